"""vmap (§3.1) in every mode: each control-flow form whose conditions differ by example, recursion
as deep as each example's data says, structures, in_axes and out_axes, composition with grad,
value_and_grad, jvp and checkpoint, and the errors. The oracle is the loop over the examples
(the same function called once per example), and NumPy where a value is easy to write down."""
import re

import numpy as np
import pytest

import dg

from .util import dg_mode, load_src

SRC = """
def branchy(x: f32[N], t: f32) -> f32:
    s = sum(x)
    if s > t:
        y = s * 2.0
    else:
        y = -s
    return y

def heavy_branch(x: f32[N], n: i64) -> f32:
    s = sum(x)
    if s > 0.0:
        for i in range(n):
            s = s * 0.5 + 1.0
    else:
        s = s - f32(n)
    return s

def looper(x: f32[N], n: i64) -> f32:
    s = 0.0
    i = 0
    while i < n:
        s = s + sum(x) * f32(i)
        i = i + 1
    return s

def ranged(x: f32[N], n: i64) -> f32:
    s = 0.0
    for j in range(n):
        s = s + x[j] * x[j]
    return s

def breaker(x: f32[N], lim: f32) -> f32:
    s = 0.0
    for j in range(len(x)):
        if s > lim:
            break
        s = s + exp(x[j])
    return s

def skipper(x: f32[N]) -> f32:
    s = 0.0
    for j in range(len(x)):
        if x[j] < 0.0:
            continue
        s = s + x[j]
    return s

def early(x: f32[N]) -> f32:
    for j in range(len(x)):
        if x[j] > 1.0:
            return x[j] * 10.0
    return sum(x)

def fact(n: i64) -> f32:
    if n <= 1:
        return 1.0
    return f32(n) * fact(n - 1)

def rec(x: f32, n: i64) -> f32:
    if n <= 0:
        return x
    return tanh(rec(x, n - 1)) * 1.5

def tree_sum(v: f32[T], left: i64[T], right: i64[T], n: i64) -> f32:
    if left[n] < 0:
        return v[n]
    return tanh(tree_sum(v, left, right, left[n]) + tree_sum(v, left, right, right[n])) + v[n]

def adaptive(x: f32[N], w: f32[N, N]) -> f32:
    h = x
    k = 0
    while sum(h * h) > 0.1 and k < 50:
        h = tanh(h @ w) * 0.9
        k = k + 1
    return sum(h) + f32(k)

def checked(x: f32[N], n: i64) -> f32:
    assert n < len(x), "n too large"
    return x[n]

def rows(p: {"w": f32[N, M], "b": f32[M]}, x: f32[N]) -> (f32[M], f32):
    h = tanh(x @ p["w"] + p["b"])
    return (h, sum(h))

def loss(w: f32[N, N], x: f32[N], n: i64) -> f32:
    h = x
    for i in range(n):
        h = tanh(h @ w)
    if sum(h) > 0.0:
        return sum(h * h)
    return sum(abs(h))

def batch_loss(w: f32[N, N], xs: f32[B, N], ns: i64[B]) -> f32:
    return sum(vmap(loss, in_axes=(None, 0, 0))(w, xs, ns))

def per_example_grads(w: f32[N, N], xs: f32[B, N], ns: i64[B]) -> f32[B, N, N]:
    return vmap(grad(loss), in_axes=(None, 0, 0))(w, xs, ns)

def loss_rec(w: f32[N, N], x: f32[N], n: i64) -> f32:
    if n <= 0:
        return sum(x * x)
    return loss_rec(w, tanh(x @ w), n - 1)

def th(x: f32[N]) -> f32[N]:
    return tanh(x)

def columns(xs: f32[N, B]) -> f32[N, B]:
    return vmap(th, in_axes=1, out_axes=1)(xs)

def scale(x: f32[N]) -> f32[N]:
    return x * 2.0

def mapped_columns(xs: f32[N, B]) -> f32[B, N]:
    return vmap(scale, in_axes=-1)(xs)

def transposed_out(xs: f32[B, N]) -> f32[N, B]:
    return vmap(scale, out_axes=-1)(xs)
"""

RNG = np.random.default_rng(0)
B = 6
XS = RNG.standard_normal((B, 5)).astype(np.float32)
NS = np.array([0, 3, 5, 1, 2, 4])
W = (RNG.standard_normal((5, 5)) * 0.6).astype(np.float32)


@pytest.fixture
def m(mode):
    return load_src(SRC, mode)


def _loop(f, args, axes):
    return [f(*[a[b] if ax == 0 else a for a, ax in zip(args, axes)]) for b in range(len(args[axes.index(0)]))]


def assert_same_as_loop(f, args, axes, rtol=1e-5):
    got = dg.vmap(f, in_axes=axes)(*args)
    want = _loop(f, args, axes)
    if isinstance(got, tuple):
        for j, g in enumerate(got):
            np.testing.assert_allclose(g, np.stack([w[j] for w in want]), rtol=rtol, atol=1e-5)
    else:
        np.testing.assert_allclose(got, np.stack(want), rtol=rtol, atol=1e-5)
    return got


def test_if_on_a_condition_per_example(m):
    got = assert_same_as_loop(m.branchy, [XS, np.float32(0.3)], (0, None))
    s = XS.sum(axis=1)
    np.testing.assert_allclose(got, np.where(s > 0.3, 2 * s, -s), rtol=1e-5)


def test_if_whose_side_holds_a_loop(m):
    assert_same_as_loop(m.heavy_branch, [XS, NS], (0, 0))


def test_while_with_a_trip_count_per_example(m):
    got = assert_same_as_loop(m.looper, [XS, NS], (0, 0))
    np.testing.assert_allclose(got, XS.sum(axis=1) * NS * (NS - 1) / 2, rtol=1e-5)


def test_for_over_a_range_per_example(m):
    got = assert_same_as_loop(m.ranged, [XS, NS], (0, 0))
    np.testing.assert_allclose(got, [np.sum(XS[b, :n] ** 2) for b, n in enumerate(NS)], rtol=1e-5)


def test_break_continue_and_early_return(m):
    assert_same_as_loop(m.breaker, [XS, np.float32(2.0)], (0, None))
    got = assert_same_as_loop(m.skipper, [XS], (0,))
    np.testing.assert_allclose(got, np.where(XS > 0, XS, 0).sum(axis=1), rtol=1e-5)
    assert_same_as_loop(m.early, [XS], (0,))


def test_recursion_as_deep_as_each_example(m):
    got = assert_same_as_loop(m.fact, [NS], (0,))
    np.testing.assert_allclose(got, [float(np.prod(np.arange(1, n + 1))) for n in NS])
    assert_same_as_loop(m.rec, [XS[:, 0], NS], (0, 0))


def test_trees_of_different_shapes(m):
    """Each example a tree of its own shape (children by index, -1 at a leaf), recursing from its
    root: the batch recurses as deep as its deepest tree."""
    left = np.array([[1, -1, -1, -1, -1], [1, 2, -1, -1, -1], [-1, -1, -1, -1, -1], [1, 3, -1, -1, -1]])
    right = np.array([[2, -1, -1, -1, -1], [4, 3, -1, -1, -1], [-1, -1, -1, -1, -1], [2, 4, -1, -1, -1]])
    v = RNG.standard_normal((4, 5)).astype(np.float32)
    roots = np.zeros(4, dtype=np.int64)
    assert_same_as_loop(m.tree_sum, [v, left, right, roots], (0, 0, 0, 0))


def test_adaptive_computation(m):
    assert_same_as_loop(m.adaptive, [XS, W], (0, None))


def test_structures_in_and_out(m):
    p = {"w": W[:, :3].copy(), "b": np.ones(3, np.float32)}
    h, s = dg.vmap(m.rows, in_axes=(None, 0))(p, XS)
    want = [m.rows(p, x) for x in XS]
    np.testing.assert_allclose(h, np.stack([w[0] for w in want]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s, [w[1] for w in want], rtol=1e-5)
    ps = {"w": np.stack([W[:, :3]] * B), "b": RNG.standard_normal((B, 3)).astype(np.float32)}
    h, s = dg.vmap(m.rows)(ps, XS)
    for b in range(B):
        hb, sb = m.rows({"w": ps["w"][b], "b": ps["b"][b]}, XS[b])
        np.testing.assert_allclose(h[b], hb, rtol=1e-5, atol=1e-6)


def test_in_axes_and_out_axes(m):
    np.testing.assert_allclose(m.columns(XS.T.copy()), np.tanh(XS.T), rtol=1e-6)
    np.testing.assert_allclose(m.mapped_columns(XS.T.copy()), XS * 2)
    np.testing.assert_allclose(m.transposed_out(XS), XS.T * 2)
    np.testing.assert_allclose(dg.vmap(m.scale, in_axes=1, out_axes=1)(XS.T.copy()), XS.T * 2)


def test_minibatch_gradient_is_the_sum_of_the_examples(m):
    g = dg.grad(m.batch_loss)(W, XS, NS)
    want = sum(dg.grad(m.loss)(W, XS[b], NS[b]) for b in range(B))
    np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5)


@pytest.mark.slow  # (compiles gradients of batched programs: several seconds; the slow tier)
def test_per_example_gradients(m):
    want = np.stack([dg.grad(m.loss)(W, XS[b], NS[b]) for b in range(B)])
    np.testing.assert_allclose(m.per_example_grads(W, XS, NS), want, rtol=1e-4, atol=1e-5)
    got = dg.vmap(dg.grad(m.loss_rec), in_axes=(None, 0, 0))(W, XS, NS)
    want = np.stack([dg.grad(m.loss_rec)(W, XS[b], NS[b]) for b in range(B)])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    v, (gw, gx) = dg.vmap(dg.value_and_grad(m.loss, wrt=(0, 1)), in_axes=(None, 0, 0))(W, XS, NS)
    np.testing.assert_allclose(v, [m.loss(W, XS[b], NS[b]) for b in range(B)], rtol=1e-5)
    np.testing.assert_allclose(gx, np.stack([dg.grad(m.loss, wrt=1)(W, XS[b], NS[b]) for b in range(B)]),
                               rtol=1e-4, atol=1e-5)


def test_jvp_and_checkpoint_of_a_batch(m):
    t = RNG.standard_normal(W.shape).astype(np.float32)
    v, tan = dg.jvp(m.batch_loss, (W, XS, NS), (t, np.zeros_like(XS), np.zeros_like(NS)))
    eps = 1e-3
    fd = (m.batch_loss(W + eps * t, XS, NS) - m.batch_loss(W - eps * t, XS, NS)) / (2 * eps)
    np.testing.assert_allclose(tan, fd, rtol=2e-2, atol=1e-3)
    g = dg.grad(dg.checkpoint(m.batch_loss, slots=2))(W, XS, NS)
    np.testing.assert_allclose(g, dg.grad(m.batch_loss)(W, XS, NS), rtol=1e-5, atol=1e-6)


def test_a_failed_check_names_the_example(m):
    with pytest.raises(dg.DgError, match=re.escape("assertion failed: n too large (example 2 of the batch)")):
        dg.vmap(m.checked)(XS, np.array([0, 1, 7, 2, 9, 1]))


def test_mapped_arguments_must_agree_on_the_batch_size(m):
    with pytest.raises(dg.DgError, match="batch size"):
        dg.vmap(m.looper)(XS, NS[:4])


@pytest.mark.parametrize("src,message", [
    ("def g(x: f32) -> f32:\n    return x\n\ndef f(x: f32[N]) -> f32[N]:\n    return vmap(g, in_axes=(0, 0))(x)\n",
     "in_axes has 2 entries for 1 arguments"),
    ("def g(x: f32) -> f32:\n    return x\n\ndef f(x: f32[N]) -> f32[N]:\n    return vmap(g, in_axes=1)(x)\n",
     "in_axes=1 is out of range for argument 0, of rank 1"),
    ("def g(x: f32) -> f32:\n    return x\n\ndef f(x: f32[N]) -> f32[N]:\n    return vmap(g, in_axes=None)(x)\n",
     "needs at least one mapped argument"),
])
def test_vmap_mistakes_are_located(mode, src, message):
    m = dg.loads(src, mode=dg_mode(mode))
    with pytest.raises(dg.DgError, match=re.escape(message)) as e:
        m.f(np.ones(3, np.float32))
    assert re.search(r":\d+:\d+: error", str(e.value))


def test_the_batch_stage_shows_the_batched_function(m):
    text = m.batch_loss.ir("batch", args=(W, XS, NS))
    assert "func.func @loss__batch_011" in text
    # the for over a per-example range: up to the largest bound, each step masked
    assert '"dg.max"' in text and "scf.for" in text
    assert "dg.kind" not in text


AUTO = """
def quiet(x: f32[?]) -> f32:
    return sum(x * x)

def loud(x: f32[?]) -> f32:
    print("item", sum(x))
    return sum(x * x)

def total_quiet(xs: list[f32[?]]) -> f32:
    s = 0.0
    for x in xs:
        s += quiet(x)
    return s

def total_loud(xs: list[f32[?]]) -> f32:
    s = 0.0
    for x in xs:
        s += loud(x)
    return s

def total_read_after(xs: list[f32[?]]) -> f32:
    s = 0.0
    for x in xs:
        y = quiet(x)
        s += y
    return s + y
"""


def test_automatic_batching_takes_only_loops_it_keeps_the_meaning_of(mode):
    """A loop that only adds up runs as a vmap of its body; one whose callee prints (the prints'
    order and values would change), or whose body's variable is read after it (the last item's
    value), stays a loop; the values are the same either way."""
    m = load_src(AUTO, mode)
    xs = [np.arange(n, dtype=np.float32) for n in (2, 3, 1)]
    want = sum(float((x * x).sum()) for x in xs)
    for name in ("total_quiet", "total_loud", "total_read_after"):
        fn = getattr(m, name)
        got = fn(xs)
        np.testing.assert_allclose(got, want + (float((xs[-1] ** 2).sum()) if name == "total_read_after" else 0),
                                   rtol=1e-6)
        assert ("__vmap" in fn.ir("batch", args=(xs,))) == (name == "total_quiet"), name
