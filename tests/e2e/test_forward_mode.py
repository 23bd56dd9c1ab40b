"""Forward mode (`jvp`) and higher orders, in every mode.

- JAX's while-loop JVP tests (`testWhileJVP`, `testWhileJVPViaForiLoop`,
  `testWhileJVPWithGrowingNonzeroTangents` in JAX's tests/lax_control_flow_test.py),
  written with dg's own `while` and `for`: the same numbers, and the second order
  forward (`jvp` of `jvp`) against differences, as JAX's `check_grads(order=2, modes=["fwd"])`.
- `jvp` through `if`, `for`, `while`, `break`, `continue`, an early `return`, calls and
  recursion, against central differences.
- `jvp` of `grad` (Hessian-vector products) and `grad` of `jvp`.
- Second and third derivatives through `while` loops of 100 and 1,000 iterations (the
  tapes of a differentiated gradient grow as it runs, and are differentiated in turn).
"""
import numpy as np
import pytest

import dg

from .util import FRONT_END_MODE, load_src, made_no_code

JAX_PORTS = """
def while_square(x: f64[3, 3]) -> f64[3, 3]:
    while x[0, 2] <= 8.0:
        x = x * x
    return x

def while_square_jvp(x: f64[3, 3], t: f64[3, 3]) -> (f64[3, 3], f64[3, 3]):
    return jvp(while_square, (x,), (t,))

def while_square_jvp2(x: f64[3, 3], t: f64[3, 3], s: f64[3, 3]) -> f64[3, 3]:
    return jvp(while_square_jvp, (x, t), (s, zeros_like(t)))[1][1]

def fori_double(x: f64) -> f64:
    for i in range(3):
        x = x * 2.0
    return x

def fori_scaled(x: f64) -> f64:
    for i in range(3):
        x = x * float(i + 1)
    return x

def fori_double_jvp(x: f64, t: f64) -> (f64, f64):
    return jvp(fori_double, (x,), (t,))

def fori_scaled_jvp(x: f64, t: f64) -> (f64, f64):
    return jvp(fori_scaled, (x,), (t,))

def growing(x: f64[2], y: f64[2], z: f64[2]) -> f64[2]:
    i = 0
    while i < 2:
        y = x * x
        z = y * y
        i = i + 1
    return x

def growing_jvp(x: f64[2], y: f64[2], z: f64[2], t: f64[2]) -> (f64[2], f64[2]):
    return jvp(growing, (x, y, z), (t, zeros_like(y), zeros_like(z)))
"""


def test_jax_while_jvp(mode):
    m = load_src(JAX_PORTS, mode)
    x = np.arange(9.0).reshape(3, 3)
    y, t = m.while_square_jvp(x, x)
    np.testing.assert_allclose(y, x ** 4)  # x[0, 2] = 2 -> 4 -> 16: two squarings
    np.testing.assert_allclose(t, 4 * x ** 3 * x)
    s = np.random.default_rng(0).standard_normal((3, 3))
    h = 1e-6
    fd = (m.while_square_jvp(x + h * s, x)[1] - m.while_square_jvp(x - h * s, x)[1]) / (2 * h)
    np.testing.assert_allclose(m.while_square_jvp2(x, x, s), fd, rtol=1e-6, atol=1e-4)
    np.testing.assert_allclose(m.while_square_jvp2(x, x, s), 12 * x ** 3 * s)  # d(4 x^3 t)/dx along s, t = x


def test_jax_while_jvp_via_fori_loop(mode):
    m = load_src(JAX_PORTS, mode)
    assert m.fori_double(2.0) == 16.0
    assert tuple(m.fori_double_jvp(2.0, 1.0)) == (16.0, 8.0)
    assert m.fori_scaled(2.0) == 12.0
    assert tuple(m.fori_scaled_jvp(2.0, 1.0)) == (12.0, 6.0)


def test_jax_while_jvp_with_growing_nonzero_tangents(mode):
    m = load_src(JAX_PORTS, mode)
    rng = np.random.RandomState(0)
    y, z = rng.randn(2), rng.randn(2)
    x = rng.randn(2)
    value, tangent = m.growing_jvp(x, y, z, x)
    np.testing.assert_allclose(value, x)
    np.testing.assert_allclose(tangent, x)


FLOW = """
def branchy(x: f64[?]) -> f64:
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] > 0.0:
            s = s + x[i] * x[i]
        elif x[i] < -1.0:
            continue
        else:
            s = s - sin(x[i])
        if s > 50.0:
            break
    return s

def newton(a: f64) -> f64:
    r = a
    while abs(r * r - a) > 1e-12:
        r = 0.5 * (r + a / r)
    return r

def early(x: f64, n: i64) -> f64:
    y = x
    for i in range(n):
        y = y * x + 1.0
        if y > 100.0:
            return y * 2.0
    return y

def power(x: f64, n: i64) -> f64:
    if n == 0:
        return 1.0
    return x * power(x, n - 1)

def helper(x: f64[?], w: f64[?]) -> f64[?]:
    return tanh(x * w)

def caller(x: f64[?], w: f64[?]) -> f64:
    return sum(helper(helper(x, w), w))

def branchy_jvp(x: f64[?], t: f64[?]) -> f64:
    return jvp(branchy, (x,), (t,))[1]

def newton_jvp(a: f64) -> f64:
    return jvp(newton, (a,), (1.0,))[1]

def early_jvp(x: f64, n: i64) -> f64:
    return jvp(early, (x, n), (1.0, 0))[1]

def power_jvp(x: f64, n: i64) -> f64:
    return jvp(power, (x, n), (1.0, 0))[1]

def caller_jvp(x: f64[?], w: f64[?], tx: f64[?], tw: f64[?]) -> (f64, f64):
    return jvp(caller, (x, w), (tx, tw))

def hvp(x: f64[?], v: f64[?]) -> f64[?]:
    return jvp(grad(branchy), (x,), (v,))[1]

def grad_of_jvp(x: f64[?], w: f64[?], tx: f64[?], tw: f64[?]) -> f64[?]:
    return grad(lambda_free, wrt=0)(x, w, tx, tw)

def lambda_free(x: f64[?], w: f64[?], tx: f64[?], tw: f64[?]) -> f64:
    return jvp(caller, (x, w), (tx, tw))[1]
"""


def _fd(f, x, t, h=1e-6):
    return (f(x + h * t) - f(x - h * t)) / (2 * h)


@pytest.mark.parametrize("x", [[0.5, -0.3, 1.2, -2.0], [3.0, 4.0, 6.0, 6.0, 1.0]])
def test_jvp_through_branches_continue_and_break(mode, x):
    m = load_src(FLOW, mode)
    x = np.array(x)
    t = np.linspace(1.0, -1.0, x.size)
    np.testing.assert_allclose(m.branchy_jvp(x, t), _fd(m.branchy, x, t), rtol=1e-6)


def test_jvp_through_a_while_loop_and_an_early_return(mode):
    m = load_src(FLOW, mode)
    np.testing.assert_allclose(m.newton_jvp(2.0), 0.5 / np.sqrt(2.0), rtol=1e-9)
    for n in (3, 10):  # 10 returns early
        np.testing.assert_allclose(m.early_jvp(1.5, n), _fd(lambda v: m.early(v, n), 1.5, 1.0), rtol=1e-6)


def test_jvp_through_calls_and_recursion(mode):
    m = load_src(FLOW, mode)
    np.testing.assert_allclose(m.power_jvp(1.3, 7), 7 * 1.3 ** 6, rtol=1e-12)
    rng = np.random.default_rng(1)
    x, w, tx, tw = (rng.standard_normal(4) for _ in range(4))
    v, t = m.caller_jvp(x, w, tx, tw)
    h = 1e-6
    fd = (m.caller(x + h * tx, w + h * tw) - m.caller(x - h * tx, w - h * tw)) / (2 * h)
    np.testing.assert_allclose(v, m.caller(x, w))
    np.testing.assert_allclose(t, fd, rtol=1e-6)


def test_hessian_vector_product_and_gradient_of_a_jvp(mode):
    m = load_src(FLOW, mode)
    x = np.array([0.5, -0.3, 1.2, -2.0])
    v = np.array([1.0, 2.0, -1.0, 3.0])
    np.testing.assert_allclose(m.hvp(x, v), np.array([2.0, np.sin(-0.3) * 2.0, -2.0, 0.0]), rtol=1e-12)
    rng = np.random.default_rng(2)
    x, w, tx, tw = (rng.standard_normal(4) for _ in range(4))
    g = m.grad_of_jvp(x, w, tx, tw)
    fd = np.array([_fd(lambda s: m.lambda_free(x + s * e, w, tx, tw), 0.0, 1.0) for e in np.eye(4)])
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-8)


HIGHER = """
def f(x: f64, n: i64) -> f64:
    y = x
    i = 0
    while i < n:
        y = 0.5 * y + 0.3 * sin(x * y) + 0.2 * x
        i = i + 1
    return y

def g(x: f64[?], n: i64) -> f64:
    s = x
    for i in range(n):
        s = tanh(s * 1.1 + x)
    return sum(s)

def d1(x: f64, n: i64) -> f64:
    return grad(f)(x, n)

def d2(x: f64, n: i64) -> f64:
    return grad(d1)(x, n)

def d3(x: f64, n: i64) -> f64:
    return grad(d2)(x, n)

def d2_fwd(x: f64, n: i64) -> f64:
    return jvp(d1, (x, n), (1.0, 0))[1]

def gd1(x: f64[?], n: i64) -> f64[?]:
    return grad(g)(x, n)

def gd2(x: f64[?], v: f64[?], n: i64) -> f64:
    return sum(gd1(x, n) * v)

def ghv(x: f64[?], v: f64[?], n: i64) -> f64[?]:
    return grad(gd2)(x, v, n)
"""


@pytest.mark.slow
@pytest.mark.parametrize("n", [100, 1000])
def test_second_and_third_derivatives_through_long_while_loops(mode, n):
    m = load_src(HIGHER, mode)
    x, h = 0.3, 1e-5
    d2 = m.d2(x, n)
    np.testing.assert_allclose(d2, (m.d1(x + h, n) - m.d1(x - h, n)) / (2 * h), rtol=1e-6)
    np.testing.assert_allclose(m.d2_fwd(x, n), d2, rtol=1e-12)
    np.testing.assert_allclose(m.d3(x, n), (m.d2(x + h, n) - m.d2(x - h, n)) / (2 * h), rtol=1e-6)


def test_hessian_through_a_long_for_loop(mode):
    m = load_src(HIGHER, mode)
    rng = np.random.default_rng(3)
    x, v = rng.standard_normal(5) * 0.3, rng.standard_normal(5)
    hv = m.ghv(x, v, 300)
    fd = _fd(lambda y: m.gd1(y, 300), x, v)
    np.testing.assert_allclose(hv, fd, rtol=1e-6, atol=1e-9)


def test_python_jvp_with_structures_and_a_hessian_vector_product(mode):
    from .util import dg_mode

    m = dg.loads("""
def loss(p, x: f32[?]) -> f32:
    return sum(tanh(x * p["w"] + p["b"]))
""", mode=dg_mode(mode))
    p = {"w": np.float32(0.5), "b": np.float32(-0.1)}
    x = np.array([1.0, 2.0, 3.0], np.float32)
    tp = {"w": np.float32(1.0), "b": np.float32(0.0)}
    value, t = dg.jvp(m.loss, (p, x), (tp, np.zeros(3, np.float32)))
    np.testing.assert_allclose(value, m.loss(p, x))
    np.testing.assert_allclose(t, np.sum(x * (1 - np.tanh(x * 0.5 - 0.1) ** 2)), rtol=1e-5)
    g, hv = dg.jvp(dg.grad(m.loss), (p, x), (tp, np.zeros(3, np.float32)))
    assert set(g) == set(hv) == {"b", "w"}
    s = np.tanh(x * 0.5 - 0.1)
    np.testing.assert_allclose(hv["w"], np.sum(-2 * s * (1 - s ** 2) * x * x), rtol=1e-4)


def test_jvp_errors_are_located():
    with made_no_code(), pytest.raises(dg.DgError, match=r"jvp_bad\.dg:4:\d+: .*the tangents must have the structure"):
        load_src("def f(x: f32) -> f32:\n    return x\ndef g(x: f32) -> f32:\n    return jvp(f, (x,), (x, x))[1]\n",
                 FRONT_END_MODE, filename="jvp_bad.dg").g(np.float32(1.0))
    with made_no_code(), pytest.raises(dg.DgError, match="takes a function, a tuple of primals"):
        dg.jvp(load_src("def f(x: f32) -> f32:\n    return x\n", FRONT_END_MODE).f, np.float32(1.0), np.float32(1.0))
