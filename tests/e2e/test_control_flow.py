"""Programs checked by hand in every mode: break, continue, early return; names defined on some paths only.

Each is compared with a plain Python / NumPy re-implementation, or must fail with a located
`dg.DgError` (`x.dg:LINE:COL: error: ...`).
"""

import numpy as np
import pytest

import dg

from .util import F, assert_located, assert_same, f32, load

NESTED = """
def nested(x, n):
    total = 0.0
    for i in range(n):
        if i % 2 == 1:
            continue
        for j in range(n):
            if j > i:
                break
            total = total + x[i] * x[j]
    return total

def whiles(x):
    n = x.shape[0]
    i = 0
    acc = 0.0
    while i < n:
        i += 1
        if x[i - 1] < 0.0:
            continue
        j = 0
        while True:
            if j >= i:
                break
            j += 1
            if j % 2 == 0:
                continue
            acc = acc + x[j - 1]
    return acc

def find(x, t):
    for i in range(x.shape[0]):
        j = 0
        while j < x.shape[1]:
            if x[i, j] == t:
                return i * 100 + j
            j += 1
    return -1

def early_nested(x):
    for i in range(3):
        for j in range(3):
            if i * 3 + j == x:
                return i * 10 + j
        assert x < 3 * i or x > 3 * i + 2, "ran on after an early return"
    return -1

def chain(x):
    acc = 0
    for i in range(x.shape[0]):
        if x[i] > 5:
            return acc
        elif x[i] < 0:
            acc = acc - 1
        elif x[i] == 0:
            continue
        else:
            acc = acc + x[i]
    return acc + 1000

def skip_nested_if(x):
    s = 0
    for i in range(x.shape[0]):
        if x[i] > 0:
            if x[i] > 10:
                continue
            s = s + 1
        s = s + 100
    return s
"""


def _nested(x, n):
    total = 0.0
    for i in range(n):
        if i % 2 == 1:
            continue
        for j in range(n):
            if j > i:
                break
            total += x[i] * x[j]
    return total


def _whiles(x):
    n, i, acc = len(x), 0, 0.0
    while i < n:
        i += 1
        if x[i - 1] < 0:
            continue
        j = 0
        while True:
            if j >= i:
                break
            j += 1
            if j % 2 == 0:
                continue
            acc += x[j - 1]
    return acc


@pytest.mark.parametrize("n", [0, 1, 2, 5, 6])
def test_break_inner_continue_outer(mode, n):
    x = np.arange(1, 7, dtype=np.float32)
    assert_same(load(NESTED, mode).nested(x, n), np.float32(_nested(x, n)))


@pytest.mark.parametrize("x", [f32(1, 2, 3, 4, 5), f32(-1, 2, -3, 4, 5, 6), f32(-1), f32()])
def test_nested_whiles_with_break_and_continue(mode, x):
    assert_same(load(NESTED, mode).whiles(x), np.float32(_whiles(x)))


def test_early_return_from_while_nested_in_for(mode):
    a = np.arange(12).reshape(3, 4)
    for t in [0, 3, 5, 7, 11, 70, -1]:
        w = next((i * 100 + j for i in range(3) for j in range(4) if a[i, j] == t), -1)
        assert_same(load(NESTED, mode).find(a, t), np.int64(w))


@pytest.mark.parametrize("t", [0, 1, 4, 5, 8, 100])
def test_early_return_in_inner_loop_skips_rest_of_outer_body(mode, t):
    # the assert after the inner loop fails exactly when it runs after an early return
    want = next((i * 10 + j for i in range(3) for j in range(3) if i * 3 + j == t), -1)
    assert_same(load(NESTED, mode).early_nested(t), np.int64(want))


def _chain(x):
    acc = 0
    for v in x:
        if v > 5:
            return acc
        elif v < 0:
            acc -= 1
        elif v == 0:
            continue
        else:
            acc += v
    return acc + 1000


@pytest.mark.parametrize("x", [[1, -2, 0, 3, 7, 1], [1, -2, 0, 3], [9], [], [0, 0, -1]])
def test_return_inside_if_elif_else_chain_in_loop(mode, x):
    a = np.array(x, dtype=np.int64)
    assert_same(load(NESTED, mode).chain(a), np.int64(_chain(x)))


def test_continue_in_nested_if_skips_enclosing_statements(mode):
    x = np.array([1, 20, -3, 5, 11, 0])
    want = sum((0 if v > 10 else 101) if v > 0 else 100 for v in x)
    assert_same(load(NESTED, mode).skip_nested_if(x), np.int64(want))


FALL = """
def fall(x):
    if x > 0:
        return x * 2

def first_pos(x):
    for i in range(x.shape[0]):
        if x[i] > 0.0:
            return i
"""


def test_fall_off_end_only_fails_on_that_path(mode):
    assert_same(load(FALL, mode).fall(3), np.int64(6))
    assert_same(load(FALL, mode).fall(np.float32(2.5)), np.float32(5.0))
    for bad in (-3, np.float32(-1.0), 0):
        with pytest.raises(dg.DgRuntimeError) as e:
            load(FALL, mode).fall(bad)
        assert str(e.value).startswith(f"{F}:"), str(e.value)
    assert_same(load(FALL, mode).first_pos(f32(-1, -2, 3, 4)), np.int64(2))
    with pytest.raises(dg.DgRuntimeError):
        load(FALL, mode).first_pos(f32(-1, -2))


def test_fall_off_end_after_static_zero_trip_loop(mode):
    # x has static shape (0,): the loop is dropped at compile time, but falling off the
    # end must still be the same run-time error as for f32(-1, -2), not an internal name
    with pytest.raises(dg.DgRuntimeError) as e:
        load(FALL, mode).first_pos(f32())
    assert "__ret" not in str(e.value), str(e.value)


WHILE_TRUE = """
def first_neg(x):
    i = 0
    while True:
        if x[i] < 0:
            break
        i += 1
    return i

def double_until(x):
    while True:
        if x > 10.0:
            return x
        x = x * 2.0

def stop_on_break(x):
    i = 0
    while x[i] > 0:
        i += 1
        if i == x.shape[0]:
            break
    return i
"""


def test_while_true_with_break_and_return(mode):
    assert_same(load(WHILE_TRUE, mode).first_neg(f32(1, 2, -3, 4)), np.int64(2))
    assert_same(load(WHILE_TRUE, mode).double_until(np.float32(0.3)), np.float32(19.2))
    assert_same(load(WHILE_TRUE, mode).double_until(np.float32(11.0)), np.float32(11.0))


def test_break_stops_before_the_condition_is_evaluated_again(mode):
    # after `break`, x[i] with i == len(x) would be out of range
    assert_same(load(WHILE_TRUE, mode).stop_on_break(f32(1, 2, 3)), np.int64(3))
    assert_same(load(WHILE_TRUE, mode).stop_on_break(f32(1, -2, 3)), np.int64(1))

def test_variable_defined_on_some_paths_is_located_runtime_error(mode):
    # Python's rule: read where the path that ran bound it; elsewhere an UnboundLocalError at
    # the read (see test_unbound_names.py).
    m = load("""
    def partial(x):
        if x > 0:
            y = x + 1
        return y
    """, mode)
    assert_same(m.partial(3.0), np.float32(4.0))
    with pytest.raises(dg.DgRuntimeError) as e:
        m.partial(-3.0)
    assert_located(e.value, 4, dg.DgRuntimeError)
    assert "local variable 'y' is referenced before assignment" in str(e.value)


def test_variable_defined_on_every_path_after_elif_chain(mode):
    m = load("""
    def allpaths(x):
        if x > 0:
            y = x + 1
        elif x < -5:
            y = x * 2
        else:
            y = x - 1
        return y
    """, mode)
    for v in (3.0, -7.0, -1.0, 0.0):
        want = v + 1 if v > 0 else (v * 2 if v < -5 else v - 1)
        assert_same(m.allpaths(v), np.float32(want))


def test_variable_only_defined_inside_loop(mode):
    # Python's rule: `t` is bound by the first iteration and read by the later ones and after
    # the loop; with no iteration, the read after the loop fails there.
    m = load("""
    def local_accum(x, n):
        for i in range(n):
            if i == 0:
                t = x
            else:
                t = t + x
        return t
    """, mode)
    x = f32(1, 2, 3)
    assert_same(m.local_accum(x, 3), x * 3)
    with pytest.raises(dg.DgRuntimeError) as e:
        m.local_accum(x, 0)
    assert_located(e.value, 7, dg.DgRuntimeError)
    assert "local variable 't' is referenced before assignment" in str(e.value)


def test_loop_variable_after_the_loop_keeps_python_semantics(mode):
    m = load("""
    def last(n):
        i = 100
        for i in range(n):
            pass
        return i
    """, mode)
    assert_same(m.last(5), np.int64(4))
    assert_same(m.last(0), np.int64(100))


def test_reassigning_the_loop_variable_does_not_change_iteration(mode):
    m = load("""
    def f(x, n):
        s = x
        for i in range(n):
            i = i * 2
            s = s + f32(i)
        return s
    """, mode)
    x = f32(1, 2, 3)
    assert_same(m.f(x, 3), x + 6)
