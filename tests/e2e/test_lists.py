"""Lists (LANGUAGE.md §1.3, `list[T]`) and vmap over a list's items (§3.1, docs/batching.md), in
every mode: Python lists of arrays, records and scalars in and out, `len`, `xs[i]` (negative from
the end, out of range a located error), `for x in xs:` (automatic batching on and off), gradients
through the items, the located type errors of bad items; vmap over the items of a list ("ragged"
examples, each with its own first axis) in dg code and from Python, through per-example loops,
row reads from either end, embedding reads, arrays made with a size per example and written row
by row, a bidirectional recurrence, and the gradient of a sum of them. The oracles: the same
function called once per item (a Python loop), and NumPy where a value is easy to write down."""
import re

import numpy as np
import pytest

import dg

from .util import dg_mode, load_src

RTOL, ATOL = 1e-5, 1e-6

# ---------------------------------------------------------------- lists in dg code
LISTS = "lists.dg"
SRC = """
def count(xs: list[f32[?, 3]]) -> i64:
    return len(xs)

def item(xs: list[f32[?, 3]], i: i64) -> f32[?, 3]:
    return xs[i]

def same(xs: list[f32[?, 3]]) -> list[f32[?, 3]]:
    return xs

def same_records(xs: list[{"w": i64[?], "t": f32}]) -> list[{"w": i64[?], "t": f32}]:
    return xs

def same_scalars(xs: list[f32]) -> list[f32]:
    return xs

def weighted_scalars(xs: list[f32]) -> f32:
    s = 0.0
    for i in range(len(xs)):
        s = s + xs[i] * f32(i + 1)
    return s

def by_index(xs: list[f32[?, 3]], v: f32[3]) -> f32:
    s = 0.0
    for i in range(len(xs)):
        s = s + sum(tanh(xs[i] @ v))
    return s

def with_total(xs: list[f32[?, 3]], v: f32[3]) -> (list[f32[?, 3]], f32):
    return (xs, by_index(xs, v))

def ends(xs: list[f32[?, 3]], v: f32[3]) -> f32:
    return sum(xs[-1] @ v) * sum(xs[0] @ v)

def reversed_items(xs: list[i64[?]]) -> i64:
    s = 0
    for i in range(len(xs)):
        s = s + sum(xs[len(xs) - 1 - i]) * (i + 1)
    return s

def row_sum(x: f32[?, 3], v: f32[3]) -> f32:
    s = 0.0
    for t in range(len(x)):
        s = s + sum(tanh(x[t] * v))
    return s

def adds_up(xs: list[f32[?, 3]], v: f32[3]) -> f32:
    total = 0.0
    for x in xs:
        total = total + row_sum(x, v)
    return total

def adds_up_records(v: f32[3], xs: list[{"x": f32[?, 3], "y": f32}]) -> f32:
    total = 0.0
    for r in xs:
        total += (row_sum(r["x"], v) - r["y"]) ** 2.0
    return total

def whole_items(xs: list[f32[?, 3]], v: f32[3]) -> f32:
    total = 0.0
    for x in xs:
        total = total + sum(x * x) * sum(v)
    return total

def decayed(xs: list[f32[?, 3]], v: f32[3]) -> f32:
    s = 0.0
    for x in xs:
        s = 0.5 * s + sum(tanh(x @ v))
    return s

def last_item_rows(xs: list[f32[?, 3]]) -> i64:
    n = 0
    for x in xs:
        n = n + len(x)
    return n + len(x)

def named_width(w: f32[D], xs: list[f32[?, D]]) -> f32:
    s = 0.0
    for i in range(len(xs)):
        s = s + sum(xs[i] @ w)
    return s
"""

RNG = np.random.default_rng(0)
XS3 = [RNG.standard_normal((n, 3)).astype(np.float32) for n in (2, 0, 4, 1)]
V3 = RNG.standard_normal(3).astype(np.float32)
RECORDS = [{"w": np.array([1, 2, 3]), "t": np.float32(0.5)}, {"w": np.array([], dtype=np.int64), "t": np.float32(2.0)},
           {"w": np.array([7]), "t": np.float32(-1.0)}]
XY = [{"x": x, "y": np.float32(k)} for k, x in enumerate(XS3)]

_LOADED: dict = {}


def _loaded(src: str, mode: str, filename: str, **options):
    """dg.loads with options (autobatch=False) once per (source, mode, options)."""
    key = (src, mode, filename, tuple(sorted(options.items())))
    if key not in _LOADED:
        _LOADED[key] = dg.loads(src, mode=dg_mode(mode), filename=filename, **options)
    return _LOADED[key]


@pytest.fixture
def m(mode):
    return load_src(SRC, mode, filename=LISTS)


@pytest.fixture
def m_one_by_one(mode):
    """The same module with automatic batching off: `for x in xs` runs one item after another."""
    return _loaded(SRC, mode, LISTS, autobatch=False)


def _line(src: str, needle: str) -> int:
    return next(i + 1 for i, line in enumerate(src.splitlines()) if needle in line)


def _located(e, src, filename, needle):
    msg = str(e)
    assert re.match(rf"{re.escape(filename)}:{_line(src, needle)}:\d+: error: ", msg), msg
    return msg


def _same_arrays(got, want):
    assert isinstance(got, list), f"expected a Python list, got {type(got).__name__}"
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert isinstance(g, np.ndarray) and g.dtype == w.dtype and g.shape == w.shape, (g, w)
        np.testing.assert_array_equal(g, w)


def _np_by_index(xs, v):
    return sum(float(np.tanh(x @ v).sum()) for x in xs)


def _np_row_sum(x, v):
    return float(np.tanh(x * v).sum())


# ------------------------------------------------ lists in and out of Python
@pytest.mark.parametrize("items", [XS3, XS3[:1], XS3[1:2], []], ids=["several", "one", "one-empty-item", "empty"])
def test_a_list_of_arrays_comes_back_as_a_list(m, items):
    _same_arrays(m.same(items), items)
    assert m.count(items) == len(items)


def test_a_list_of_records_comes_back_as_a_list_of_dicts(m):
    for items in (RECORDS, RECORDS[2:], []):
        got = m.same_records(items)
        assert isinstance(got, list) and len(got) == len(items)
        for g, w in zip(got, items):
            assert isinstance(g, dict) and set(g) == {"w", "t"}
            np.testing.assert_array_equal(g["w"], w["w"])
            assert g["w"].dtype == np.int64
            assert np.asarray(g["t"]).shape == () and float(g["t"]) == float(w["t"])


def test_items_given_as_nested_python_lists(m):
    items = [[[1.0, 2.0, 3.0]], [[4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]]
    assert m.count(items) == 2
    _same_arrays(m.same(items), [np.array(x, np.float32) for x in items])


def test_scalar_items(m):
    xs = [np.float32(1.5), 2.0, np.float32(-3.0)]
    got = m.same_scalars(xs)
    assert isinstance(got, list) and len(got) == 3
    np.testing.assert_allclose([float(g) for g in got], [1.5, 2.0, -3.0])
    assert all(np.asarray(g).shape == () for g in got)
    np.testing.assert_allclose(m.weighted_scalars(xs), 1.5 * 1 + 2.0 * 2 - 3.0 * 3, rtol=RTOL)
    assert m.same_scalars([]) == []
    assert float(m.weighted_scalars([])) == 0.0
    assert float(m.weighted_scalars([np.float32(4.0)])) == 4.0


def test_a_list_inside_a_tuple_result(m):
    xs, s = m.with_total(XS3, V3)
    _same_arrays(xs, XS3)
    np.testing.assert_allclose(s, _np_by_index(XS3, V3), rtol=RTOL, atol=ATOL)


# ------------------------------------------------ len, indexing, loops
def test_len_and_items(m):
    assert m.count(XS3) == 4
    for i in range(-4, 4):
        got = m.item(XS3, i)
        assert got.shape == XS3[i].shape
        np.testing.assert_array_equal(got, XS3[i])
    np.testing.assert_allclose(m.ends(XS3, V3), (XS3[-1] @ V3).sum() * (XS3[0] @ V3).sum(), rtol=RTOL, atol=ATOL)
    ns = [np.arange(n) for n in (1, 2, 3, 4)]
    assert m.reversed_items(ns) == sum(int(ns[len(ns) - 1 - i].sum()) * (i + 1) for i in range(len(ns)))


@pytest.mark.parametrize("items,i", [(XS3, 4), (XS3, -5), (XS3, 100), ([], 0), ([], -1)])
def test_an_index_out_of_range_is_located(m, items, i):
    with pytest.raises(dg.DgError) as e:
        m.item(items, i)
    msg = _located(e.value, SRC, LISTS, "return xs[i]")
    assert "list index out of range" in msg
    assert "return xs[i]" in msg  # the source line is quoted


def test_for_over_range_of_len(m):
    np.testing.assert_allclose(m.by_index(XS3, V3), _np_by_index(XS3, V3), rtol=RTOL, atol=ATOL)
    assert float(m.by_index([], V3)) == 0.0


def test_for_over_a_list_that_adds_up(m, m_one_by_one):
    """Automatic batching (a sum over the items) gives the loop's values."""
    want = sum(_np_row_sum(x, V3) for x in XS3)
    np.testing.assert_allclose(m.adds_up(XS3, V3), want, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(m_one_by_one.adds_up(XS3, V3), want, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(m.adds_up(XS3[2:3], V3), _np_row_sum(XS3[2], V3), rtol=RTOL, atol=ATOL)
    assert float(m.adds_up([], V3)) == 0.0
    want = sum((_np_row_sum(r["x"], V3) - r["y"]) ** 2 for r in XY)
    np.testing.assert_allclose(m.adds_up_records(V3, XY), want, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(m_one_by_one.adds_up_records(V3, XY), want, rtol=RTOL, atol=ATOL)


def test_for_over_a_list_that_does_not_only_add_up(m):
    s = 0.0
    for x in XS3:
        s = 0.5 * s + float(np.tanh(x @ V3).sum())
    np.testing.assert_allclose(m.decayed(XS3, V3), s, rtol=RTOL, atol=ATOL)
    assert m.last_item_rows(XS3) == sum(len(x) for x in XS3) + len(XS3[-1])


def test_for_over_a_list_reducing_whole_items_one_by_one(m_one_by_one):
    np.testing.assert_allclose(m_one_by_one.whole_items(XS3, V3), sum(float((x * x).sum()) for x in XS3) * V3.sum(),
                               rtol=RTOL, atol=ATOL)


def test_for_over_a_list_reducing_whole_items(m):
    np.testing.assert_allclose(m.whole_items(XS3, V3), sum(float((x * x).sum()) for x in XS3) * V3.sum(),
                               rtol=RTOL, atol=ATOL)


# ------------------------------------------------ gradients through items
@pytest.mark.slow  # (compiles gradients of batched programs: several seconds; the slow tier)
def test_gradients_flow_through_items(m, m_one_by_one):
    # d/dv sum_i sum tanh(x_i @ v)
    want = sum(((1 - np.tanh(x @ V3) ** 2)[:, None] * x).sum(0) for x in XS3)
    np.testing.assert_allclose(dg.grad(m.by_index, wrt=1)(XS3, V3), want, rtol=1e-4, atol=1e-5)
    a, b = XS3[-1].sum(0), XS3[0].sum(0)
    np.testing.assert_allclose(dg.grad(m.ends, wrt=1)(XS3, V3), a * (b @ V3) + b * (a @ V3), rtol=1e-4, atol=1e-5)
    # the automatically batched loop against the loop
    want = sum(((1 - np.tanh(x * V3) ** 2) * x).sum(0) for x in XS3)
    np.testing.assert_allclose(dg.grad(m.adds_up, wrt=1)(XS3, V3), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dg.grad(m_one_by_one.adds_up, wrt=1)(XS3, V3), want, rtol=1e-4, atol=1e-5)
    want = sum(2 * (_np_row_sum(r["x"], V3) - r["y"]) * ((1 - np.tanh(r["x"] * V3) ** 2) * r["x"]).sum(0) for r in XY)
    np.testing.assert_allclose(dg.grad(m.adds_up_records)(V3, XY), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dg.grad(m_one_by_one.adds_up_records)(V3, XY), want, rtol=1e-4, atol=1e-5)


def test_the_gradient_of_a_list_is_a_list(m):
    g = dg.grad(m.by_index, wrt=0)(XS3, V3)
    assert isinstance(g, list) and len(g) == len(XS3)
    for gi, x in zip(g, XS3):
        np.testing.assert_allclose(gi, (1 - np.tanh(x @ V3) ** 2)[:, None] * V3, rtol=1e-4, atol=1e-5)


# ------------------------------------------------ bad items
@pytest.mark.parametrize("items,what", [
    ([np.ones(3, np.float32)], "rank"),
    ([np.ones((2, 3, 1), np.float32)], "rank"),
    ([np.ones((2, 3), np.float32), np.ones((2, 4), np.float32)], "first axis"),
    ([np.ones((2, 3), np.float32), np.ones(3, np.float32)], "rank"),
    ([np.ones((2, 4), np.float32)] * 2, "axis 1 has size 4, expected 3"),
    ([np.ones((2, 3), np.int64)], "element type"),
    (np.ones((2, 3), np.float32), "must be a list"),
], ids=["rank-1", "rank-3", "trailing-axes-differ", "ranks-differ", "trailing-axis-not-declared", "dtype", "array"])
def test_bad_items_are_located_type_errors(m, items, what):
    with pytest.raises(dg.DgTypeError) as e:
        m.count(items)
    msg = _located(e.value, SRC, LISTS, "def count(")
    assert what in msg, msg


def test_a_named_trailing_size_is_checked_across_arguments(m):
    xs = [np.ones((2, 4), np.float32), np.ones((1, 4), np.float32)]
    np.testing.assert_allclose(m.named_width(np.ones(4, np.float32), xs), 12.0)
    with pytest.raises(dg.DgTypeError) as e:
        m.named_width(np.ones(3, np.float32), xs)
    assert "'D'" in _located(e.value, SRC, LISTS, "def named_width(")


def test_an_empty_list_with_a_named_trailing_size(m):
    assert float(m.named_width(np.ones(3, np.float32), [])) == 0.0


# ---------------------------------------------------------------- vmap over a list's items
VMAP = "lists_vmap.dg"
VSRC = """
def rnn(w: f32[H, H], x: f32[?, H]) -> f32[H]:
    h = zeros((w.shape[0],))
    for t in range(len(x)):
        h = tanh(x[t] + h @ w)
    return h

def backwards(w: f32[H, H], x: f32[?, H]) -> f32[H]:
    h = zeros((w.shape[0],))
    for t in range(len(x)):
        h = tanh(x[len(x) - 1 - t] + h @ w)
    return h

def ends(x: f32[?, H]) -> f32[H]:
    return x[-1] * 2.0 + x[0] * f32(len(x))

def embed(E: f32[V, H], words: i64[?]) -> f32[H]:
    e = E[words]
    h = zeros((E.shape[1],))
    for t in range(len(words)):
        h = tanh(e[t] + h * 0.5)
    return h

def stored(w: f32[H, H], x: f32[?, H]) -> f32[H]:
    n = len(x)
    hs = zeros((n, w.shape[0]))
    h = zeros((w.shape[0],))
    for t in range(n):
        h = tanh(x[t] + h @ w)
        hs[t] = h
    s = zeros((w.shape[0],))
    for t in range(n):
        s = s + hs[t] * f32(t + 1)
    return s

def bi(w: f32[H, H], x: f32[?, H]) -> f32[H]:
    n = len(x)
    d = w.shape[0]
    fw = zeros((n, d))
    bw = zeros((n, d))
    h = zeros((d,))
    g = zeros((d,))
    for t in range(n):
        h = tanh(x[t] + h @ w)
        fw[t] = h
        g = tanh(x[n - 1 - t] + g @ w)
        bw[n - 1 - t] = g
    s = zeros((d,))
    for t in range(n):
        s = s + fw[t] * bw[t]
    return s

def bi_loss(w: f32[H, H], x: f32[?, H]) -> f32:
    h = bi(w, x)
    return sum(h * h)

def embed_loss(E: f32[V, H], words: i64[?]) -> f32:
    h = embed(E, words)
    return sum(h * h)

def row(x: f32[?, H], k: i64) -> f32[H]:
    return x[k]

def record_item(p: {"w": i64[?], "t": f32}) -> f32:
    s = 0.0
    for k in range(len(p["w"])):
        s = s + f32(p["w"][k]) * p["t"]
    return s

def square(a: f32) -> f32:
    return a * a

def product(x: f32[?, H], w: f32[H, H]) -> f32[H]:
    y = x @ w
    return y[0]

def mat_vec(x: f32[?, H], u: f32[H]) -> f32:
    y = x @ u
    return y[-1]

def row_total(x: f32[?, H]) -> f32:
    return sum(x)

def double(x: f32[?, H]) -> f32[?, H]:
    return x * 2.0

def batch_rnn(w: f32[H, H], xs: list[f32[?, H]]) -> f32[?, H]:
    return vmap(rnn, in_axes=(None, 0))(w, xs)

def batch_rnn4(w: f32[4, 4], xs: list[f32[?, 4]]) -> f32[?, 4]:
    return vmap(rnn, in_axes=(None, 0))(w, xs)

def batch_backwards(w: f32[H, H], xs: list[f32[?, H]]) -> f32[?, H]:
    return vmap(backwards, in_axes=(None, 0))(w, xs)

def batch_ends(xs: list[f32[?, H]]) -> f32[?, H]:
    return vmap(ends)(xs)

def batch_embed(E: f32[V, H], ws: list[i64[?]]) -> f32[?, H]:
    return vmap(embed, in_axes=(None, 0))(E, ws)

def batch_stored(w: f32[H, H], xs: list[f32[?, H]]) -> f32[?, H]:
    return vmap(stored, in_axes=(None, 0))(w, xs)

def batch_bi(w: f32[H, H], xs: list[f32[?, H]]) -> f32[?, H]:
    return vmap(bi, in_axes=(None, 0))(w, xs)

def batch_rows(xs: list[f32[?, H]], ks: i64[?]) -> f32[?, H]:
    return vmap(row)(xs, ks)

def batch_records(ps: list[{"w": i64[?], "t": f32}]) -> f32[?]:
    return vmap(record_item)(ps)

def batch_squares(xs: list[f32]) -> f32[?]:
    return vmap(square)(xs)

def batch_product(xs: list[f32[?, H]], w: f32[H, H]) -> f32[?, H]:
    return vmap(product, in_axes=(0, None))(xs, w)

def batch_double(xs: list[f32[?, H]]) -> list[f32[?, H]]:
    return vmap(double)(xs)

def batch_bad_axis(xs: list[f32[?, H]]) -> f32[?, H]:
    return vmap(ends, in_axes=1)(xs)

def batch_loss(w: f32[H, H], xs: list[f32[?, H]]) -> f32:
    return sum(vmap(bi_loss, in_axes=(None, 0))(w, xs))

def batch_embed_loss(E: f32[V, H], ws: list[i64[?]]) -> f32:
    return sum(vmap(embed_loss, in_axes=(None, 0))(E, ws))

def per_example_grads(w: f32[H, H], xs: list[f32[?, H]]) -> f32[?, H, H]:
    return vmap(grad(bi_loss), in_axes=(None, 0))(w, xs)
"""

H = 4
W = (RNG.standard_normal((H, H)) * 0.5).astype(np.float32)
XS = [RNG.standard_normal((n, H)).astype(np.float32) for n in (3, 1, 0, 5, 2)]  # an empty item too
FULL = [x for x in XS if len(x)]  # for functions that read a row whatever the length
E = RNG.standard_normal((7, H)).astype(np.float32)
WORDS = [np.array([1, 2, 3]), np.array([6]), np.array([], dtype=np.int64), np.array([0, 0, 5, 4, 2])]


@pytest.fixture
def v(mode):
    return load_src(VSRC, mode, filename=VMAP)


# NumPy versions of the per-example functions
def np_rnn(w, x):
    h = np.zeros(len(w), np.float32)
    for t in range(len(x)):
        h = np.tanh(x[t] + h @ w)
    return h


def np_backwards(w, x):
    return np_rnn(w, x[::-1])


def np_embed(E, words):
    h = np.zeros(E.shape[1], np.float32)
    for t in words:
        h = np.tanh(E[t] + h * 0.5)
    return h


def np_stored(w, x):
    s, h = np.zeros(len(w), np.float32), np.zeros(len(w), np.float32)
    for t in range(len(x)):
        h = np.tanh(x[t] + h @ w)
        s = s + h * (t + 1)
    return s


def np_bi(w, x):
    n = len(x)
    fw, bw = np.zeros((n, len(w)), np.float32), np.zeros((n, len(w)), np.float32)
    h, g = np.zeros(len(w), np.float32), np.zeros(len(w), np.float32)
    for t in range(n):
        h = np.tanh(x[t] + h @ w)
        fw[t] = h
        g = np.tanh(x[n - 1 - t] + g @ w)
        bw[n - 1 - t] = g
    return (fw * bw).sum(0)


def _per_item(f, shared, items):
    return np.stack([f(*shared, x) for x in items])


def _check_batch(got, f, shared, items, oracle=None):
    """`got` (a vmap over `items`) against f called once per item, and against NumPy."""
    want = _per_item(f, shared, items)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    if oracle is not None:
        np.testing.assert_allclose(got, _per_item(oracle, shared, items), rtol=1e-4, atol=1e-5)


PATTERNS = [  # (per-example function, the dg function mapping it over a list, shared arguments, items, NumPy)
    ("rnn", "batch_rnn", (W,), XS, np_rnn),
    ("backwards", "batch_backwards", (W,), XS, np_backwards),
    ("ends", "batch_ends", (), FULL, lambda x: x[-1] * 2 + x[0] * len(x)),
    ("embed", "batch_embed", (E,), WORDS, np_embed),
    ("stored", "batch_stored", (W,), XS, np_stored),
    ("bi", "batch_bi", (W,), XS, np_bi),
]
IDS = [p[0] for p in PATTERNS]


@pytest.mark.parametrize("fn,batch,shared,items,oracle", PATTERNS, ids=IDS)
def test_vmap_over_a_list_in_dg_code(v, fn, batch, shared, items, oracle):
    _check_batch(getattr(v, batch)(*shared, items), getattr(v, fn), shared, items, oracle)


@pytest.mark.parametrize("fn,batch,shared,items,oracle", PATTERNS, ids=IDS)
def test_vmap_over_a_list_from_python(v, fn, batch, shared, items, oracle):
    f = getattr(v, fn)
    got = dg.vmap(f, in_axes=(None,) * len(shared) + (0,))(*shared, items)
    _check_batch(got, f, shared, items, oracle)


@pytest.mark.parametrize("n", [1, 2])
def test_vmap_over_short_lists(v, n):
    _check_batch(v.batch_bi(W, XS[:n]), v.bi, (W,), XS[:n], np_bi)
    _check_batch(dg.vmap(v.rnn, in_axes=(None, 0))(W, XS[3:3 + n]), v.rnn, (W,), XS[3:3 + n], np_rnn)


def test_a_list_beside_a_batched_array(v):
    ks = np.array([0, -1, 2, 1])
    want = np.stack([x[k] for x, k in zip(FULL, ks)])
    np.testing.assert_array_equal(v.batch_rows(FULL, ks), want)
    np.testing.assert_array_equal(dg.vmap(v.row)(FULL, ks), want)


def test_records_and_scalar_items_in_dg_code(v):
    np.testing.assert_allclose(v.batch_records(RECORDS), [3.0, 0.0, -7.0], rtol=RTOL)
    xs = [np.float32(2.0), np.float32(-3.0), np.float32(0.5)]
    np.testing.assert_allclose(v.batch_squares(xs), [4.0, 9.0, 0.25], rtol=RTOL)
    np.testing.assert_allclose(dg.vmap(v.square)(xs), [4.0, 9.0, 0.25], rtol=RTOL)


def test_vmap_over_a_list_of_records_from_python(v):
    np.testing.assert_allclose(dg.vmap(v.record_item)(RECORDS), [3.0, 0.0, -7.0], rtol=RTOL)


def test_a_row_out_of_range_names_the_example(v):
    with pytest.raises(dg.DgError) as e:
        v.batch_rows(FULL, np.array([0, 1, 0, 0]))  # item 1 has one row
    msg = _located(e.value, VSRC, VMAP, "return x[k]")
    assert "example 1 of the batch" in msg, msg
    with pytest.raises(dg.DgError) as e:
        dg.vmap(v.row)(FULL, np.array([0, 0, 0, -6]))
    assert "example 3 of the batch" in _located(e.value, VSRC, VMAP, "return x[k]")


def test_a_list_and_an_array_must_agree_on_the_batch_size(v):
    with pytest.raises(dg.DgError, match="batch size"):
        v.batch_rows(FULL, np.array([0, 0, 0]))
    with pytest.raises(dg.DgError, match="batch size"):
        dg.vmap(v.row)(FULL, np.array([0, 0, 0, 0, 0]))


def test_a_reduction_over_an_items_rows_is_per_example(v):
    """A reduction over the first axis of a ragged value reduces each example's own rows."""
    np.testing.assert_allclose(dg.vmap(v.row_total)(FULL), [v.row_total(x) for x in FULL], rtol=1e-5, atol=1e-6)


def test_a_list_maps_over_its_items_only(v):
    with pytest.raises(dg.DgTypeError) as e:
        v.batch_bad_axis(FULL)
    assert "a list maps over its items" in _located(e.value, VSRC, VMAP, "vmap(ends, in_axes=1)")
    with pytest.raises(dg.DgTypeError, match="a list maps over its items"):
        dg.vmap(v.ends, in_axes=1)(FULL)


@pytest.mark.slow  # (compiles gradients of batched programs: several seconds; the slow tier)
def test_grad_of_a_sum_of_vmap_over_a_list(v):
    g = dg.grad(v.batch_loss)(W, XS)
    want = sum(dg.grad(v.bi_loss)(W, x) for x in XS)
    np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(v.batch_loss(W, XS), sum(float((np_bi(W, x) ** 2).sum()) for x in XS),
                               rtol=1e-4, atol=1e-5)
    # embedding rows gathered by every word of every example: the gradient scatters back
    g = dg.grad(v.batch_embed_loss)(E, WORDS)
    want = sum(dg.grad(v.embed_loss)(E, w) for w in WORDS)
    np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5)
    assert not g[np.setdiff1d(np.arange(7), np.concatenate(WORDS))].any()  # rows no word reads


def test_vmap_of_products_with_shared_operands(v):
    """`x @ w` and `x @ u` with x an item: every example's rows at once."""
    want = np.stack([(x @ W)[0] for x in FULL])
    np.testing.assert_allclose(v.batch_product(FULL, W), want, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(dg.vmap(v.product, in_axes=(0, None))(FULL, W), want, rtol=RTOL, atol=ATOL)
    u = W[0]
    want = np.array([(x @ u)[-1] for x in FULL])
    np.testing.assert_allclose(dg.vmap(v.mat_vec, in_axes=(0, None))(FULL, u), want, rtol=RTOL, atol=ATOL)
    _check_batch(dg.vmap(v.mat_vec, in_axes=(0, None))(FULL, u), lambda x: v.mat_vec(x, u), (), FULL)


@pytest.mark.slow  # (compiles gradients of batched programs: several seconds; the slow tier)
def test_per_example_gradients_over_a_list(v):
    want = np.stack([dg.grad(v.bi_loss)(W, x) for x in XS])
    np.testing.assert_allclose(v.per_example_grads(W, XS), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dg.vmap(dg.grad(v.bi_loss), in_axes=(None, 0))(W, XS), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("where", ["dg", "python"])
def test_vmap_over_an_empty_list(v, where):
    got = v.batch_rnn4(W, []) if where == "dg" else dg.vmap(v.rnn, in_axes=(None, 0))(W, [])
    assert got.shape == (0, H)


@pytest.mark.xfail(strict=True, reason="§3.1: a result whose shape differs by example comes back as a list; "
                   "docs/batching.md lists it as not there yet ('a value whose first axis differs by example "
                   "cannot be stacked here')")
def test_a_ragged_result_comes_back_as_a_list(v):
    want = [x * 2 for x in FULL]
    for got in (v.batch_double(FULL), dg.vmap(v.double)(FULL)):
        assert isinstance(got, list) and len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w)
