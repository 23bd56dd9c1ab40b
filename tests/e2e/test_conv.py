"""conv2d, max_pool2d and avg_pool2d in every mode: values and gradients against PyTorch
(torch.nn.functional), one test per option, symbolic sizes, and the located errors of bad
arguments."""
import numpy as np
import pytest

import dg

from .util import assert_located_type_error, assert_same, load, load_src, randn

try:  # (the references; where torch is not installed, the modes are checked against each other)
    import torch
    F = torch.nn.functional
except ImportError:
    torch = F = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed: the references come from it")

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
@needs_torch
def test_conv2d_values(module, name):
    args, kw = _conv_case(name)
    want = F.conv2d(*(_t(a) for a in args), **kw).numpy()
    assert_same(getattr(module, f"conv_{name}")(*args), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", list(CONV))
@needs_torch
def test_conv2d_gradients(module, name):
    args, kw = _conv_case(name)
    ts = [_t(a, grad=True) for a in args]
    y = F.conv2d(*ts, **kw)
    r = randn(*y.shape, seed=5)
    (y * _t(r)).sum().backward()
    wrt = tuple(range(len(args)))
    got = dg.grad(getattr(module, f"conv_{name}_loss"), wrt=wrt)(*args, r)
    for g, t in zip(got, ts):
        assert_same(g, t.grad.numpy(), rtol=1e-4, atol=1e-4)


def _pool_case(name):
    xs, _, fn, (pos, kw) = POOL[name]
    return randn(*xs, seed=sum(map(ord, name))), getattr(F, fn, None), pos, kw


@pytest.mark.parametrize("name", list(POOL))
@needs_torch
def test_pool_values(module, name):
    x, fn, pos, kw = _pool_case(name)
    assert_same(getattr(module, f"pool_{name}")(x), fn(_t(x), *pos, **kw).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", list(POOL))
@needs_torch
def test_pool_gradients(module, name):
    x, fn, pos, kw = _pool_case(name)
    t = _t(x, grad=True)
    y = fn(t, *pos, **kw)
    r = randn(*y.shape, seed=9)
    (y * _t(r)).sum().backward()
    assert_same(dg.grad(getattr(module, f"pool_{name}_loss"))(x, r), t.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["max", "max_overlap"])
@needs_torch
def test_max_pool_ties_go_to_the_first_largest(module, name):
    """Equal elements in a window: the gradient goes to the first (row-major), as PyTorch's CPU
    kernel does; overlapping windows add up."""
    x = np.round(randn(*POOL[name][0], seed=3)).astype(np.float32) * 0  # every window a tie
    x[..., 1:, :] += 1.0  # ties among rows 1.. (row 0 is smaller)
    _, fn, pos, kw = _pool_case(name)
    t = _t(x, grad=True)
    y = fn(t, *pos, **kw)
    r = randn(*y.shape, seed=4)
    (y * _t(r)).sum().backward()
    assert_same(dg.grad(getattr(module, f"pool_{name}_loss"))(x, r), t.grad.numpy())


@needs_torch
def test_symbolic_sizes_share_one_function(module):
    w = randn(4, 3, 3, 3, seed=1)
    for shape in [(2, 3, 7, 6), (1, 3, 10, 5)]:
        x = randn(*shape, seed=2)
        assert_same(module.conv_any(x, w), F.conv2d(_t(x), _t(w), padding=1, stride=2).numpy(), rtol=1e-4, atol=1e-5)
        want = (F.max_pool2d(_t(x), 2) + F.avg_pool2d(_t(x), 2)).numpy()
        assert_same(module.pool_any(x), want, rtol=1e-5, atol=1e-6)


def test_channels_checked_at_run_time(module):
    with pytest.raises(dg.DgRuntimeError, match="channels"):
        module.conv_any_channels(randn(1, 2, 5, 5), randn(4, 3, 3, 3))


def test_too_small_at_run_time(module):
    with pytest.raises(dg.DgRuntimeError, match="smaller than the kernel"):
        module.conv_any_channels(randn(1, 3, 2, 5), randn(4, 3, 3, 3))


@needs_torch
def test_lenet_block(module):
    x, w, b = randn(3, 1, 12, 12, seed=1), randn(6, 1, 5, 5, seed=2), randn(6, seed=3)
    ts = [_t(a, grad=True) for a in (x, w, b)]
    y = F.max_pool2d(F.relu(F.conv2d(*ts, padding=2)), 2)
    r = randn(*y.shape, seed=4)
    (y * _t(r)).sum().backward()
    assert_same(module.lenet_block(x, w, b), y.detach().numpy(), rtol=1e-4, atol=1e-5)
    for g, t in zip(dg.grad(module.lenet_loss, wrt=(0, 1, 2))(x, w, b, r), ts):
        assert_same(g, t.grad.numpy(), rtol=1e-4, atol=1e-4)


@needs_torch
def test_f64_and_integer_inputs(module):
    x, w = randn(2, 2, 5, 5, dtype=np.float64), randn(3, 2, 3, 3, seed=1, dtype=np.float64)
    got = module.conv_f64(x, w)
    assert got.dtype == np.float64
    assert_same(got, F.conv2d(_t(x), _t(w), padding=1).numpy(), rtol=1e-12, atol=1e-12)
    y = module.conv_ints(np.arange(9).reshape(1, 1, 3, 3))
    assert y.dtype == np.float32
    assert_same(y, np.array([[[[8.0, 12.0], [20.0, 24.0]]]]))


@needs_torch
def test_bias_none_and_expressions(module):
    x, w, c = randn(2, 2, 4, 4), randn(3, 2, 2, 2, seed=1), randn(3, seed=2)
    y = F.conv2d(_t(x), _t(w))
    assert_same(module.conv_none_bias(x, w, c), (2 * y + F.conv2d(_t(x), _t(w), _t(c * 2))).numpy(), rtol=1e-4, atol=1e-5)


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
def test_located_errors(mode, body, match):
    src = f"def bad(n: i64):\n    return {body}\n"
    assert_located_type_error(lambda: load(src, mode).bad(2), match)


@pytest.mark.parametrize("name", list(CONV) + [f"pool {p}" for p in POOL])
def test_compiled_code_agrees_with_the_interpreter(name):
    """Values and gradients of every case, compiled against interpreted (no torch needed)."""
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


@needs_torch
def test_tiled_max_pool_gradient_ties_as_torch():
    """All-equal windows (zeros after relu): the first cell of each gets the gradient, as in PyTorch."""
    c = load_src(TILED.replace("KERNEL", "2"), "compiled", filename="tiled.dg")
    x = np.zeros((2, 3, 6, 8), np.float32)
    x[:, :, 1::2, 1::2] = -1.0
    x[1, 1, 2:4, 4:6] = 3.0
    r = randn(2, 3, 3, 4, seed=2)
    t = _t(x, grad=True)
    (F.max_pool2d(F.relu(t), 2) * _t(r)).sum().backward()
    assert_same(c.tiled_relu_grad(x, r), t.grad.numpy())
