"""erf(x) and gelu(x, approximate="none"|"tanh") against PyTorch, values and gradients, in every
mode (LANGUAGE.md §2: gelu is exact, erf-based, by default, as in PyTorch)."""
import math

import ml_dtypes
import numpy as np
import pytest

import dg

from .util import check, load_src

try:  # (the references; the finite-difference and edge-value tests need none)
    import torch
    F = torch.nn.functional
except ImportError:
    torch = F = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed: the references come from it")

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


@pytest.fixture
def m(mode):
    return load_src(SRC, mode)


def _exact_gelu(x64):
    """x * Phi(x), in float64 from libm's erfc: accurate in the far negative tail too (PyTorch's
    float64 0.5 * x * (1 + erf(x / sqrt 2)) is 0 there)."""
    return np.array([0.5 * v * math.erfc(-v / math.sqrt(2.0)) for v in x64.ravel()]).reshape(x64.shape)


@pytest.mark.parametrize("dtype", list(DTYPES), ids=lambda d: np.dtype(d).name)
@needs_torch
def test_erf_matches_torch(m, dtype):
    x = X.astype(dtype)
    want = torch.erf(torch.from_numpy(x.astype(np.float64))).numpy().astype(dtype)
    check(m.erf_of(x), want, **DTYPES[dtype])
    check(m.erf_of(x.reshape(1, -1)), want.reshape(1, -1), **DTYPES[dtype])


@pytest.mark.parametrize("dtype", list(DTYPES), ids=lambda d: np.dtype(d).name)
@needs_torch
def test_gelu_matches_torch(m, dtype):
    x = X.astype(dtype)
    t = torch.from_numpy(x.astype(np.float64))
    exact = F.gelu(t).numpy()
    tail = x.astype(np.float64) < -2  # where PyTorch's float64 form loses digits
    exact[tail] = _exact_gelu(x.astype(np.float64))[tail]
    tanh = F.gelu(t, approximate="tanh").numpy()
    got = m.gelu_of(x)
    for g, w in zip(got[:2], (exact, exact)):
        check(g, w.astype(dtype), **DTYPES[dtype])
    # the tanh form is computed in the element type: 1 + tanh(...) cancels for negative x, in
    # PyTorch as here, to a few ulps of 1 absolute
    eps = float(ml_dtypes.finfo(dtype).eps)
    for g in got[2:]:
        check(g, tanh.astype(dtype), rtol=DTYPES[dtype]["rtol"], atol=8 * eps)


@needs_torch
def test_gelu_matches_torch_in_its_own_precision(m):
    """PyTorch's float32 gelu, where it is accurate (not the far negative tail)."""
    x = np.random.default_rng(0).standard_normal(1000).astype(np.float32) * 3
    t = torch.from_numpy(x)
    exact, _, tanh, _ = m.gelu_of(x)
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
@needs_torch
def test_gradients_match_torch(m, mode, dtype):
    x = (np.random.default_rng(1).standard_normal(64) * 2.5).astype(dtype)
    t = torch.from_numpy(x).requires_grad_()
    (F.gelu(t) * t).sum().add(F.gelu(t * 2, approximate="tanh").sum()).backward()
    # float32: 1 + tanh(...) and 1 + erf(...) cancel for negative x, in PyTorch as here
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-14)
    check(dg.grad(m.gelu_loss)(x), t.grad.numpy(), **tol)
    t = torch.from_numpy(x).requires_grad_()
    (torch.erf(t) * t).sum().backward()
    check(dg.grad(m.erf_loss)(x), t.grad.numpy(), **tol)


def test_gradients_match_finite_differences(m, mode):
    x = np.random.default_rng(2).standard_normal(8) * 2
    for f in (m.gelu_loss, m.erf_loss):
        g = dg.grad(f)(x)
        h = 1e-6
        fd = np.array([(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(len(x))])
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


@needs_torch
def test_literals_fold(m):
    got = m.literals()
    want = (F.gelu(torch.tensor(1.0, dtype=torch.float64)).item(),
            F.gelu(torch.tensor(-2.0, dtype=torch.float64), approximate="tanh").item(), math.erf(0.5),
            F.gelu(torch.tensor(1.0, dtype=torch.float64)).item(), math.erf(1.0))
    for g, w in zip(got, want):
        assert abs(float(g) - w) < 1e-6


@pytest.mark.parametrize("call, message", [
    ('gelu(x, approximate="exact")', 'approximate must be "none" or "tanh"'),
    ("gelu(x, approximate=1)", 'approximate must be "none" or "tanh"'),
    ("gelu(x, approx=\"tanh\")", "gelu() has no argument 'approx'"),
    ("erf(x, 1)", "erf() takes at most 1 arguments"),
])
def test_bad_arguments_are_located_type_errors(mode, call, message):
    if mode != "interp":
        pytest.skip("an emitter error, the same in every mode")
    with pytest.raises(dg.DgTypeError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        dg.loads(f"def f(x):\n    return {call}\n", filename="bad.dg").f(np.ones(2, np.float32))
    assert str(e.value).startswith("bad.dg:2:")
