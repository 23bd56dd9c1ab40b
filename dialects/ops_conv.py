"""Convolution and pooling over NCHW images: conv2d, max_pool2d, avg_pool2d, and the ops their
gradients are made of (conv2d_input_grad, conv2d_weight_grad, max_pool2d_grad, avg_pool2d_grad).

Expects: float tensors of rank 4 (images [N, C, H, W]; weights [O, C / groups, KH, KW]);
`stride`, `padding`, `dilation` (conv2d) and `kernel` (pools) are static pairs (height, width),
`groups` a static int. The kernel's spatial sizes must be static; N, C, H, W and O may be
symbolic. An output size is floor((H + 2p - d (k - 1) - 1) / s) + 1, static where H is.

Guarantees: both modes compute the same thing, as PyTorch's `conv2d`, `max_pool2d` (padding
with -inf; the gradient goes to the first largest element of a window, row-major, as PyTorch's
CPU kernel) and `avg_pool2d` (padded cells count in the divisor k_h * k_w) with `ceil_mode` off.
Sizes the types leave open are checked at run time (a located DgRuntimeError in both modes).

The NumPy implementations are vectorized: windows through `sliding_window_view`, contractions
through `einsum`; gradients scatter with one strided slice per kernel position. On the CPU, the
three convolution ops with groups = 1 are an im2col copy and one `linalg.matmul` each (a BLAS
gemm after the blas-matmuls pass; the section "conv2d as gemms" below). Otherwise (groups > 1,
and on CUDA) the lowerings pad into a filled tensor (`tensor.insert_slice`), view the channels
as (groups, channels per group) (`tensor.expand_shape`) and contract with one `linalg.generic`
whose affine maps carry stride and dilation; the input gradient is a stride-1 convolution of
the output gradient spread out by the stride (a strided `insert_slice` into zeros) with the
kernel flipped. The pool gradients gather over each pixel's windows inside a generic, but for
max_pool2d_grad with windows that tile the input (stride = kernel, no padding): one element-wise
generic over the windows' cells, writing dx in place (`_lower_max_pool2d_grad_tiled`).
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from dg.core.types import ShapeError, Sym, TensorType, is_float

from .builder import cast, fail_if, if_else, stand_in_if
from .jvp_rules import bilinear, linear
from .ops_elementwise import map_generic
from .registry import OpDef, register

CONV_ATTRS = {"stride": "ints", "padding": "ints", "dilation": "ints", "groups": "int"}
POOL_ATTRS = {"kernel": "ints", "stride": "ints", "padding": "ints"}
_PAR, _RED = "parallel", "reduction"


# ---------------------------------------------------------------- shape rules
def _image(what: str, t: TensorType, role: str) -> None:
    if t.rank != 4 or not is_float(t.dtype):
        raise ShapeError(f"{what}: the {role} must be a float tensor of rank 4, got {t}")


def _positive(what: str, name: str, pair, least: int = 1) -> None:
    if len(pair) != 2 or any(v < least for v in pair):
        raise ShapeError(f"{what}: {name} must be {'positive' if least else 'non-negative'}, got {tuple(pair)}")


def out_dim(what: str, size, k: int, s: int, p: int, d: int = 1):
    """The output size along one axis: an int where `size` is one, else a fresh symbolic size."""
    if not isinstance(size, int):
        return Sym()
    n = (size + 2 * p - d * (k - 1) - 1) // s + 1
    if n < 1:
        raise ShapeError(f"{what}: the input size {size} with padding {p} is smaller than the kernel "
                         f"({d * (k - 1) + 1} with dilation)")
    return n


def _conv_rule(types, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    x, w = types[0], types[1]
    _image("conv2d", x, "input")
    _image("conv2d", w, "weight")
    if x.dtype != w.dtype:
        raise ShapeError(f"conv2d: the input and the weight have different element types ({x} and {w})")
    _positive("conv2d", "stride", stride)
    _positive("conv2d", "padding", padding, 0)
    _positive("conv2d", "dilation", dilation)
    if groups < 1:
        raise ShapeError(f"conv2d: groups must be positive, got {groups}")
    o, cg, kh, kw = w.shape
    if not (isinstance(kh, int) and isinstance(kw, int)):
        raise ShapeError(f"conv2d: the kernel's height and width must be static, got {w}")
    if kh < 1 or kw < 1:
        raise ShapeError(f"conv2d: the kernel is empty: {w}")
    if isinstance(o, int) and o % groups:
        raise ShapeError(f"conv2d: the weight's {o} output channels are not a multiple of groups={groups}")
    c = x.shape[1]
    if isinstance(c, int) and isinstance(cg, int) and c != cg * groups:
        raise ShapeError(f"conv2d: the input has {c} channels but the weight expects {cg * groups} "
                         f"({cg} per group, groups={groups})")
    oh = out_dim("conv2d", x.shape[2], kh, stride[0], padding[0], dilation[0])
    ow = out_dim("conv2d", x.shape[3], kw, stride[1], padding[1], dilation[1])
    return TensorType(x.dtype, (x.shape[0], o, oh, ow))


def _pool_rule(name):
    def rule(types, kernel=(1, 1), stride=(1, 1), padding=(0, 0)):
        x = types[0]
        _image(name, x, "input")
        _positive(name, "the kernel size", kernel)
        _positive(name, "stride", stride)
        _positive(name, "padding", padding, 0)
        if any(2 * p > k for p, k in zip(padding, kernel)):
            raise ShapeError(f"{name}: padding {tuple(padding)} is more than half the kernel {tuple(kernel)}")
        oh = out_dim(name, x.shape[2], kernel[0], stride[0], padding[0])
        ow = out_dim(name, x.shape[3], kernel[1], stride[1], padding[1])
        return TensorType(x.dtype, x.shape[:2] + (oh, ow))

    return rule


def _like_rule(k: int, of: str):
    """The rule of a gradient op: the type of operand k, the others of its element type."""
    def rule(types, **attrs):
        if any(t.dtype != types[k].dtype or t.rank != 4 for t in types):
            raise ShapeError(f"{of}: operands must be rank-4 tensors of one element type, got {types}")
        return types[k]

    return rule


# ---------------------------------------------------------------- NumPy
def _out_sizes(x_shape, k, stride, padding, dilation=(1, 1)):
    sizes = [(h + 2 * p - d * (kk - 1) - 1) // s + 1
             for h, kk, s, p, d in zip(x_shape[2:], k, stride, padding, dilation)]
    if min(sizes) < 1:
        raise ValueError(f"the input {tuple(x_shape[2:])} with padding {tuple(padding)} is smaller than the kernel")
    return sizes


def _pad(x, padding, value=0.0):
    (ph, pw) = padding
    if ph == 0 and pw == 0:
        return x
    return np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=value)


def _windows(xp, k, stride, dilation, out):
    """The windows of a padded image: a view [N, C, OH, OW, KH, KW]."""
    span = [d * (kk - 1) + 1 for kk, d in zip(k, dilation)]
    v = sliding_window_view(xp, span, axis=(2, 3))
    v = v[:, :, ::stride[0], ::stride[1], ::dilation[0], ::dilation[1]]
    return v[:, :, :out[0], :out[1]]


def _check_channels(c, o, cg, groups):
    if c != cg * groups:
        raise ValueError(f"conv2d: the input has {c} channels, the weight expects {cg * groups}")
    if o % groups:
        raise ValueError(f"conv2d: the weight's {o} output channels are not a multiple of groups ({groups})")


def _grouped(x, w, stride, padding, dilation, groups):
    """The input's windows [N, G, C/G, OH, OW, KH, KW] and the output size."""
    n, c = x.shape[:2]
    o, cg, kh, kw = w.shape
    _check_channels(c, o, cg, groups)
    out = _out_sizes(x.shape, (kh, kw), stride, padding, dilation)
    win = _windows(_pad(x, padding), (kh, kw), stride, dilation, out)
    return win.reshape(n, groups, cg, out[0], out[1], kh, kw), out


def _conv2d(x, w, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    win, out = _grouped(x, w, stride, padding, dilation, groups)
    o, cg, kh, kw = w.shape
    y = np.einsum("ngcyxij,gocij->ngoyx", win, w.reshape(groups, o // groups, cg, kh, kw), optimize=True)
    return np.ascontiguousarray(y.reshape(x.shape[0], o, out[0], out[1]), dtype=x.dtype)


def _conv2d_weight_grad(x, d, w, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    win, out = _grouped(x, w, stride, padding, dilation, groups)
    o, cg, kh, kw = w.shape
    d5 = d.reshape(d.shape[0], groups, o // groups, out[0], out[1])
    g = np.einsum("ngcyxij,ngoyx->gocij", win, d5, optimize=True)
    return np.ascontiguousarray(g.reshape(w.shape), dtype=x.dtype)


def _scatter(x_shape, dtype, padding, stride, dilation, k, part):
    """sum over kernel positions (i, j) of part(i, j) ([N, C, OH, OW]) added into the padded
    image at rows i*d + oh*s and columns j*d + ow*s, cropped to x_shape."""
    n, c, h, w = x_shape
    (ph, pw) = padding
    out = np.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=dtype)
    for i in range(k[0]):
        for j in range(k[1]):
            p = part(i, j)
            r0, c0 = i * dilation[0], j * dilation[1]
            out[:, :, r0:r0 + (p.shape[2] - 1) * stride[0] + 1:stride[0],
                c0:c0 + (p.shape[3] - 1) * stride[1] + 1:stride[1]] += p
    return out[:, :, ph:ph + h, pw:pw + w]


def _conv2d_input_grad(d, w, x, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    n, c = x.shape[:2]
    o, cg, kh, kw = w.shape
    _check_channels(c, o, cg, groups)
    d5 = d.reshape(n, groups, o // groups, d.shape[2], d.shape[3])
    w5 = w.reshape(groups, o // groups, cg, kh, kw)

    def part(i, j):
        return np.einsum("ngoyx,goc->ngcyx", d5, w5[..., i, j], optimize=True).reshape(n, c, d.shape[2], d.shape[3])

    return np.ascontiguousarray(_scatter(x.shape, x.dtype, padding, stride, dilation, (kh, kw), part))


def _pool_windows(x, kernel, stride, padding, fill):
    out = _out_sizes(x.shape, kernel, stride, padding)
    return _windows(_pad(x, padding, fill), kernel, stride, (1, 1), out)


def _max_pool2d(x, kernel=(1, 1), stride=(1, 1), padding=(0, 0)):
    return np.ascontiguousarray(np.max(_pool_windows(x, kernel, stride, padding, -np.inf), axis=(4, 5)))


def _avg_pool2d(x, kernel=(1, 1), stride=(1, 1), padding=(0, 0)):
    s = np.sum(_pool_windows(x, kernel, stride, padding, 0.0), axis=(4, 5))
    return np.ascontiguousarray(s / np.asarray(kernel[0] * kernel[1], dtype=x.dtype), dtype=x.dtype)


def _max_pool2d_grad(x, d, kernel=(1, 1), stride=(1, 1), padding=(0, 0)):
    win = _pool_windows(x, kernel, stride, padding, -np.inf)
    arg = np.argmax(win.reshape(win.shape[:4] + (-1,)), axis=4)  # the first largest (or NaN)
    return np.ascontiguousarray(_scatter(x.shape, x.dtype, padding, stride, (1, 1), kernel,
                                         lambda i, j: np.where(arg == i * kernel[1] + j, d, 0).astype(x.dtype)))


def _avg_pool2d_grad(d, x, kernel=(1, 1), stride=(1, 1), padding=(0, 0)):
    share = d / np.asarray(kernel[0] * kernel[1], dtype=d.dtype)
    return np.ascontiguousarray(_scatter(x.shape, x.dtype, padding, stride, (1, 1), kernel, lambda i, j: share))


# ---------------------------------------------------------------- lowering pieces
def _ix(b, n: int) -> str:
    return b.const(n, "index")


def _iop(b, name: str, a: str, c: str) -> str:
    return b.binary(f"arith.{name}", a, c, "index")


def _dims(b, v, t) -> list:
    return [b.dim(v, t, i) for i in range(t.rank)]


def _sizes_text(t: TensorType, sizes: list) -> str:
    return ", ".join(str(d) if isinstance(d, int) else s for d, s in zip(t.shape, sizes))


def _grown(d, by: int):
    return d + by if isinstance(d, int) else Sym()


def _padded(b, x, xt, padding, value):
    """(x padded on H and W with `value`, its type, its sizes)."""
    sizes = _dims(b, x, xt)
    (ph, pw) = padding
    if ph == 0 and pw == 0:
        return x, xt, sizes
    pt = TensorType(xt.dtype, xt.shape[:2] + (_grown(xt.shape[2], 2 * ph), _grown(xt.shape[3], 2 * pw)))
    psizes = sizes[:2] + [_iop(b, "addi", sizes[2], _ix(b, 2 * ph)), _iop(b, "addi", sizes[3], _ix(b, 2 * pw))]
    init = b.fill(pt, psizes, b.const(value, xt.element))
    r = b.assign(f"tensor.insert_slice {x} into {init}[0, 0, {ph}, {pw}] [{_sizes_text(xt, sizes)}] [1, 1, 1, 1] "
                 f": {xt.mlir()} into {pt.mlir()}", "pad")
    return r, pt, psizes


def _split(b, v, vt, sizes, axis: int, groups: int):
    """v with axis `axis` (0 or 1) viewed as (groups, size / groups): (value, type, sizes)."""
    d = vt.shape[axis]
    part = d // groups if isinstance(d, int) else Sym()
    t = TensorType(vt.dtype, vt.shape[:axis] + (groups, part) + vt.shape[axis + 1:])
    s = sizes[:axis] + [_ix(b, groups), _iop(b, "divui", sizes[axis], _ix(b, groups))] + sizes[axis + 1:]
    reassoc = "[[0, 1], [2], [3], [4]]" if axis == 0 else "[[0], [1, 2], [3], [4]]"
    r = b.assign(f"tensor.expand_shape {v} {reassoc} output_shape [{_sizes_text(t, s)}] : {vt.mlir()} into {t.mlir()}", "grp")
    return r, t, s


def _join(b, v, vt, axis: int, want: TensorType):
    """The inverse of _split: axes (axis, axis + 1) as one, as type `want` (a cast where the sizes
    the types know differ)."""
    a, c = vt.shape[axis], vt.shape[axis + 1]
    d = a * c if isinstance(a, int) and isinstance(c, int) else Sym()
    t = TensorType(vt.dtype, vt.shape[:axis] + (d,) + vt.shape[axis + 2:])
    reassoc = "[[0, 1], [2], [3], [4]]" if axis == 0 else "[[0], [1, 2], [3], [4]]"
    r = b.assign(f"tensor.collapse_shape {v} {reassoc} : {vt.mlir()} into {t.mlir()}", "cat")
    return cast(b, r, t, want)


def _out_len(b, out_d, padded: str, k: int, s: int, d: int = 1) -> str:
    """The output size along one axis as an index: a constant where the type has it, else
    computed from the padded size and checked to be at least 1 (0 after a failed check)."""
    if isinstance(out_d, int):
        return _ix(b, out_d)
    t = _iop(b, "subi", padded, _ix(b, d * (k - 1) + 1))
    n = _iop(b, "addi", _iop(b, "floordivsi", t, _ix(b, s)), _ix(b, 1))
    fail_if(b, b.cmp("slt", n, _ix(b, 1), "index"),
            "the input is smaller than the kernel: the output would have size {0}", ((n, "index"),))
    return _iop(b, "maxsi", n, _ix(b, 0))


def _conv_operands(b, x, xt, w, wt, groups: int):
    """x and w, checked at run time to agree (C = groups * C_w, O a multiple of groups) where
    their types leave it open; after a failed check, stand-ins of agreeing sizes."""
    c, o, cw = xt.shape[1], wt.shape[0], wt.shape[1]
    if all(isinstance(v, int) for v in (c, o, cw)):
        return x, w
    g = _ix(b, groups)
    cd, od, cwd = b.dim(x, xt, 1), b.dim(w, wt, 0), b.dim(w, wt, 1)
    want = _iop(b, "muli", cwd, g)
    bad_c = b.cmp("ne", cd, want, "index")
    fail_if(b, bad_c, "conv2d: the input has {0} channels, the weight expects {1}", ((cd, "index"), (want, "index")))
    w_sizes, x_sizes = {}, {}
    if isinstance(c, int):
        w_sizes[1] = _ix(b, c // groups)
    else:
        x_sizes[1] = want
    bad_w = bad_c
    if not isinstance(o, int) and groups > 1:
        bad_o = b.cmp("ne", _iop(b, "remui", od, g), _ix(b, 0), "index")
        fail_if(b, bad_o, "conv2d: the weight's {0} output channels are not a multiple of groups ({1})",
                ((od, "index"), (g, "index")))
        w_sizes[0] = _iop(b, "muli", _iop(b, "divui", od, g), g)
        bad_w = b.binary("arith.ori", bad_c, bad_o, "i1")
    if x_sizes:
        x = stand_in_if(b, bad_c, x, xt, x_sizes)
    if w_sizes:
        w = stand_in_if(b, bad_w, w, wt, w_sizes)
    return x, w


def _affine(out: str, s: int, k: str, d: int) -> str:
    """`out * s + k * d` as affine text."""
    return f"{out}{f' * {s}' if s != 1 else ''} + {k}{f' * {d}' if d != 1 else ''}"


def _mac(ety):
    def body(bb, a):
        return bb.binary("arith.addf", bb.binary("arith.mulf", a[0], a[1], ety), a[2], ety)

    return body


def _conv_attrs(op):
    a = op.attrs
    return (tuple(a.get("stride", (1, 1))), tuple(a.get("padding", (0, 0))), tuple(a.get("dilation", (1, 1))),
            int(a.get("groups", 1)))


# ---------------------------------------------------------------- conv2d lowerings
def _lower_conv2d(b, op):
    """y[n, g, o, y, x] = sum over (c, i, j) of xp[n, g, c, y*s + i*d, x*s + j*d] * w[g, o, c, i, j]."""
    (x, xt), (w, wt) = zip(op.operands, op.types)
    out_t = op.result_types[0]
    stride, padding, dil, groups = _conv_attrs(op)
    x, w = _conv_operands(b, x, xt, w, wt, groups)
    kh, kw = wt.shape[2:]
    xp, pt, ps = _padded(b, x, xt, padding, 0.0)
    oh = _out_len(b, out_t.shape[2], ps[2], kh, stride[0], dil[0])
    ow = _out_len(b, out_t.shape[3], ps[3], kw, stride[1], dil[1])
    x5, x5t, _ = _split(b, xp, pt, ps, 1, groups)
    w5, w5t, ws = _split(b, w, wt, _dims(b, w, wt), 0, groups)
    y5t = TensorType(out_t.dtype, (xt.shape[0], groups, w5t.shape[1], out_t.shape[2], out_t.shape[3]))
    init = b.fill(y5t, [ps[0], ws[0], ws[1], oh, ow], b.const(0.0, out_t.element))
    x_map = f"d0, d1, d5, {_affine('d3', stride[0], 'd6', dil[0])}, {_affine('d4', stride[1], 'd7', dil[1])}"
    y5 = b.generic(y5t, init, [(x5, x5t), (w5, w5t)], [x_map, "d1, d2, d5, d6, d7"], "d0, d1, d2, d3, d4",
                   [_PAR] * 5 + [_RED] * 3, _mac(out_t.element))
    return _join(b, y5, y5t, 1, out_t)


def _lower_conv2d_weight_grad(b, op):
    """dw[g, o, c, i, j] = sum over (n, y, x) of xp[n, g, c, y*s + i*d, x*s + j*d] * dy[n, g, o, y, x]."""
    (x, xt), (d, dt), (w, wt) = zip(op.operands, op.types)
    out_t = op.result_types[0]
    stride, padding, dil, groups = _conv_attrs(op)
    x, w = _conv_operands(b, x, xt, w, wt, groups)
    xp, pt, ps = _padded(b, x, xt, padding, 0.0)
    x5, x5t, _ = _split(b, xp, pt, ps, 1, groups)
    d5, d5t, _ = _split(b, d, dt, _dims(b, d, dt), 1, groups)
    ws = _dims(b, w, wt)
    og = _iop(b, "divui", ws[0], _ix(b, groups))
    g5t = TensorType(out_t.dtype, (groups, d5t.shape[2], x5t.shape[2]) + wt.shape[2:])
    init = b.fill(g5t, [_ix(b, groups), og, ws[1], ws[2], ws[3]], b.const(0.0, out_t.element))
    x_map = f"d5, d0, d2, {_affine('d6', stride[0], 'd3', dil[0])}, {_affine('d7', stride[1], 'd4', dil[1])}"
    g5 = b.generic(g5t, init, [(x5, x5t), (d5, d5t)], [x_map, "d5, d0, d1, d6, d7"], "d0, d1, d2, d3, d4",
                   [_PAR] * 5 + [_RED] * 3, _mac(out_t.element))
    return _join(b, g5, g5t, 0, out_t)


def _lower_conv2d_input_grad(b, op):
    """The output gradient spread out by the stride into zeros (u[n, o, (KH-1)d + y*s, ...] =
    dy[n, o, y, ...]), convolved with stride 1 and the kernel flipped:
    dxp[n, g, c, h, w] = sum over (o, i, j) of u[n, g, o, h + (KH-1-i)d, ...] * w[g, o, c, i, j];
    then the padding cut off."""
    (d, dt), (w, wt), (x, xt) = zip(op.operands, op.types)
    out_t = op.result_types[0]
    stride, padding, dil, groups = _conv_attrs(op)
    x, w = _conv_operands(b, x, xt, w, wt, groups)
    kh, kw = wt.shape[2:]
    xs = _dims(b, x, xt)
    ds = _dims(b, d, dt)
    ph, pw = padding
    reach = ((kh - 1) * dil[0], (kw - 1) * dil[1])
    ut = TensorType(dt.dtype, dt.shape[:2] + (_grown(xt.shape[2], 2 * ph + reach[0]), _grown(xt.shape[3], 2 * pw + reach[1])))
    us = ds[:2] + [_iop(b, "addi", xs[2], _ix(b, 2 * ph + reach[0])), _iop(b, "addi", xs[3], _ix(b, 2 * pw + reach[1]))]
    zeros = b.fill(ut, us, b.const(0.0, dt.element))
    u = b.assign(f"tensor.insert_slice {d} into {zeros}[0, 0, {reach[0]}, {reach[1]}] [{_sizes_text(dt, ds)}] "
                 f"[1, 1, {stride[0]}, {stride[1]}] : {dt.mlir()} into {ut.mlir()}", "spread")
    u5, u5t, _ = _split(b, u, ut, us, 1, groups)
    w5, w5t, ws = _split(b, w, wt, _dims(b, w, wt), 0, groups)
    hp, wp = _iop(b, "addi", xs[2], _ix(b, 2 * ph)), _iop(b, "addi", xs[3], _ix(b, 2 * pw))
    g5t = TensorType(out_t.dtype, (xt.shape[0], groups, w5t.shape[2], _grown(xt.shape[2], 2 * ph), _grown(xt.shape[3], 2 * pw)))
    init = b.fill(g5t, [xs[0], ws[0], ws[2], hp, wp], b.const(0.0, out_t.element))
    flip = [f"d{3 + a} - d{6 + a}{f' * {dil[a]}' if dil[a] != 1 else ''} + {reach[a]}" for a in (0, 1)]
    g5 = b.generic(g5t, init, [(u5, u5t), (w5, w5t)], [f"d0, d1, d5, {flip[0]}, {flip[1]}", "d1, d5, d2, d6, d7"],
                   "d0, d1, d2, d3, d4", [_PAR] * 5 + [_RED] * 3, _mac(out_t.element))
    joined_t = TensorType(out_t.dtype, (xt.shape[0], Sym()) + g5t.shape[3:])
    gp = _join(b, g5, g5t, 1, joined_t)
    crop_t = TensorType(out_t.dtype, (xt.shape[0], Sym()) + xt.shape[2:])
    c = b.dim(gp, joined_t, 1)
    r = b.assign(f"tensor.extract_slice {gp}[0, 0, {ph}, {pw}] [{_sizes_text(crop_t, [xs[0], c, xs[2], xs[3]])}] "
                 f"[1, 1, 1, 1] : {joined_t.mlir()} to {crop_t.mlir()}", "crop")
    return cast(b, r, crop_t, out_t)


# ---------------------------------------------------------------- conv2d as gemms (CPU)
# With groups = 1 the CPU lowers the three convolution ops to one matrix product each, which the
# blas-matmuls pass makes a BLAS gemm (about 10x the generics above; `benchmarks/lenet.py`):
#   col[c, i, j, n, y, x] = xp[n, c, y*s + i*d, x*s + j*d]      (im2col, a [C*KH*KW, N*OH*OW] copy)
#   y        = W [O, C*KH*KW] @ col, then [O, N, ...] -> [N, O, ...]
#   dw       = dy' [O, N*OH*OW] @ col^T                          (dy' = dy as [O, N, OH, OW])
#   dx       = col2im(W^T @ dy'): each kernel position (i, j) of the product added into a
#              strided slice of the padded input's gradient (KH * KW vectorizable adds)
# The transposes are the matmul's indexing maps (a BLAS transpose flag, no copy).
def _prod(dims):
    out = 1
    for d in dims:
        if not isinstance(d, int):
            return Sym()
        out *= d
    return out


def _reshape(b, v, vt, t: TensorType, sizes: list) -> str:
    """v (contiguous) read as type t, `sizes` the index names of t's axes. A `tensor.reshape`, not
    an expand/collapse_shape: MLIR's elementwise fusion would fold those into a neighbouring
    matmul and make it a generic, which no BLAS call replaces."""
    shape = b.assign(f"tensor.from_elements {', '.join(sizes)} : tensor<{len(sizes)}xindex>", "shape")
    return b.assign(f"tensor.reshape {v}({shape}) : ({vt.mlir()}, tensor<{len(sizes)}xindex>) -> {t.mlir()}", "rs")


def _flat(b, v, vt, sizes: list, lead: int):
    """v as a matrix: its first `lead` axes as the rows, the others as the columns: (value, type)."""
    def prod(ss):
        return ss[0] if len(ss) == 1 else _iop(b, "muli", ss[0], prod(ss[1:]))

    t = TensorType(vt.dtype, (_prod(vt.shape[:lead]), _prod(vt.shape[lead:])))
    return _reshape(b, v, vt, t, [prod(sizes[:lead]), prod(sizes[lead:])]), t


def _matmul(b, a, at, c, ct, out_t, sizes, trans=(False, False)) -> str:
    """A @ C (A^T, C^T where `trans` says) into zeros of type out_t."""
    init = b.fill(out_t, sizes, b.const(0.0, out_t.element))
    maps = ""
    if any(trans):
        a_map = "(d2, d0)" if trans[0] else "(d0, d2)"
        c_map = "(d1, d2)" if trans[1] else "(d2, d1)"
        maps = "indexing_maps = [" + ", ".join(f"affine_map<(d0, d1, d2) -> {m}>" for m in (a_map, c_map, "(d0, d1)")) + "] "
    return b.assign(f"linalg.matmul {maps}ins({a}, {c} : {at.mlir()}, {ct.mlir()}) outs({init} : {out_t.mlir()}) "
                    f"-> {out_t.mlir()}", "mm")


def _im2col(b, xp, pt, ps, k, stride, dil, out_hw, out_sizes):
    """col [C*KH*KW, N*OH*OW] of the padded input: (value, type)."""
    t = TensorType(pt.dtype, (pt.shape[1], k[0], k[1], pt.shape[0]) + tuple(out_hw))
    init = b.empty(t, [ps[1], None, None, ps[0]] + list(out_sizes))
    x_map = f"d3, d0, {_affine('d4', stride[0], 'd1', dil[0])}, {_affine('d5', stride[1], 'd2', dil[1])}"
    col = b.generic(t, init, [(xp, pt)], [x_map], "d0, d1, d2, d3, d4, d5", [_PAR] * 6, lambda bb, a: a[0])
    return _flat(b, col, t, [ps[1], _ix(b, k[0]), _ix(b, k[1]), ps[0]] + list(out_sizes), 3)


def _swap01(b, v, vt, sizes):
    """v [A, B, H, W] as [B, A, H, W] (a copy): (value, type)."""
    t = TensorType(vt.dtype, (vt.shape[1], vt.shape[0]) + vt.shape[2:])
    init = b.empty(t, [sizes[1], sizes[0]] + sizes[2:])
    return b.generic(t, init, [(v, vt)], ["d1, d0, d2, d3"], "d0, d1, d2, d3", [_PAR] * 4, lambda bb, a: a[0]), t


def _channels_first(b, d, dt, ds):
    """dy [N, O, OH, OW] as dy' [O, N*OH*OW]: (value, type)."""
    v, t = _swap01(b, d, dt, ds)
    return _flat(b, v, t, [ds[1], ds[0]] + ds[2:], 1)


def _lower_conv2d_gemm(b, op):
    """y = W @ im2col(x), as [O, N, OH, OW] turned to [N, O, OH, OW]. With one input channel the
    gemm's depth is only KH * KW and the copy KH * KW times the input: the generic is faster
    (LeNet's first layer: 0.7 ms against 1.1 ms)."""
    (x, xt), (w, wt) = zip(op.operands, op.types)
    out_t = op.result_types[0]
    stride, padding, dil, groups = _conv_attrs(op)
    if groups != 1 or wt.shape[1] == 1:
        return _lower_conv2d(b, op)
    x, w = _conv_operands(b, x, xt, w, wt, groups)
    k = wt.shape[2:]
    xp, pt, ps = _padded(b, x, xt, padding, 0.0)
    oh = _out_len(b, out_t.shape[2], ps[2], k[0], stride[0], dil[0])
    ow = _out_len(b, out_t.shape[3], ps[3], k[1], stride[1], dil[1])
    col, colt = _im2col(b, xp, pt, ps, k, stride, dil, out_t.shape[2:], [oh, ow])
    w2, w2t = _flat(b, w, wt, _dims(b, w, wt), 1)
    o = b.dim(w, wt, 0)
    y2t = TensorType(out_t.dtype, (wt.shape[0], colt.shape[1]))
    y2 = _matmul(b, w2, w2t, col, colt, y2t, [o, b.dim(col, colt, 1)])
    y4t = TensorType(out_t.dtype, (wt.shape[0], xt.shape[0]) + out_t.shape[2:])
    y4 = _reshape(b, y2, y2t, y4t, [o, ps[0], oh, ow])
    y, yt = _swap01(b, y4, y4t, [o, ps[0], oh, ow])
    return cast(b, y, yt, out_t)


def _lower_conv2d_weight_grad_gemm(b, op):
    """dw = dy' @ im2col(x)^T, as [O, C, KH, KW]."""
    (x, xt), (d, dt), (w, wt) = zip(op.operands, op.types)
    out_t = op.result_types[0]
    stride, padding, dil, groups = _conv_attrs(op)
    if groups != 1:
        return _lower_conv2d_weight_grad(b, op)
    x, w = _conv_operands(b, x, xt, w, wt, groups)
    xp, pt, ps = _padded(b, x, xt, padding, 0.0)
    ds = _dims(b, d, dt)
    col, colt = _im2col(b, xp, pt, ps, wt.shape[2:], stride, dil, dt.shape[2:], ds[2:])
    dp, dpt = _channels_first(b, d, dt, ds)
    ws = _dims(b, w, wt)
    g2t = TensorType(out_t.dtype, (wt.shape[0], _prod(wt.shape[1:])))
    g2 = _matmul(b, dp, dpt, col, colt, g2t, [ws[0], b.dim(col, colt, 0)], trans=(False, True))
    return cast(b, _reshape(b, g2, g2t, wt, ws), wt, out_t)


def _lower_conv2d_input_grad_gemm(b, op):
    """dcol = W^T @ dy' [C*KH*KW, N*OH*OW]; dx = the sum over (i, j) of dcol[:, i, j] added into the
    padded gradient at rows i*d + y*s, columns j*d + x*s, the padding then cut off."""
    (d, dt), (w, wt), (x, xt) = zip(op.operands, op.types)
    out_t = op.result_types[0]
    stride, padding, dil, groups = _conv_attrs(op)
    if groups != 1:
        return _lower_conv2d_input_grad(b, op)
    x, w = _conv_operands(b, x, xt, w, wt, groups)
    kh, kw = wt.shape[2:]
    xs, ds, ws = _dims(b, x, xt), _dims(b, d, dt), _dims(b, w, wt)
    dp, dpt = _channels_first(b, d, dt, ds)
    w2, w2t = _flat(b, w, wt, ws, 1)
    ckk = _iop(b, "muli", ws[1], _ix(b, kh * kw))
    dct = TensorType(out_t.dtype, (w2t.shape[1], dpt.shape[1]))
    dc = _matmul(b, w2, w2t, dp, dpt, dct, [ckk, b.dim(dp, dpt, 1)], trans=(True, False))
    d6t = TensorType(out_t.dtype, (wt.shape[1], kh, kw, dt.shape[0]) + dt.shape[2:])
    d6 = _reshape(b, dc, dct, d6t, [ws[1], _ix(b, kh), _ix(b, kw)] + [ds[0]] + ds[2:])
    ph, pw = padding
    acc_t = TensorType(out_t.dtype, (xt.shape[0], wt.shape[1], _grown(xt.shape[2], 2 * ph), _grown(xt.shape[3], 2 * pw)))
    acc_s = [xs[0], ws[1], _iop(b, "addi", xs[2], _ix(b, 2 * ph)), _iop(b, "addi", xs[3], _ix(b, 2 * pw))]
    acc = b.fill(acc_t, acc_s, b.const(0.0, out_t.element))
    part_t = TensorType(out_t.dtype, (xt.shape[0], wt.shape[1]) + dt.shape[2:])
    part_s = _sizes_text(part_t, [xs[0], ws[1], ds[2], ds[3]])
    ety = out_t.element
    for i in range(kh):
        for j in range(kw):
            at = f"[0, 0, {i * dil[0]}, {j * dil[1]}] [{part_s}] [1, 1, {stride[0]}, {stride[1]}]"
            part = b.assign(f"tensor.extract_slice {acc}{at} : {acc_t.mlir()} to {part_t.mlir()}", "part")
            added = b.generic(part_t, part, [(d6, d6t)], [f"d1, {i}, {j}, d0, d2, d3"], "d0, d1, d2, d3", [_PAR] * 4,
                              lambda bb, a: bb.binary("arith.addf", a[1], a[0], ety))
            acc = b.assign(f"tensor.insert_slice {added} into {acc}{at} : {part_t.mlir()} into {acc_t.mlir()}", "acc")
    if ph == 0 and pw == 0:
        return cast(b, acc, acc_t, out_t)
    crop_t = TensorType(out_t.dtype, (xt.shape[0], wt.shape[1]) + xt.shape[2:])
    r = b.assign(f"tensor.extract_slice {acc}[0, 0, {ph}, {pw}] [{_sizes_text(crop_t, [xs[0], ws[1], xs[2], xs[3]])}] "
                 f"[1, 1, 1, 1] : {acc_t.mlir()} to {crop_t.mlir()}", "crop")
    return cast(b, r, crop_t, out_t)


# ---------------------------------------------------------------- pool lowerings
def _pool_attrs(op):
    a = op.attrs
    return tuple(a["kernel"]), tuple(a.get("stride", a["kernel"])), tuple(a.get("padding", (0, 0)))


def _window(b, kernel, ety):
    """A tensor of the kernel's shape, read by no one: the extent of the window loops."""
    t = TensorType(ety, tuple(kernel))
    return b.empty(t, [None, None]), t


def _pool_generic(b, op, fill: float, combine):
    """out[n, c, y, x] = combine over (i, j) of xp[n, c, y*s + i, x*s + j], starting from `fill`."""
    x, xt = op.operands[0], op.types[0]
    out_t = op.result_types[0]
    kernel, stride, padding = _pool_attrs(op)
    ety = xt.element
    xp, pt, ps = _padded(b, x, xt, padding, fill)
    oh = _out_len(b, out_t.shape[2], ps[2], kernel[0], stride[0])
    ow = _out_len(b, out_t.shape[3], ps[3], kernel[1], stride[1])
    win, wint = _window(b, kernel, op.types[0].dtype)
    init = b.fill(out_t, [ps[0], ps[1], oh, ow], b.const(fill, ety))
    x_map = f"d0, d1, {_affine('d2', stride[0], 'd4', 1)}, {_affine('d3', stride[1], 'd5', 1)}"
    return b.generic(out_t, init, [(xp, pt), (win, wint)], [x_map, "d4, d5"], "d0, d1, d2, d3",
                     [_PAR] * 4 + [_RED] * 2, lambda bb, a: combine(bb, a[0], a[2], ety)), (xp, pt, oh, ow)


def _lower_max_pool2d(b, op):
    return _pool_generic(b, op, float("-inf"), lambda bb, v, acc, ety: bb.binary("arith.maximumf", v, acc, ety))[0]


def _lower_avg_pool2d(b, op):
    kernel = _pool_attrs(op)[0]
    out_t = op.result_types[0]
    ety = out_t.element
    s = _pool_generic(b, op, 0.0, lambda bb, v, acc, e: bb.binary("arith.addf", v, acc, e))[0]
    k = b.const(float(kernel[0] * kernel[1]), ety)
    return map_generic(b, out_t, [(s, out_t)], lambda bb, a: bb.binary("arith.divf", a[0], k, ety))


def _argmax_windows(b, op, xp, pt, oh, ow):
    """The row-major index (i64) of the first largest element of each window (a NaN counts as
    the largest, as np.argmax)."""
    x, xt = op.operands[0], op.types[0]
    kernel, stride, _ = _pool_attrs(op)
    ety = xt.element
    out_t = TensorType(xt.dtype, xt.shape[:2] + (Sym(), Sym()))
    it = TensorType("i64", out_t.shape)
    sizes = [b.dim(x, xt, 0), b.dim(x, xt, 1), oh, ow]
    vinit = b.fill(out_t, sizes, b.const(float("-inf"), ety))
    iinit = b.fill(it, sizes, b.const(-1, "i64"))
    win, wint = _window(b, kernel, xt.dtype)
    dims = ", ".join(f"d{i}" for i in range(6))
    x_map = f"d0, d1, {_affine('d2', stride[0], 'd4', 1)}, {_affine('d3', stride[1], 'd5', 1)}"
    maps = ", ".join(f"affine_map<({dims}) -> ({m})>" for m in (x_map, "d4, d5", "d0, d1, d2, d3", "d0, d1, d2, d3"))
    its = ", ".join(f'"{t}"' for t in [_PAR] * 4 + [_RED] * 2)
    r = b.fresh("am")
    b.emit(f"{r}:2 = linalg.generic {{indexing_maps = [{maps}], iterator_types = [{its}]}} "
           f"ins({xp}, {win} : {pt.mlir()}, {wint.mlir()}) outs({vinit}, {iinit} : {out_t.mlir()}, {it.mlir()}) {{")
    a, _w, bv, bi = b.fresh("a"), b.fresh("a"), b.fresh("o"), b.fresh("o")
    b.line(f"^bb0({a}: {ety}, {_w}: {wint.element}, {bv}: {ety}, {bi}: i64):")
    with b.nested():
        i, j = (b.assign(f"linalg.index {k} : index", "li") for k in (4, 5))
        flat = _iop(b, "addi", _iop(b, "muli", i, _ix(b, kernel[1])), j)
        fi = b.assign(f"arith.index_cast {flat} : index to i64", "x")
        better = b.cmp("ogt", a, bv, ety)
        nan_new, nan_old = b.cmp("uno", a, a, ety), b.cmp("uno", bv, bv, ety)
        better = b.binary("arith.andi", b.binary("arith.ori", better, nan_new, "i1"),
                          b.binary("arith.xori", nan_old, b.const(True, "i1"), "i1"), "i1")
        take = b.binary("arith.ori", better, b.cmp("slt", bi, b.const(0, "i64"), "i64"), "i1")
        b.emit(f"linalg.yield {b.select(take, a, bv, ety)}, {b.select(take, fi, bi, 'i64')} : {ety}, i64")
    b.line(f"}} -> ({out_t.mlir()}, {it.mlir()}) {b.loc}")
    return f"{r}#1", it


def _gather_grad(b, op, x, xt, d, dt, contribution):
    """dx[n, c, h, w] = sum over the windows (i, j) that hold pixel (h, w), i.e. (h + p - i) =
    y * s with 0 <= y < OH (likewise w), of contribution(b, n, c, y, x, i, j): a gather, one
    pixel at a time."""
    kernel, stride, padding = _pool_attrs(op)
    out_t = op.result_types[0]
    ety = out_t.element
    ds = _dims(b, d, dt)
    win, wint = _window(b, kernel, xt.dtype)
    init = b.fill(out_t, _dims(b, x, xt), b.const(0.0, ety))

    def body(bb, a):
        n, c, h, w, i, j = (bb.assign(f"linalg.index {k} : index", "li") for k in range(6))
        place, ok = [], None
        for pix, k, s, p, size in ((h, i, stride[0], padding[0], ds[2]), (w, j, stride[1], padding[1], ds[3])):
            t = _iop(bb, "subi", _iop(bb, "addi", pix, _ix(bb, p)), k)
            y = _iop(bb, "floordivsi", t, _ix(bb, s))
            fits = [bb.cmp("sge", t, _ix(bb, 0), "index"), bb.cmp("slt", y, size, "index")]
            if s != 1:
                fits.append(bb.cmp("eq", _iop(bb, "remsi", t, _ix(bb, s)), _ix(bb, 0), "index"))
            for f in fits:
                ok = f if ok is None else bb.binary("arith.andi", ok, f, "i1")
            place.append(y)
        add = if_else(bb, ok, ety, lambda b2: contribution(b2, n, c, place[0], place[1], i, j),
                      lambda b2: b2.const(0.0, ety))
        return bb.binary("arith.addf", a[1], add, ety)

    return b.generic(out_t, init, [(win, wint)], ["d4, d5"], "d0, d1, d2, d3", [_PAR] * 4 + [_RED] * 2, body)


def _lower_max_pool2d_grad(b, op):
    (x, xt), (d, dt) = zip(op.operands, op.types)
    kernel, stride, padding = _pool_attrs(op)
    if stride == kernel and padding == (0, 0) and kernel[0] * kernel[1] <= _TILED_MAX_AREA:
        return _lower_max_pool2d_grad_tiled(b, op)
    fill = float("-inf")
    xp, pt, ps = _padded(b, x, xt, padding, fill)
    oh, ow = b.dim(d, dt, 2), b.dim(d, dt, 3)
    arg, it = _argmax_windows(b, op, xp, pt, oh, ow)
    ety = dt.element

    def contribution(bb, n, c, y, x_, i, j):
        at = bb.assign(f"tensor.extract {arg}[{n}, {c}, {y}, {x_}] : {it.mlir()}", "x")
        flat = _iop(bb, "addi", _iop(bb, "muli", i, _ix(bb, kernel[1])), j)
        hit = bb.cmp("eq", at, bb.assign(f"arith.index_cast {flat} : index to i64", "x"), "i64")
        v = bb.assign(f"tensor.extract {d}[{n}, {c}, {y}, {x_}] : {dt.mlir()}", "x")
        return bb.select(hit, v, bb.const(0.0, ety), ety)

    return _gather_grad(b, op, x, xt, d, dt, contribution)


# Windows that tile the input (stride = kernel, no padding), up to this many cells each: one
# element-wise generic instead of the gather above.
_TILED_MAX_AREA = 64


def _first_max_flags(b, cells, ety) -> list:
    """Per cell (row-major), an i1 that says it is the window's first largest, as np.argmax: the
    first NaN where there is one, else the first cell equal to the largest (ties, -0 and +0
    included, go to the first). The largest is a chain of (v > top ? v : top), which LLVM makes
    a `maxss` (a NaN in it matters not: where there is one, only NaNs match)."""
    true = b.const(True, "i1")
    top, nan = cells[0], None
    for v in cells[1:]:
        top = b.select(b.cmp("ogt", v, top, ety), v, top, ety)
    for p in range(0, len(cells), 2):  # `uno a, b`: either is NaN
        u = b.cmp("uno", cells[p], cells[min(p + 1, len(cells) - 1)], ety)
        nan = u if nan is None else b.binary("arith.ori", nan, u, "i1")
    no_nan = b.binary("arith.xori", nan, true, "i1")
    flags, seen = [], None
    for p, v in enumerate(cells):
        if seen is not None and p == len(cells) - 1:  # some cell matches: the last where none before did
            flags.append(b.binary("arith.xori", seen, true, "i1"))
            break
        match = b.binary("arith.ori", b.binary("arith.andi", b.cmp("oeq", v, top, ety), no_nan, "i1"),
                         b.cmp("uno", v, v, ety), "i1")
        if seen is None:
            flags.append(match)
            seen = match
        else:
            flags.append(b.binary("arith.andi", match, b.binary("arith.xori", seen, true, "i1"), "i1"))
            seen = b.binary("arith.ori", seen, match, "i1")
    return flags


_BITS = {"f16": "i16", "bf16": "i16", "f32": "i32", "f64": "i64"}


def _keep_if(b, flag, v, ety) -> str:
    """v where `flag`, else +0: the bits of v and'ed with the flag widened (no select, which LLVM
    may make a branch, mispredicted half the time on a pool's data)."""
    ity = _BITS.get(ety)
    if ity is None:
        return b.select(flag, v, b.const(0.0, ety), ety)
    mask = b.assign(f"arith.extsi {flag} : i1 to {ity}", "m")
    bits = b.assign(f"arith.bitcast {v} : {ety} to {ity}", "m")
    return b.assign(f"arith.bitcast {b.binary('arith.andi', bits, mask, ity)} : {ity} to {ety}", "m")


def _lower_max_pool2d_grad_tiled(b, op):
    """max_pool2d_grad where the windows tile the input (stride = kernel, no padding). The part
    of x and of dx the windows cover, [N, C, OH*KH, OW*KW], is viewed as [N, C, OH, KH, OW, KW]
    (an expand_shape, no copy) and one element-wise generic over that shape writes dx in
    place: each cell reads its window's KH * KW cells (through maps with constant offsets) and
    the window's dy, and takes 0 + dy (the interpreter's sum, -0 becoming +0) where it is the
    window's first largest (`_first_max_flags`), else 0. No gather, no reduction and no branch:
    LLVM unrolls the window loops (i, j) and computes a window's flags once per row of it. (It
    does not vectorize the OW loop where OW is a small constant, LeNet's 12 and 4: its cost model
    declines; still 0.5 ms against the gather's 0.85 to 1.4 on [64, 6, 24, 24].) The rows and
    columns past OH*KH and OW*KW, which no window holds, stay zero."""
    (x, xt), (d, dt) = zip(op.operands, op.types)
    kh, kw = _pool_attrs(op)[0]
    out_t = op.result_types[0]
    ety = out_t.element
    xs = _dims(b, x, xt)
    tiles, idx = [], []
    for size, ksize, sz in ((xt.shape[2], kh, xs[2]), (xt.shape[3], kw, xs[3])):
        tiles.append(size // ksize if isinstance(size, int) else Sym())
        idx.append(_ix(b, size // ksize) if isinstance(size, int) else _iop(b, "divui", sz, _ix(b, ksize)))
    oh, ow = idx
    covered = all(isinstance(sz, int) and sz % k == 0 for sz, k in zip(xt.shape[2:], (kh, kw)))
    cov_t = TensorType(out_t.dtype, xt.shape[:2] + tuple(_prod([t, k]) for t, k in zip(tiles, (kh, kw))))
    cov_s = xs[:2] + [_iop(b, "muli", oh, _ix(b, kh)), _iop(b, "muli", ow, _ix(b, kw))]
    at = f"[0, 0, 0, 0] [{_sizes_text(cov_t, cov_s)}] [1, 1, 1, 1]"
    if covered:
        acc, xc = None, x
    else:
        acc = b.fill(out_t, xs, b.const(0.0, ety))
        xc = b.assign(f"tensor.extract_slice {x}{at} : {xt.mlir()} to {cov_t.mlir()}", "cov")
    t6 = TensorType(out_t.dtype, xt.shape[:2] + (tiles[0], kh, tiles[1], kw))
    s6 = _sizes_text(t6, xs[:2] + [oh, _ix(b, kh), ow, _ix(b, kw)])
    reassoc = "[[0], [1], [2, 3], [4, 5]]"

    def expand(v, vt):
        return b.assign(f"tensor.expand_shape {v} {reassoc} output_shape [{s6}] : {vt.mlir()} into {t6.mlir()}", "win")

    x6 = expand(xc, cov_t)
    if covered:  # every cell is written
        init6 = b.empty(t6, xs[:2] + [oh, None, ow, None])
    else:
        init6 = expand(b.assign(f"tensor.extract_slice {acc}{at} : {out_t.mlir()} to {cov_t.mlir()}", "cov"), cov_t)
    offsets = [(i, j) for i in range(kh) for j in range(kw)]
    maps = [f"d0, d1, d2, {i}, d4, {j}" for i, j in offsets] + ["d0, d1, d2, d4"]

    def body(bb, a):
        cells, dv = a[:len(offsets)], a[len(offsets)]
        flags = _first_max_flags(bb, cells, ety)
        i, j = (bb.assign(f"linalg.index {k} : index", "li") for k in (3, 5))
        here = _iop(bb, "addi", _iop(bb, "muli", i, _ix(bb, kw)), j)
        mine = flags[0]
        for p in range(1, len(flags)):  # this cell's flag (i and j are constants once LLVM unrolls)
            mine = bb.select(bb.cmp("eq", here, _ix(bb, p), "index"), flags[p], mine, "i1")
        return _keep_if(bb, mine, bb.binary("arith.addf", bb.const(0.0, ety), dv, ety), ety)

    g6 = b.generic(t6, init6, [(x6, t6)] * len(offsets) + [(d, dt)], maps, "d0, d1, d2, d3, d4, d5",
                   [_PAR] * 6, body)
    dxc = b.assign(f"tensor.collapse_shape {g6} {reassoc} : {t6.mlir()} into {cov_t.mlir()}", "dx")
    if covered:
        return cast(b, dxc, cov_t, out_t)
    return b.assign(f"tensor.insert_slice {dxc} into {acc}{at} : {cov_t.mlir()} into {out_t.mlir()}", "dx")


def _lower_avg_pool2d_grad(b, op):
    (d, dt), (x, xt) = zip(op.operands, op.types)
    kernel = _pool_attrs(op)[0]
    ety = dt.element

    def contribution(bb, n, c, y, x_, i, j):
        v = bb.assign(f"tensor.extract {d}[{n}, {c}, {y}, {x_}] : {dt.mlir()}", "x")
        return bb.binary("arith.divf", v, bb.const(float(kernel[0] * kernel[1]), ety), ety)

    return _gather_grad(b, op, x, xt, d, dt, contribution)


# ---------------------------------------------------------------- VJPs
def _vjp_conv2d(g, op, d):
    x, w = op.operands
    a = dict(op.attrs)
    return [g.dg_op("conv2d_input_grad", [d, w, x], a), g.dg_op("conv2d_weight_grad", [x, d, w], a)]


def _vjp_conv2d_input_grad(g, op, u):
    """conv2d_input_grad(dy, w) is linear in dy and in w: <u, J_x(w)^T dy> = <conv2d(u, w), dy>."""
    d, w, x = op.operands
    a = dict(op.attrs)
    return [g.dg_op("conv2d", [u, w], a), g.dg_op("conv2d_weight_grad", [u, d, w], a), None]


def _vjp_conv2d_weight_grad(g, op, u):
    x, d, w = op.operands
    a = dict(op.attrs)
    return [g.dg_op("conv2d_input_grad", [d, u, x], a), g.dg_op("conv2d", [x, u], a), None]


def _vjp_avg_pool2d_grad(g, op, u):
    d, x = op.operands
    return [g.dg_op("avg_pool2d", [u], dict(op.attrs)), None]


# ---------------------------------------------------------------- JVPs
def _padded_hw(g, v, padding, fill: float):
    """v [N, C, H, W] with padding[0] rows and padding[1] columns of `fill` on each side (dg ops:
    bands from `full`, joined with `concat`)."""
    for axis, p in zip((2, 3), padding):
        if p == 0:
            continue
        shape = tuple(p if a == axis else d for a, d in enumerate(v.tt.shape))
        dyn = [g.dim(v, a) for a, d in enumerate(shape) if not isinstance(d, int)]
        band = g.dg_op("full", [g.const(fill, v)] + dyn,
                       {"shape": tuple(d if isinstance(d, int) else -2 for d in shape)})
        v = g.dg_op("concat", [g.dg_op("concat", [band, v], {"axis": axis}), band], {"axis": axis})
    return v


def _window_cells(g, vp, y, at, stride):
    """The cell at offset `at` = (i, j) of every window of the padded image vp, a tensor shaped
    like y [N, C, OH, OW]: vp[:, :, i : i + s0 (OH - 1) + 1 : s0, j : ... : s1]."""
    spec, dyn = ["s:::", "s:::"], []
    for axis, (k, s) in enumerate(zip(at, stride), start=2):
        n = y.tt.shape[axis]
        if isinstance(n, int):
            spec.append(f"s:{k}:{k + s * (n - 1) + 1}:{s}")
        else:
            oh = g.dim(y, axis)
            dyn.append(g.add(g.mul(oh, g.const(s, oh)), g.const(k + 1 - s, oh)))
            spec.append(f"s:{k}:$:{s}")
    return g.dg_op("getitem", [vp] + dyn, {"spec": tuple(spec)})


def _jvp_max_pool2d(g, op, ts):
    """The tangent at each window's first largest element (`_at_largest`)."""
    return None if ts[0] is None else _at_largest(g, op.operands[0], op.results[0], ts[0], op.attrs)


def _vjp_max_pool2d_grad(g, op, u):
    """max_pool2d_grad(x, d) is linear in d, and constant in x between ties: d's adjoint is the
    adjoint u (shaped as x) at each window's first largest element; x has none."""
    x = op.operands[0]
    return [None, _at_largest(g, x, g.dg_op("max_pool2d", [x], dict(op.attrs)), u, op.attrs)]


def _at_largest(g, x, y, t, attrs):
    """t (shaped as x) at each window's first largest element of x (row-major; the first NaN where
    there is one), shaped as y = max_pool2d(x), as max_pool2d_grad sends the gradient: the cells
    compared with y, one window offset at a time, the first match winning (offsets visited last
    to first, each overwriting)."""
    kernel = attrs.get("kernel", (1, 1))
    stride = attrs.get("stride", (1, 1))
    padding = attrs.get("padding", (0, 0))
    xp, tp = _padded_hw(g, x, padding, float("-inf")), _padded_hw(g, t, padding, 0.0)
    out = g.zeros_like(y)
    for at in reversed([(i, j) for i in range(kernel[0]) for j in range(kernel[1])]):
        cell = _window_cells(g, xp, y, at, stride)
        hit = g.dg_op("or", [g.dg_op("eq", [y, cell]), g.dg_op("ne", [cell, cell])])
        out = g.where(hit, _window_cells(g, tp, y, at, stride), out)
    return out


# ---------------------------------------------------------------- samples
_CONV_SAMPLE = {"stride": (2, 1), "padding": (1, 2), "dilation": (1, 2), "groups": 2}
_POOL_SAMPLE = {"kernel": (3, 2), "stride": (2, 1), "padding": (1, 1)}


def _conv_inputs(rng):
    x = rng.standard_normal((2, 4, 7, 6)).astype(np.float32)
    w = rng.standard_normal((6, 2, 3, 2)).astype(np.float32)
    return x, w


def _dy(rng, y):
    return rng.standard_normal(y.shape).astype(y.dtype)


def _sample_conv(rng):
    return list(_conv_inputs(rng)), dict(_CONV_SAMPLE)


def _sample_input_grad(rng):
    x, w = _conv_inputs(rng)
    return [_dy(rng, _conv2d(x, w, **_CONV_SAMPLE)), w, x], dict(_CONV_SAMPLE)


def _sample_weight_grad(rng):
    x, w = _conv_inputs(rng)
    return [x, _dy(rng, _conv2d(x, w, **_CONV_SAMPLE)), w], dict(_CONV_SAMPLE)


def _pool_input(rng):
    return rng.standard_normal((2, 3, 7, 5)).astype(np.float32)


def _sample_pool(rng):
    return [_pool_input(rng)], dict(_POOL_SAMPLE)


def _sample_max_grad(rng):
    x = _pool_input(rng)
    return [x, _dy(rng, _max_pool2d(x, **_POOL_SAMPLE))], dict(_POOL_SAMPLE)


def _sample_avg_grad(rng):
    x = _pool_input(rng)
    return [_dy(rng, _avg_pool2d(x, **_POOL_SAMPLE)), x], dict(_POOL_SAMPLE)


# ---------------------------------------------------------------- registration
_CONV_IR = 'stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, groups = 1 : i64'
_POOL_IR = 'kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>'

register(OpDef(
    name="conv2d", impl=_conv2d, nargs=2, attrs=CONV_ATTRS, infer=_conv_rule,
    lower=_lower_conv2d_gemm, lower_for={"cuda": _lower_conv2d},
    vjp=_vjp_conv2d, jvp=bilinear(0, 1), sample=_sample_conv,
    doc=f"""The 2-D convolution (cross-correlation, as PyTorch's) of x [N, C, H, W] with w [O, C/groups, KH, KW].

        %y = "dg.conv2d"(%x, %w) {{{_CONV_IR}}} : (tensor<1x2x5x5xf32>, tensor<3x2x3x3xf32>) -> tensor<1x3x5x5xf32>""",
))

register(OpDef(
    name="conv2d_input_grad", impl=_conv2d_input_grad, nargs=3, attrs=CONV_ATTRS, infer=_like_rule(2, "conv2d_input_grad"),
    lower=_lower_conv2d_input_grad_gemm, lower_for={"cuda": _lower_conv2d_input_grad},
    vjp=_vjp_conv2d_input_grad, jvp=bilinear(0, 1), sample=_sample_input_grad,
    doc=f"""The gradient of conv2d with respect to its input, from the output's gradient dy, the weight
    and the input (for its shape only).

        %y = "dg.conv2d_input_grad"(%a, %b, %c) {{{_CONV_IR}}} : (tensor<1x3x5x5xf32>, tensor<3x2x3x3xf32>, tensor<1x2x5x5xf32>) -> tensor<1x2x5x5xf32>""",
))

register(OpDef(
    name="conv2d_weight_grad", impl=_conv2d_weight_grad, nargs=3, attrs=CONV_ATTRS,
    infer=_like_rule(2, "conv2d_weight_grad"),
    lower=_lower_conv2d_weight_grad_gemm, lower_for={"cuda": _lower_conv2d_weight_grad},
    vjp=_vjp_conv2d_weight_grad, jvp=bilinear(0, 1), sample=_sample_weight_grad,
    doc=f"""The gradient of conv2d with respect to its weight, from the input, the output's gradient dy
    and the weight (for its shape only).

        %y = "dg.conv2d_weight_grad"(%a, %b, %c) {{{_CONV_IR}}} : (tensor<1x2x5x5xf32>, tensor<1x3x5x5xf32>, tensor<3x2x3x3xf32>) -> tensor<3x2x3x3xf32>""",
))

register(OpDef(
    name="max_pool2d", impl=_max_pool2d, attrs=POOL_ATTRS, infer=_pool_rule("max_pool2d"),
    lower=_lower_max_pool2d,
    vjp=lambda g, op, d: [g.dg_op("max_pool2d_grad", [op.operands[0], d], dict(op.attrs))], jvp=_jvp_max_pool2d,
    sample=_sample_pool,
    doc=f"""The largest element of each KH x KW window of x [N, C, H, W] (padding with -inf).

        %y = "dg.max_pool2d"(%x) {{{_POOL_IR}}} : (tensor<1x2x4x4xf32>) -> tensor<1x2x2x2xf32>""",
))

register(OpDef(
    name="max_pool2d_grad", impl=_max_pool2d_grad, nargs=2, attrs=POOL_ATTRS, infer=_like_rule(0, "max_pool2d_grad"),
    lower=_lower_max_pool2d_grad, vjp=_vjp_max_pool2d_grad, jvp=linear(1), sample=_sample_max_grad,
    doc=f"""The gradient of max_pool2d with respect to x, from x and the output's gradient: each window's
    gradient goes to its first largest element (row-major).

        %y = "dg.max_pool2d_grad"(%a, %b) {{{_POOL_IR}}} : (tensor<1x2x4x4xf32>, tensor<1x2x2x2xf32>) -> tensor<1x2x4x4xf32>""",
))

register(OpDef(
    name="avg_pool2d", impl=_avg_pool2d, attrs=POOL_ATTRS, infer=_pool_rule("avg_pool2d"),
    lower=_lower_avg_pool2d,
    vjp=lambda g, op, d: [g.dg_op("avg_pool2d_grad", [d, op.operands[0]], dict(op.attrs))], jvp=linear(0),
    sample=_sample_pool,
    doc=f"""The mean of each KH x KW window of x [N, C, H, W]; padded cells count (zeros) in the divisor.

        %y = "dg.avg_pool2d"(%x) {{{_POOL_IR}}} : (tensor<1x2x4x4xf32>) -> tensor<1x2x2x2xf32>""",
))

register(OpDef(
    name="avg_pool2d_grad", impl=_avg_pool2d_grad, nargs=2, attrs=POOL_ATTRS, infer=_like_rule(1, "avg_pool2d_grad"),
    lower=_lower_avg_pool2d_grad,
    vjp=_vjp_avg_pool2d_grad, jvp=linear(0), sample=_sample_avg_grad,
    doc=f"""The gradient of avg_pool2d with respect to x, from the output's gradient and x (for its shape
    only): each window's gradient spread evenly over it.

        %y = "dg.avg_pool2d_grad"(%a, %b) {{{_POOL_IR}}} : (tensor<1x2x2x2xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>""",
))
