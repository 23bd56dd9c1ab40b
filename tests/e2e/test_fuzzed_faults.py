"""Valid programs a round of differential fuzzing found rejected, each against NumPy and central
differences in every mode: a name rebound to another rank or structure after an early return,
second order through max pooling, take's gradient for an index tensor of any rank, tuples of
numbers on the way in, and nested loop targets."""
import numpy as np
import pytest

import dg

from .util import load_src


def _fd(f, x, *rest, eps=1e-6):
    """Central differences of the scalar f at x (an array) along each element."""
    g = np.zeros_like(x)
    for k in np.ndindex(x.shape):
        p, q = x.copy(), x.copy()
        p[k] += eps
        q[k] -= eps
        g[k] = (float(f(p, *rest)) - float(f(q, *rest))) / (2 * eps)
    return g


REBOUND = """
def g1(x: f64) -> f64:
    if x > 5.0:
        return x
    x = [x, 2.0 * x]
    return sum(x)

def f1(p: {"a": f64}, x: f64) -> f64:
    if x > 5.0:
        return x
    p["b"] = x
    return p["a"] + p["b"]

def h1(t: (f64, f64), x: f64) -> f64:
    if x > 5.0:
        return x
    t = (t[0], t[1], x)
    return t[0] + t[2]

def read_after(x: f64) -> f64:
    if x > 5.0:
        y = x
    else:
        y = [x, x]
    return sum(y)
"""


def test_a_name_rebound_after_an_early_return_is_one_binding_per_read(mode):
    """The path that returned early never reaches the rebinding, so each read sees one binding,
    as in Python; where both bindings reach a read, the error stays."""
    m = load_src(REBOUND, mode)
    assert m.g1(1.0) == 3.0 and m.g1(6.0) == 6.0
    assert m.f1({"a": 1.0}, 1.0) == 2.0 and m.f1({"a": 1.0}, 6.0) == 6.0
    assert m.h1((1.0, 2.0), 1.0) == 2.0 and m.h1((1.0, 2.0), 6.0) == 6.0
    assert dg.grad(m.g1)(1.0) == pytest.approx(3.0) and dg.grad(m.h1, wrt=1)((1.0, 2.0), 1.0) == pytest.approx(1.0)
    with pytest.raises(dg.DgTypeError, match="'y' has rank 0 on one path and 1 on another"):
        m.read_after(1.0)


MAXPOOL = """
def mp(x: f64[1, 1, 4, 4]) -> f64:
    return sum(max_pool2d(x * x, 2))

def gmp(x: f64[1, 1, 4, 4]) -> f64:
    return sum(grad(mp)(x) * x)

def hvp(x: f64[1, 1, 4, 4], v: f64[1, 1, 4, 4]) -> f64[1, 1, 4, 4]:
    return jvp(grad(mp), (x,), (v,))[1]
"""


def test_second_order_through_max_pooling(mode):
    rng = np.random.default_rng(3)
    x, v = rng.standard_normal((1, 1, 4, 4)), rng.standard_normal((1, 1, 4, 4))
    largest = np.zeros_like(x)  # each 2x2 window's largest x*x
    for i in range(2):
        for j in range(2):
            w = (x * x)[0, 0, 2 * i:2 * i + 2, 2 * j:2 * j + 2]
            a, b = np.unravel_index(np.argmax(w), w.shape)
            largest[0, 0, 2 * i + a, 2 * j + b] = 1.0
    m = load_src(MAXPOOL, mode)
    np.testing.assert_allclose(dg.grad(m.gmp)(x), 4 * x * largest, rtol=1e-10)
    np.testing.assert_allclose(dg.grad(m.gmp)(x), _fd(m.gmp, x), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(m.hvp(x, v), 2 * v * largest, rtol=1e-10)


TAKE = """
def tk(x: f64[4], i: i64[2, 2]) -> f64:
    return sum(take(x, i) * take(x, i))

def tk_axis1(x: f64[3, 4], i: i64[2, 2]) -> f64:
    return sum(take(x, i, axis=1) ** 2)

def tk_last(x: f64[N, M], i: i64[K, L, J]) -> f64:
    return sum(take(x, i, axis=-1) ** 2)

def ix(x: f64[4], i: i64[2, 2]) -> f64:
    return sum(x[i] * x[i])
"""


def test_takes_gradient_for_an_index_tensor_of_any_rank(mode):
    """NumPy's gradient: repeated indices add up, negative ones count from the end."""
    m = load_src(TAKE, mode)
    i = np.array([[3, 0], [3, -1]])
    x = np.arange(1.0, 5.0)
    want = np.zeros(4)
    np.add.at(want, i % 4, 2 * x[i])
    np.testing.assert_allclose(dg.grad(m.tk)(x, i), want)
    np.testing.assert_allclose(dg.grad(m.ix)(x, i), want)
    x2 = np.random.default_rng(0).standard_normal((3, 4))
    np.testing.assert_allclose(dg.grad(m.tk_axis1)(x2, i), _fd(m.tk_axis1, x2, i), rtol=1e-6, atol=1e-8)
    i3 = np.random.default_rng(1).integers(-4, 4, (2, 3, 2))
    np.testing.assert_allclose(dg.grad(m.tk_last)(x2, i3), _fd(m.tk_last, x2, i3), rtol=1e-6, atol=1e-8)


TUPLES = """
def g(x: f64) -> {"a": f64, "t": (f64, f64)}:
    return {"a": x, "t": (x * 2.0, x * x)}

def h(t: (f64, f64)) -> f64:
    return t[0] * t[1]

def k(t):
    return t[0] * t[1]
"""


def test_a_tuple_of_numbers_stays_a_tuple_and_numbers_keep_their_types(mode):
    m = load_src(TUPLES, mode)
    out = m.g(3.0)
    assert out == {"a": 3.0, "t": (6.0, 9.0)}
    value, pullback = dg.vjp(m.g, 3.0)
    assert pullback(out) == (pytest.approx(3.0 + 2.0 * 6.0 + 6.0 * 9.0),)  # its own result as the cotangent
    assert dg.jvp(m.h, ((1.0, 2.0),), ((1.0, 1.0),)) == (2.0, 3.0)
    r = m.k((np.float64(0.1), np.float64(0.2)))
    assert type(r) is np.float64 and r == 0.1 * 0.2
    assert type(m.k((0.1, 0.2))) is np.float32  # (Python numbers: a tensor, as in NumPy, f32 by default)


LOOPS = """
def flat(x: f64[3, 2], y: f64[3, 2]) -> f64:
    s = 0.0
    for a, b in zip(x, y):
        s = s + sum(a * b)
    return s

def enum_zip(x: f64[3, 2], y: f64[3, 2]) -> f64:
    s = 0.0
    for i, (a, b) in enumerate(zip(x, y)):
        s = s + f64(i) * sum(a * b)
    return s

def zip_enum(x: f64[3, 2], y: f64[3, 2]) -> f64:
    s = 0.0
    for (i, a), b in zip(enumerate(x), y):
        s = s + f64(i) * sum(a * b)
    return s
"""


def test_nested_loop_targets(mode):
    m = load_src(LOOPS, mode)
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((3, 2)), rng.standard_normal((3, 2))
    assert m.flat(x, y) == pytest.approx(sum(np.sum(a * b) for a, b in zip(x, y)))
    want = sum(i * np.sum(a * b) for i, (a, b) in enumerate(zip(x, y)))
    assert m.enum_zip(x, y) == pytest.approx(want) and m.zip_enum(x, y) == pytest.approx(want)
    weights = np.arange(3.0)[:, None] * y
    np.testing.assert_allclose(dg.grad(m.enum_zip)(x, y), weights)
    np.testing.assert_allclose(dg.grad(m.zip_enum)(x, y), weights)
