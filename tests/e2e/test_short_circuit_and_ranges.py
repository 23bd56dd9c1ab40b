"""Programs checked by hand in every mode: short-circuit guards, loops of no trip, ranges with run-time bounds and steps.

Each is compared with a plain Python / NumPy re-implementation, or must fail with a located
`dg.DgError` (`x.dg:LINE:COL: error: ...`).
"""

import numpy as np
import pytest

import dg

from .util import assert_located, assert_same, f32, load

GUARDS = """
def sc(x, n):
    i = 0
    while i < n and x[i] > 0:
        i += 1
    return i

def or_guard(x, n):
    i = 0
    s = 0.0
    while True:
        if i >= n or x[i] < 0.0:
            break
        s = s + x[i]
        i += 1
    return s, i

def not_guard(x):
    i = 0
    n = x.shape[0]
    while not (i >= n or x[i] < 0.0):
        i += 1
    return i

def ifexp_guard(x, i):
    return x[i] if i < x.shape[0] else -1.0
"""


@pytest.mark.parametrize("x", [[1, 2, 3], [1, -2, 3], [-1], [], [5, 5, 5, 5, 0]])
def test_short_circuit_and_guards_the_index(mode, x):
    a = np.array(x, np.float32)
    i = 0
    while i < len(a) and a[i] > 0:
        i += 1
    assert_same(load(GUARDS, mode).sc(a, len(a)), np.int64(i))
    s = 0.0
    j = 0
    while not (j >= len(a) or a[j] < 0):
        s += a[j]
        j += 1
    assert_same(load(GUARDS, mode).or_guard(a, len(a)), (np.float32(s), np.int64(j)))
    assert_same(load(GUARDS, mode).not_guard(a), np.int64(j))


def test_conditional_expression_guards_the_index(mode):
    x = f32(1, 2, 3)
    assert_same(load(GUARDS, mode).ifexp_guard(x, 1), np.float32(2))
    assert_same(load(GUARDS, mode).ifexp_guard(x, 3), np.float32(-1))
    assert_same(load(GUARDS, mode).ifexp_guard(x, 99), np.float32(-1))


def test_zero_trip_loops_leave_values_unchanged(mode):
    m = load("""
    def zero_trip(x, n):
        y = x
        for i in range(0):
            y = y + 1.0
        z = x
        while z > 100.0:
            z = z - 1.0
        k = x
        for j in range(5, 2):
            k = k * 2.0
        w = x
        for j in range(n):
            w = w * 3.0
        r = x
        for row in zeros([0, 2]):
            r = r + sum(row)
        return y, z, k, w, r
    """, mode)
    v = np.float32(1.5)
    assert_same(m.zero_trip(v, 0), (v, v, v, v, v))
    assert_same(m.zero_trip(v, -4), (v, v, v, v, v))
    assert_same(m.zero_trip(v, 2), (v, v, v, v * 9, v))


RANGES = """
def horner(lo, hi):
    acc = 0
    for i in range(hi, lo, -1):
        acc = acc * 3 + i
    return acc

def stepped(a, b, s):
    acc = 0
    cnt = 0
    for i in range(a, b, s):
        acc = acc + i
        cnt += 1
    return acc, cnt

def rev(x):
    out = x[0:0]
    for i in range(x.shape[0] - 1, -1, -1):
        out = concat([out, x[i:i+1]], 0)
    return out

def const_neg():
    acc = 0
    for i in range(10, -10, -7):
        acc = acc * 10 + i
    return acc
"""


@pytest.mark.parametrize("a,b,s", [(10, -3, -3), (0, 10, 3), (5, 5, -1), (-1, -10, -4), (3, 10, -1),
                                   (0, 250, 100), (7, 0, -100), (-5, 5, 1), (2, -2, -1)])
def test_range_with_data_dependent_bounds_and_steps(mode, a, b, s):
    r = range(a, b, s)
    assert_same(load(RANGES, mode).stepped(a, b, s), (np.int64(sum(r)), np.int64(len(r))))


def test_range_negative_step_order_matters(mode):
    for lo, hi in [(-2, 4), (3, 3), (0, 1), (5, 2)]:
        acc = 0
        for i in range(hi, lo, -1):
            acc = acc * 3 + i
        assert_same(load(RANGES, mode).horner(lo, hi), np.int64(acc))
    acc = 0
    for i in range(10, -10, -7):
        acc = acc * 10 + i
    assert_same(load(RANGES, mode).const_neg(), np.int64(acc))
    assert_same(load(RANGES, mode).rev(f32(1, 2, 3, 4)), f32(4, 3, 2, 1))
    assert_same(load(RANGES, mode).rev(f32()), f32())


def test_range_with_zero_step_at_run_time_is_located_error(mode):
    with pytest.raises(dg.DgError) as e:
        load(RANGES, mode).stepped(0, 5, 0)
    assert_located(e.value, 10)
