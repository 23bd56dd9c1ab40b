"""Values at the edges of the number types, and shapes checked only at run time, in every mode:
each result is NumPy's (integer division by zero and by -1, bool order, fmod-based float floor
division, half-precision conversions and sums), and each bad shape a located DgRuntimeError, never
a crash of the process."""
import numpy as np
import pytest

import dg

from .util import check, load_src

SRC = '''
def idivmod(x: i64[N], y: i64[N]):
    return x // y, x % y

def idivmod32(x: i32[N], y: i32[N]):
    return x // y, x % y

def bool_order(a: bool[N], b: bool[N]):
    return a < b, a <= b, a > b, a >= b, maximum(a, b), minimum(a, b), argmax(a), argmin(a)

def fdivmod(x: f64[N], y: f64[N]):
    return x // y, x % y

def ipow(x: i64[N], y: i64[N]):
    return x ** y

def to_half(x: f64[N]):
    return f16(x), bf16(x)

def bf16_math(x: bf16[N]):
    return x + x, x * x, exp(x), tanh(x) * x

def bf16_chains(x: bf16[N]):
    return x * x + x, (x - 1.0) * (x + 1.0), exp(x) * x

def f16_sums(x: f16[N]):
    return sum(x), mean(x)

def zero_d_reductions(x: f32[N], y: f32):
    return sum(y) * x, mean(y) * x, x + var(y), logsumexp(y) * x, prod(y) * x

def kept(x: f32[A, B, C]):
    return logsumexp(x, axis=0, keepdims=True), var(x, axis=(0, 2), keepdims=True)

def soft64(x: f64[N]):
    return softmax(x), log_softmax(x)

def cat(x: f32[?, ?], y: f32[?, ?]):
    return concat([x, y], 0)

def squeezed(x: f32[?, ?]):
    return squeeze(x, 0)

def no_step(x: f32[?]):
    return x[::0]

def identity(n: i64):
    return eye(n)

def trips(a: i64, b: i64, s: i64):
    k = 0
    v = -999
    for i in range(a, b, s):
        k += 1
        v = i
    return k, v

def ce(l: f32[B, C], y: i64[B]) -> f32:
    return cross_entropy(l, y)

def reshaped(x: f64[N], n: i64):
    return reshape(x, [n, -1])

def soft_empty(x: f32[B, K]):
    return softmax(x, axis=1), log_softmax(x, axis=1), softmax(x, axis=0)

def carry_empty(x, n: i64) -> f64:
    h = x
    for i in range(n):
        h = tanh(h) * 2.0
    return sum(h)

def carry_empty_while(x: f64[N, 0], n: i64) -> f64:
    h = x
    k = 0
    while k < n:
        h = h * h
        k += 1
    return sum(h) + f64(k)
'''


@pytest.fixture
def m(mode):
    return load_src(SRC, mode)


def test_integer_division_by_zero_and_minus_one(m):
    """NumPy's results: x // 0 = x % 0 = 0, x // -1 = -x (the smallest integer wraps), x % -1 = 0;
    compiled code divided by zero (SIGFPE)."""
    lo = np.iinfo(np.int64).min
    x = np.array([7, -7, 7, lo, lo, 5, -5, 0], np.int64)
    y = np.array([0, 0, -1, -1, 0, -3, 3, 0], np.int64)
    q, r = m.idivmod(x, y)
    with np.errstate(divide="ignore", over="ignore"):
        check(q, np.floor_divide(x, y))
        check(r, np.mod(x, y))
    x32, y32 = x.astype(np.int32) // 4, y.astype(np.int32)
    x32[3] = np.iinfo(np.int32).min
    q, r = m.idivmod32(x32, y32)
    with np.errstate(divide="ignore", over="ignore"):
        check(q, np.floor_divide(x32, y32))
        check(r, np.mod(x32, y32))


def test_bools_are_ordered_false_before_true(m):
    a = np.array([False, True, True, False])
    b = np.array([True, False, True, False])
    got = m.bool_order(a, b)
    want = (a < b, a <= b, a > b, a >= b, np.maximum(a, b), np.minimum(a, b), np.argmax(a), np.argmin(a))
    for g, w in zip(got, want):
        check(g, w)


def test_float_floor_division_and_remainder_as_numpy(m):
    x = np.array([-1, 2, 3, np.inf, 1, 7, -7, 7, -7, 0.0, -0.0, 5, np.nan, 1, 3, 1e-300])
    y = np.array([-np.inf, np.inf, -np.inf, 2, 0.1, 2, 2, -2, -2, 3, 3, 0, 1, np.nan, 0.0, 1e300])
    q, r = m.fdivmod(x, y)
    with np.errstate(divide="ignore", invalid="ignore"):
        wq, wr = np.floor_divide(x, y), np.mod(x, y)
    np.testing.assert_array_equal(q, wq)
    np.testing.assert_array_equal(r, wr)
    np.testing.assert_array_equal(np.signbit(q), np.signbit(wq))
    np.testing.assert_array_equal(np.signbit(r), np.signbit(wr))


def test_integer_power_with_a_negative_exponent_raises(m):
    check(m.ipow(np.array([2, 3]), np.array([5, 2])), np.array([32, 9]))
    with pytest.raises(dg.DgRuntimeError, match="negative integer powers"):
        m.ipow(np.array([2, 3]), np.array([-1, 2]))


def test_narrowing_to_half_precision_rounds_once(m):
    """f64 to f16 and bf16 as one rounding (compiled code called a function the JIT lacks)."""
    from dg.core.types import DTYPES

    x = np.array([1.5, -3.3333, 1e-8, 65519.99, 70000.0, np.nan, np.inf, 1 + 2.0 ** -11 + 2.0 ** -40,
                  1 + 2.0 ** -11, 2.0 ** -25 * 1.0000001, 3.0e38])
    h, bh = m.to_half(x)
    with np.errstate(over="ignore"):
        check(h, x.astype(np.float16), rtol=0, atol=0)
    want = x.astype(DTYPES["bf16"][1])
    assert bh.dtype == want.dtype
    np.testing.assert_array_equal(bh.astype(np.float64), want.astype(np.float64))


def _bf16_inputs():
    """bf16 values of every binade from 2^-6 to 2^6, of both signs, with all their significands."""
    from dg.core.types import DTYPES

    bf = DTYPES["bf16"][1]
    x = (np.random.default_rng(7).standard_normal(1000) * np.exp2(np.random.default_rng(8).integers(-6, 6, 1000)))
    return np.concatenate([[1.5, 2.25, -3.0, 0.1], x]).astype(np.float32).astype(bf), bf


def _rounded(bf):
    """r(v): v (float32) rounded to bf16, given back as float32 (ml_dtypes' round to nearest even)."""
    return lambda v: np.asarray(v, np.float32).astype(bf).astype(np.float32)


def _bits_equal(got, want, bf, what):
    assert got.dtype == bf, (what, got.dtype)
    g, w = np.asarray(got).astype(np.float32), np.asarray(want, np.float32)
    bad = np.flatnonzero(g.view(np.uint32) != w.view(np.uint32))
    assert bad.size == 0, f"{what}: {bad.size} of {g.size} differ, e.g. {g[bad[:5]]} against {w[bad[:5]]}"


def test_bf16_arithmetic_rounds_after_each_operation(m):
    """Each operation's result is rounded to bf16, to the bit: the reference computes each in f32
    (exact for + and * of two bf16s; exp and tanh as NumPy does) and rounds it to bf16 before the
    next. Rounding once at the end (tanh(x) * x in f32, then bf16) differs from it, and would fail."""
    x, bf = _bf16_inputs()
    r = _rounded(bf)
    x32 = x.astype(np.float32)
    got = m.bf16_math(x)
    want = [r(x32 + x32), r(x32 * x32), r(np.exp(x32)), r(r(np.tanh(x32)) * x32)]
    for g, w, what in zip(got, want, ["x + x", "x * x", "exp(x)", "tanh(x) * x"]):
        _bits_equal(g, w, bf, what)
    at_the_end = r(np.tanh(x32) * x32)
    assert np.sum(at_the_end != want[3]) > 50  # (the inputs tell one rounding from two)


def test_bf16_chains_of_arithmetic_round_after_each_operation(m):
    """As above, for + - * of bf16 values feeding one another (which compiled code fuses into one
    loop), and a math function's result multiplied."""
    x, bf = _bf16_inputs()
    r = _rounded(bf)
    x32 = x.astype(np.float32)
    got = m.bf16_chains(x)
    want = [r(r(x32 * x32) + x32), r(r(x32 - 1) * r(x32 + 1)), r(r(np.exp(x32)) * x32)]
    at_the_end = [r(x32 * x32 + x32), r((x32 - 1) * (x32 + 1)), r(np.exp(x32) * x32)]
    for w, e in zip(want, at_the_end):
        assert np.sum(w != e) > 50  # (the inputs tell one rounding from two)
    for g, w, what in zip(got, want, ["x * x + x", "(x - 1) * (x + 1)", "exp(x) * x"]):
        _bits_equal(g, w, bf, what)


def test_f16_sums_add_up_in_f32(m):
    """As NumPy: 5000 ones sum to 5000 (in f16, 4996), and the mean of 70000 ones is 1 (the f16
    sum overflows)."""
    check(m.f16_sums(np.ones(5000, np.float16))[0], np.float16(5000))
    s, mean = m.f16_sums(np.ones(70000, np.float16))
    with np.errstate(over="ignore"):
        check(s, np.ones(70000, np.float16).sum())
    check(mean, np.float16(1.0))


def test_reductions_of_a_0d_tensor_inside_an_expression(m):
    """sum(y) of a 0-d y, fused into the product with x, was added up once per element of x."""
    x, y = np.array([1, 5, 3], np.float32), np.float32(2)
    got = m.zero_d_reductions(x, y)
    for g, w in zip(got, (2 * x, 2 * x, x, 2 * x, 2 * x)):
        check(g, w.astype(np.float32))


def test_keepdims_on_axes_other_than_the_last(m):
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    lse, v = m.kept(x)
    mx = x.max(0, keepdims=True)
    check(lse, (np.log(np.exp(x - mx).sum(0, keepdims=True)) + mx).astype(np.float32), rtol=1e-5)
    check(v, x.var(axis=(0, 2), keepdims=True), rtol=1e-5)


def test_softmax_keeps_f64(m):
    x = np.array([0.5, 1.0, -2.0])
    s, ls = m.soft64(x)
    e = np.exp(x - x.max())
    check(s, e / e.sum(), rtol=1e-12)
    check(ls, np.log(e / e.sum()), rtol=1e-12)


@pytest.mark.parametrize("call, message", [
    (lambda m: m.cat(np.ones((2, 3), np.float32), np.ones((2, 5), np.float32)), "except for the concatenation axis"),
    (lambda m: m.squeezed(np.ones((2, 3), np.float32)), "size not equal to one"),
    (lambda m: m.no_step(np.ones(5, np.float32)), "slice step cannot be zero"),
    (lambda m: m.identity(-3), "negative dimensions"),
    (lambda m: m.trips(1, 5, 0), "range\\(\\) step cannot be zero"),
    (lambda m: m.reshaped(np.zeros(0), 0), "cannot reshape"),  # as NumPy: -1 is no one size here
    (lambda m: m.reshaped(np.zeros(6), 0), "cannot reshape"),
])
def test_bad_sizes_at_run_time_raise(m, call, message):
    with pytest.raises(dg.DgRuntimeError, match=message) as err:
        call(m)
    assert ":" in str(err.value).split(" error:")[0]  # FILE:LINE:COL


def test_good_sizes_at_run_time(m):
    check(m.cat(np.ones((2, 3), np.float32), np.zeros((4, 3), np.float32)),
          np.concatenate([np.ones((2, 3)), np.zeros((4, 3))]).astype(np.float32))
    check(m.squeezed(np.ones((1, 3), np.float32)), np.ones(3, np.float32))
    check(m.identity(2), np.eye(2, dtype=np.float32))


def test_range_with_steps_known_at_run_time(m):
    """Python's trip counts for either sign of step, at the ends of i64 too (the distance and the
    step's size are unsigned, so neither overflows); a step of 0 (above) raised SIGFPE."""
    vals, big = (-7, -3, -1, 0, 1, 2, 5, 9), 2 ** 62
    cases = [(a, b, s) for a in vals for b in vals for s in (-4, -1, 1, 3)]
    cases += [(-big, big, big), (big, -big, -(2 ** 63)), (-(2 ** 63), 2 ** 63 - 1, 2 ** 63 - 1), (5, -5, -(2 ** 63))]
    for a, b, s in cases:
        r = range(a, b, s)
        assert tuple(int(v) for v in m.trips(a, b, s)) == (len(r), r[-1] if len(r) else -999), (a, b, s)


@pytest.mark.parametrize("shape", [(0,), (3, 0)])
def test_gradients_through_loops_carrying_empty_tensors(m, shape):
    """A carried tensor with a static size of 0 (unannotated, or declared so) has an empty tape;
    compiled mode wrote tape slices at offset 0 of a size-0 axis, IR that does not verify."""
    x = np.zeros(shape)
    v, g = dg.value_and_grad(m.carry_empty)(x, 3)
    assert float(v) == 0.0 and g.shape == shape and g.dtype == np.float64
    v, g = dg.value_and_grad(m.carry_empty_while)(np.zeros((3, 0)), 2)
    assert float(v) == 2.0 and g.shape == (3, 0)


@pytest.mark.parametrize("shape", [(2, 0), (0, 3)])
def test_softmax_over_an_empty_axis_is_empty(m, shape):
    """As in PyTorch and JAX; the interpreter raised (NumPy's max of an empty axis), compiled code did not."""
    for r in m.soft_empty(np.zeros(shape, np.float32)):
        assert r.shape == shape and r.dtype == np.float32


@pytest.mark.parametrize("label", [-1, -3, 3])
def test_cross_entropy_labels_outside_the_classes_raise(m, label):
    """A negative label is no class (compiled code read -1 as the last class, as an index)."""
    logits = np.array([[1.0, 2.0, 3.0], [0.5, 0.0, -1.0]], np.float32)
    y = np.array([0, label])
    for call in (m.ce, dg.value_and_grad(m.ce)):
        with pytest.raises(dg.DgRuntimeError, match=rf"label {label} is outside \[0, 3\)"):
            call(logits, y)
    check(m.ce(logits, np.array([0, 2])), np.float32(2.2558684), rtol=1e-6)
