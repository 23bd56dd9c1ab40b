"""Where rounding decides the answer, every mode gives it to within a few units in the last place:
log1p, expm1 and softplus of tiny or very negative arguments, float32 sums and means of millions
of elements along any axis, and the sign of a zero that maximum and minimum pick."""
import numpy as np
import pytest

from .util import load_src

REFERENCE = {"log1p": np.log1p, "expm1": np.expm1, "softplus": lambda x: np.logaddexp(0.0, x)}
RANGES = {"log1p": [(-0.999, 10.0), (-1e-3, 1e-3), (-1e-7, 1e-7), (1e3, 1e30)],
          "expm1": [(-80.0, 80.0), (-1e-3, 1e-3), (-1e-7, 1e-7)],
          "softplus": [(-80.0, 80.0), (-100.0, -15.0), (-1e-3, 1e-3)]}

# log1p32(x: f32[N]) -> f32[N] ... softplus64: each function of REFERENCE, in f32 and f64
UNARY = "".join(f"def {name}{bits}(x: f{bits}[N]) -> f{bits}[N]:\n    return {name}(x)\n\n"
                for name in REFERENCE for bits in (32, 64))

SRC = UNARY + """
def means(x: f32[N, M]) -> (f32, f32[M], f32[N]):
    return mean(x), mean(x, axis=0), sum(x, axis=1)

def larger(a: f32, b: f32) -> f32:
    return maximum(a, b)

def smaller(a: f32, b: f32) -> f32:
    return minimum(a, b)

def extremes(x: f32[N]) -> (f32, f32):
    return max(x), min(x)
"""


def ulps(got, want, dtype) -> float:
    """The largest |got - want| in units of the spacing of `dtype` at the float64 reference."""
    spacing = np.spacing(np.abs(want).astype(dtype)).astype(np.float64)
    return float(np.max(np.abs(got.astype(np.float64) - want) / spacing))


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_within_a_few_ulp_where_one_plus_x_rounds_away(mode, name):
    """MLIR lowers log1p to log(1 + x) and expm1 to exp(x) - 1: 0 for 1e-8 in float32, and
    softplus(-17) 0 with them. Compiled code computes them as accurately as NumPy."""
    m = load_src(SRC, mode, "precision.dg")
    for lo, hi in RANGES[name]:
        x = np.linspace(lo, hi, 20001)
        x32 = x.astype(np.float32)
        want32 = REFERENCE[name](x32.astype(np.float64))
        assert ulps(getattr(m, name + "32")(x32), want32, np.float32) <= 3.5, (name, lo, hi)
        assert ulps(getattr(m, name + "64")(x), REFERENCE[name](x), np.float64) <= 4, (name, lo, hi)
    tiny = np.array([1e-8, -1e-8, 1e-30], np.float32)
    if name != "softplus":
        np.testing.assert_allclose(getattr(m, name + "32")(tiny), tiny, rtol=1e-6)
    assert m.softplus32(np.array([-17.0], np.float32))[0] == pytest.approx(np.exp(-17.0), rel=1e-6)


def test_special_values(mode):
    m = load_src(SRC, mode, "precision.dg")
    with np.errstate(all="ignore"):
        x = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, -1.0, 1e38], np.float32)
        for name in ("log1p", "expm1"):
            np.testing.assert_array_equal(getattr(m, name + "32")(x), getattr(np, name)(x), err_msg=name)
        np.testing.assert_array_equal(m.softplus32(x[:5]), np.logaddexp(np.float32(0), x[:5]))
    assert np.signbit(m.log1p32(x)[4]) and np.signbit(m.expm132(x)[4])


@pytest.mark.slow
def test_float32_means_of_millions_agree(mode):
    """NumPy sums float32 one element after another along a strided axis: the interpreter was
    4e-5 off after 3 million rows, and the error grows with them. Both modes stay within 1e-5 of
    the exact mean."""
    m = load_src(SRC, mode, "precision.dg")
    y = (np.random.default_rng(0).random((4_000_000, 4)) + 1.0).astype(np.float32)
    whole, cols, rows = m.means(y)
    exact = y.astype(np.float64)
    assert abs(whole / exact.mean() - 1) < 1e-5
    np.testing.assert_allclose(cols, exact.mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(rows, exact.sum(axis=1), rtol=1e-6)


def test_signed_zeros_of_maximum_and_minimum(mode):
    """As IEEE 754's maximum and minimum (and compiled code): -0 < +0, whichever comes first."""
    m = load_src(SRC, mode, "precision.dg")
    for a, b in ((0.0, -0.0), (-0.0, 0.0)):
        assert not np.signbit(m.larger(a, b)) and np.signbit(m.smaller(a, b)), (a, b)
    assert np.signbit(m.larger(-0.0, -0.0)) and not np.signbit(m.smaller(0.0, 0.0))
    for z in ([0.0, -0.0], [-0.0, 0.0]):
        big, small = m.extremes(np.array(z, np.float32))
        assert not np.signbit(big) and np.signbit(small), z
