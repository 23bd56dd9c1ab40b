"""Gradients from the autodiff pass against finite differences (float64), in both modes.

Through if/elif/else with data-dependent conditions, for with runtime
bounds, while with a data-dependent trip count, break, continue, early
return inside a loop, calls, recursion (the tree sample), a variable-length
RNN, and second derivatives. PyTorch autograd is a second oracle where it
is installed.
"""
from pathlib import Path

import numpy as np
import pytest

import dg

SAMPLES = Path(__file__).resolve().parent.parent.parent / "samples"

SRC = """
def branches(x: f64[3], t: f64) -> f64:
    s = sum(x)
    if s > t:
        y = sum(exp(x)) * 0.5
    elif s > t - 1.0:
        y = sum(x * x * x)
    else:
        y = -sum(sin(x))
    return y * s

def loop(x: f64[3], n: i64) -> f64:
    s = 0.0
    h = x
    for i in range(n):
        h = tanh(h * 1.5 + 0.1)
        if sum(h) > 1.0:
            s = s + sum(h * h)
        else:
            s = s - sum(h)
        if s > 3.0:
            break
    return s + sum(h)

def skip(x: f64[4], n: i64) -> f64:
    s = 0.0
    for i in range(1, n, 2):
        if i % 3 == 0:
            continue
        s = s + sum(x * float(i)) * s + x[i % 4]
    return s

def grow(x: f64[3]) -> f64:
    s = sum(x * x)
    k = 0
    while s < 50.0:
        s = s * 1.7 + sum(sin(x))
        k = k + 1
    return s / float(k + 1)

def helper(x: f64[3], y: f64) -> f64:
    return sum(x * y) + y * y

def early(x: f64[3]) -> f64:
    acc = 0.0
    for i in range(10):
        acc = acc + helper(x, acc * 0.1 + 1.0)
        if acc > 20.0:
            return acc * 2.0
    return acc

def rec(x: f64[3], n: i64) -> f64:
    if n <= 0:
        return sum(x)
    return rec(tanh(x) * 1.1, n - 1) * 0.9 + sum(x * x) * 0.01

def rnn(xs: f64[T, 2], h0: f64[3], w: f64[2, 3], u: f64[3, 3], length: i64) -> f64:
    h = h0
    t = 0
    while t < length:
        h = tanh(xs[t] @ w + h @ u)
        t = t + 1
    return sum(h * h)

def power(x: f64, n: i64) -> f64:
    y = x
    for i in range(n):
        y = sin(y) * x
    return y

def g_branches(x: f64[3], t: f64):
    return grad(branches)(x, t)

def vg_loop(x: f64[3], n: i64):
    return value_and_grad(loop)(x, n)

def pullback(x: f64[3], n: i64, ct: f64):
    v, pb = vjp(rec, x, n)
    return v, pb(ct)[0]

def second(x: f64, n: i64):
    return grad(grad(power))(x, n)
"""

MODES = ["interp", "compiled"]


@pytest.fixture(scope="module", params=MODES)
def m(request):
    return dg.loads(SRC, mode=request.param, filename="ad.dg")


def fd(f, args, i, eps=1e-6):
    """Central differences of f with respect to argument i (a float64 array or scalar)."""
    x = np.asarray(args[i], dtype=np.float64)
    g = np.zeros_like(x)
    for j in np.ndindex(*x.shape):
        hi, lo = x.copy(), x.copy()
        hi[j] += eps
        lo[j] -= eps
        a, b = list(args), list(args)
        a[i], b[i] = hi, lo
        g[j] = (f(*a) - f(*b)) / (2 * eps)
    return g


def close(a, b):
    np.testing.assert_allclose(np.asarray(a, np.float64), b, rtol=2e-5, atol=2e-6)


X = np.array([0.3, -0.2, 0.5])


@pytest.mark.parametrize("t", [-1.0, 0.3, 0.9, 3.0])  # every branch taken
def test_if_elif_else(m, t):
    close(dg.grad(m.branches)(X, t), fd(m.branches, [X, t], 0))
    close(dg.grad(m.branches, wrt=1)(X, t), fd(m.branches, [X, t], 1))
    close(m.g_branches(X, t), fd(m.branches, [X, t], 0))


@pytest.mark.parametrize("n", [0, 1, 3, 7])
def test_for_with_runtime_bound_and_break(m, n):
    v, g = m.vg_loop(X, n)
    assert v == pytest.approx(m.loop(X, n))
    close(g, fd(m.loop, [X, n], 0))


@pytest.mark.parametrize("n", [0, 2, 6, 11])
def test_continue_and_strided_range(m, n):
    x = np.array([0.2, -0.4, 0.1, 0.3])
    close(dg.grad(m.skip)(x, n), fd(m.skip, [x, n], 0))


@pytest.mark.parametrize("scale", [0.1, 1.0, 3.0])
def test_while_with_data_dependent_trip_count(m, scale):
    close(dg.grad(m.grow)(X * scale), fd(m.grow, [X * scale], 0))


@pytest.mark.parametrize("scale", [0.1, 1.0, 3.0])
def test_early_return_inside_a_loop_through_a_call(m, scale):
    close(dg.grad(m.early)(X * scale), fd(m.early, [X * scale], 0))


@pytest.mark.parametrize("n", [0, 2, 5])
def test_recursion_and_vjp(m, n):
    v, g = m.pullback(X, n, 2.0)
    assert v == pytest.approx(m.rec(X, n))
    close(g, 2.0 * fd(m.rec, [X, n], 0))
    val, pb = dg.vjp(m.rec, X, n)
    close(pb(1.0)[0], fd(m.rec, [X, n], 0))


@pytest.mark.parametrize("length", [0, 1, 4, 6])
def test_variable_length_rnn(m, length):
    rng = np.random.default_rng(length)
    xs, h0 = rng.normal(size=(6, 2)), rng.normal(size=3)
    w, u = rng.normal(size=(2, 3)) * 0.5, rng.normal(size=(3, 3)) * 0.5
    args = [xs, h0, w, u, length]
    grads = dg.grad(m.rnn, wrt=(0, 1, 2, 3))(*args)
    for i, g in enumerate(grads):
        close(g, fd(m.rnn, args, i))


@pytest.mark.parametrize("n", [0, 1, 3])
def test_second_derivative_through_a_loop(m, n):
    g = dg.grad(m.power)
    close(m.second(0.7, n), fd(g, [0.7, n], 0, eps=1e-5))
    close(dg.grad(dg.grad(m.power))(0.7, n), fd(g, [0.7, n], 0, eps=1e-5))


def test_second_derivative_of_a_while_loop(m):
    src = "def w(x: f64) -> f64:\n    y = x\n    while y < 10.0:\n        y = y * y + x\n    return y\n"
    w = dg.loads(src, mode=m.helper.mode, filename="w.dg").w
    g = dg.grad(w)
    close(dg.grad(g)(1.3), fd(g, [1.3], 0, eps=1e-5))


@pytest.mark.parametrize("n", [1, 3, 5])
def test_recursive_tree_sample(n):
    tree = dg.load(SAMPLES / "tree.dg")
    rng = np.random.default_rng(n)
    args = [rng.normal(size=(n, 4)).astype(np.float32)] + [rng.normal(size=(4, 4)).astype(np.float32) * 0.5
                                                           for _ in range(3)]
    grads = dg.grad(tree.score, wrt=(0, 1, 2, 3))(*args)
    args64 = [a.astype(np.float64) for a in args]
    for i, g in enumerate(grads):
        want = fd(lambda *a: float(tree.score(*[np.asarray(x, np.float32) for x in a])), args64, i, eps=1e-2)
        np.testing.assert_allclose(g, want, rtol=2e-2, atol=2e-3)


def test_gradient_of_int_argument_is_a_type_error(m):
    with pytest.raises(dg.DgTypeError, match="not a float"):
        dg.grad(m.loop, wrt=1)(X, 3)
    with pytest.raises(dg.DgTypeError, match="one float scalar"):
        dg.grad(dg.loads("def f(x: f64[3]):\n    return x * 2.0\n", filename="v.dg").f)(X)


def test_stop_gradient(m):
    f = dg.loads("def f(x: f64[3]) -> f64:\n    return sum(x * stop_gradient(x))\n", filename="s.dg").f
    close(dg.grad(f)(X), X)


def test_grad_ir_shows_tapes(m):
    text = dg.grad(m.rnn).ir("grad", args=(np.zeros((2, 2)), np.zeros(3), np.zeros((2, 3)), np.zeros((3, 3)), 1))
    for op in ("dg.tape_alloc", "dg.tape_push", "dg.tape_read", "rnn__vjp_0"):
        assert op in text


def test_torch_autograd_agrees(m):
    torch = pytest.importorskip("torch", reason="PyTorch is an optional second oracle")
    rng = np.random.default_rng(0)
    xs, h0 = rng.normal(size=(6, 2)), rng.normal(size=3)
    w, u = rng.normal(size=(2, 3)) * 0.5, rng.normal(size=(3, 3)) * 0.5
    tw, tu = torch.tensor(w, requires_grad=True), torch.tensor(u, requires_grad=True)
    h = torch.tensor(h0)
    for t in range(4):
        h = torch.tanh(torch.tensor(xs[t]) @ tw + h @ tu)
    (h * h).sum().backward()
    gw, gu = dg.grad(m.rnn, wrt=(2, 3))(xs, h0, w, u, 4)
    close(gw, tw.grad.numpy())
    close(gu, tu.grad.numpy())


RECOMPUTE_SRC = """
def cell_for(xs: f32[T, B, I], h0: f32[B, H], wx: f32[I, H], wh: f32[H, H]) -> f32:
    h = h0
    for t in range(xs.shape[0]):
        h = tanh(xs[t] @ wx + h @ wh)
    return mean(h * h)

def cell_while(xs: f32[T, B, I], h0: f32[B, H], wx: f32[I, H], wh: f32[H, H], n: i64) -> f32:
    h = h0
    t = 0
    while t < n:
        h = tanh(xs[t] @ wx + h @ wh)
        t = t + 1
    return mean(h * h)

def g_for(xs: f32[T, B, I], h0: f32[B, H], wx: f32[I, H], wh: f32[H, H]):
    return grad(cell_for, wrt=(2, 3))(xs, h0, wx, wh)

def g_while(xs: f32[T, B, I], h0: f32[B, H], wx: f32[I, H], wh: f32[H, H], n: i64):
    return grad(cell_while, wrt=(2, 3))(xs, h0, wx, wh, n)
"""


@pytest.mark.parametrize("name,extra", [("g_for", ()), ("g_while", (3,))])
def test_reverse_loops_read_yielded_values_from_the_tape(name, extra):
    """A reverse step recomputes its body only for what the tape does not hold: the step's new
    hidden state is the next tape row, so the forward matmuls that made it are not run again
    (2 forward matmuls, then 3 in the reverse: dwx, dwh and the adjoint of h). A `while` loop
    runs twice forward (counted, then taped as an scf.for): 2 more matmuls there, none more in
    the reverse step."""
    from dg.dialects.dialect import parse
    from dg.lowering.pipeline import run_passes

    rng = np.random.default_rng(0)
    args = (rng.standard_normal((4, 2, 3)).astype(np.float32), rng.standard_normal((2, 5)).astype(np.float32),
            rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal((5, 5)).astype(np.float32)) + extra
    m = dg.loads(RECOMPUTE_SRC, mode="interp")
    fn = getattr(m, name)
    out = str(run_passes(parse(fn.ir("dg", args=args)), "autodiff,canonicalize"))
    vjp = out.split("__vjp_2_3(")[1].split("func.func")[0]
    assert vjp.count('"dg.matmul"') == (5 if name == "g_for" else 7)
    reverse_step = vjp[vjp.rindex("scf.for"):]
    assert reverse_step.count('"dg.matmul"') == 3
    got = fn(*args)
    want = getattr(dg.loads(RECOMPUTE_SRC, mode="compiled"), name)(*args)
    loss = getattr(m, name.replace("g_", "cell_"))

    def loss32(*a):
        return float(loss(*[np.asarray(v, np.float32) if isinstance(v, np.ndarray) else v for v in a]))

    for i, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(g, fd(loss32, args, 2 + i, eps=1e-3), rtol=2e-2, atol=2e-3)


def test_a_new_gradient_object_reuses_the_compiled_function(m):
    """`dg.value_and_grad(m.f)(...)` written inside a training loop: each new object finds the
    gradient function the first one made (and its compiled specializations) instead of adding
    and compiling another one per step."""
    x = np.array([0.3, -0.2, 0.5])
    first = dg.value_and_grad(m.loop, wrt=0)
    v, g = first(x, 3)
    again = dg.value_and_grad(m.loop, wrt=0)
    v2, g2 = again(x, 3)
    assert again._fn() is first._fn() and len(first._fn()._cache) == 1
    assert float(v2) == float(v) and np.array_equal(g2, g)
    assert dg.grad(m.loop, wrt=0)._fn() is not first._fn()  # another expression, another function
    assert dg.grad(dg.grad(m.branches, wrt=1), wrt=1)._fn() is dg.grad(dg.grad(m.branches, wrt=1), wrt=1)._fn()


EARLY_ROWS = """
def first_big(x: f64[N], k: i64) -> f64[N]:
    for i in range(k):
        if sum(x) > 2.0:
            return x * float(i)
        x = x * 1.5
    return x

def first_big_open(x: f64[?], k: i64) -> f64[?]:
    for i in range(k):
        if sum(x) > 2.0:
            return x * float(i)
        x = x * 1.5
    return x

def loss(x: f64[N], k: i64) -> f64:
    return sum(sin(first_big(x, k)))

def loss_open(x: f64[?], k: i64) -> f64:
    return sum(sin(first_big_open(x, k)))

def last_row(a: f64[N, M], k: i64):
    for i in range(k):
        return a[-1] * float(i + 1), 0.5
    return a[0], 1.5

def loss_rows(x: f64[N], k: i64) -> f64:
    r, c = last_row(outer(x, x * 2.0), k)
    return sum(sin(r)) * c

def doubled(x: f64[N], k: i64):
    for i in range(k):
        if sum(x) > 2.0:
            return concat([x, x * float(i)], 0)
        x = x * 1.5
    return concat([x, x * 2.0], 0)

def loss_doubled(x: f64[N], k: i64) -> f64:
    return sum(sin(doubled(x, k)))

def doubled_inside(x: f64[N], k: i64):
    for j in range(2):
        for i in range(k):
            if sum(x) > 2.0:
                return concat([x, x * float(i + j)], 0)
            x = x * 1.5
    return concat([x, x * 2.0], 0)

def loss_doubled_inside(x: f64[N], k: i64) -> f64:
    return sum(sin(doubled_inside(x, k)))
"""


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["loss", "loss_open", "loss_rows", "loss_doubled", "loss_doubled_inside"])
def test_gradient_of_an_early_return_of_dynamic_size_from_a_loop(mode, name):
    """The returned value's slot started as a size-0 placeholder, which the loop's tape then saw
    change size ('a loop-carried value changed shape from (0,) to (3,)'); it takes the sizes of
    the parameters it shares them with (a row of an f64[N, M] keeps the size M: a whole-axis
    slice keeps its symbol). A size no parameter gives (2N, of a concat) stays a placeholder,
    which the body only hands on: the tape leaves that slot out."""
    m = dg.loads(EARLY_ROWS, mode=mode, filename="early.dg")
    f = getattr(m, name)
    for k in (0, 2, 5):  # no trip, the loop's end, an early return
        close(dg.grad(f)(X, k), fd(f, [X, k], 0))


def test_a_gradient_that_differentiates_itself_is_an_error():
    """grad(f) inside f would need f's gradients of every order: the pass names the cycle
    (it used to fail inside the pass, with no place)."""
    src = ("def f(x: f64, n: i64) -> f64:\n"
           "    if n <= 0:\n"
           "        return x * x\n"
           "    return grad(f)(x, n - 1)\n")
    for mode in ("interp", "compiled"):
        with pytest.raises(dg.DgError, match=r"cannot differentiate itself: f__grad_0 -> f__grad_0") as e:
            dg.loads(src, mode=mode).f(3.0, 2)
        assert ":4:12" in str(e.value)
