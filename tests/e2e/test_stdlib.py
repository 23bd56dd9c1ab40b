"""dg's standard library, written in dg (stdlib/nn.dg, stdlib/init.dg; LANGUAGE.md section 1.4).

Every function of `nn` runs in the interpreter and in compiled mode, and is checked
- against a NumPy reference (values, f32; no torch needed),
- against PyTorch (values and gradients, f64): torch.nn.functional, torch.nn.LSTMCell/GRUCell/
  RNNCell/LSTM/GRU with the same weights, F.scaled_dot_product_attention(is_causal=True);
  these skip one by one where torch is not installed,
- by finite differences of the gradient along a random direction (f64; no torch needed).
`init`'s initialisers are checked statistically (mean, std, bounds of a large sample against
the formula), for determinism per key, and (with torch) their fans against torch.nn.init's.
`import nn` is resolved from a .dg file in a temporary folder: the importing folder first, then
DG_PATH, then the standard library.

Modules are loaded once per mode and shared (compiled mode compiles each signature once).
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest

import dg

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # CI has no torch: the comparisons with it skip, the rest runs
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="needs torch")

MODES = ["interp", "compiled"]
STDLIB = Path(__file__).resolve().parents[2] / "stdlib"  # repo: stdlib/; installed: dg/stdlib/


# ------------------------------------------------------------------ the cases
class Case:
    """One nn function with its arguments: `shapes` lists each parameter as a shape (a float
    tensor), ("int", value) (an integer scalar), or ("idx", shape, high) (an integer tensor)."""

    def __init__(self, id, fn, params, shapes, numpy_ref, torch_ref, n_out=1, compiled_grad="ci"):
        self.id, self.fn, self.params, self.shapes = id, fn, params, shapes
        self.numpy_ref, self.torch_ref, self.n_out = numpy_ref, torch_ref, n_out
        # where the gradient is checked in compiled mode (LLVM takes long over some of them):
        # "ci" everywhere, "torch" against torch only, None not (the interpreter's always is;
        # pad2d, conv2d_padded, causal_sdpa, attention_bias run compiled inside conv_block and
        # transformer_block, whose gradients are checked compiled)
        self.compiled_grad = compiled_grad
        self.wrt = tuple(i for i, s in enumerate(shapes) if isinstance(s, tuple) and (not s or s[0] not in ("int", "idx")))

    def args(self, dtype, seed=0):
        rng = np.random.default_rng(seed)
        out = []
        for s in self.shapes:
            if s and s[0] == "int":
                out.append(s[1])
            elif s and s[0] == "idx":
                out.append(rng.integers(0, s[2], size=s[1]).astype(np.int64))
            else:
                out.append((rng.standard_normal(s) * 0.7).astype(dtype))
        return out

    def cotangents(self, outputs, seed=1):
        rng = np.random.default_rng(seed)
        return [rng.standard_normal(np.shape(o)).astype(np.float64) for o in outputs]


def _erf(x):
    return np.vectorize(math.erf)(x)


def _gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def np_layer_norm(x, g, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(x.var(-1, keepdims=True) + eps) * g + b


def np_pad2d(x, p):
    return np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))


def np_conv2d(x, w, b, stride, padding):
    x = np_pad2d(x, padding)
    kh, kw = w.shape[2:]
    win = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))[:, :, ::stride, ::stride]
    return np.einsum("nchwij,ocij->nohw", win, w) + b[None, :, None, None]


def np_conv_block(x, w, b, stride, padding):
    y = np.maximum(np_conv2d(x, w, b, stride, padding), 0.0)
    n, c, h, w_ = y.shape
    y = y[:, :, :h // 2 * 2, :w_ // 2 * 2].reshape(n, c, h // 2, 2, w_ // 2, 2)
    return y.max(axis=(3, 5))


def np_sdpa(q, k, v):
    t, d = q.shape[-2:]
    att = q @ np.swapaxes(k, -1, -2) / math.sqrt(d)
    att = np.where(np.tril(np.ones((t, t), bool)), att, -np.inf)
    return _softmax(att) @ v


def np_attention_bias(x, wq, bq, wk, bk, wv, bv, wo, bo, n_head):
    b, t, c = x.shape

    def heads(a):
        return a.reshape(b, t, n_head, c // n_head).transpose(0, 2, 1, 3)

    y = np_sdpa(heads(x @ wq + bq), heads(x @ wk + bk), heads(x @ wv + bv))
    return y.transpose(0, 2, 1, 3).reshape(b, t, c) @ wo + bo


def np_attention(x, wq, wk, wv, wo, n_head):
    z = np.zeros(x.shape[-1])
    return np_attention_bias(x, wq, z, wk, z, wv, z, wo, z, n_head)


def np_mlp(x, w1, b1, w2, b2):
    return _gelu(x @ w1 + b1) @ w2 + b2


def np_block(x, g1, c1, wq, bq, wk, bk, wv, bv, wo, bo, g2, c2, w1, b1, w2, b2, n_head):
    x = x + np_attention_bias(np_layer_norm(x, g1, c1), wq, bq, wk, bk, wv, bv, wo, bo, n_head)
    return x + np_mlp(np_layer_norm(x, g2, c2), w1, b1, w2, b2)


def np_rnn_cell(x, h, w_ih, w_hh, b_ih, b_hh):
    return np.tanh(x @ w_ih.T + b_ih + h @ w_hh.T + b_hh)


def np_lstm_cell(x, h, c, w_ih, w_hh, b_ih, b_hh):
    i, f, g, o = np.split(x @ w_ih.T + b_ih + h @ w_hh.T + b_hh, 4, axis=-1)
    c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
    return _sigmoid(o) * np.tanh(c), c


def np_gru_cell(x, h, w_ih, w_hh, b_ih, b_hh):
    xr, xz, xn = np.split(x @ w_ih.T + b_ih, 3, axis=-1)
    hr, hz, hn = np.split(h @ w_hh.T + b_hh, 3, axis=-1)
    r, z = _sigmoid(xr + hr), _sigmoid(xz + hz)
    return (1 - z) * np.tanh(xn + r * hn) + z * h


def np_lstm(xs, h, c, *w):
    ys = []
    for x in xs:
        h, c = np_lstm_cell(x, h, c, *w)
        ys.append(h)
    return np.stack(ys), h, c


def np_gru(xs, h, *w):
    ys = []
    for x in xs:
        h = np_gru_cell(x, h, *w)
        ys.append(h)
    return np.stack(ys), h


# torch references: the same arguments as torch tensors
def t_conv_block(x, w, b, stride, padding):
    return F.max_pool2d(F.relu(F.conv2d(x, w, b, stride=stride, padding=padding)), 2)


def t_sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def t_attention_bias(x, wq, bq, wk, bk, wv, bv, wo, bo, n_head):
    # nanoGPT's CausalSelfAttention (no dropout), with torch's [out, in] weights = ours transposed
    b, t, c = x.shape
    q, k, v = F.linear(x, wq.T, bq), F.linear(x, wk.T, bk), F.linear(x, wv.T, bv)
    q, k, v = (a.view(b, t, n_head, c // n_head).transpose(1, 2) for a in (q, k, v))
    y = t_sdpa(q, k, v).transpose(1, 2).contiguous().view(b, t, c)
    return F.linear(y, wo.T, bo)


def t_attention(x, wq, wk, wv, wo, n_head):
    z = torch.zeros(x.shape[-1], dtype=x.dtype)
    return t_attention_bias(x, wq, z, wk, z, wv, z, wo, z, n_head)


def t_mlp(x, w1, b1, w2, b2):
    return F.linear(F.gelu(F.linear(x, w1.T, b1)), w2.T, b2)


def t_block(x, g1, c1, wq, bq, wk, bk, wv, bv, wo, bo, g2, c2, w1, b1, w2, b2, n_head):
    # nanoGPT's Block (bias=True, no dropout)
    c = x.shape[-1]
    x = x + t_attention_bias(F.layer_norm(x, (c,), g1, c1), wq, bq, wk, bk, wv, bv, wo, bo, n_head)
    return x + t_mlp(F.layer_norm(x, (c,), g2, c2), w1, b1, w2, b2)


def _cell(module, weights, inputs):
    names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
    return torch.func.functional_call(module.double(), dict(zip(names, weights)), inputs)


def t_rnn_cell(x, h, *w):
    return _cell(torch.nn.RNNCell(x.shape[-1], h.shape[-1]), w, (x, h))


def t_lstm_cell(x, h, c, *w):
    return _cell(torch.nn.LSTMCell(x.shape[-1], h.shape[-1]), w, (x, (h, c)))


def t_gru_cell(x, h, *w):
    return _cell(torch.nn.GRUCell(x.shape[-1], h.shape[-1]), w, (x, h))


def _seq(module, weights, inputs):
    names = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")
    return torch.func.functional_call(module.double(), dict(zip(names, weights)), inputs)


def t_lstm(xs, h, c, *w):
    ys, (hn, cn) = _seq(torch.nn.LSTM(xs.shape[-1], h.shape[-1]), w, (xs, (h[None], c[None])))
    return ys, hn[0], cn[0]


def t_gru(xs, h, *w):
    ys, hn = _seq(torch.nn.GRU(xs.shape[-1], h.shape[-1]), w, (xs, h[None]))
    return ys, hn[0]


B, T, C, NH, FF = 2, 5, 8, 2, 16
I_, H_ = 4, 5  # recurrent input and hidden sizes
_att = [(B, T, C)] + [(C, C)] * 4 + [("int", NH)]
_att_b = [(B, T, C), (C, C), (C,), (C, C), (C,), (C, C), (C,), (C, C), (C,), ("int", NH)]
_block = [(B, T, C), (C,), (C,)] + _att_b[1:9] + [(C,), (C,), (C, FF), (FF,), (FF, C), (C,), ("int", NH)]
_cellw = lambda g: [(g * H_, I_), (g * H_, H_), (g * H_,), (g * H_,)]  # noqa: E731

CASES = [
    Case("dense", "dense", "x w b", [(3, 4), (4, 5), (5,)], lambda x, w, b: x @ w + b,
         lambda x, w, b: F.linear(x, w.T, b)),
    Case("dense_relu", "dense_relu", "x w b", [(3, 4), (4, 5), (5,)], lambda x, w, b: np.maximum(x @ w + b, 0),
         lambda x, w, b: F.relu(F.linear(x, w.T, b))),
    Case("mlp", "mlp", "x w1 b1 w2 b2", [(B, 3, C), (C, FF), (FF,), (FF, C), (C,)], np_mlp, lambda *a: t_mlp(*a)),
    Case("layer_norm", "layer_norm", "x g b", [(3, 6), (6,), (6,)], np_layer_norm,
         lambda x, g, b: F.layer_norm(x, (x.shape[-1],), g, b, 1e-5)),
    Case("embedding", "embedding", "table idx", [(7, 4), ("idx", (2, 6), 7)], lambda t, i: t[i],
         lambda t, i: F.embedding(i, t)),
    Case("pad2d", "pad2d", "x p", [(2, 3, 4, 5), ("int", 2)], np_pad2d, lambda x, p: F.pad(x, (p, p, p, p)),
         compiled_grad=None),
    Case("conv2d_padded", "conv2d_padded", "x w b s p", [(2, 3, 7, 8), (4, 3, 3, 2), (4,), ("int", 2), ("int", 1)],
         np_conv2d, lambda x, w, b, s, p: F.conv2d(x, w, b, stride=s, padding=p), compiled_grad=None),
    Case("conv_block-s1p0", "conv_block", "x w b s p", [(2, 3, 9, 9), (4, 3, 3, 3), (4,), ("int", 1), ("int", 0)],
         np_conv_block, t_conv_block, compiled_grad=None),
    Case("conv_block-s2p1", "conv_block", "x w b s p", [(2, 3, 9, 9), (4, 3, 3, 3), (4,), ("int", 2), ("int", 1)],
         np_conv_block, t_conv_block, compiled_grad="torch"),
    Case("causal_sdpa", "causal_sdpa", "q k v", [(B, NH, T, 3)] * 3, np_sdpa, t_sdpa),
    Case("attention", "attention", "x wq wk wv wo n", _att, np_attention, t_attention, compiled_grad=None),
    Case("attention_bias", "attention_bias", "x wq bq wk bk wv bv wo bo n", _att_b, np_attention_bias,
         t_attention_bias, compiled_grad=None),
    Case("transformer_block", "transformer_block", "x g1 c1 wq bq wk bk wv bv wo bo g2 c2 w1 b1 w2 b2 n", _block,
         np_block, t_block, compiled_grad="torch"),
    Case("rnn_cell", "rnn_cell", "x h wi wh bi bh", [(3, I_), (3, H_)] + _cellw(1), np_rnn_cell, t_rnn_cell),
    Case("lstm_cell", "lstm_cell", "x h c wi wh bi bh", [(3, I_), (3, H_), (3, H_)] + _cellw(4), np_lstm_cell,
         t_lstm_cell, n_out=2),
    Case("gru_cell", "gru_cell", "x h wi wh bi bh", [(3, I_), (3, H_)] + _cellw(3), np_gru_cell, t_gru_cell),
    Case("lstm", "lstm", "xs h c wi wh bi bh", [(4, 3, I_), (3, H_), (3, H_)] + _cellw(4), np_lstm, t_lstm,
         n_out=3, compiled_grad="torch"),
    Case("gru", "gru", "xs h wi wh bi bh", [(4, 3, I_), (3, H_)] + _cellw(3), np_gru, t_gru, n_out=2,
         compiled_grad="torch"),
]
BY_ID = {c.id: c for c in CASES}


def _losses() -> str:
    """A dg function l_FN(params..., ct0, ...) = sum of <output_i, ct_i> for each nn function."""
    out, seen = [], set()
    for c in CASES:
        if c.fn in seen or not c.wrt:
            continue
        seen.add(c.fn)
        ps = ", ".join(c.params.split())
        cts = [f"ct{i}" for i in range(c.n_out)]
        if c.n_out == 1:
            body = f"    return sum(nn.{c.fn}({ps}) * ct0)\n"
        else:
            body = (f"    {', '.join(f'y{i}' for i in range(c.n_out))} = nn.{c.fn}({ps})\n"
                    f"    return {' + '.join(f'sum(y{i} * ct{i})' for i in range(c.n_out))}\n")
        out.append(f"def l_{c.fn}({ps}, {', '.join(cts)}):\n{body}")
    return "\n".join(out)


INITS = """
def i_glorot_uniform(seed: i64, shape, gain):
    return init.glorot_uniform(key(seed), shape, gain=gain)

def i_glorot_normal(seed: i64, shape, gain):
    return init.glorot_normal(key(seed), shape, gain)

def i_he_uniform(seed: i64, shape, a):
    return init.he_uniform(key(seed), shape, a)

def i_he_normal(seed: i64, shape, a):
    return init.he_normal(key(seed), shape, a)

def i_lecun_normal(seed: i64, shape):
    return init.lecun_normal(key(seed), shape)

def i_linear_default(seed: i64, shape):
    return init.linear_default(key(seed), shape)

def i_normal_init(seed: i64, shape, std, mu):
    return init.normal_init(key(seed), shape, std=std, mean=mu)

def i_uniform_init(seed: i64, shape, a, b):
    return init.uniform_init(key(seed), shape, a, b)

def i_defaults(seed: i64):
    k1, k2 = split(key(seed))
    return (init.glorot_uniform(k1, [3, 4]), init.he_normal(k2, [2, 3, 3, 3]), init.normal_init(k1, [5]),
            init.zeros_init([2, 3]), init.ones_init([4]), init.constant_init([2, 2, 2], 2.5),
            init.fan_in_out([16, 8, 3, 3]), init.fan_in_out([20, 30]), init.fan_in_out([7]))
"""

USER_PROGRAM = "import nn\nimport init\nfrom nn import dense\n\n" + _losses() + INITS + """
def local_dense(x, w, b):
    return dense(x, w, b)
"""

_MODULES: dict = {}


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory):
    """A folder outside the repository holding a program that imports the standard library."""
    d = tmp_path_factory.mktemp("stdlib_user")
    (d / "uses_stdlib.dg").write_text(USER_PROGRAM)
    return d


def _load(kind: str, mode: str, user_dir: Path | None = None):
    key = (kind, mode)
    if key not in _MODULES:
        if kind == "nn":
            _MODULES[key] = dg.load(str(STDLIB / "nn.dg"), mode=mode)
        else:
            saved = os.environ.pop("DG_PATH", None)  # resolve from the importing folder, then the stdlib
            try:
                _MODULES[key] = dg.load(str(user_dir / "uses_stdlib.dg"), mode=mode)
            finally:
                if saved is not None:
                    os.environ["DG_PATH"] = saved
    return _MODULES[key]


@pytest.fixture(params=MODES, scope="module")
def mode(request):
    return request.param


@pytest.fixture(scope="module")
def nn(mode):
    return _load("nn", mode)


@pytest.fixture(scope="module")
def user(mode, user_dir):
    return _load("user", mode, user_dir)


def _as_tuple(v):
    return v if isinstance(v, tuple) else (v,)


def _close(actual, expected, rtol, atol, what):
    actual, expected = _as_tuple(actual), _as_tuple(expected)
    assert len(actual) == len(expected), what
    for i, (a, e) in enumerate(zip(actual, expected)):
        a, e = np.asarray(a), np.asarray(e)
        assert a.shape == e.shape, f"{what}[{i}]: shape {a.shape}, expected {e.shape}"
        np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, err_msg=f"{what}[{i}]")


# ------------------------------------------------------------------ nn: values against NumPy
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_nn_matches_numpy(case, nn):
    args = case.args(np.float32)
    out = getattr(nn, case.fn)(*args)
    for o in _as_tuple(out):
        assert np.asarray(o).dtype == np.float32, f"{case.id}: an f32 input gives {np.asarray(o).dtype}"
    expected = case.numpy_ref(*[a.astype(np.float64) if isinstance(a, np.ndarray) and a.dtype == np.float32
                                else a for a in args])
    _close(out, expected, 1e-4, 1e-5, case.id)


# ------------------------------------------------------------------ nn: values and gradients against PyTorch
def _torch_args(args, wrt):
    return [torch.tensor(a, requires_grad=i in wrt) if isinstance(a, np.ndarray) else a
            for i, a in enumerate(args)]


def _grads_checked(case, mode, where):
    return case.wrt and (mode == "interp" or case.compiled_grad in where)


@needs_torch
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_nn_matches_torch(case, mode, nn, user):
    # values in f32 (the signature the NumPy test compiled), gradients in f64
    args = case.args(np.float32)
    tout = _as_tuple(case.torch_ref(*_torch_args(args, ())))
    _close(getattr(nn, case.fn)(*args), tuple(t.numpy() for t in tout), 1e-4, 1e-5, f"{case.id} value")
    if not _grads_checked(case, mode, ("ci", "torch")):
        return
    args = case.args(np.float64)
    targs = _torch_args(args, case.wrt)
    tout = _as_tuple(case.torch_ref(*targs))
    cts = case.cotangents(tout)
    loss_t = sum((t * torch.tensor(ct)).sum() for t, ct in zip(tout, cts))
    loss_t.backward()
    value, grads = dg.value_and_grad(getattr(user, "l_" + case.fn), wrt=case.wrt)(*args, *cts)
    np.testing.assert_allclose(value, loss_t.item(), rtol=1e-9, atol=1e-10)
    _close(tuple(grads), tuple(targs[i].grad.numpy() for i in case.wrt), 1e-8, 1e-10, f"{case.id} gradient")


# ------------------------------------------------------------------ nn: gradients without torch
@pytest.mark.parametrize("case", [c for c in CASES if c.wrt], ids=lambda c: c.id)
def test_nn_gradient_matches_finite_differences(case, user_dir):
    """In the interpreter (f64): the gradient along a random direction against central differences."""
    user = _load("user", "interp", user_dir)
    args = case.args(np.float64)
    cts = case.cotangents(_as_tuple(case.numpy_ref(*args)))
    vg = dg.value_and_grad(getattr(user, "l_" + case.fn), wrt=case.wrt)
    _, grads = vg(*args, *cts)
    rng = np.random.default_rng(2)
    direction = {i: rng.standard_normal(args[i].shape) for i in case.wrt}
    eps = 1e-6

    def at(sign):
        moved = [a + sign * eps * direction[i] if i in direction else a for i, a in enumerate(args)]
        return vg(*moved, *cts)[0]

    numeric = (at(1.0) - at(-1.0)) / (2 * eps)
    analytic = sum(float(np.sum(g * direction[i])) for g, i in zip(grads, case.wrt))
    assert numeric == pytest.approx(analytic, rel=1e-5, abs=1e-6), case.id


@pytest.mark.parametrize("case", [c for c in CASES if c.wrt and c.compiled_grad == "ci"], ids=lambda c: c.id)
def test_nn_compiled_gradient_matches_interp(case, user_dir):
    args = case.args(np.float64)
    cts = case.cotangents(_as_tuple(case.numpy_ref(*args)))
    got = [dg.value_and_grad(getattr(_load("user", mode, user_dir), "l_" + case.fn), wrt=case.wrt)(*args, *cts)
           for mode in MODES]
    np.testing.assert_allclose(got[1][0], got[0][0], rtol=1e-10, atol=1e-12)
    _close(tuple(got[1][1]), tuple(got[0][1]), 1e-9, 1e-11, f"{case.id} gradient")


def test_unbatched_cells_match_numpy(nn):
    """The cells also take one example: x [I], h [H] (as torch's cells do)."""
    rng = np.random.default_rng(5)
    x, h, c = rng.standard_normal(I_), rng.standard_normal(H_), rng.standard_normal(H_)
    w4 = [rng.standard_normal(s) for s in _cellw(4)]
    w3 = [rng.standard_normal(s) for s in _cellw(3)]
    _close(nn.lstm_cell(x, h, c, *w4), np_lstm_cell(x, h, c, *w4), 1e-10, 1e-12, "lstm_cell")
    _close(nn.gru_cell(x, h, *w3), np_gru_cell(x, h, *w3), 1e-10, 1e-12, "gru_cell")


def test_attention_is_causal(nn):
    """Changing the last position of x changes no output before it."""
    args = BY_ID["attention"].args(np.float32)  # the signature test_nn_matches_numpy compiled
    x = args[0]
    y1 = nn.attention(*args)
    x2 = x.copy()
    x2[:, -1] += 1.0
    y2 = nn.attention(x2, *args[1:])
    np.testing.assert_allclose(y1[:, :-1], y2[:, :-1], rtol=1e-6, atol=1e-6)
    assert np.abs(y1[:, -1] - y2[:, -1]).max() > 1e-3


# ------------------------------------------------------------------ init
# (function, shape, extra arguments, ("uniform", low, high) or ("normal", mean, std))
def _b(fan):
    return math.sqrt(6.0 / fan)


INIT_CASES = [
    ("glorot_uniform", [300, 200], (1.5,), ("uniform", -1.5 * _b(500), 1.5 * _b(500))),
    ("glorot_normal", [300, 200], (1.0,), ("normal", 0.0, math.sqrt(2.0 / 500))),
    ("he_uniform", [64, 32, 3, 3], (0.0,), ("uniform", -_b(32 * 9), _b(32 * 9))),
    ("he_uniform", [256, 300], (math.sqrt(5.0),), ("uniform", -1 / 16, 1 / 16)),
    ("he_normal", [500, 400], (0.0,), ("normal", 0.0, math.sqrt(2.0 / 500))),
    ("lecun_normal", [500, 400], (), ("normal", 0.0, math.sqrt(1.0 / 500))),
    ("linear_default", [256, 300], (), ("uniform", -1 / 16, 1 / 16)),
    ("normal_init", [200000], (0.02, 0.5), ("normal", 0.5, 0.02)),
    ("uniform_init", [50, 40, 100], (-2.0, 3.0), ("uniform", -2.0, 3.0)),
]


@pytest.mark.parametrize("name, shape, extra, law", INIT_CASES,
                         ids=[f"{c[0]}-{'x'.join(map(str, c[1]))}" for c in INIT_CASES])
def test_init_statistics(name, shape, extra, law, user):
    x = np.asarray(getattr(user, "i_" + name)(7, np.array(shape), *extra))
    assert x.shape == tuple(shape) and x.dtype == np.float32
    x = x.astype(np.float64).ravel()
    n = x.size
    kind, p, q = law
    if kind == "uniform":
        mean, std = (p + q) / 2, (q - p) / math.sqrt(12)
        assert x.min() >= p and x.max() <= q
        assert x.min() < p + 0.01 * (q - p) and x.max() > q - 0.01 * (q - p)
    else:
        mean, std = p, q
        assert 0.67 < np.mean(np.abs(x - mean) < std) < 0.695  # 68.27% within one std
    assert abs(x.mean() - mean) < 5 * std / math.sqrt(n)
    assert x.std() == pytest.approx(std, rel=0.02)


def test_init_is_deterministic_per_key(user):
    a = user.i_glorot_uniform(3, np.array([40, 30]), 1.0)
    b = user.i_glorot_uniform(3, np.array([40, 30]), 1.0)
    c = user.i_glorot_uniform(4, np.array([40, 30]), 1.0)
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - c).max() > 0.01


def test_init_same_numbers_in_both_modes(user_dir):
    a = _load("user", "interp", user_dir).i_he_normal(11, np.array([30, 20]), 0.0)
    b = _load("user", "compiled", user_dir).i_he_normal(11, np.array([30, 20]), 0.0)
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_init_defaults_and_constants(user):
    gu, hn, ni, z, o, k, fans4, fans2, fans1 = user.i_defaults(0)
    assert gu.shape == (3, 4) and np.abs(gu).max() <= math.sqrt(6.0 / 7)
    assert hn.shape == (2, 3, 3, 3) and ni.shape == (5,)
    np.testing.assert_array_equal(z, np.zeros((2, 3), np.float32))
    np.testing.assert_array_equal(o, np.ones(4, np.float32))
    np.testing.assert_array_equal(k, np.full((2, 2, 2), 2.5, np.float32))
    assert tuple(map(int, fans4)) == (8 * 9, 16 * 9)  # OIHW: fan_in = I*KH*KW, fan_out = O*KH*KW
    assert tuple(map(int, fans2)) == (20, 30)  # dense [in, out]
    assert tuple(map(int, fans1)) == (7, 7)


@needs_torch
def test_init_fans_match_torch():
    """dg's dense weight [in, out] is torch.nn.Linear's [out, in] transposed; conv weights are
    OIHW in both: the fans (and so every bound and std) agree with torch.nn.init's."""
    fans = torch.nn.init._calculate_fan_in_and_fan_out
    assert fans(torch.empty(30, 20)) == (20, 30)  # torch's Linear(20, 30) weight; dg's is [20, 30]
    assert fans(torch.empty(16, 8, 3, 3)) == (8 * 9, 16 * 9)
    t = torch.empty(256, 300)
    torch.nn.init.kaiming_uniform_(t)  # defaults: a=0, mode="fan_in", "leaky_relu": bound sqrt(6 / fan_in)
    # (torch draws in float32: its largest value may be the bound rounded to float32, just above it)
    assert t.abs().max().item() <= np.float32(math.sqrt(6.0 / 300)) and t.abs().max().item() > 0.99 * math.sqrt(6.0 / 300)
    torch.nn.init.kaiming_normal_(t)
    assert t.std().item() == pytest.approx(math.sqrt(2.0 / 300), rel=0.02)
    torch.nn.init.xavier_uniform_(t, gain=1.5)
    assert t.abs().max().item() <= np.float32(1.5 * math.sqrt(6.0 / 556))
    # torch.nn.Linear(300, 256)'s default weight init: U(+-1/sqrt(fan_in)), our linear_default
    assert torch.nn.Linear(300, 256).weight.abs().max().item() <= 1 / math.sqrt(300)


# ------------------------------------------------------------------ where `import nn` is found
def test_import_nn_resolves_to_the_standard_library(user):
    rng = np.random.default_rng(3)
    x, w, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 2)), rng.standard_normal(2)
    np.testing.assert_allclose(user.local_dense(x, w, b), x @ w + b, rtol=1e-12)


def test_the_standard_library_is_found_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DG_PATH", raising=False)
    m = dg.loads("from nn import layer_norm\nimport init\n\n"
                 "def f(x, g, b):\n    return layer_norm(x, g, b) + sum(init.zeros_init([2]))\n", mode="interp")
    x = np.random.default_rng(0).standard_normal((2, 5))
    np.testing.assert_allclose(m.f(x, np.ones(5), np.zeros(5)), np_layer_norm(x, 1.0, 0.0), rtol=1e-12)


def test_a_local_nn_takes_precedence(tmp_path, monkeypatch):
    monkeypatch.delenv("DG_PATH", raising=False)
    (tmp_path / "nn.dg").write_text("def dense(x, w, b):\n    return x @ w + b + 100.0\n")
    (tmp_path / "main.dg").write_text("from nn import dense\n\ndef f(x, w, b):\n    return dense(x, w, b)\n")
    x, w, b = np.ones((1, 2)), np.ones((2, 3)), np.zeros(3)
    for mode in MODES:
        m = dg.load(str(tmp_path / "main.dg"), mode=mode)
        np.testing.assert_allclose(m.f(x, w, b), np.full((1, 3), 102.0))


def test_dg_path_takes_precedence_over_the_standard_library(tmp_path, monkeypatch):
    lib, prog = tmp_path / "lib", tmp_path / "prog"
    lib.mkdir()
    prog.mkdir()
    (lib / "nn.dg").write_text("def dense(x, w, b):\n    return x @ w + b - 1.0\n")
    (prog / "main.dg").write_text("import nn\n\ndef f(x, w, b):\n    return nn.dense(x, w, b)\n")
    monkeypatch.setenv("DG_PATH", str(lib))
    m = dg.load(str(prog / "main.dg"), mode="interp")
    np.testing.assert_allclose(m.f(np.ones((1, 2)), np.ones((2, 3)), np.zeros(3)), np.full((1, 3), 1.0))


def test_a_missing_module_names_the_standard_library_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("DG_PATH", raising=False)
    (tmp_path / "main.dg").write_text("import no_such_stdlib_module\n\ndef f(x):\n    return x\n")
    with pytest.raises(dg.DgError) as ei:
        dg.load(str(tmp_path / "main.dg"), mode="interp").f(np.zeros(2))
    msg = str(ei.value)
    assert "no_such_stdlib_module" in msg and str(tmp_path) in msg
    assert str(STDLIB.resolve()) in msg or os.path.join("dg", "stdlib") in msg


def test_the_standard_library_ships_with_the_package():
    assert (STDLIB / "nn.dg").is_file() and (STDLIB / "init.dg").is_file() and (STDLIB / "__init__.py").is_file()
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    if pyproject.is_file():  # in the repository (an installed dg has no pyproject.toml)
        text = pyproject.read_text()
        assert '"dg.stdlib"' in text and '"dg.stdlib" = "stdlib"' in text and '"dg.stdlib" = ["*.dg"]' in text
