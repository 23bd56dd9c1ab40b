"""conv2d, max_pool2d and avg_pool2d in every mode: values and gradients against references in
NumPy written here (the forward from `sliding_window_view` and `einsum`, in float64; the gradients
from the definition, one output position at a time, themselves checked against finite differences
of the forward), and against PyTorch (torch.nn.functional) as a second, independent check where
torch is installed; one test per option, symbolic sizes, and the located errors of bad arguments."""
import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

import dg

from .util import FRONT_END_MODE, assert_located_type_error, assert_same, load, load_src, made_no_code, randn

try:  # (the second reference: the NumPy ones below need nothing)
    import torch
    F = torch.nn.functional
except ImportError:
    torch = F = None

# name -> (x shape, w shape, bias?, options as dg source, options for torch)
CONV = {
    "plain": ((2, 3, 6, 5), (4, 3, 3, 3), False, "", {}),
    "stride": ((2, 2, 7, 6), (3, 2, 3, 3), False, ", stride=2", {"stride": 2}),
    "padding": ((2, 2, 5, 5), (3, 2, 3, 2), False, ", padding=(1, 2)", {"padding": (1, 2)}),
    "dilation": ((2, 2, 8, 7), (3, 2, 3, 2), False, ", dilation=(2, 3)", {"dilation": (2, 3)}),
    "groups": ((2, 4, 6, 6), (6, 2, 3, 3), False, ", groups=2", {"groups": 2}),
    "depthwise": ((2, 3, 5, 5), (3, 1, 3, 3), False, ", padding=1, groups=3", {"padding": 1, "groups": 3}),
    "bias": ((2, 3, 5, 6), (4, 3, 2, 3), True, "", {}),
    "nonsquare": ((3, 2, 9, 7), (2, 2, 4, 2), False, ", stride=(2, 1)", {"stride": (2, 1)}),
    "combined": ((2, 4, 9, 8), (6, 2, 3, 2), True, ", stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2",
                 {"stride": (2, 1), "padding": (1, 2), "dilation": (1, 2), "groups": 2}),
}

# name -> (x shape, dg call, torch function, its arguments)
POOL = {
    "max": ((2, 3, 6, 6), "max_pool2d(x, 2)", "max_pool2d", ((2,), {})),
    "max_options": ((2, 2, 7, 6), "max_pool2d(x, (3, 2), stride=(2, 1), padding=1)", "max_pool2d",
                    (((3, 2),), {"stride": (2, 1), "padding": 1})),
    "max_overlap": ((1, 2, 5, 5), "max_pool2d(x, 3, stride=1)", "max_pool2d", ((3,), {"stride": 1})),
    "avg": ((2, 3, 6, 6), "avg_pool2d(x, 2)", "avg_pool2d", ((2,), {})),
    "avg_options": ((2, 2, 7, 6), "avg_pool2d(x, (3, 2), stride=(2, 1), padding=1)", "avg_pool2d",
                    (((3, 2),), {"stride": (2, 1), "padding": 1})),
    "avg_overlap": ((1, 2, 5, 5), "avg_pool2d(x, 3, stride=1, padding=1)", "avg_pool2d", ((3,), {"stride": 1, "padding": 1})),
}


def _source() -> str:
    out = []
    for name, (_, _, bias, opts, _) in CONV.items():
        params = "x, w, b" if bias else "x, w"
        call = f"conv2d({params}{opts})"
        out.append(f"def conv_{name}({params}):\n    return {call}\n")
        out.append(f"def conv_{name}_loss({params}, r):\n    return sum({call} * r)\n")
    for name, (_, call, _, _) in POOL.items():
        out.append(f"def pool_{name}(x):\n    return {call}\n")
        out.append(f"def pool_{name}_loss(x, r):\n    return sum({call} * r)\n")
    out.append('''
def conv_any(x: f32[N, 3, H, W], w: f32[4, 3, 3, 3]) -> f32[N, 4, ?, ?]:
    return conv2d(x, w, padding=1, stride=2)

def conv_any_channels(x: f32[N, C, H, W], w: f32[4, 3, 3, 3]):
    return conv2d(x, w)

def pool_any(x: f32[N, C, H, W]):
    return max_pool2d(x, 2) + avg_pool2d(x, 2)

def lenet_block(x, w, b):
    return max_pool2d(relu(conv2d(x, w, b, padding=2)), 2)

def lenet_loss(x, w, b, r):
    return sum(lenet_block(x, w, b) * r)

def conv_f64(x: f64[2, 2, 5, 5], w: f64[3, 2, 3, 3]):
    return conv2d(x, w, padding=1)

def conv_ints(x: i64[1, 1, 3, 3]):
    return conv2d(x, ones([1, 1, 2, 2]))

def conv_none_bias(x, w, c):
    return conv2d(x, w, None, 1) + conv2d(x, w, b=None) + conv2d(x, w, c * 2.0)
''')
    return "\n".join(out)


SRC = _source()
# ---------------------------------------------------------------- the NumPy references
def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def np_conv2d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    """y[n, o, p, q] = b[o] + sum over c, i, j of xpad[n, g * C/G + c, p * sh + i * dh, q * sw + j * dw]
    * w[o, c, i, j] (g the group of o), in float64: the windows of the padded input from
    `sliding_window_view`, each window's taps every d-th element, contracted with `einsum`."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    n = x.shape[0]
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    win = sliding_window_view(xp, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(2, 3))[:, :, ::sh, ::sw, ::dh, ::dw]
    p, q = win.shape[2:4]
    win = win.reshape(n, groups, cg, p, q, kh, kw)
    y = np.einsum("ngcpqij,gocij->ngopq", win, w.reshape(groups, o // groups, cg, kh, kw)).reshape(n, o, p, q)
    return y if b is None else y + np.asarray(b, np.float64)[None, :, None, None]


def np_conv2d_grads(x, w, b, r, stride=1, padding=0, dilation=1, groups=1):
    """The gradients (x, w[, b]) of sum(np_conv2d(x, w, b, ...) * r), from the definition: each
    output position (p, q) adds r[:, :, p, q] times the weights into its window of the padded
    input's gradient, and r times the window into the weights' gradient."""
    x, w, r = (np.asarray(a, np.float64) for a in (x, w, r))
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    o, cg, kh, kw = w.shape
    og = o // groups
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    gxp, gw = np.zeros_like(xp), np.zeros_like(w)
    for p in range(r.shape[2]):
        for q in range(r.shape[3]):
            rows = slice(p * sh, p * sh + (kh - 1) * dh + 1, dh)
            cols = slice(q * sw, q * sw + (kw - 1) * dw + 1, dw)
            for g in range(groups):
                chans, outs = slice(g * cg, (g + 1) * cg), slice(g * og, (g + 1) * og)
                rg = r[:, outs, p, q]  # [N, O/G]
                gw[outs] += np.einsum("nm,ncij->mcij", rg, xp[:, chans, rows, cols])
                gxp[:, chans, rows, cols] += np.einsum("nm,mcij->ncij", rg, w[outs])
    grads = (gxp[:, :, ph:ph + x.shape[2], pw:pw + x.shape[3]], gw)
    return grads if b is None else grads + (r.sum(axis=(0, 2, 3)),)


def np_pool2d(x, kind, kernel, stride=None, padding=0):
    """max_pool2d ("max": padding is -inf) or avg_pool2d ("avg": padding is 0, counted in the
    mean, PyTorch's default) in float64, from the windows of `sliding_window_view`."""
    (kh, kw), (ph, pw) = _pair(kernel), _pair(padding)
    sh, sw = _pair(kernel if stride is None else stride)
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(np.asarray(x, np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=fill)
    win = sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]
    return win.max(axis=(4, 5)) if kind == "max" else win.sum(axis=(4, 5)) / (kh * kw)


def np_pool2d_grad(x, kind, r, kernel, stride=None, padding=0):
    """The gradient of sum(np_pool2d(x, ...) * r), one window at a time: a max window gives its
    r to its first largest element (row-major, as PyTorch's CPU kernel), an average window
    r / (kh kw) to each of its elements (those in the padding are dropped)."""
    x, r = np.asarray(x, np.float64), np.asarray(r, np.float64)
    (kh, kw), (ph, pw) = _pair(kernel), _pair(padding)
    sh, sw = _pair(kernel if stride is None else stride)
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=fill)
    gxp = np.zeros_like(xp)
    n, c = x.shape[:2]
    for p in range(r.shape[2]):
        for q in range(r.shape[3]):
            rows, cols = slice(p * sh, p * sh + kh), slice(q * sw, q * sw + kw)
            if kind == "max":
                first = xp[:, :, rows, cols].reshape(n, c, kh * kw).argmax(axis=2)
                share = (np.arange(kh * kw) == first[..., None]).reshape(n, c, kh, kw) * r[:, :, p, q, None, None]
            else:
                share = np.broadcast_to(r[:, :, p, q, None, None] / (kh * kw), (n, c, kh, kw))
            gxp[:, :, rows, cols] += share
    return gxp[:, :, ph:ph + x.shape[2], pw:pw + x.shape[3]]


def _pool_options(name):
    """POOL[name]'s call as (kind, kernel, stride, padding) for np_pool2d."""
    _, _, fn, ((kernel,), kw) = POOL[name]
    return fn[:3], kernel, kw.get("stride"), kw.get("padding", 0)


def _finite_differences(loss, a, h=1e-3):
    """d loss / d a by central differences in float64 (exact but for rounding where loss is
    linear in a, as these are away from a max pool's ties)."""
    a = np.array(a, np.float64)
    g = np.zeros_like(a)
    for k in range(a.size):
        e = np.zeros_like(a)
        e.flat[k] = h
        g.flat[k] = (loss(a + e) - loss(a - e)) / (2 * h)
    return g


@pytest.mark.parametrize("name", list(CONV) + [f"pool {p}" for p in POOL])
def test_the_numpy_gradients_are_the_forwards_finite_differences(name):
    """The hand-written NumPy gradients are the derivatives of the NumPy forward (no dg: once)."""
    if name.startswith("pool "):
        p = name[5:]
        x = randn(*POOL[p][0], seed=sum(map(ord, p))).astype(np.float64)
        kind, kernel, stride, padding = _pool_options(p)
        r = randn(*np_pool2d(x, kind, kernel, stride, padding).shape, seed=9).astype(np.float64)
        fd = _finite_differences(lambda a: np.sum(np_pool2d(a, kind, kernel, stride, padding) * r), x)
        np.testing.assert_allclose(np_pool2d_grad(x, kind, r, kernel, stride, padding), fd, rtol=1e-9, atol=1e-9)
        return
    args, kw = _conv_case(name)
    args = [a.astype(np.float64) for a in args]
    r = randn(*np_conv2d(*args, **kw).shape, seed=5).astype(np.float64)
    for k, g in enumerate(np_conv2d_grads(*(args + [None] * (3 - len(args))), r, **kw)):
        def loss(a, k=k):
            return np.sum(np_conv2d(*(args[:k] + [a] + args[k + 1:]), **kw) * r)
        np.testing.assert_allclose(g, _finite_differences(loss, args[k]), rtol=1e-9, atol=1e-9)


@pytest.fixture(scope="module")
def module(mode):
    return load_src(SRC, mode, filename="conv_e2e.dg")


def _t(a, grad=False):
    return torch.tensor(np.asarray(a), requires_grad=grad)


def _conv_case(name):
    xs, ws, bias, _, kw = CONV[name]
    seed = sum(map(ord, name))
    args = [randn(*xs, seed=seed), randn(*ws, seed=seed + 1)] + ([randn(ws[0], seed=seed + 2)] if bias else [])
    return args, kw


@pytest.mark.parametrize("name", list(CONV))
def test_conv2d_values(module, name):
    args, kw = _conv_case(name)
    got = getattr(module, f"conv_{name}")(*args)
    assert got.dtype == np.float32
    assert_same(got, np_conv2d(*args, **kw), rtol=1e-4, atol=1e-5)
    if torch is not None:
        assert_same(got, F.conv2d(*(_t(a) for a in args), **kw).numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", list(CONV))
def test_conv2d_gradients(module, name):
    args, kw = _conv_case(name)
    r = randn(*np_conv2d(*args, **kw).shape, seed=5)
    wrt = tuple(range(len(args)))
    got = dg.grad(getattr(module, f"conv_{name}_loss"), wrt=wrt)(*args, r)
    want = np_conv2d_grads(*(args + [None] * (3 - len(args))), r, **kw)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == np.float32
        assert_same(g, w, rtol=1e-4, atol=1e-4)
    if torch is not None:
        ts = [_t(a, grad=True) for a in args]
        (F.conv2d(*ts, **kw) * _t(r)).sum().backward()
        for g, t in zip(got, ts):
            assert_same(g, t.grad.numpy(), rtol=1e-4, atol=1e-4)


def _pool_case(name):
    xs, _, fn, (pos, kw) = POOL[name]
    return randn(*xs, seed=sum(map(ord, name))), getattr(F, fn, None), pos, kw


@pytest.mark.parametrize("name", list(POOL))
def test_pool_values(module, name):
    x, fn, pos, kw = _pool_case(name)
    got = getattr(module, f"pool_{name}")(x)
    assert got.dtype == np.float32
    assert_same(got, np_pool2d(x, *_pool_options(name)), rtol=1e-5, atol=1e-6)
    if torch is not None:
        assert_same(got, fn(_t(x), *pos, **kw).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", list(POOL))
def test_pool_gradients(module, name):
    x, fn, pos, kw = _pool_case(name)
    r = randn(*np_pool2d(x, *_pool_options(name)).shape, seed=9)
    got = dg.grad(getattr(module, f"pool_{name}_loss"))(x, r)
    assert got.dtype == np.float32
    kind, kernel, stride, padding = _pool_options(name)
    assert_same(got, np_pool2d_grad(x, kind, r, kernel, stride, padding), rtol=1e-5, atol=1e-6)
    if torch is not None:
        t = _t(x, grad=True)
        (fn(t, *pos, **kw) * _t(r)).sum().backward()
        assert_same(got, t.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["max", "max_overlap"])
def test_max_pool_ties_go_to_the_first_largest(module, name):
    """Equal elements in a window: the gradient goes to the first (row-major), as PyTorch's CPU
    kernel does; overlapping windows add up."""
    x = np.round(randn(*POOL[name][0], seed=3)).astype(np.float32) * 0  # every window a tie
    x[..., 1:, :] += 1.0  # ties among rows 1.. (row 0 is smaller)
    _, fn, pos, kw = _pool_case(name)
    kind, kernel, stride, padding = _pool_options(name)
    r = randn(*np_pool2d(x, kind, kernel, stride, padding).shape, seed=4)
    got = dg.grad(getattr(module, f"pool_{name}_loss"))(x, r)
    assert_same(got, np_pool2d_grad(x, kind, r, kernel, stride, padding))
    if torch is not None:
        t = _t(x, grad=True)
        (fn(t, *pos, **kw) * _t(r)).sum().backward()
        assert_same(got, t.grad.numpy())


def test_symbolic_sizes_share_one_function(module):
    w = randn(4, 3, 3, 3, seed=1)
    for shape in [(2, 3, 7, 6), (1, 3, 10, 5)]:
        x = randn(*shape, seed=2)
        conv, pools = module.conv_any(x, w), module.pool_any(x)
        assert_same(conv, np_conv2d(x, w, padding=1, stride=2), rtol=1e-4, atol=1e-5)
        assert_same(pools, np_pool2d(x, "max", 2) + np_pool2d(x, "avg", 2), rtol=1e-5, atol=1e-6)
        if torch is not None:
            assert_same(conv, F.conv2d(_t(x), _t(w), padding=1, stride=2).numpy(), rtol=1e-4, atol=1e-5)
            assert_same(pools, (F.max_pool2d(_t(x), 2) + F.avg_pool2d(_t(x), 2)).numpy(), rtol=1e-5, atol=1e-6)


def test_channels_checked_at_run_time(module):
    with pytest.raises(dg.DgRuntimeError, match="channels"):
        module.conv_any_channels(randn(1, 2, 5, 5), randn(4, 3, 3, 3))


def test_too_small_at_run_time(module):
    with pytest.raises(dg.DgRuntimeError, match="smaller than the kernel"):
        module.conv_any_channels(randn(1, 3, 2, 5), randn(4, 3, 3, 3))


def test_lenet_block(module):
    x, w, b = randn(3, 1, 12, 12, seed=1), randn(6, 1, 5, 5, seed=2), randn(6, seed=3)
    z = np_conv2d(x, w, b, padding=2)
    a = np.maximum(z, 0.0)
    y = np_pool2d(a, "max", 2)
    r = randn(*y.shape, seed=4)
    ga = np_pool2d_grad(a, "max", r, 2)
    want = np_conv2d_grads(x, w, b, ga * (z > 0), padding=2)
    got_y, got = module.lenet_block(x, w, b), dg.grad(module.lenet_loss, wrt=(0, 1, 2))(x, w, b, r)
    assert_same(got_y, y, rtol=1e-4, atol=1e-5)
    for g, h in zip(got, want):
        assert_same(g, h, rtol=1e-4, atol=1e-4)
    if torch is not None:
        ts = [_t(v, grad=True) for v in (x, w, b)]
        yt = F.max_pool2d(F.relu(F.conv2d(*ts, padding=2)), 2)
        (yt * _t(r)).sum().backward()
        assert_same(got_y, yt.detach().numpy(), rtol=1e-4, atol=1e-5)
        for g, t in zip(got, ts):
            assert_same(g, t.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_f64_and_integer_inputs(module):
    x, w = randn(2, 2, 5, 5, dtype=np.float64), randn(3, 2, 3, 3, seed=1, dtype=np.float64)
    got = module.conv_f64(x, w)
    assert got.dtype == np.float64
    assert_same(got, np_conv2d(x, w, padding=1), rtol=1e-12, atol=1e-12)
    if torch is not None:
        assert_same(got, F.conv2d(_t(x), _t(w), padding=1).numpy(), rtol=1e-12, atol=1e-12)
    y = module.conv_ints(np.arange(9).reshape(1, 1, 3, 3))
    assert y.dtype == np.float32
    assert_same(y, np.array([[[[8.0, 12.0], [20.0, 24.0]]]]))


def test_bias_none_and_expressions(module):
    x, w, c = randn(2, 2, 4, 4), randn(3, 2, 2, 2, seed=1), randn(3, seed=2)
    got = module.conv_none_bias(x, w, c)
    assert_same(got, 2 * np_conv2d(x, w) + np_conv2d(x, w, c * 2.0), rtol=1e-4, atol=1e-5)
    if torch is not None:
        y = F.conv2d(_t(x), _t(w))
        assert_same(got, (2 * y + F.conv2d(_t(x), _t(w), _t(c * 2))).numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("body, match", [
    ("conv2d(zeros([1, 3, 5, 5]), zeros([4, 2, 3, 3]))", "3 channels but the weight expects 2"),
    ("conv2d(zeros([1, 4, 5, 5]), zeros([4, 1, 3, 3]), groups=2)", "4 channels but the weight expects 2"),
    ("conv2d(zeros([1, 4, 5, 5]), zeros([3, 2, 3, 3]), groups=2)", "output channels are not a multiple"),
    ("conv2d(zeros([1, 1, 5, 5]), zeros([2, 1, 3, 3]), zeros([3]))", "bias must be a vector of the 2"),
    ("conv2d(zeros([1, 1, 5, 5]), zeros([2, 1, 3, 3]), stride=0)", "stride must be positive"),
    ("conv2d(zeros([1, 1, 5, 5]), zeros([2, 1, 3, 3]), padding=(1, 2, 3))", "padding must be an integer or a pair"),
    ("conv2d(zeros([1, 1, 2, 5]), zeros([2, 1, 3, 3]))", "smaller than the kernel"),
    ("conv2d(zeros([5, 5]), zeros([2, 1, 3, 3]))", "input must be a float tensor of rank 4"),
    ("max_pool2d(zeros([1, 1, 4, 4]), 2, padding=2)", "more than half the kernel"),
    ("avg_pool2d(zeros([1, 1, 4, 4]), 0)", "kernel size must be positive"),
    ("max_pool2d(zeros([1, 1, 4, 4]), n)", "must be a constant integer"),
])
def test_located_errors(body, match):
    """Errors of the front end, before any code is made: one run stands for every mode."""
    src = f"def bad(n: i64):\n    return {body}\n"
    with made_no_code():
        assert_located_type_error(lambda: load(src, FRONT_END_MODE).bad(2), match)


@pytest.mark.parametrize("name", list(CONV) + [f"pool {p}" for p in POOL])
def test_compiled_code_agrees_with_the_interpreter(name):
    """Values and gradients of every case, compiled against interpreted."""
    m, c = (load_src(SRC, mode, filename="conv_e2e.dg") for mode in ("interp", "compiled"))
    if name.startswith("pool "):
        p = name[5:]
        x = randn(*POOL[p][0], seed=sum(map(ord, p)))
        args, fn = [x], f"pool_{p}"
    else:
        args, fn = _conv_case(name)[0], f"conv_{name}"
    want = getattr(m, fn)(*args)
    assert_same(getattr(c, fn)(*args), want, rtol=1e-5, atol=1e-6)
    r = randn(*np.shape(want), seed=3)
    wrt = tuple(range(len(args)))
    for g, h in zip(dg.grad(getattr(c, fn + "_loss"), wrt=wrt)(*args, r), dg.grad(getattr(m, fn + "_loss"), wrt=wrt)(*args, r)):
        assert_same(g, h, rtol=1e-4, atol=1e-5)


# max_pool2d's gradient where the windows tile the input (stride = kernel, no padding) is one
# element-wise generic on the CPU, not the gather over windows: it must give the interpreter's
# bits, ties (all-equal windows, the zeros after relu, -0 against +0) and NaNs included.
TILED = '''
def tiled_loss(x: f32[B, C, H, W], r) -> f32:
    return sum(max_pool2d(x, KERNEL) * r)

def tiled_grad(x: f32[B, C, H, W], r):
    return grad(tiled_loss)(x, r)

def tiled_relu_loss(x: f32[B, C, H, W], r) -> f32:
    return sum(max_pool2d(relu(x), KERNEL) * r)

def tiled_relu_grad(x: f32[B, C, H, W], r):
    return grad(tiled_relu_loss)(x, r)

def tiled_f64_loss(x: f64[2, 3, 7, 5], r) -> f64:
    return sum(max_pool2d(x, KERNEL) * r)

def tiled_f64_grad(x: f64[2, 3, 7, 5], r):
    return grad(tiled_f64_loss)(x, r)
'''


def _tied(shape, seed, dtype=np.float32):
    """Values with many ties in each window: small integers, -0s, whole windows of one value, NaNs."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-2, 3, shape).astype(dtype)
    x[rng.random(shape) < 0.1] = -0.0
    x[0, 0] = 0.0  # a channel of zeros: every window a tie
    if shape[0] > 1:
        x[1, 0] = 1.5
    nan = rng.random(shape) < 0.03
    x[nan] = np.nan
    return x


def _bits_equal(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert got.tobytes() == want.tobytes(), np.argwhere(got.view(np.uint8) != want.view(np.uint8))[:5]


@pytest.mark.parametrize("kernel", ["2", "(3, 2)", "(1, 3)", "1"])
def test_tiled_max_pool_gradient_is_the_interpreters_bit_for_bit(kernel):
    src = TILED.replace("KERNEL", kernel)
    interp, compiled = (load_src(src, mode, filename="tiled.dg") for mode in ("interp", "compiled"))
    k = eval(kernel)
    k = (k, k) if isinstance(k, int) else k
    # even and odd sizes (rows and columns past the last window get no gradient), symbolic
    # batch and channels (one compiled function for several)
    for i, shape in enumerate([(2, 3, 6, 6), (3, 2, 7, 9), (1, 4, 5, 4), (2, 1, 13, 11)]):
        if shape[2] < k[0] or shape[3] < k[1]:
            continue
        x = _tied(shape, i)
        out = (shape[0], shape[1], shape[2] // k[0], shape[3] // k[1])
        r = np.random.default_rng(10 + i).standard_normal(out).astype(np.float32)
        r.flat[::7] = -0.0  # a -0 gradient becomes +0 in the interpreter's sum
        for fn in ("tiled_grad", "tiled_relu_grad"):
            _bits_equal(getattr(compiled, fn)(x, r), getattr(interp, fn)(x, r))
    x, r = _tied((2, 3, 7, 5), 7, np.float64), np.random.default_rng(3).standard_normal((2, 3, 7 // k[0], 5 // k[1]))
    _bits_equal(compiled.tiled_f64_grad(x, r), interp.tiled_f64_grad(x, r))


def test_tiled_max_pool_gradient_ties_as_torch():
    """All-equal windows (zeros after relu): the first cell of each gets the gradient, as in PyTorch
    (and relu's gradient is 0 at 0)."""
    c = load_src(TILED.replace("KERNEL", "2"), "compiled", filename="tiled.dg")
    x = np.zeros((2, 3, 6, 8), np.float32)
    x[:, :, 1::2, 1::2] = -1.0
    x[1, 1, 2:4, 4:6] = 3.0
    r = randn(2, 3, 3, 4, seed=2)
    got = c.tiled_relu_grad(x, r)
    assert_same(got, np_pool2d_grad(np.maximum(x, 0), "max", r, 2) * (x > 0))
    if torch is not None:
        t = _t(x, grad=True)
        (F.max_pool2d(F.relu(t), 2) * _t(r)).sum().backward()
        assert_same(got, t.grad.numpy())
