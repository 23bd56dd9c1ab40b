"""Advanced indexing (NumPy's rules) in every mode: reads with several integer index tensors of any
rank, their gradients (repeated indices add up) against torch, updates through index tensors (the
last write wins where indices repeat, as NumPy), and out-of-range indices as located errors."""
import numpy as np
import pytest

import dg

from .util import load_src

try:  # (the gradient references; the reads and updates are checked against NumPy)
    import torch
except ImportError:
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed: the references come from it")

SRC = """
def pick(logp: f32[N, C], t: i64[N]) -> f32[N]:
    return logp[arange(logp.shape[0]), t]

def embed(wte: f32[V, C], idx: i64[B, T]) -> f32[B, T, C]:
    return wte[idx]

def split(x: f32[A, B, C], i: i64[K], j: i64[K]) -> f32[K, B]:
    return x[i, :, j]

def adjacent(x: f32[A, B, C], i: i64[K, 1], j: i64[M]) -> f32[A, K, M]:
    return x[:, i, j]

def with_int(x: f32[A, B, C], j: i64[K]) -> f32[K, B]:
    return x[0, :, j]

def sliced(x: f32[A, B, C], i: i64[K]) -> f32[K, 2]:
    return x[i, 1:3, 0]

def loss_pick(logp: f32[N, C], t: i64[N]) -> f32:
    return sum(logp[arange(logp.shape[0]), t] * logp[arange(logp.shape[0]), t])

def loss_embed(wte: f32[V, C], idx: i64[B, T]) -> f32:
    e = wte[idx]
    return sum(e * e)

def loss_split(x: f32[A, B, C], i: i64[K], j: i64[K]) -> f32:
    return sum(sin(x[i, :, j]))

def put(x: f32[A, B], i: i64[K], v: f32[K]) -> f32[A, B]:
    x[i, 1] = v
    return x

def put_rows(x: f32[A, B], idx: i64[K]) -> f32[A, B]:
    x[idx] = 7.0
    return x

def add_rows(x: f32[A, B], idx: i64[K], v: f32[K, B]) -> f32[A, B]:
    x[idx] += v
    return x

def loss_put(x: f32[A, B], i: i64[K], v: f32[K]) -> f32:
    x[i, 1] = v * v
    return sum(x * x)
"""

RNG = np.random.default_rng(0)
X = RNG.standard_normal((4, 3, 5)).astype(np.float32)


def _m(mode):
    return load_src(SRC, mode)


def test_reads_match_numpy(mode):
    m = _m(mode)
    logp = RNG.standard_normal((5, 6)).astype(np.float32)
    t = np.array([0, 5, 2, 2, -1])
    np.testing.assert_array_equal(m.pick(logp, t), logp[np.arange(5), t])
    wte = RNG.standard_normal((7, 3)).astype(np.float32)
    idx = np.array([[0, 6, 6], [1, 0, -7]])
    np.testing.assert_array_equal(m.embed(wte, idx), wte[idx])
    i, j = np.array([3, 0, 3]), np.array([4, -1, 0])
    np.testing.assert_array_equal(m.split(X, i, j), X[i, :, j])
    i2 = np.array([[2], [0]])
    np.testing.assert_array_equal(m.adjacent(X, i2, j), X[:, i2, j])
    np.testing.assert_array_equal(m.with_int(X, j), X[0, :, j])
    np.testing.assert_array_equal(m.sliced(X, i), X[i, 1:3, 0])


def _torch_grad(f, *args):
    ts = [torch.tensor(a, dtype=torch.float64, requires_grad=True) if a.dtype.kind == "f" else torch.tensor(a)
          for a in args]
    f(*ts).backward()
    return ts[0].grad.numpy()


@pytest.mark.parametrize("case", ["pick", "embed", "split"])
@needs_torch
def test_gradients_match_torch(mode, case):
    m = _m(mode)
    if case == "pick":
        logp = RNG.standard_normal((5, 6)).astype(np.float32)
        t = np.array([0, 5, 2, 2, -1])
        got = dg.grad(m.loss_pick)(logp, t)
        want = _torch_grad(lambda a, t: (a[torch.arange(5), t] ** 2).sum(), logp, t)
    elif case == "embed":
        wte = RNG.standard_normal((7, 3)).astype(np.float32)
        idx = np.array([[0, 6, 6], [1, 0, 6]])  # repeats add up
        got = dg.grad(m.loss_embed)(wte, idx)
        want = _torch_grad(lambda w, i: (w[i] ** 2).sum(), wte, idx)
    else:
        i, j = np.array([3, 0, 3]), np.array([4, 1, 4])
        got = dg.grad(m.loss_split)(X, i, j)
        want = _torch_grad(lambda x, i, j: torch.sin(x[i, :, j]).sum(), X, i, j)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_updates_match_numpy(mode):
    m = _m(mode)
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    i, v = np.array([2, 0, 2]), np.array([1.0, 2.0, 3.0], np.float32)
    want = x.copy()
    want[i, 1] = v  # the last write wins
    np.testing.assert_array_equal(m.put(x, i, v), want)
    want = x.copy()
    want[np.array([1, -1])] = 7.0
    np.testing.assert_array_equal(m.put_rows(x, np.array([1, -1])), want)
    vv = RNG.standard_normal((3, 3)).astype(np.float32)
    want = x.copy()
    want[i] += vv  # no accumulation of repeats, as NumPy
    np.testing.assert_allclose(m.add_rows(x, i, vv), want, rtol=1e-6)


@needs_torch
def test_update_gradient_matches_torch(mode):
    m = _m(mode)
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    i, v = np.array([2, 0, 2]), np.array([1.0, 2.0, 3.0], np.float32)
    gx, gv = dg.grad(m.loss_put, wrt=(0, 2))(x, i, v)

    def f(xt, vt):
        y = xt.clone()
        y[torch.tensor(i), 1] = vt * vt  # torch (like NumPy on the CPU) keeps the last write
        return (y * y).sum()

    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    vt = torch.tensor(v, dtype=torch.float64, requires_grad=True)
    f(xt, vt).backward()
    np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-5)
    np.testing.assert_allclose(gv, [0.0, 2 * 2 * 2.0 ** 3, 2 * 2 * 3.0 ** 3], rtol=1e-5)


@pytest.mark.parametrize("fn, args, text", [
    ("pick", (np.zeros((2, 3), np.float32), np.array([0, 3])), "index 3 is out of bounds for axis 1 with size 3"),
    ("split", (X, np.array([0, -5]), np.array([0, 0])), "index -5 is out of bounds for axis 0 with size 4"),
    ("put", (np.zeros((4, 3), np.float32), np.array([9]), np.ones(1, np.float32)),
     "index 9 is out of bounds for axis 0 with size 4"),
])
def test_out_of_range_is_located(mode, fn, args, text):
    m = _m(mode)
    with pytest.raises(dg.DgRuntimeError) as e:
        getattr(m, fn)(*args)
    assert text in str(e.value) and ".dg:" in str(e.value)
