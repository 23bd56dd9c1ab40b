"""Programs checked by hand in every mode: weak literals, specializations per dtype, arithmetic as in Python.

Each is compared with a plain Python / NumPy re-implementation, or must fail with a located
`dg.DgError` (`x.dg:LINE:COL: error: ...`).
"""
import re

import numpy as np
import pytest

import dg

from .util import F, FRONT_END_MODE, assert_located, assert_same, f32, load, made_no_code

WEAK = """
def scale(x, k):
    return x * k

def use_scale(x):
    return scale(x, 2), scale(x, 2.5), scale(3, 2), scale(x, x)

def h(x):
    return x * 2

def both(a, b):
    return h(a), h(b), h(3), h(2.5)
"""


def test_functions_called_with_weak_literals_and_tensors(mode):
    x = f32(1, 2)
    assert_same(load(WEAK, mode).use_scale(x), (x * 2, x * 2.5, np.int64(6), x * x))
    xi = np.array([1, 2])
    got = load(WEAK, mode).use_scale(xi)
    assert_same(got, (xi * 2, f32(2.5, 5), np.int64(6), xi * xi))
    assert got[0].dtype == np.int64 and got[1].dtype == np.float32
    b = np.arange(9).reshape(3, 3)
    got = load(WEAK, mode).both(x, b)
    assert_same(got, (x * 2, b * 2, np.int64(6), np.float32(5)))
    assert got[1].dtype == np.int64


def test_specialization_cache_per_dtype(mode):
    results = [load(WEAK, mode).h(3), load(WEAK, mode).h(2.5), load(WEAK, mode).h(np.int32(3)), load(WEAK, mode).h(np.float64(2.5)),
               load(WEAK, mode).h(np.array([1, 2], np.int32)), load(WEAK, mode).h(True), load(WEAK, mode).h(3)]
    dtypes = [np.asarray(r).dtype for r in results]
    assert dtypes == [np.int64, np.float32, np.int32, np.float64, np.int32, np.int64, np.int64]
    assert_same(results[0], np.int64(6))
    assert_same(results[3], np.float64(5.0))
    assert_same(results[5], np.int64(2))


def test_dtype_rebinding_is_located_type_error():
    m = load("""
    def branches(x, c):
        if c > 0:
            y = x
        else:
            y = i64(x)
        return y

    def in_loop(x, n):
        y = x
        for i in range(n):
            y = i64(y)
        return y

    def bool_branch(x):
        if x[0] > 0:
            y = x
        else:
            y = x > 1.0
        return y
    """, FRONT_END_MODE)
    with made_no_code(), pytest.raises(dg.DgTypeError) as e:
        m.branches(np.float32(1.5), 1)
    assert_located(e.value, 2)
    with made_no_code(), pytest.raises(dg.DgTypeError) as e:
        m.in_loop(np.float32(1.5), 2)
    assert re.match(rf"{F}:(10|11):\d+: error:", str(e.value)), str(e.value)
    with made_no_code(), pytest.raises(dg.DgTypeError) as e:
        m.bool_branch(f32(1, 2))
    assert_located(e.value, 15)


def test_augmented_assignment_matches_plain_binop(mode):
    # `s += e` should mean `s = s + e` (tensors are values); NumPy would refuse an
    # unsafe in-place cast, Python would give 1.5; silently truncating to 1 is neither.
    m = load("""
    def aug(n):
        s = n
        s += 0.5
        return s

    def plain(n):
        s = n
        s = s + 0.5
        return s
    """, mode)
    assert_same(m.plain(1), np.float32(1.5))
    assert_same(m.aug(1), np.float32(1.5))


def test_integer_floordiv_and_mod_follow_python_with_negatives(mode):
    m = load("""
    def dm(a, b):
        return a // b, a % b

    def lit(a):
        return a // -3, a % -3, -7 // 2, -7 % 2, 7 // -2, 7 % -2, (-7) // (-2), -7 % -2
    """, mode)
    a = np.array([7, -7, 7, -7, 0, -1, 1, -9])
    b = np.array([2, 2, -2, -2, 3, 5, -5, 3])
    assert_same(m.dm(a, b), (np.array([p // q for p, q in zip(a.tolist(), b.tolist())]),
                      np.array([p % q for p, q in zip(a.tolist(), b.tolist())])))
    for p, q in [(7, 2), (-7, 2), (7, -2), (-7, -2), (0, -3), (-1, 7)]:
        assert_same(m.dm(p, q), (np.int64(p // q), np.int64(p % q)))
    v = np.array([7, -7, 8, -8, 0])
    want = tuple([np.array([e // -3 for e in v.tolist()]), np.array([e % -3 for e in v.tolist()])]
                 + [np.int64(r) for r in (-7 // 2, -7 % 2, 7 // -2, 7 % -2, (-7) // (-2), -7 % -2)])
    assert_same(m.lit(v), want)
    af, bf = f32(7.5, -7.5, 7.5, -7.5), f32(2, 2, -2, -2)
    assert_same(m.dm(af, bf), (af // bf, af % bf))


def test_chained_comparisons_with_tensors(mode):
    m = load("""
    def chain(x, lo, hi):
        return lo < x <= hi

    def chain3(x):
        return 0 < x < 1 < 2

    def gprint(x):
        print("g", x)
        return x

    def once(x):
        return 0 < gprint(x) < 10
    """, mode)
    x = f32(0, 1, 1.5, 2, 3)
    assert_same(m.chain(x, 1.0, 2.0), (1.0 < x) & (x <= 2.0))
    y = f32(-1, 0.5, 1)
    assert_same(m.chain3(y), (0 < y) & (y < 1))
    for v in (0.5, 1.0, 2.0, 2.5):
        assert_same(m.chain(np.float32(v), 1.0, 2.0), np.bool_(1.0 < v <= 2.0))
    assert_same(m.once(3), np.bool_(True))


BUILTIN_OF_LITERALS = """
def returned(x: f64) -> f64:
    return sin(1.0)

def declared(x: f64) -> f64:
    v: f64 = sin(0.1)
    return v + x

def in_f32(x: f32) -> f32:
    return x * exp(0.5) + maximum(0.25, 1.0)

def mixed(x: f64[N]) -> f64[N]:
    return x - tanh(0.69) + abs(-3) + pow(2.0, 0.5) + sqrt(2)

def ints() -> i64:
    return abs(-4) + maximum(2, 7)
"""


def test_a_builtin_of_weak_literals_is_a_weak_literal(mode):
    # Weak in, weak out (as `1.0 + 2.0`): the value takes the element type of what it meets,
    # computed in f64, not an f32 that f64 code refuses or rounds.
    m = load(BUILTIN_OF_LITERALS, mode)
    got = m.returned(0.0)
    assert got.dtype == np.float64 and got == np.sin(1.0)
    assert m.declared(1.0) == np.sin(0.1) + 1.0
    got = m.in_f32(np.float32(1))
    assert got.dtype == np.float32 and got == np.float32(np.exp(0.5)) + np.float32(1.0)
    got = m.mixed(np.zeros(2))
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, -np.tanh(0.69) + 3 + 2 * np.sqrt(2), rtol=1e-15)
    assert_same(m.ints(), np.int64(11))


EARLY_LITERALS = """
def in_branch(x: f64[N]):
    if x[0] > 0.0:
        return 1.0
    return sum(x)

def in_loop(x: f64[N]):
    for i in range(3):
        if x[i] > 0.0:
            return tanh(0.5)
    return sum(x)

def declared(x: f64[N]) -> f64:
    for i in range(3):
        if x[i] > 0.0:
            return 1.0
    return sum(x)

def pair(x: f64[N]):
    if x[0] > 0.0:
        return 1.0, 2
    return sum(x), i32(3)

def loss(x: f64[N]) -> f64:
    return in_loop(x) * 2.0

def rec(x: f64, d: i64):
    if d <= 0:
        return 0.5
    y = rec(x, d - 1)
    return y + x
"""


def test_an_early_return_of_a_literal_takes_the_other_returns_type(mode):
    """`return 1.0` early and `return sum(x)` of an f64 x at the end: the function returns f64
    on both paths, as Python would, instead of 'f64 on one path and f32 on another'."""
    m = load(EARLY_LITERALS, mode)
    pos, neg = np.ones(3), -np.ones(3)
    for name, early, late in [("in_branch", 1.0, -3.0), ("in_loop", np.tanh(0.5), -3.0), ("declared", 1.0, -3.0)]:
        got = getattr(m, name)(pos), getattr(m, name)(neg)
        assert got[0].dtype == got[1].dtype == np.float64, (name, got)
        assert got == (early, late), (name, got)
    got = m.pair(pos)
    assert got[0].dtype == np.float64 and got[1].dtype == np.int32 and got == (1.0, 2)
    assert_same(dg.grad(m.loss)(neg), np.full(3, 2.0))
    assert_same(dg.grad(m.loss)(pos), np.zeros(3))
    # recursive: the calls were typed with the literal's f32 first, then again with f64
    got = m.rec(np.float64(2.0), 3)
    assert got.dtype == np.float64 and got == 6.5
