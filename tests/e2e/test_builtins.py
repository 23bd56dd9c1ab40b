"""Built-in functions of LANGUAGE.md section 2 (no autodiff, conv or pooling) vs NumPy."""
import math

import numpy as np
import pytest

import dg

from .util import check, load_src, randn

F32, F64, F16, I32, I64, B = np.float32, np.float64, np.float16, np.int32, np.int64, np.bool_

UNARY = {
    "exp": np.exp,
    "log": np.log,
    "log1p": np.log1p,
    "expm1": np.expm1,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "abs": np.abs,
    "sign": np.sign,
    "sin": np.sin,
    "cos": np.cos,
    "tanh": np.tanh,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "relu": lambda x: np.maximum(x, 0.0),
    # exact, as torch.nn.functional.gelu (approximate="tanh" in tests/e2e/test_gelu_erf.py)
    "gelu": lambda x: 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0))),
    "softplus": lambda x: np.logaddexp(0.0, x),
    "erf": np.vectorize(math.erf),
    "floor": np.floor,
    "ceil": np.ceil,
    "round": np.round,  # half to even, like NumPy
}
POSITIVE_ONLY = {"log", "sqrt", "rsqrt"}
REDUCTIONS = ["sum", "mean", "max", "min", "prod", "logsumexp", "var"]

SRC = "\n".join(f"def u_{n}(x):\n    return {n}(x)\n" for n in UNARY) + "\n".join(
    f"""
def r_{n}(x):
    return {n}(x), {n}(x, axis=0), {n}(x, axis=-1), {n}(x, axis=(0, 2)), {n}(x, 1, True), \\
        {n}(x, axis=(0, 1), keepdims=True), {n}(x, axis=(2, 0))

def rn_{n}(x):
    return {n}(x, axis=None), {n}(x, axis=None, keepdims=True), {n}(x, keepdims=True)
""" for n in REDUCTIONS) + '''
def r_arg(x):
    return argmax(x), argmin(x), argmax(x, axis=0), argmin(x, axis=-1), argmax(x, 1, True), \\
        argmin(x, axis=2, keepdims=True)

def r_int(x: i64[?, ?]):
    return sum(x), sum(x, axis=0), max(x, axis=1), min(x), prod(x, axis=1), argmax(x, axis=1)

def r_i32(x: i32[?, ?]):
    return max(x, axis=1), min(x), argmax(x, axis=0), argmin(x)

def r_none(x: f32[?, ?]):
    return max(x, axis=0), min(x, axis=0), argmax(x, axis=0), argmin(x, axis=0)

def r_bool(x: f32[?]):
    return sum(x > 0.0), max(x > 0.0), min(x > 0.0)

def r_mean_int(x: i64[?]):
    return mean(x)

def lse_big(x: f32[?]):
    return logsumexp(x)

def creation(n: i64, m: i64):
    return zeros([n, m]), ones([2, 3]), full([n, 2], 1.5), arange(n), eye(n), \\
        zeros([n], dtype=i64), ones([m], dtype=f64), full([2], 7), zeros(n), full([m], 2.5, dtype=f64)

def likes(x):
    return zeros_like(x), ones_like(x)

def elementwise2(x: f32[?, ?], y: f32[?, ?]):
    return clip(x, -0.5, 0.5), maximum(x, y), minimum(x, y), where(x > y, x, y * 0.1), \\
        pow(abs(x), y), pow(x, 3.0), maximum(x, 0.0), minimum(0.25, x), where(x > 0.0, 1.0, -1.0)

def clip_int(x: i64[?]):
    return clip(x, 0, 3)

def int_unary(x: i64[?]):
    return abs(x), sign(x)

def shape_ops(x: f32[2, 3, 4]):
    return reshape(x, [6, -1]), reshape(x, (4, 6)), reshape(x, [-1]), reshape(x, [x.shape[2], -1, 2]), \\
        transpose(x, [2, 0, 1]), transpose(x, (1, 0, 2)), x.T

def dims_ops(x: f32[3, 1, 4]):
    return expand_dims(x, 0), expand_dims(x, -1), expand_dims(x, axis=2), squeeze(x), squeeze(x, 1), \\
        squeeze(expand_dims(x, 0), axis=0)

def bcast(x: f32[3], n: i64):
    return broadcast_to(x, [4, 3]), broadcast_to(x, [n, 2, 3]), broadcast_to(x[None, :], (2, 3))

def joins(a: f32[2, 3], b: f32[2, 3], c: f32[1, 3]):
    return concat([a, b], 0), concat([a, b, a], axis=1), concat([a, c, b], axis=0), concat([a, b], -1), \\
        stack([a, b]), stack([a, b], axis=1), stack([a, b, a], -1), concat([a, b]), stack([a[0], b[1]], 0)

def takes(x: f32[?, ?], idx: i64[?]):
    return take(x, idx, 0), take(x, idx, axis=1), take(x, idx, axis=-1)

def lengths(x, y):
    return len(x), len(y)

def linalg(a: f32[?, ?], b: f32[?, ?], v: f32[?], w: f32[?]):
    return matmul(a, b), dot(v, w), dot(a, b), outer(v, w), dot(a, b[:, 0])

def bmatmul(a, b):
    return matmul(a, b)

def softmaxes(x: f32[?, ?]):
    return softmax(x), softmax(x, axis=0), softmax(x, 1), log_softmax(x), log_softmax(x, axis=0)

def xent(logits: f32[B, C], labels: i64[B]):
    return cross_entropy(logits, labels)

def mse_(a, b):
    return mse(a, b)

def ln(x: f32[?, D], g: f32[D], b: f32[D]):
    return layer_norm(x, g, b), layer_norm(x, g, b, eps=1e-2), layer_norm(x, g, b, 0.5)

def drop(x, p: f32, seed: i64):
    return dropout(x, p, key(seed))

def drop_lit(x):
    return dropout(x, 0.0, key(3)), dropout(x, 0.5, key(3))

def casts(x: f32[?]):
    return f32(x), f64(x), f16(x), i32(x), i64(x), bool(x), float(x), int(x)

def casts_int(x: i64[?]):
    return f32(x), float(x), int(x), bool(x), f64(x), i32(x)

def cast_scalars(x: f32):
    return float(x), int(x), bool(x), i64(x > 0.0), f32(x > 0.0), int(x) + 1

def rand(seed: i64, n: i64):
    k = key(seed)
    k1, k2 = split(k)
    return normal(k, [n]), normal(k1, [n]), normal(k2, [n]), uniform(k1, [n]), uniform(k, [2, 3]), \\
        normal(k2, [n, 2]), normal(k, [3], dtype=f64)

def rand_lit():
    k = key(7)
    a, b = split(k)
    c, d = split(a)
    return normal(k, [4]), normal(a, [4]), normal(c, [4]), normal(d, [4]), uniform(key(7), [4])
'''


@pytest.fixture
def m(mode):
    return load_src(SRC, mode)


def _unary_input(name, dtype):
    x = np.array([-3.7, -2.5, -1.5, -0.5, -0.2, 0.0, 0.3, 0.5, 1.5, 2.5, 2.6, 4.0, -100.0, 100.0, 20.0, -20.0])
    if name in POSITIVE_ONLY:
        x = np.array([0.01, 0.5, 1.0, 2.0, 4.0, 9.0, 100.0, 1e4])
    if name == "log1p":
        x = np.array([-0.5, -1e-6, 0.0, 1e-7, 1e-3, 0.5, 3.0, 1e3])
    if name in ("exp", "sin", "cos"):
        x = x[np.abs(x) < 50]
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("name", list(UNARY))
def test_unary(m, name, dtype):
    x = _unary_input(name, dtype)
    want = UNARY[name](x.astype(F64)).astype(dtype)
    got = getattr(m, f"u_{name}")(x)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == F32 else dict(rtol=1e-12, atol=1e-15)
    check(got, want, **tol)
    # 2-D and 0-d arguments too
    x2 = x.reshape(2, -1)
    check(getattr(m, f"u_{name}")(x2), want.reshape(2, -1), **tol)
    check(getattr(m, f"u_{name}")(x[3:4].reshape(())), want[3], **tol)


def test_round_half_to_even(m):
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 3.5, 2.4999], F32)
    check(m.u_round(x), np.round(x))


def test_int_unary(m):
    x = np.array([-3, 0, 5], I64)
    a, s = m.int_unary(x)
    check(a, np.abs(x))
    check(s, np.sign(x))


def _lse(x, axis=None, keepdims=False):
    x = x.astype(F64)
    mx = np.max(x, axis=axis, keepdims=True)
    r = np.log(np.sum(np.exp(x - mx), axis=axis, keepdims=True)) + mx
    if not keepdims:
        r = np.squeeze(r, axis=axis) if axis is not None else r.reshape(())
    return r


REF = {
    "sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod, "var": np.var,
    "logsumexp": _lse,
}


@pytest.mark.parametrize("name", REDUCTIONS)
def test_reductions(m, name):
    x = np.random.default_rng(5).uniform(0.5, 1.5, (3, 4, 5)).astype(F32)
    x[1, 2, 3] = -2.0
    got = getattr(m, f"r_{name}")(x)
    f = REF[name]
    x64 = x.astype(F64)
    wants = [f(x64), f(x64, axis=0), f(x64, axis=-1), f(x64, axis=(0, 2)), f(x64, axis=1, keepdims=True),
             f(x64, axis=(0, 1), keepdims=True), f(x64, axis=(2, 0))]
    assert len(got) == len(wants)
    for g, w in zip(got, wants):
        check(g, np.asarray(w).astype(F32), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", REDUCTIONS)
def test_reductions_axis_none(m, name):
    x = np.random.default_rng(5).uniform(0.5, 1.5, (3, 4, 5)).astype(F32)
    got = getattr(m, f"rn_{name}")(x)
    f = REF[name]
    x64 = x.astype(F64)
    wants = [f(x64, axis=None), f(x64, axis=None, keepdims=True), f(x64, keepdims=True)]
    for g, w in zip(got, wants):
        check(g, np.asarray(w).astype(F32), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["sum", "mean", "max", "logsumexp", "var"])
def test_reductions_f64(m, name):
    x = randn(3, 4, 5, seed=6, dtype=F64)
    got = getattr(m, f"r_{name}")(x)
    check(got[0], np.asarray(REF[name](x)), rtol=1e-12)
    check(got[3], np.asarray(REF[name](x, axis=(0, 2))), rtol=1e-12)


def test_arg_reductions(m):
    x = randn(3, 4, 5, seed=7)
    got = m.r_arg(x)
    wants = [np.argmax(x), np.argmin(x), np.argmax(x, axis=0), np.argmin(x, axis=-1),
             np.argmax(x, axis=1, keepdims=True), np.argmin(x, axis=2, keepdims=True)]
    for g, w in zip(got, wants):
        check(g, np.asarray(w).astype(I64))


def test_int_and_bool_reductions(m):
    x = np.array([[3, -1, 4], [1, 5, -9]], I64)
    got = m.r_int(x)
    wants = [x.sum(), x.sum(axis=0), x.max(axis=1), x.min(), x.prod(axis=1), x.argmax(axis=1)]
    for g, w in zip(got, wants):
        check(g, np.asarray(w).astype(I64))
    v = np.array([1.0, -1.0, 2.0, 0.0], F32)
    s, mx, mn = m.r_bool(v)
    check(s, I64(2))  # summing bools counts them, as NumPy does
    check(mx, B(True))
    check(mn, B(False))


def test_i32_reductions(m):
    x = np.array([[3, -2**31, 4], [2**31 - 1, 5, -9]], np.int32)
    got = m.r_i32(x)
    wants = [x.max(axis=1), x.min(), x.argmax(axis=0), x.argmin()]
    for g, w, dt in zip(got, wants, [np.int32, np.int32, I64, I64]):
        check(g, np.asarray(w).astype(dt))


def test_max_min_and_their_indices_of_nothing_raise(m):
    """NumPy's errors when a reduced axis is empty (these have no value to start from), located;
    an empty result of a non-empty reduced axis is fine."""
    got = m.r_none(np.zeros((3, 0), F32))
    for g, dt in zip(got, [F32, F32, I64, I64]):
        check(g, np.zeros(0, dt))
    with pytest.raises(dg.DgRuntimeError, match=r":\d+:\d+: error: ValueError: zero-size array to reduction "
                                                r"operation maximum which has no identity"):
        m.r_none(np.zeros((0, 3), F32))


@pytest.mark.parametrize("name, message", [("min", "zero-size array to reduction operation minimum"),
                                           ("argmax", "attempt to get argmax of an empty sequence"),
                                           ("argmin", "attempt to get argmin of an empty sequence")])
def test_each_of_nothing_raises(mode, name, message):
    f = load_src(f"def f(x: f32[?]):\n    return {name}(x)\n", mode)
    with pytest.raises(dg.DgRuntimeError, match=message):
        f.f(np.zeros(0, F32))


def test_mean_of_ints_is_float(m):
    r = m.r_mean_int(np.array([1, 2, 4], I64))
    assert np.asarray(r).dtype.kind == "f"
    np.testing.assert_allclose(r, 7.0 / 3.0, rtol=1e-6)


def test_logsumexp_is_stable(m):
    check(m.lse_big(np.array([1000.0, 1000.0], F32)), F32(1000.0 + math.log(2.0)))
    check(m.lse_big(np.array([-1000.0, -1000.0, -1000.0], F32)), F32(-1000.0 + math.log(3.0)))


def test_creation(m):
    for n, k in [(3, 4), (1, 2)]:
        z, o, f, a, e, zi, od, fi, zn, fd = m.creation(n, k)
        check(z, np.zeros((n, k), F32))
        check(o, np.ones((2, 3), F32))
        check(f, np.full((n, 2), 1.5, F32))
        check(a, np.arange(n, dtype=I64))
        check(e, np.eye(n, dtype=F32))
        check(zi, np.zeros(n, I64))
        check(od, np.ones(k, F64))
        check(fi, np.full(2, 7, I64))
        check(zn, np.zeros(n, F32))
        check(fd, np.full(k, 2.5, F64))


@pytest.mark.parametrize("dt", [F32, F64, I64, B])
def test_zeros_ones_like(m, dt):
    x = np.array([[1, 0, 3]]).astype(dt)
    z, o = m.likes(x)
    check(z, np.zeros_like(x))
    check(o, np.ones_like(x))


def test_binary_elementwise(m):
    x, y = randn(3, 4, seed=8), randn(3, 4, seed=9)
    got = m.elementwise2(x, y)
    wants = [np.clip(x, -0.5, 0.5), np.maximum(x, y), np.minimum(x, y), np.where(x > y, x, y * F32(0.1)),
             np.power(np.abs(x), y), x ** 3, np.maximum(x, 0.0), np.minimum(0.25, x),
             np.where(x > 0, 1.0, -1.0)]
    for g, w in zip(got, wants):
        check(g, np.asarray(w, F32), rtol=1e-5)
    check(m.clip_int(np.array([-2, 1, 5], I64)), np.array([0, 1, 3], I64))


def test_reshape_transpose(m):
    x = randn(2, 3, 4, seed=10)
    got = m.shape_ops(x)
    wants = [x.reshape(6, -1), x.reshape(4, 6), x.reshape(-1), x.reshape(4, -1, 2),
             np.transpose(x, (2, 0, 1)), np.transpose(x, (1, 0, 2)), x.T]
    for g, w in zip(got, wants):
        check(g, w)


def test_expand_squeeze(m):
    x = randn(3, 1, 4, seed=11)
    got = m.dims_ops(x)
    wants = [np.expand_dims(x, 0), np.expand_dims(x, -1), np.expand_dims(x, 2), np.squeeze(x),
             np.squeeze(x, 1), x]
    for g, w in zip(got, wants):
        check(g, w)


def test_broadcast_to(m):
    x = randn(3, seed=12)
    a, b, c = m.bcast(x, 5)
    check(a, np.broadcast_to(x, (4, 3)))
    check(b, np.broadcast_to(x, (5, 2, 3)))
    check(c, np.broadcast_to(x, (2, 3)))


def test_concat_stack(m):
    a, b, c = randn(2, 3, seed=13), randn(2, 3, seed=14), randn(1, 3, seed=15)
    got = m.joins(a, b, c)
    wants = [np.concatenate([a, b], 0), np.concatenate([a, b, a], axis=1), np.concatenate([a, c, b], 0),
             np.concatenate([a, b], -1), np.stack([a, b]), np.stack([a, b], axis=1), np.stack([a, b, a], -1),
             np.concatenate([a, b]), np.stack([a[0], b[1]], 0)]
    for g, w in zip(got, wants):
        check(g, w)


def test_take(m):
    x = randn(4, 5, seed=16)
    idx = np.array([3, 0, 3], I64)
    a, b, c = m.takes(x, idx)
    check(a, np.take(x, idx, 0))
    check(b, np.take(x, idx, axis=1))
    check(c, np.take(x, idx, axis=-1))


def test_len(m):
    a, b = m.lengths(np.zeros((7, 2), F32), np.zeros(3, I64))
    check(a, I64(7))
    check(b, I64(3))


def test_linalg(m):
    a, b = randn(3, 4, seed=17), randn(4, 2, seed=18)
    v, w = randn(5, seed=19), randn(5, seed=20)
    mm, d, d2, o, mv = m.linalg(a, b, v, w)
    check(mm, a @ b, rtol=1e-5)
    check(d, F32(np.dot(v, w)), rtol=1e-5)
    check(d2, np.dot(a, b), rtol=1e-5)
    check(o, np.outer(v, w))
    check(mv, np.dot(a, b[:, 0]), rtol=1e-5)


def test_batched_matmul_builtin(m):
    a, b = randn(2, 3, 4, seed=21), randn(2, 4, 5, seed=22)
    check(m.bmatmul(a, b), np.matmul(a, b), rtol=1e-5)
    c = randn(4, 6, seed=23)
    check(m.bmatmul(a, c), np.matmul(a, c), rtol=1e-5)


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _log_softmax(x, axis=-1):
    return x - _lse(x, axis=axis, keepdims=True)


def test_softmax_log_softmax(m):
    x = randn(3, 5, seed=24) * F32(3.0)
    got = m.softmaxes(x)
    x64 = x.astype(F64)
    wants = [_softmax(x64), _softmax(x64, 0), _softmax(x64, 1), _log_softmax(x64), _log_softmax(x64, 0)]
    for g, w in zip(got, wants):
        check(g, w.astype(F32), rtol=1e-5, atol=1e-6)


def test_softmax_is_stable(m):
    x = np.array([[1000.0, 1000.0, -1000.0], [-1000.0, 0.0, 1000.0]], F32)
    got = m.softmaxes(x)
    check(got[0], np.array([[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]], F32))
    check(got[3], _log_softmax(x.astype(F64)).astype(F32), rtol=1e-5)


def _xent(logits, labels):
    ls = _log_softmax(logits.astype(F64))
    return -np.mean(ls[np.arange(len(labels)), labels])


def test_cross_entropy(m):
    logits = randn(6, 4, seed=25) * F32(2.0)
    labels = np.array([0, 3, 1, 1, 2, 3], I64)
    check(m.xent(logits, labels), F32(_xent(logits, labels)), rtol=1e-5)
    big = np.array([[1000.0, 0.0], [0.0, 1000.0]], F32)
    check(m.xent(big, np.array([0, 0], I64)), F32(500.0), rtol=1e-5)


def test_mse(m):
    a, b = randn(4, 3, seed=26), randn(4, 3, seed=27)
    check(m.mse_(a, b), F32(np.mean((a.astype(F64) - b) ** 2)), rtol=1e-5)
    check(m.mse_(a[0], a[0]), F32(0.0))


def _ln(x, g, b, eps=1e-5):
    x = x.astype(F64)
    mu = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return ((x - mu) / np.sqrt(var + eps) * g + b).astype(F32)


def test_layer_norm(m):
    x, g, b = randn(3, 6, seed=28) * F32(4.0) + F32(1.0), randn(6, seed=29), randn(6, seed=30)
    r1, r2, r3 = m.ln(x, g, b)
    check(r1, _ln(x, g, b), rtol=1e-4, atol=1e-5)
    check(r2, _ln(x, g, b, 1e-2), rtol=1e-4, atol=1e-5)
    check(r3, _ln(x, g, b, 0.5), rtol=1e-4, atol=1e-5)


def test_dropout_statistics_and_scaling(m):
    n = 200_000
    x = np.random.default_rng(31).uniform(1.0, 2.0, n).astype(F32)
    for p in (0.25, 0.5, 0.9):
        y = m.drop(x, F32(p), 1)
        check(y, y.astype(F32))  # dtype f32, shape kept
        assert y.shape == x.shape
        kept = y != 0
        assert abs(1.0 - kept.mean() - p) < 0.01, (p, kept.mean())
        # kept values are scaled by 1 / (1 - p); dropped ones are exactly 0
        np.testing.assert_allclose(y[kept], x[kept] / F32(1.0 - p), rtol=1e-5)


def test_dropout_determinism(m):
    x = np.ones(1000, F32)
    a = m.drop(x, F32(0.5), 1)
    b = m.drop(x, F32(0.5), 1)
    c = m.drop(x, F32(0.5), 2)
    np.testing.assert_array_equal(a, b)
    assert (a != c).any()


def test_dropout_p0_is_identity(m):
    x = randn(50, 3, seed=32)
    check(m.drop(x, F32(0.0), 5), x, rtol=0, atol=0)
    ident, half = m.drop_lit(x)
    check(ident, x, rtol=0, atol=0)
    kept = half != 0
    np.testing.assert_allclose(half[kept], 2.0 * x[kept], rtol=1e-6)
    assert 0.3 < kept.mean() < 0.7


def test_casts_from_float(m):
    x = np.array([-2.7, -0.5, 0.0, 0.4, 1.0, 3.9], F32)
    got = m.casts(x)
    wants = [x, x.astype(F64), x.astype(F16), x.astype(I32), x.astype(I64), x != 0, x.astype(F32),
             x.astype(I64)]
    for g, w in zip(got, wants):
        check(g, w, rtol=1e-3 if w.dtype == F16 else 1e-6)


def test_casts_from_int(m):
    x = np.array([-3, 0, 2, 7], I64)
    got = m.casts_int(x)
    wants = [x.astype(F32), x.astype(F32), x, x != 0, x.astype(F64), x.astype(I32)]
    for g, w in zip(got, wants):
        check(g, w)


@pytest.mark.parametrize("v", [-2.7, 0.0, 0.6, 3.2])
def test_casts_scalar(m, v):
    f, i, b, ib, fb, i1 = m.cast_scalars(F32(v))
    check(f, F32(v))
    check(i, I64(int(v)))  # truncation toward zero, like Python int()
    check(b, B(bool(v)))
    check(ib, I64(v > 0))
    check(fb, F32(v > 0))
    check(i1, I64(int(v) + 1))


def test_random_determinism_and_split(m):
    n = 1000
    r1 = m.rand(0, n)
    r2 = m.rand(0, n)
    r3 = m.rand(1, n)
    for a, b in zip(r1, r2):
        np.testing.assert_array_equal(a, b)  # same key, same draws
    nk, n1, n2, u1, u23, n2d, n64 = r1
    check(nk, nk.astype(F32))
    assert nk.shape == n1.shape == n2.shape == u1.shape == (n,)
    assert u23.shape == (2, 3) and u23.dtype == F32
    assert n2d.shape == (n, 2) and n2d.dtype == F32
    assert n64.shape == (3,) and n64.dtype == F64
    # split keys give different streams, different from the parent too
    assert not np.array_equal(n1, n2)
    assert not np.array_equal(nk, n1)
    assert not np.array_equal(nk, n2)
    # a different seed gives different numbers
    assert not np.array_equal(nk, r3[0])


def test_random_statistics(m):
    n = 200_000
    nk, n1, n2, u1, _, n2d, _ = m.rand(42, n)
    for z in (nk, n1, n2, n2d.ravel()):
        assert abs(z.mean()) < 0.02
        assert abs(z.std() - 1.0) < 0.02
    assert abs(np.corrcoef(n1, n2)[0, 1]) < 0.02
    assert u1.min() >= 0.0 and u1.max() < 1.0
    assert abs(u1.mean() - 0.5) < 0.01
    assert abs(u1.var() - 1.0 / 12.0) < 0.005


def test_random_with_literal_keys(m):
    a, b, c, d, u = m.rand_lit()
    a2, b2, c2, d2, u2 = m.rand_lit()
    np.testing.assert_array_equal(a, a2)
    np.testing.assert_array_equal(d, d2)
    draws = [a, b, c, d]
    for i in range(4):
        for j in range(i + 1, 4):
            assert not np.array_equal(draws[i], draws[j]), (i, j)
    assert u.shape == (4,) and u.dtype == F32


def test_keys_are_the_same_numbers_in_every_mode(mode):
    """A key is a u64 in both modes (compiled code returned its bits as an int64 before)."""
    m = load_src("def k(s: i64):\n    return key(s)\n\ndef both(s: i64):\n    a, b = split(key(s))\n    return a, b\n",
                 mode, "keys.dg")
    k = m.k(0)
    assert isinstance(k, np.uint64) and k == np.uint64(16294208416658607535)
    a, b = m.both(3)
    assert isinstance(a, np.uint64) and a == np.uint64(17027085370592858547)
    assert isinstance(b, np.uint64)


ANY_ALL = """
def truth(x: f32[N, M]) -> (bool, bool[N], bool[1, M], bool, bool):
    return any(x > 0.5), any(x, axis=1), all(x > 0.0, axis=0, keepdims=True), x.all(), all(x > 9.0, axis=(0, 1))

def branch(x: f32[N]) -> f32:
    if any(x > 1.0):
        return sum(x)
    return 0.0
"""


@pytest.mark.parametrize("x", [np.array([[0.2, 0.9, 0.0], [0.1, 0.3, 0.4]], F32), np.zeros((0, 3), F32),
                               np.zeros((2, 0), F32)])
def test_any_and_all(mode, x):
    """As NumPy's: over no elements, any is False and all is True."""
    got = load_src(ANY_ALL, mode).truth(x)
    wants = [np.any(x > 0.5), np.any(x, axis=1), np.all(x > 0.0, axis=0, keepdims=True), np.all(x), np.all(x > 9.0)]
    for g, w in zip(got, wants):
        check(g, np.asarray(w))


def test_any_decides_a_branch_and_its_gradient(mode):
    m = load_src(ANY_ALL, mode)
    x = np.array([0.5, 2.0], F32)
    check(m.branch(x), F32(2.5))
    check(dg.grad(m.branch)(x), np.ones(2, F32))
    check(dg.grad(m.branch)(np.zeros(2, F32)), np.zeros(2, F32))


def test_a_tensor_condition_suggests_any_and_all():
    with pytest.raises(dg.DgTypeError, match=r"reduce it with any\(\) or all\(\)"):
        dg.loads("def f(x: f32[N]) -> f32:\n    if x > 0.0:\n        return 1.0\n    return 0.0\n").f(np.ones(2, F32))
