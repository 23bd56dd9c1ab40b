"""erf(x) and gelu(x, approximate="none"|"tanh") in every mode, values and gradients, against
references from Python's `math` (erf, erfc, tanh, exp: libm's, in float64) and the formulas of
their derivatives, and against PyTorch as a second, independent check where torch is installed
(LANGUAGE.md §2: gelu is exact, erf-based, by default, as in PyTorch)."""
import math

import ml_dtypes
import numpy as np
import pytest

import dg

from .util import FRONT_END_MODE, check, load_src, made_no_code

try:  # (the second reference: the ones from `math` need nothing)
    import torch
    F = torch.nn.functional
except ImportError:
    torch = F = None

SRC = '''
def erf_of(x):
    return erf(x)

def gelu_of(x):
    return gelu(x), gelu(x, approximate="none"), gelu(x, approximate="tanh"), gelu(x, "tanh")

def gelu_loss(x):
    return sum(gelu(x) * x) + sum(gelu(x * 2.0, approximate="tanh"))

def erf_loss(x):
    return sum(erf(x) * x)

def literals():
    return gelu(1.0), gelu(-2.0, approximate="tanh"), erf(0.5), gelu(1), erf(True)
'''

X = np.array([-30.0, -8.0, -5.0, -3.7, -2.5, -1.0, -0.5, -1e-3, -0.0, 0.0, 1e-8, 0.3, 0.5, 1.0, 1.5,
              2.5, 4.0, 6.0, 30.0])
# f64: erfc's argument x / sqrt 2 rounds, which moves erfc by 2 z^2 ulps (1e-13 at x = -30)
DTYPES = {np.float32: dict(rtol=2e-6, atol=1e-30), np.float64: dict(rtol=5e-13, atol=1e-300),
          np.float16: dict(rtol=2e-3, atol=1e-7), ml_dtypes.bfloat16: dict(rtol=1e-2, atol=1e-30)}
K = math.sqrt(2.0 / math.pi)  # the tanh form: 0.5 x (1 + tanh(K (x + A x^3)))
A = 0.044715


@pytest.fixture
def m(mode):
    return load_src(SRC, mode)


def _each(f, x):
    """f (a function of a Python float) of each element of x, in float64."""
    x64 = np.asarray(x, np.float64)
    return np.array([f(float(v)) for v in x64.ravel()]).reshape(x64.shape)


def erf_ref(x):
    return _each(math.erf, x)


def gelu_ref(x):
    """x Phi(x) = x (1 + erf(x / sqrt 2)) / 2, written with erfc (1 - erf(-z), which keeps its digits
    in the far negative tail, where 1 + erf cancels; PyTorch's float64 gelu is 0 there)."""
    return _each(lambda v: 0.5 * v * math.erfc(-v / math.sqrt(2.0)), x)


def gelu_tanh_ref(x):
    return _each(lambda v: 0.5 * v * (1.0 + math.tanh(K * (v + A * v ** 3))), x)


def gelu_slope(v):
    """d/dx x Phi(x) = Phi(x) + x phi(x)."""
    return 0.5 * math.erfc(-v / math.sqrt(2.0)) + v * math.exp(-0.5 * v * v) / math.sqrt(2.0 * math.pi)


def gelu_tanh_slope(u):
    t = math.tanh(K * (u + A * u ** 3))
    return 0.5 * (1.0 + t) + 0.5 * u * (1.0 - t * t) * K * (1.0 + 3.0 * A * u * u)


def gelu_loss_grad(x):
    """The gradient of sum(gelu(x) * x) + sum(gelu(2 x, approximate="tanh"))."""
    return _each(lambda v: 0.5 * v * math.erfc(-v / math.sqrt(2.0)) + v * gelu_slope(v) + 2.0 * gelu_tanh_slope(2.0 * v), x)


def erf_loss_grad(x):
    """The gradient of sum(erf(x) * x): erf(x) + x 2 exp(-x^2) / sqrt(pi)."""
    return _each(lambda v: math.erf(v) + v * 2.0 * math.exp(-v * v) / math.sqrt(math.pi), x)


@pytest.mark.parametrize("dtype", list(DTYPES), ids=lambda d: np.dtype(d).name)
def test_erf_values(m, dtype):
    x = X.astype(dtype)
    want = erf_ref(x).astype(dtype)
    got = m.erf_of(x)
    check(got, want, **DTYPES[dtype])
    check(m.erf_of(x.reshape(1, -1)), want.reshape(1, -1), **DTYPES[dtype])
    if torch is not None:
        check(got, torch.erf(torch.from_numpy(x.astype(np.float64))).numpy().astype(dtype), **DTYPES[dtype])


@pytest.mark.parametrize("dtype", list(DTYPES), ids=lambda d: np.dtype(d).name)
def test_gelu_values(m, dtype):
    x = X.astype(dtype)
    exact, tanh = gelu_ref(x), gelu_tanh_ref(x)
    got = m.gelu_of(x)
    for g in got[:2]:
        check(g, exact.astype(dtype), **DTYPES[dtype])
    # the tanh form is computed in the element type: 1 + tanh(...) cancels for negative x, in
    # PyTorch as here, to a few ulps of 1 absolute
    eps = float(ml_dtypes.finfo(dtype).eps)
    for g in got[2:]:
        check(g, tanh.astype(dtype), rtol=DTYPES[dtype]["rtol"], atol=8 * eps)
    if torch is not None:
        t = torch.from_numpy(x.astype(np.float64))
        torch_exact = F.gelu(t).numpy()
        tail = x.astype(np.float64) < -2  # where PyTorch's float64 form loses digits
        torch_exact[tail] = exact[tail]
        for g in got[:2]:
            check(g, torch_exact.astype(dtype), **DTYPES[dtype])
        for g in got[2:]:
            check(g, F.gelu(t, approximate="tanh").numpy().astype(dtype), rtol=DTYPES[dtype]["rtol"], atol=8 * eps)


def test_gelu_in_float32_to_its_precision(m):
    """float32 gelu on a thousand values of [-9, 9]: to a few ulps (1e-6 absolute where the tanh form
    cancels), against float64 from `math` and against PyTorch's own float32."""
    x = np.random.default_rng(0).standard_normal(1000).astype(np.float32) * 3
    exact, _, tanh, _ = m.gelu_of(x)
    check(exact, gelu_ref(x).astype(np.float32), rtol=1e-5, atol=1e-6)
    check(tanh, gelu_tanh_ref(x).astype(np.float32), rtol=1e-5, atol=1e-6)
    if torch is not None:
        t = torch.from_numpy(x)
        check(exact, F.gelu(t).numpy(), rtol=1e-5, atol=1e-6)
        check(tanh, F.gelu(t, approximate="tanh").numpy(), rtol=1e-5, atol=1e-6)


def test_edge_values(m):
    x = np.array([np.inf, -np.inf, np.nan, -0.0], np.float32)
    e = m.erf_of(x)
    np.testing.assert_array_equal(e[:2], [1.0, -1.0])
    assert np.isnan(e[2]) and e[3] == 0 and np.signbit(e[3])
    g = m.gelu_of(x)[0]
    assert g[0] == np.inf and np.isnan(g[2]) and g[3] == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_gradients(m, mode, dtype):
    """Against the derivatives' formulas (from `math`), and PyTorch's autograd."""
    x = (np.random.default_rng(1).standard_normal(64) * 2.5).astype(dtype)
    # float32: 1 + tanh(...) and 1 + erf(...) cancel for negative x, in PyTorch as here
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-14)
    g_gelu, g_erf = dg.grad(m.gelu_loss)(x), dg.grad(m.erf_loss)(x)
    check(g_gelu, gelu_loss_grad(x).astype(dtype), **tol)
    check(g_erf, erf_loss_grad(x).astype(dtype), **tol)
    if torch is not None:
        t = torch.from_numpy(x).requires_grad_()
        (F.gelu(t) * t).sum().add(F.gelu(t * 2, approximate="tanh").sum()).backward()
        check(g_gelu, t.grad.numpy(), **tol)
        t = torch.from_numpy(x).requires_grad_()
        (torch.erf(t) * t).sum().backward()
        check(g_erf, t.grad.numpy(), **tol)


def test_gradients_match_finite_differences(m, mode):
    x = np.random.default_rng(2).standard_normal(8) * 2
    for f in (m.gelu_loss, m.erf_loss):
        g = dg.grad(f)(x)
        h = 1e-6
        fd = np.array([(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(len(x))])
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


def test_literals_fold(m):
    got = m.literals()
    want = (gelu_ref(1.0), gelu_tanh_ref(-2.0), math.erf(0.5), gelu_ref(1.0), math.erf(1.0))
    for g, w in zip(got, want):
        assert abs(float(g) - w) < 1e-6
    if torch is not None:
        t = (F.gelu(torch.tensor(1.0, dtype=torch.float64)).item(),
             F.gelu(torch.tensor(-2.0, dtype=torch.float64), approximate="tanh").item())
        assert abs(float(got[0]) - t[0]) < 1e-6 and abs(float(got[1]) - t[1]) < 1e-6


@pytest.mark.parametrize("call, message", [
    ('gelu(x, approximate="exact")', 'approximate must be "none" or "tanh"'),
    ("gelu(x, approximate=1)", 'approximate must be "none" or "tanh"'),
    ("gelu(x, approx=\"tanh\")", "gelu() has no argument 'approx'"),
    ("erf(x, 1)", "erf() takes at most 1 arguments"),
])
def test_bad_arguments_are_located_type_errors(call, message):
    """Errors of the front end, before any code is made: one run stands for every mode."""
    with made_no_code(), pytest.raises(dg.DgTypeError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        dg.loads(f"def f(x):\n    return {call}\n", mode=FRONT_END_MODE, filename="bad.dg").f(np.ones(2, np.float32))
    assert str(e.value).startswith("bad.dg:2:")
