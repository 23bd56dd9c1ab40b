"""Structures (LANGUAGE.md 1.3): tuples and records as arguments, results, loop-carried values and
branch results, through grad/value_and_grad/vjp, tree_map/tree_leaves/zeros_like, from Python
(tuples, lists and dicts of arrays in; tuples and dicts out), with errors naming the leaf."""
import numpy as np
import pytest

import dg

from .util import load_src

F32 = np.float32

SRC = """
def sgd_leaf(p, g, lr: f32 = 0.1):
    return p - lr * g

def mlp(p: {"w1": f32[I, H], "b1": f32[H], "w2": f32[H], "b2": f32}, x: f32[N, I]) -> f32[N]:
    h = tanh(x @ p["w1"] + p["b1"])
    return h @ p["w2"] + p["b2"]

def loss(p, x, y) -> f32:
    return mean((mlp(p, x) - y) ** 2.0)

def step(p, x, y, lr: f32):
    l, g = value_and_grad(loss)(p, x, y)
    return l, tree_map(sgd_leaf, p, g, lr=lr)

def train(p, x, y, n: i64):
    losses = zeros([n])
    for i in range(n):
        l, p = step(p, x, y, 0.1)
        losses[i] = l
    return p, losses

def train_while(p, x, y, tol: f32):
    l = loss(p, x, y)
    n = 0
    while l > tol and n < 50:
        l, p = step(p, x, y, 0.1)
        n += 1
    return p, n

def nested(t: ((f32[2], f32[2]), {"a": f32[2], "z": (f32[2], f32)})):
    (u, v), r = t
    return {"sum": u + v + r["a"], "pair": (r["z"][0] * r["z"][1], u)}

def pick(c: f32, p):
    if c > 0.0:
        q = {"w1": p["w1"] * 2.0, "b1": p["b1"], "w2": p["w2"], "b2": p["b2"]}
    else:
        q = p
    return q

def update(p):
    q = p
    q["w2"] = q["w2"] * 0.0
    q["extra"] = (q["b1"], 3.0 * q["b2"])
    q["w1"][0, 0] = 7.0
    return q

def like(p):
    return zeros_like(p), ones_like(p), tree_leaves(p)

def sq(a):
    return a * a

def sumsq(p) -> f32:
    s = 0.0
    for v in tree_leaves(tree_map(sq, p)):
        s = s + sum(v)
    return s

def pullback(p, x, y):
    value, back = vjp(loss, p, x, y)
    gp, gx, gy = back(1.0)
    return value, gp, gx

def two_structs(a, b) -> f32:
    return sum(a[0] * b["k"]) + sum(a[1])

def bad_key(p: {"w": f32[2]}) -> f32:
    return sum(p["v"])

def bad_tuple_update(t):
    t[0] = 1.0
    return t

def branch_mismatch(c: f32, p: {"w": f32[2]}):
    if c > 0.0:
        q = {"w": p["w"]}
    else:
        q = {"v": p["w"]}
    return q
"""


def params(rng, i=3, h=4):
    return {"w1": rng.standard_normal((i, h)).astype(F32), "b1": rng.standard_normal(h).astype(F32),
            "w2": rng.standard_normal(h).astype(F32), "b2": F32(0.5)}


def data(rng, n=5, i=3):
    return rng.standard_normal((n, i)).astype(F32), rng.standard_normal(n).astype(F32)


def np_loss(p, x, y):
    h = np.tanh(x.astype(np.float64) @ p["w1"] + p["b1"])
    return np.mean((h @ p["w2"] + p["b2"] - y) ** 2)


def np_grad(p, x, y, eps=1e-6):
    """Central differences of np_loss in float64, leaf by leaf."""
    p64 = {k: np.asarray(v, np.float64) for k, v in p.items()}
    out = {}
    for k, v in p64.items():
        g = np.zeros_like(v)
        for idx in np.ndindex(v.shape):
            hi, lo = {**p64, k: v.copy()}, {**p64, k: v.copy()}
            hi[k][idx] += eps
            lo[k][idx] -= eps
            g[idx] = (np_loss(hi, x, y) - np_loss(lo, x, y)) / (2 * eps)
        out[k] = g
    return out


@pytest.fixture
def m(mode):
    return load_src(SRC, mode, "structures.dg")


def assert_tree_close(a, b, rtol=1e-4, atol=1e-5):
    assert type(a) is type(b) or (isinstance(a, np.ndarray) or np.isscalar(a)), (type(a), type(b))
    if isinstance(b, dict):
        assert sorted(a) == sorted(b)
        for k in b:
            assert_tree_close(a[k], b[k], rtol, atol)
    elif isinstance(b, tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_tree_close(x, y, rtol, atol)
    else:
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=rtol, atol=atol)


def test_record_argument_and_gradient_of_the_same_structure(m):
    rng = np.random.default_rng(0)
    p, (x, y) = params(rng), data(rng)
    l, g = dg.value_and_grad(m.loss)(p, x, y)
    assert isinstance(g, dict) and sorted(g) == ["b1", "b2", "w1", "w2"]
    assert np.shape(g["b2"]) == ()
    assert_tree_close(l, np_loss(p, x, y))
    assert_tree_close(g, np_grad(p, x, y), rtol=1e-3, atol=1e-4)


def test_training_loop_carries_a_record(m):
    rng = np.random.default_rng(1)
    p, (x, y) = params(rng), data(rng)
    want = dict(p)
    for _ in range(4):
        g = np_grad(want, x, y)
        want = {k: want[k] - 0.1 * g[k] for k in want}
    got, losses = m.train(p, x, y, 4)
    assert_tree_close(got, {k: np.asarray(v, np.float64) for k, v in want.items()}, rtol=1e-3, atol=1e-4)
    assert losses[-1] < losses[0]
    q, n = m.train_while(p, x, y, F32(0.5 * np_loss(p, x, y)))
    assert 0 < n < 50 and np_loss(q, x, y) <= 0.5 * np_loss(p, x, y) + 1e-6


def test_nested_tuples_and_records_in_and_out(m):
    a, b, c, d = (np.full(2, v, F32) for v in (1, 2, 3, 4))
    out = m.nested(((a, b), {"z": (d, F32(2)), "a": c}))
    assert isinstance(out, dict) and isinstance(out["pair"], tuple)
    assert_tree_close(out, {"sum": a + b + c, "pair": (d * 2, a)})
    # a list is a tuple at the boundary, as in a JAX pytree
    out2 = m.nested([[a, b], {"z": [d, F32(2)], "a": c}])
    assert_tree_close(out2, out)


def test_records_through_branches_and_updates(m):
    p = params(np.random.default_rng(2))
    assert_tree_close(m.pick(F32(1), p), {**p, "w1": p["w1"] * 2})
    assert_tree_close(m.pick(F32(-1), p), p)
    q = m.update(p)
    w1 = p["w1"].copy()
    w1[0, 0] = 7
    assert_tree_close(q, {**p, "w2": p["w2"] * 0, "extra": (p["b1"], 3 * p["b2"]), "w1": w1})
    assert p["w1"][0, 0] != 7  # values are never aliased


def test_tree_functions(m):
    p = params(np.random.default_rng(3))
    z, o, leaves = m.like(p)
    assert_tree_close(z, {k: np.zeros_like(v) for k, v in p.items()})
    assert_tree_close(o, {k: np.ones_like(v) for k, v in p.items()})
    assert_tree_close(leaves, tuple(p[k] for k in sorted(p)))  # records flatten in sorted key order
    assert_tree_close(m.sumsq(p), sum(float(np.sum(np.square(v, dtype=np.float64))) for v in p.values()))


def test_vjp_pullback_gives_structures(m):
    rng = np.random.default_rng(4)
    p, (x, y) = params(rng), data(rng)
    value, gp, gx = m.pullback(p, x, y)
    assert_tree_close(value, np_loss(p, x, y))
    assert_tree_close(gp, np_grad(p, x, y), rtol=1e-3, atol=1e-4)
    assert gx.shape == x.shape


def test_grad_of_several_structured_arguments(m):
    a = (np.arange(3, dtype=F32), np.ones(2, F32))
    b = {"k": np.full(3, 2.0, F32)}
    ga, gb = dg.grad(m.two_structs, wrt=(0, 1))(a, b)
    assert isinstance(ga, tuple) and isinstance(gb, dict)
    assert_tree_close(ga, (b["k"], np.ones(2, F32)))
    assert_tree_close(gb, {"k": a[0]})


def test_structure_is_part_of_the_specialization(m):
    p = params(np.random.default_rng(5))
    x = np.ones((2, 3), F32)
    t1 = m.two_structs((x[0], x[1, :2]), {"k": x[1]})
    t2 = m.two_structs([x[0], x[1, :2]], {"k": x[1]})
    assert t1 == t2
    # the same leaves in another structure are another signature, not a wrong answer
    with pytest.raises(dg.DgTypeError, match="record has no key 'k'"):
        m.two_structs((x[0], x[1, :2]), {"j": x[1]})
    assert m.sumsq(p) != m.sumsq({"a": p["w1"]})


@pytest.mark.parametrize("bad, message", [
    ({"w1": np.ones((3, 4), F32), "b1": np.ones(4, F32), "w2": np.ones(4, F32)}, r"argument 'p' of mlp\(\) must be a record with keys 'b1', 'b2', 'w1', 'w2': missing key 'b2'"),
    ({"w1": np.ones((3, 5), F32), "b1": np.ones(4, F32), "w2": np.ones(4, F32), "b2": F32(0)}, r"size 'H' is 4 in axis 0 of 'p\[\"b1\"\]' but 5 in axis 1 of 'p\[\"w1\"\]'"),
    ({"w1": np.ones((3, 4), F32), "b1": np.ones(4, np.float64), "w2": np.ones(4, F32), "b2": F32(0)}, r"argument 'p\[\"b1\"\]' of mlp\(\) must be f32\[H\], got a float64 array"),
    ({"w1": np.ones((3, 4), F32), "b1": np.ones(4, F32), "w2": np.ones(4, F32), "b2": F32(0), "c": F32(1)}, r"unexpected key 'c'"),
    ((np.ones((3, 4), F32),), r"must be a record with keys .* \(a dict\), got a tuple of 1"),
])
def test_bad_structures_name_the_leaf(m, bad, message):
    with pytest.raises(dg.DgTypeError, match=message) as e:
        m.mlp(bad, np.ones((2, 3), F32))
    assert "structures.dg:" in str(e.value)


def test_errors_in_dg_code_are_located(m):
    with pytest.raises(dg.DgTypeError, match=r"structures.dg:\d+:\d+: .*the record has no key 'v' \(its keys: 'w'\)"):
        m.bad_key({"w": np.ones(2, F32)})
    with pytest.raises(dg.DgTypeError, match="'t' is a tuple, which cannot be updated by index"):
        m.bad_tuple_update((np.ones(2, F32), np.ones(2, F32)))
    with pytest.raises(dg.DgTypeError, match="'q' has a different structure on different paths"):
        m.branch_mismatch(F32(1), {"w": np.ones(2, F32)})


def test_dict_keys_must_be_strings(m):
    with pytest.raises(dg.DgTypeError, match="string keys"):
        m.sumsq({1: np.ones(2, F32)})


def test_parse_errors_of_record_displays():
    with pytest.raises(dg.DgSyntaxError, match="keys are strings"):
        dg.loads("def f(x):\n    return {x: x}\n")
    with pytest.raises(dg.DgSyntaxError, match="the key 'a' is repeated"):
        dg.loads('def f(x):\n    return {"a": x, "a": x}\n')


def test_ir_of_a_declared_record_signature():
    """(the emitter's IR, the same in every mode: once)"""
    src = 'def f(p: {"w": f32[N, 3], "b": f32[3]}) -> {"s": f32[3]}:\n    return {"s": sum(p["w"], axis=0) + p["b"]}\n'
    text = dg.loads(src).f.ir("dg")
    assert 'loc("p[\\22b\\22]"' in text  # the leaf's parameter is named by its path (MLIR escapes the quotes)
    assert "tensor<?x3xf32>" in text and "tensor<3xf32>" in text


STATIC_SRC = """
def conv(x, w, s, p):
    return conv2d(x, w, stride=s, padding=p)

def convs(x: f32[1, 1, 6, 6], w: f32[1, 1, 3, 3]):
    return conv(x, w, 2, 1), conv(x, w, 1, 0)

def heads(x: f32[N, 8], n):
    return reshape(x, [x.shape[0], n, 8 // n])

def shaped(x: f32[N, 8]):
    return heads(x, 2), heads(x, 4)

def count(n):
    if n <= 0:
        return 0
    return 1 + count(n - 1)

def deep():
    return count(5)

def lit_then_vjp(x: f32[3]):
    y, back = vjp(scale, x, 3)
    return back(ones([3]))

def scale(x, k):
    return x * f32(k)
"""


def test_integer_literal_arguments_specialize_the_callee(mode):
    """An integer literal passed to a parameter is a constant in the callee (conv2d's stride, a
    static size), one specialization per value; recursion stays one specialization."""
    m = load_src(STATIC_SRC, mode, "static.dg")
    x = np.arange(36, dtype=F32).reshape(1, 1, 6, 6)
    w = np.ones((1, 1, 3, 3), F32)
    a, b = m.convs(x, w)
    assert a.shape == (1, 1, 3, 3) and b.shape == (1, 1, 4, 4)
    assert b[0, 0, 0, 0] == x[0, 0, :3, :3].sum()
    h2, h4 = m.shaped(np.ones((3, 8), F32))
    assert h2.shape == (3, 2, 4) and h4.shape == (3, 4, 2)
    assert m.deep() == 5
    gx, gk = m.lit_then_vjp(np.ones(3, F32))
    np.testing.assert_array_equal(gx, np.full(3, 3, F32))
    assert gk == 0
    if mode == "interp":
        text = m.shaped.ir("dg", args=(np.ones((3, 8), F32),))
        assert "tensor<?x2x4xf32>" in text and "tensor<?x4x2xf32>" in text  # static sizes
