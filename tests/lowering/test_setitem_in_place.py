"""A scalar stored into an array (`y[i] = s`, `x[i, 1:] = s`) lowers on the CPU to a store of one
element or an inserted region, which bufferization does in place: not a pass over the whole
array per store (a linalg.generic that selected, at every element, the old value or s)."""
import numpy as np
import pytest

import dg
from dg.core.mlir import operations_under
from dg.dialects.dialect import parse
from dg.lowering import pipeline
from dg.runtime.modes import grad_text

SRC = """
def squares(n: i64) -> f32[?]:
    y = zeros([n])
    for i in range(n):
        y[i] = f32(i * i)
    return y

def rows(x: f32[?, ?], s: f32) -> f32[?, ?]:
    for i in range(x.shape[0]):
        x[i, 1:] = s * f32(i)
    return x

def pick(x: f32[?, ?], i: i64, j: i64, s: f32) -> f32[?, ?]:
    x[i, j] = s
    return x

def strided(x: f32[?], s: f32) -> f32[?]:
    x[1::2] = s
    return x

def both(x: f32[?], s: f32) -> (f32[?], f32[?]):
    y = x
    y[0] = s
    return x, y

def picked(z: f32[?], k: i64) -> f32:
    return sum(z * z) - z[k] * 3.0

def cleared(x: f32[?], k: i64) -> f32[?]:
    return grad(picked)(x, k)

def arows(h: f32[?, ?], v: f32[?]) -> f32[?, ?]:
    for t in range(h.shape[0]):
        h[t] = v * f32(t)
    return h

def ablock(h: f32[?, ?, ?], v: f32[?, 1], i: i64) -> f32[?, ?, ?]:
    h[i, 1:3] = v
    h[0, :, None, 2] = v[0]
    return h

def rnn(xw: f32[?, ?, ?], w: f32[?, ?]) -> f32:
    h = zeros([xw.shape[1], w.shape[0]])
    s = 0.0
    for t in range(xw.shape[0]):
        h = tanh(xw[t] + h @ w)
        s = s + sum(h)
    return s

def rnn_grad(xw: f32[?, ?, ?], w: f32[?, ?]) -> f32[?, ?, ?]:
    return grad(rnn)(xw, w)
"""


@pytest.fixture(scope="module")
def modules():
    return {mode: dg.loads(SRC, mode=mode, filename="setitem.dg") for mode in ("interp", "compiled")}


def _loop_body(fn, args):
    """The ops of the bufferized scf.for of `fn` (its one loop), by name."""
    fn(*args)
    m = pipeline.run_passes(parse(grad_text(fn._last)), ["to-linalg", "only-entry", "inline-and-simplify", "bufferize"],
                            entry=fn._last.symbol)
    (loop,) = [op for op in operations_under(m.body) if op.name == "scf.for"]
    return [op.name for op in operations_under(loop.regions[0].blocks[0])], str(loop)


def test_a_stored_element_is_stored_in_place(modules):
    """`y[i] = s` in a loop: one memref.store per iteration, no buffer and no copy (a buffer of
    y's size and a generic over it per iteration, before)."""
    names, text = _loop_body(modules["compiled"].squares, (np.int64(5),))
    assert "linalg.generic" not in names and "memref.alloc" not in names and "memref.copy" not in names, text
    assert names.count("memref.store") == 1, text


def test_a_stored_row_fills_only_the_row(modules):
    """`x[i, 1:] = s` in a loop: the row's region is filled and copied into x; nothing of x's size
    is allocated or read per iteration."""
    names, text = _loop_body(modules["compiled"].rows, (np.ones((3, 4), np.float32), np.float32(2.0)))
    assert "linalg.generic" not in names, text
    assert names.count("linalg.fill") == 1 and names.count("memref.copy") == 1, text
    assert names.count("memref.subview") >= 1, text


def test_a_stored_array_fills_only_its_region(modules):
    """`h[t] = v * t` in a loop: the row is made from v and copied into a view of h; nothing of
    h's size is allocated or read per iteration (a generic over the whole of h per store,
    before)."""
    fn = modules["compiled"].arows
    fn(np.ones((3, 4), np.float32), np.ones(4, np.float32))
    m = pipeline.run_passes(parse(grad_text(fn._last)), ["to-linalg", "only-entry", "inline-and-simplify", "bufferize"],
                            entry=fn._last.symbol)
    loop = next(op for op in operations_under(m.body) if op.name == "scf.for")
    text = str(loop)
    assert ": memref<?x?xf32>" not in "".join(line for line in text.splitlines() if "memref.alloc" in line), text
    assert "memref.subview" in text and "memref<?xf32> to memref<?xf32, strided" in text, text
    assert "ins(%alloc :" not in text and "outs(%alloc :" not in text, text  # no pass over h


def test_a_row_read_in_a_loop_adds_only_its_row_to_the_gradient(modules):
    """The reverse of `xw[t]` in a loop adds the row's adjoint into the row of xw's gradient
    (getitem, add, setitem of the row, in place), not a whole gradient of zeros but for the row
    added to it per iteration (xw's size per step: quadratic in the steps)."""
    rng = np.random.default_rng(0)
    args = (rng.standard_normal((5, 2, 3)).astype(np.float32), rng.standard_normal((3, 3)).astype(np.float32))
    fn = modules["compiled"].rnn_grad
    fn(*args)
    m = pipeline.run_passes(parse(grad_text(fn._last)), ["canonicalize", "cse"])
    loops = [op for op in operations_under(m.body) if op.name == "scf.for"]
    big = "tensor<?x?x?xf32>"
    adds = [str(op) for lp in loops for op in operations_under(lp.regions[0].blocks[0])
            if op.name == "dg.add" and big in str(op.result.type)]
    assert not adds, adds
    want = modules["interp"].rnn_grad(*args)
    np.testing.assert_allclose(fn(*args), want, rtol=1e-5, atol=1e-6)


CASES = [
    ("squares", (np.int64(5),)),
    ("squares", (np.int64(0),)),
    ("rows", (np.arange(12, dtype=np.float32).reshape(3, 4), np.float32(2.0))),
    ("rows", (np.ones((0, 4), np.float32), np.float32(2.0))),
    ("rows", (np.ones((3, 1), np.float32), np.float32(2.0))),
    ("pick", (np.zeros((2, 3), np.float32), np.int64(-1), np.int64(2), np.float32(7.0))),
    ("pick", (np.zeros((2, 3), np.float32), np.int64(1), np.int64(-3), np.float32(7.0))),
    ("strided", (np.zeros(7, np.float32), np.float32(3.0))),
    ("strided", (np.zeros(1, np.float32), np.float32(3.0))),
    ("both", (np.zeros(3, np.float32), np.float32(4.0))),
    ("cleared", (np.arange(5, dtype=np.float32), np.int64(2))),
    ("cleared", (np.arange(5, dtype=np.float32), np.int64(-1))),
    ("arows", (np.zeros((3, 4), np.float32), np.arange(4, dtype=np.float32))),
    ("arows", (np.zeros((0, 4), np.float32), np.arange(4, dtype=np.float32))),
    ("arows", (np.zeros((3, 1), np.float32), np.ones(1, np.float32))),
    ("ablock", (np.zeros((2, 4, 3), np.float32), np.array([[1.0], [2.0]], np.float32), np.int64(1))),
    ("ablock", (np.zeros((2, 4, 3), np.float32), np.array([[1.0], [2.0]], np.float32), np.int64(-2))),
]


@pytest.mark.parametrize("name,args", CASES)
def test_stores_agree_with_the_interpreter(modules, name, args):
    keep = [np.copy(a) for a in args]
    want = getattr(modules["interp"], name)(*args)
    got = getattr(modules["compiled"], name)(*args)
    for w, g in zip(want if isinstance(want, tuple) else [want], got if isinstance(got, tuple) else [got]):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
    for a, k in zip(args, keep):  # the caller's arrays are untouched
        np.testing.assert_array_equal(a, k)


@pytest.mark.parametrize("shape,i,j", [((2, 3), 2, 0), ((2, 3), 0, -4), ((0, 3), 0, 0), ((2, 0), 1, 0)])
def test_a_store_out_of_bounds_is_the_located_index_error(modules, shape, i, j):
    for mode in ("interp", "compiled"):
        with pytest.raises(dg.DgError) as e:
            modules[mode].pick(np.zeros(shape, np.float32), np.int64(i), np.int64(j), np.float32(1.0))
        assert "setitem.dg:14:" in str(e.value) and "out of bounds" in str(e.value), str(e.value)
