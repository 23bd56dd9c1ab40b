"""Compiled float32 exp and tanh are arith code (dialects/approx.py), accurate to 1.5 ulp."""
import numpy as np
import pytest

import dg
from dg.dialects import approx

SRC = """
def ex(x: f32[N]) -> f32[N]:
    return exp(x)

def th(x: f32[N]) -> f32[N]:
    return tanh(x)

def sg(x: f32[N]) -> f32[N]:
    return sigmoid(x)

def ex64(x: f64[N]) -> f64[N]:
    return exp(x)
"""


@pytest.fixture(scope="module")
def m():
    return dg.loads(SRC, mode="compiled")


def ulps(got, x, ref):
    """|got - ref(x)| in units of the float32 spacing at the float64 reference."""
    want = ref(x.astype(np.float64))
    return np.abs(got.astype(np.float64) - want) / np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)


@pytest.mark.parametrize("lo,hi", [(-103.9, 88.7), (-87.0, 88.0), (-1.0, 1.0), (-1e-3, 1e-3)])
def test_exp_ulp(m, lo, hi):
    x = np.linspace(lo, hi, 400_001, dtype=np.float32)
    assert ulps(m.ex(x), x, np.exp).max() <= 1.5


@pytest.mark.parametrize("lo,hi", [(-12.0, 12.0), (-0.7, 0.7), (0.6, 0.65), (-1e-4, 1e-4)])
def test_tanh_ulp(m, lo, hi):
    x = np.linspace(lo, hi, 400_001, dtype=np.float32)
    assert ulps(m.th(x), x, np.tanh).max() <= 1.5


def test_special_values(m):
    x = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-30, 89.0, 88.8, -110.0, 100.0, -100.0], np.float32)
    e = m.ex(x)
    with np.errstate(over="ignore"):
        want = np.exp(x)
    np.testing.assert_array_equal(e, want)
    t = m.th(x)
    np.testing.assert_array_equal(t, np.tanh(x))
    assert np.signbit(t[4]) and not np.signbit(t[3])
    s = m.sg(x)
    np.testing.assert_allclose(s[[0, 1, 3]], [1.0, 0.0, 0.5])
    assert np.isnan(s[2])


def test_no_libm_calls_for_f32(m):
    x = np.ones(4, np.float32)
    for f in (m.ex, m.th, m.sg):
        text = f.ir("llvm", (x,))
        assert "intr.tanh" not in text and "intr.exp" not in text and "@tanhf" not in text
    # f64 keeps the library's exp
    assert "llvm.intr.exp" in m.ex64.ir("llvm", (np.ones(4),))


def test_coefficients_fit():
    """The polynomials approximate e^r and tanh to the stated fit error (float64)."""
    r = np.linspace(-np.log(2) / 2, np.log(2) / 2, 10001)
    q = np.polyval(approx.EXP_Q[::-1], r)
    assert np.max(np.abs((1 + r + r * r * q) / np.exp(r) - 1)) < 5e-9
    x = np.linspace(1e-6, approx.TANH_SMALL, 10001)
    p = np.polyval(approx.TANH_P[::-1], x * x)
    assert np.max(np.abs((x + x ** 3 * p) / np.tanh(x) - 1)) < 5e-9


def test_functions_prefer_wide_vectors(m):
    text = m.th.ir("llvm", (np.ones(4, np.float32),))
    assert '["prefer-vector-width", "512"]' in text and '["disable-tail-calls", "true"]' in text


def test_polynomials_may_contract_into_fmas(m):
    """The polynomial chains carry `contract` (LLVM fuses them into multiply-adds); the user's own
    arithmetic does not (NumPy and the interpreter round every product)."""
    text = m.th.ir("llvm", (np.ones(4, np.float32),))
    assert text.count("fastmath<contract>") >= 10
    plain = dg.loads("def f(a: f32[N], b: f32[N]) -> f32[N]:\n    return a * b + 1.0\n", mode="compiled")
    assert "contract" not in plain.f.ir("llvm", (np.ones(4, np.float32), np.ones(4, np.float32)))


def test_tanh_near_the_clamp(m):
    x = np.array([19.0, 19.99, 20.0, 20.01, 25.0, 1e30, -19.99, -20.01, -1e30], np.float32)
    np.testing.assert_array_equal(m.th(x), np.tanh(x))
