"""Expression forms (LANGUAGE.md sections 1.2 and 1.3) vs NumPy."""
import numpy as np
import pytest

from .util import check, load_src, randn

F32, F64, F16, I32, I64, B = np.float32, np.float64, np.float16, np.int32, np.int64, np.bool_

SRC = '''
def literals():
    return 1, 0.5, 1e-3, True, False, -7, 2.5e2

def exp_literals(x):
    return x * 1e-5, x + 1e20, 3e-8, 1E6, 2.5e-10 * x

def scale2(x):
    return x * 2

def scale_half(x):
    return x * 0.5 + 1

def add(a, b):
    return a + b

def arith(a, b):
    return a + b, a - b, a * b, a / b, a // b, a % b

def powr(a, b):
    return a ** b

def power_lit(x):
    return x ** 2, x ** 0.5, 2.0 ** x

def neg(x):
    return -x, -(x - 1.0), - -x

def mm(a, b):
    return a @ b

def compare(a, b):
    return a < b, a <= b, a > b, a >= b, a == b, a != b

def chained(a: f32, b: f32, c: f32):
    r1 = a < b < c
    r2 = a <= b < c <= 10.0
    r3 = 0.0 < a != b
    return r1, r2, r3

def chained_if(x: f32):
    if 0.0 <= x < 1.0:
        return 1
    return 0

def logic(a: bool, b: bool):
    return a and b, a or b, not a, not (a and b) or a

def logic_values(x: f32):
    return x > 0.0 and x < 5.0, x < -1.0 or x > 1.0, not x > 0.0

def first_nonpositive(x: f32[N]):
    i = 0
    n = x.shape[0]
    while i < n and x[i] > 0.0:
        i += 1
    return i

def any_negative(x: f32[N]):
    i = 0
    found = False
    while not (i >= x.shape[0] or found):
        found = x[i] < 0.0
        i += 1
    return found

def short_circuit_or(x: f32[N], i: i64):
    return i >= x.shape[0] or x[i] > 0.0

def cond_expr(x: f32[?]):
    s = sum(x)
    return 1.0 if s > 0.0 else -1.0, x * 2.0 if s > 0.0 else x - 1.0

def kw(x: f32[?, ?]):
    return sum(x, axis=0, keepdims=True), sum(x, keepdims=False, axis=1), softmax(x, axis=0)

def attrs(x):
    return x.shape[0], x.shape[-1], x.ndim, len(x), x.T

def shape_tuple(x):
    s = x.shape
    return s[0] * 100 + s[1]

def index_basic(x: f32[4, 5, 6]):
    return x[1], x[-1], x[1, 2], x[1, -2, 3], x[:, 2], x[1:3], x[:, :, -1]

def index_slices(x: f32[4, 5, 6]):
    return x[::2], x[1::2, ::-1], x[:-1, 1:4:2, ::3], x[-3:], x[::-1, ::-2]

def index_ellipsis_none(x: f32[4, 5, 6]):
    return x[..., 0], x[1, ...], x[None], x[:, None, :, 1], x[..., None], x[None, ..., None]

def index_tensor0(x: f32[?], y: f32[?]):
    i = argmax(y)
    return x[i]

def index_runtime_int(x: f32[?, ?], i: i64, j: i64):
    return x[i, j], x[i], x[:, j]

def index_gather(x: f32[?, ?], idx: i64[?]):
    return x[idx], x[idx, 0]

def runtime_slices(x: f32[?], i: i64, n: i64):
    return x[:n], x[i:i + 2], x[i:], x[1:x.shape[0] - 1], x[n::-1], x[i:n:2]

def runtime_slices_2d(x: f32[?, ?], n: i64):
    return x[:n, n:], x[:, :n][::-1]

def shape_value(x):
    return x.shape

def nested_tuple(x: f32[?]):
    return x * 2.0, (sum(x), (x.shape[0], x[0]))

def list_consts():
    a = [[1.0, 2.0], [3.0, 4.0]]
    b = [1, 2, 3]
    c = [[True, False]]
    d = [1.0, 2, 3]
    return a, b, c, d

def list_stack(a: f32[3], b: f32[3]):
    return [a, b], [a * 2.0, b, a + b], [[a, b], [b, a]]

def list_scalars(x: f32[?]):
    return [sum(x), max(x), min(x)]

def shape_lists(x: f32[?, ?]):
    n = x.shape[0]
    z = zeros([n, 3])
    o = ones([2, x.shape[1]])
    r = reshape(x, [x.shape[1], n])
    return z, o, r
'''


@pytest.fixture
def m(mode):
    return load_src(SRC, mode)


def test_literals(m):
    r = m.literals()
    assert isinstance(r, tuple) and len(r) == 7
    check(r[0], I64(1))
    check(r[1], F32(0.5))
    check(r[2], F32(1e-3))
    check(r[3], B(True))
    check(r[4], B(False))
    check(r[5], I64(-7))
    check(r[6], F32(250.0))


def test_exponent_literals(m):
    x = np.array([1.0, -2.0], F32)
    a, b, c, d, e = m.exp_literals(x)
    check(a, x * F32(1e-5))
    check(b, x + F32(1e20))
    check(c, F32(3e-8))
    check(d, F32(1e6))
    check(e, F32(2.5e-10) * x)


@pytest.mark.parametrize("dt", [F32, F64, F16, I32, I64])
def test_weak_int_literal_keeps_dtype(m, dt):
    x = (np.arange(5) - 2).astype(dt)
    check(m.scale2(x), (x * 2).astype(dt), rtol=1e-3 if dt == F16 else 1e-6)


@pytest.mark.parametrize("dt", [F32, F64, F16])
def test_weak_float_literal_keeps_dtype(m, dt):
    x = (np.arange(5) - 2).astype(dt)
    check(m.scale_half(x), (x * dt(0.5) + dt(1)).astype(dt))


def test_scalar_times_literal(m):
    check(m.scale2(F32(1.5)), F32(3.0))
    check(m.scale2(F64(1.5)), F64(3.0))
    check(m.scale2(I32(3)), I32(6))


@pytest.mark.parametrize("da,db,want", [
    (F32, F64, F64), (F64, F32, F64), (F16, F32, F32), (I32, I64, I64), (I64, I32, I64),
    (I64, F32, F32), (F32, I64, F32), (I32, F64, F64), (B, I64, I64), (I32, F16, F16),
])
def test_promotion(m, da, db, want):
    a = np.array([1, 2, 3]).astype(da)
    b = np.array([4, 5, 6]).astype(db)
    r = m.add(a, b)
    check(r, (a.astype(F64) + b.astype(F64)).astype(want))


def test_broadcasting(m):
    a, b = randn(4, 1, 3, seed=1), randn(5, 1, seed=2)
    check(m.add(a, b), a + b)
    check(m.add(a, F32(2.0)), a + F32(2.0))


def test_arithmetic_float(m):
    a = np.array([7.5, -7.5, 3.0, -2.0, 0.5], F32)
    b = np.array([2.0, 2.0, -4.0, -3.0, 2.0], F32)
    r = m.arith(a, b)
    check(r[0], a + b)
    check(r[1], a - b)
    check(r[2], a * b)
    check(r[3], a / b)
    check(r[4], a // b)
    check(r[5], a % b)
    check(m.powr(a, b), a ** b)  # integral exponents, so negative bases are fine
    check(m.powr(np.abs(a), F32(0.5)), np.sqrt(np.abs(a)))


def test_arithmetic_int_floor_semantics(m):
    a = np.array([7, -7, 7, -7, 0, 9], I64)
    b = np.array([2, 2, -2, -2, 3, 3], I64)
    r = m.arith(a, b)
    check(r[0], a + b)
    check(r[1], a - b)
    check(r[2], a * b)
    # true division of ints gives floats
    assert np.asarray(r[3]).dtype.kind == "f"
    np.testing.assert_allclose(r[3], a / b, rtol=1e-6)
    check(r[4], a // b)  # floor division, like Python/NumPy
    check(r[5], a % b)   # sign of the divisor
    bp = np.array([0, 1, 2, 3, 1, 2], I64)
    check(m.powr(a, bp), a ** bp)


def test_power_literals(m):
    x = np.array([0.5, 1.0, 2.0, 9.0], F32)
    p2, ph, e = m.power_lit(x)
    check(p2, x ** 2)
    check(ph, np.sqrt(x))
    check(e, F32(2.0) ** x)
    xi = np.array([1, 2, 3], I64)
    check(m.power_lit(xi)[0], xi ** 2)


def test_unary_minus(m):
    x = randn(3, 2, seed=3)
    a, b, c = m.neg(x)
    check(a, -x)
    check(b, -(x - 1.0))
    check(c, x)
    xi = np.array([1, -2, 0], I64)
    check(m.neg(xi)[0], -xi)


def test_matmul_2d(m):
    a, b = randn(3, 4, seed=4), randn(4, 5, seed=5)
    check(m.mm(a, b), a @ b, rtol=1e-5)


def test_matmul_batched(m):
    a, b = randn(2, 3, 4, seed=6), randn(2, 4, 5, seed=7)
    check(m.mm(a, b), a @ b, rtol=1e-5)
    c = randn(4, 5, seed=8)
    check(m.mm(a, c), a @ c, rtol=1e-5)
    d, e = randn(2, 1, 3, 4, seed=9), randn(3, 4, 2, seed=10)
    check(m.mm(d, e), d @ e, rtol=1e-5)


def test_matmul_1d(m):
    v, w, a = randn(4, seed=11), randn(4, seed=12), randn(4, 3, seed=13)
    check(m.mm(v, w), F32(v @ w), rtol=1e-5)
    check(m.mm(v, a), v @ a, rtol=1e-5)
    check(m.mm(a.T.copy(), v), a.T @ v, rtol=1e-5)


def test_matmul_ints(m):
    a = np.arange(6, dtype=I64).reshape(2, 3)
    b = np.arange(12, dtype=I64).reshape(3, 4)
    check(m.mm(a, b), a @ b)


def test_comparisons(m):
    a = np.array([1.0, 2.0, 3.0, 2.0], F32)
    b = np.array([2.0, 2.0, 1.0, -1.0], F32)
    r = m.compare(a, b)
    for got, want in zip(r, [a < b, a <= b, a > b, a >= b, a == b, a != b]):
        check(got, want)
    ai = np.array([1, 5], I64)
    check(m.compare(ai, I64(3))[0], ai < 3)


@pytest.mark.parametrize("a,b,c", [(1.0, 2.0, 3.0), (1.0, 3.0, 2.0), (2.0, 2.0, 3.0), (3.0, 2.0, 1.0), (-1.0, 0.0, 20.0)])
def test_chained_comparisons(m, a, b, c):
    r1, r2, r3 = m.chained(F32(a), F32(b), F32(c))
    check(r1, B(a < b < c))
    check(r2, B(a <= b < c <= 10.0))
    check(r3, B(0.0 < a != b))


@pytest.mark.parametrize("x,want", [(0.0, 1), (0.5, 1), (1.0, 0), (-0.1, 0)])
def test_chained_comparison_in_if(m, x, want):
    check(m.chained_if(F32(x)), I64(want))


@pytest.mark.parametrize("a", [True, False])
@pytest.mark.parametrize("b", [True, False])
def test_and_or_not(m, a, b):
    r = m.logic(a, b)
    for got, want in zip(r, [a and b, a or b, not a, not (a and b) or a]):
        check(got, B(want))


@pytest.mark.parametrize("x", [-3.0, -0.5, 0.0, 2.0, 7.0])
def test_and_or_not_on_comparisons(m, x):
    r = m.logic_values(F32(x))
    for got, want in zip(r, [x > 0 and x < 5, x < -1 or x > 1, not x > 0]):
        check(got, B(want))


def test_short_circuit_and_guards_index(m):
    # when i == n the right operand x[i] would be out of bounds
    check(m.first_nonpositive(np.array([1.0, 2.0, 3.0], F32)), I64(3))
    check(m.first_nonpositive(np.array([1.0, -2.0, 3.0], F32)), I64(1))
    check(m.first_nonpositive(np.array([0.0], F32)), I64(0))


def test_short_circuit_or_guards_index(m):
    x = np.array([1.0, -2.0], F32)
    check(m.short_circuit_or(x, 2), B(True))
    check(m.short_circuit_or(x, 5), B(True))
    check(m.short_circuit_or(x, 0), B(True))
    check(m.short_circuit_or(x, 1), B(False))
    check(m.any_negative(x), B(True))
    check(m.any_negative(np.array([1.0, 2.0], F32)), B(False))


def test_conditional_expression(m):
    x = np.array([1.0, 2.0], F32)
    a, b = m.cond_expr(x)
    check(a, F32(1.0))
    check(b, x * 2.0)
    a, b = m.cond_expr(-x)
    check(a, F32(-1.0))
    check(b, -x - 1.0)


def test_keyword_arguments(m):
    x = randn(3, 4, seed=14)
    a, b, c = m.kw(x)
    check(a, np.sum(x, axis=0, keepdims=True))
    check(b, np.sum(x, axis=1))
    e = np.exp(x - x.max(axis=0, keepdims=True))
    check(c, e / e.sum(axis=0, keepdims=True))


def test_attributes(m):
    x = randn(3, 4, seed=15)
    s0, s1, nd, ln, t = m.attrs(x)
    check(s0, I64(3))
    check(s1, I64(4))
    check(nd, I64(2))
    check(ln, I64(3))
    check(t, x.T)
    x3 = randn(2, 3, 4, seed=16)
    s0, s1, nd, ln, t = m.attrs(x3)
    check(s1, I64(4))
    check(nd, I64(3))
    check(t, x3.T)  # NumPy .T reverses all axes
    check(m.shape_tuple(x), I64(304))


def test_indexing_basic(m):
    x = randn(4, 5, 6, seed=17)
    r = m.index_basic(x)
    for got, want in zip(r, [x[1], x[-1], x[1, 2], x[1, -2, 3], x[:, 2], x[1:3], x[:, :, -1]]):
        check(got, want)


def test_indexing_slices_steps(m):
    x = randn(4, 5, 6, seed=18)
    r = m.index_slices(x)
    for got, want in zip(r, [x[::2], x[1::2, ::-1], x[:-1, 1:4:2, ::3], x[-3:], x[::-1, ::-2]]):
        check(got, want)


def test_indexing_ellipsis_newaxis(m):
    x = randn(4, 5, 6, seed=19)
    r = m.index_ellipsis_none(x)
    wants = [x[..., 0], x[1, ...], x[None], x[:, None, :, 1], x[..., None], x[None, ..., None]]
    for got, want in zip(r, wants):
        check(got, want)


def test_index_with_0d_int_tensor(m):
    x = randn(6, seed=20)
    y = np.array([0.0, 3.0, 9.0, 1.0, 2.0, 0.0], F32)
    check(m.index_tensor0(x, y), x[2])


def test_index_with_runtime_ints(m):
    x = randn(3, 4, seed=21)
    a, b, c = m.index_runtime_int(x, 2, -1)
    check(a, x[2, -1])
    check(b, x[2])
    check(c, x[:, -1])
    a, b, c = m.index_runtime_int(x, -3, 0)
    check(a, x[-3, 0])


def test_index_with_int_tensor(m):
    x = randn(5, 3, seed=22)
    idx = np.array([4, 0, 0, 2], I64)
    a, b = m.index_gather(x, idx)
    check(a, x[idx])
    check(b, x[idx, 0])


@pytest.mark.parametrize("i,n", [(0, 3), (2, 5), (1, 1), (3, 6)])
def test_slices_with_runtime_bounds(m, i, n):
    x = randn(6, seed=27)
    got = m.runtime_slices(x, i, n)
    wants = [x[:n], x[i:i + 2], x[i:], x[1:x.shape[0] - 1], x[n::-1], x[i:n:2]]
    for g, w in zip(got, wants):
        check(g, w)
    x2 = randn(4, 5, seed=28)
    k = min(n, 4)
    a, b = m.runtime_slices_2d(x2, k)
    check(a, x2[:k, k:])
    check(b, x2[:, :k][::-1])


def test_shape_as_result(m):
    s = m.shape_value(np.zeros((3, 5, 2), F32))
    assert isinstance(s, tuple) and len(s) == 3, s
    assert [int(v) for v in s] == [3, 5, 2]
    assert all(np.asarray(v).dtype.kind == "i" for v in s), s


def test_nested_tuple_results(m):
    x = randn(4, seed=29)
    r = m.nested_tuple(x)
    assert isinstance(r, tuple) and len(r) == 2
    check(r[0], x * 2.0)
    assert isinstance(r[1], tuple) and len(r[1]) == 2
    check(r[1][0], np.sum(x, dtype=F32))
    assert isinstance(r[1][1], tuple) and len(r[1][1]) == 2
    check(r[1][1][0], I64(4))
    check(r[1][1][1], x[0])


def test_list_constants(m):
    a, b, c, d = m.list_consts()
    check(a, np.array([[1.0, 2.0], [3.0, 4.0]], F32))
    check(b, np.array([1, 2, 3], I64))
    check(c, np.array([[True, False]]))
    check(d, np.array([1.0, 2.0, 3.0], F32))


def test_list_of_tensors_stacks(m):
    a, b = randn(3, seed=23), randn(3, seed=24)
    r1, r2, r3 = m.list_stack(a, b)
    check(r1, np.array([a, b]))
    check(r2, np.array([a * 2.0, b, a + b]))
    check(r3, np.array([[a, b], [b, a]]))
    x = randn(5, seed=25)
    check(m.list_scalars(x), np.array([x.sum(), x.max(), x.min()], F32))


def test_shapes_as_lists_with_runtime_values(m):
    for shape in [(2, 5), (4, 3)]:
        x = randn(*shape, seed=26)
        z, o, r = m.shape_lists(x)
        check(z, np.zeros((shape[0], 3), F32))
        check(o, np.ones((2, shape[1]), F32))
        check(r, x.reshape(shape[1], shape[0]))
