"""Programs checked by hand in every mode: values a loop carries: growing shapes, tuples, lists, weak literals.

Each is compared with a plain Python / NumPy re-implementation, or must fail with a located
`dg.DgError` (`x.dg:LINE:COL: error: ...`).
"""

import numpy as np
import pytest

import dg

from .util import F, FRONT_END_MODE, assert_located_type_error, assert_same, dg_mode, f32, load, made_no_code, time_limit

# A guard against a hang (these loops once never ended), not a speed limit: it fails only where the
# call is still running after two minutes, whatever else the machine is doing.
HANG = 120

GROW = """
def grow(n):
    v = zeros([0])
    i = 0
    while i < n:
        v = concat([v, ones([1]) * f32(i)], 0)
        i += 1
    return v

def runs(x):
    v = x[0:1]
    for i in range(1, x.shape[0]):
        if x[i] > v[-1]:
            v = concat([v, x[i:i+1]], 0)
    return v

def dbl(n):
    v = ones([1])
    for i in range(n):
        v = concat([v, v * 2.0], 0)
    return v

def tup(n):
    s = (0, 1)
    for i in range(n):
        a, b = s
        s = (b, a + b)
    return s

def tupw(x):
    p = (x, 0)
    while p[1] < 5:
        p = (p[0] * 2.0, p[1] + 1)
    return p

def tupgrow(n):
    p = (zeros([0]), 0)
    while p[1] < n:
        p = (concat([p[0], full([1], f32(p[1]))], 0), p[1] + 1)
    return p

def halfs(n):
    s = 1
    for i in range(n):
        s = s * 0.5
    return s

def found(x, t):
    found = False
    for i in range(x.shape[0]):
        if x[i] == t:
            found = True
    return found
"""


@pytest.mark.parametrize("n", [0, 1, 5, 17])
def test_concat_grows_vector_in_while(mode, n):
    assert_same(load(GROW, mode).grow(n), np.arange(n, dtype=np.float32))


def test_concat_grows_vector_conditionally_in_for(mode):
    for x in (f32(1, 3, 2, 5, 4, 6), f32(5, 4, 3), f32(1)):
        want = [x[0]]
        for v in x[1:]:
            if v > want[-1]:
                want.append(v)
        assert_same(load(GROW, mode).runs(x), np.array(want, np.float32))


def test_doubling_shape_in_loop(mode):
    want = np.ones(1, np.float32)
    for n in range(5):
        assert_same(load(GROW, mode).dbl(n), want)
        want = np.concatenate([want, want * 2])


def test_loop_carried_tuples(mode):
    a, b = 0, 1
    for n in range(12):
        assert_same(load(GROW, mode).tup(n), (np.int64(a), np.int64(b)))
        a, b = b, a + b
    assert_same(load(GROW, mode).tupw(1.5), (np.float32(48.0), np.int64(5)))
    assert_same(load(GROW, mode).tupgrow(4), (np.arange(4, dtype=np.float32), np.int64(4)))
    assert_same(load(GROW, mode).tupgrow(0), (np.zeros(0, np.float32), np.int64(0)))


def test_weak_int_carried_becomes_float(mode):
    assert_same(load(GROW, mode).halfs(3), np.float32(0.125))
    assert_same(load(GROW, mode).halfs(0), np.float32(1.0))


def test_bool_flag_carried(mode):
    assert_same(load(GROW, mode).found(f32(1, 2, 3), 2.0), np.bool_(True))
    assert_same(load(GROW, mode).found(f32(1, 2, 3), 5.0), np.bool_(False))


def test_loop_carried_rank_change_by_broadcasting():
    # Python/NumPy: v goes from a scalar to a vector on the first iteration.
    m = load("""
    def forloop(x, n):
        v = 0.0
        for i in range(n):
            v = v + x
        return v

    def whileloop(x, n):
        v = 0.0
        i = 0
        while i < n:
            v = v + x
            i += 1
        return v
    """, FRONT_END_MODE)
    x = f32(1, 2, 3)
    with made_no_code():
        assert_located_type_error(lambda: m.forloop(x, 3), "'v' changes rank inside the loop")
        assert_located_type_error(lambda: m.whileloop(x, 3), "'v' changes rank inside the loop")


def test_loop_carried_rank_change_does_not_hang():
    """(an error of the front end, before any code is made: once)"""
    m = load("""
    def hang(n):
        v = 0.0
        while sum(v) < 10.0:
            v = v + ones([2])
        return v
    """, FRONT_END_MODE)
    with time_limit(HANG), made_no_code():
        assert_located_type_error(lambda: m.hang(3), "'v' changes rank inside the loop")


def test_loop_carried_list_display(mode):
    m = load("""
    def listcarry(n):
        v = [1.0, 2.0]
        for i in range(n):
            v = v * 2.0
        return v

    def listwhile(n):
        v = [0.0, 1.0]
        while v[0] < f32(n):
            v = v + 1.0
        return v
    """, mode)
    assert_same(m.listcarry(3), f32(8, 16))
    with time_limit(HANG):
        assert_same(m.listwhile(4), f32(4, 5))


def test_list_display_rebound_in_branch(mode):
    m = load("""
    def lcif(x, c):
        v = [1.0, 2.0]
        if c > 0:
            v = v * 2.0
        return v
    """, mode)
    assert_same(m.lcif(1.0, 1), f32(2, 4))
    assert_same(m.lcif(1.0, 0), f32(1, 2))


def test_loop_carried_tuple_changes_length():
    m = load("""
    def tuplen(x, n):
        p = (x, 1)
        for i in range(n):
            p = (x, 1, 2)
        return p
    """, FRONT_END_MODE)
    x = f32(1, 2)
    with made_no_code():
        assert_located_type_error(lambda: m.tuplen(x, 3), "'p' changes its structure inside the loop")


def test_nested_tuples_and_branch_dependent_shapes_carried(mode):
    m = load("""
    def nestedtup(x, n):
        p = ((x, 1), 2)
        for i in range(n):
            p = ((p[0][0] * 2.0, p[0][1] + 1), p[1] * 3)
        return p

    def branchshape(x, n):
        v = x
        i = 0
        while i < n:
            if v[0] > 0.0:
                v = v[1:]
            else:
                v = concat([v, v[0:1] + 10.0], 0)
            i += 1
        return v, v.shape[0]

    def static_range_break(x):
        s = 0.0
        for i in range(10):
            if i >= x.shape[0] or x[i] < 0.0:
                break
            s = s + x[i]
        return s

    def last_in_loop(x, n):
        for i in range(n):
            last = x[i]
            if last > 2.0:
                break
        return last
    """, mode)
    x = f32(1, 2, 3)
    assert_same(m.nestedtup(x, 3), ((x * 8, np.int64(4)), np.int64(54)))
    v = f32(1, -2, 3)
    for _ in range(4):
        v = v[1:] if v[0] > 0 else np.concatenate([v, v[:1] + 10])
    assert_same(m.branchshape(f32(1, -2, 3), 4), (v, np.int64(len(v))))
    assert_same(m.static_range_break(x), np.float32(6))
    assert_same(m.static_range_break(f32(1, 2, -1, 4)), np.float32(3))
    # Python's rule: bound inside the loop, read after it; unbound (no iteration ran) is a run-time error.
    assert_same(m.last_in_loop(x, 3), np.float32(3))
    assert_same(m.last_in_loop(x, 2), np.float32(2))
    with pytest.raises(dg.DgRuntimeError, match="local variable 'last' is referenced before assignment"):
        m.last_in_loop(x, 0)


def _shift_register_src(k):
    names = "abcdefghjkmpqrstuvw"[:k]
    lines = ["def f(x, n):"] + [f"    {c} = x[0:1]" for c in names]
    lines.append("    for i in range(n):")
    lines += [f"        {names[j]} = {names[j - 1]}" for j in range(k - 1, 0, -1)]
    lines.append("        a = concat([a, x[0:1] + f32(i + 1)], 0)")
    lines.append(f"    return {', '.join(c + '.shape[0]' for c in names)}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("k", [3, 6, 7, 9])
def test_long_chain_of_loop_carried_shape_changes(mode, k):
    # a grows every iteration; b gets a's old value, c gets b's, ...: sizes n+1, n, n-1, ...
    m = dg.loads(_shift_register_src(k), mode=dg_mode(mode), filename=F)
    n = 20
    want = tuple(np.int64(max(n + 1 - j, 1)) for j in range(k))
    assert_same(m.f(f32(5.0), n), want)
