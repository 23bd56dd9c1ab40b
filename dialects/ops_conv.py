"""Convolution over NCHW images: conv2d and the two ops its gradients are made of
(conv2d_input_grad, conv2d_weight_grad), one block per op (its rule, NumPy implementation,
lowering, VJP and JVP, then its registration) after the pieces the three share.

Expects: float tensors of rank 4 (images [N, C, H, W]; weights [O, C / groups, KH, KW]);
`stride`, `padding` and `dilation` are static pairs (height, width), `groups` a static int. The
kernel's spatial sizes must be static; N, C, H, W and O may be symbolic. An output size is
floor((H + 2p - d (k - 1) - 1) / s) + 1, static where H is.

Guarantees: both modes compute the same thing, as PyTorch's `conv2d`. Sizes the types leave open
are checked at run time (a located DgRuntimeError in both modes).

The NumPy implementations are vectorized: windows through `sliding_window_view`, contractions
through `einsum`; the input gradient scatters with one strided slice per kernel position. The
lowerings write each op's plain form, for every target: pad into a filled tensor
(`tensor.insert_slice`), view the channels as (groups, channels per group)
(`tensor.expand_shape`) and contract with one `linalg.generic` whose affine maps carry stride
and dilation; the input gradient is a stride-1 convolution of the output gradient spread out by
the stride (a strided `insert_slice` into zeros) with the kernel flipped. The generic is marked
`dg.convolution` (its op, stride, dilation and groups): on the CPU, the convolutions-as-matmuls
pass (lowering/convolutions.py) makes those with groups = 1 an im2col copy and one
`linalg.matmul` each (a BLAS gemm after the blas-matmuls pass); elsewhere the marker is ignored.
"""
from __future__ import annotations

import numpy as np

from dg.core.types import ShapeError, Sym, TensorType

from . import batch_rules
from .builder import cast, fail_if, stand_in_if
from .helpers import (PAR, RED, check_image, check_positive, grown, ix, iop, like_rule, marked_generic, normal_like,
                      out_dim, out_hw, out_len, pad_hw, padded_hw, scatter_windows, sizes_of, sizes_text, window_index,
                      windows)
from .jvp_rules import bilinear
from .registry import OpDef, register

CONV_ATTRS = {"stride": "ints", "padding": "ints", "dilation": "ints", "groups": "int"}
# The marker on the generic of a convolution's plain form: {op = "conv2d" (or one of its gradients),
# stride = array<i64: ...>, dilation = array<i64: ...>, groups = N : i64}.
CONVOLUTION = "dg.convolution"
_CONV_IR = 'stride = array<i64: 1, 1>, padding = array<i64: 1, 1>, dilation = array<i64: 1, 1>, groups = 1 : i64'
_CONV_SAMPLE = {"stride": (2, 1), "padding": (1, 2), "dilation": (1, 2), "groups": 2}


# ---------------------------------------------------------------- shared by the three ops
def _conv_attrs(op):
    a = op.attrs
    return (tuple(a.get("stride", (1, 1))), tuple(a.get("padding", (0, 0))), tuple(a.get("dilation", (1, 1))),
            int(a.get("groups", 1)))


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
    out = out_hw(x.shape, (kh, kw), stride, padding, dilation)
    win = windows(pad_hw(x, padding), (kh, kw), stride, dilation, out)
    return win.reshape(n, groups, cg, out[0], out[1], kh, kw), out


def _conv_operands(b, x, xt, w, wt, groups: int):
    """x and w, checked at run time to agree (C = groups * C_w, O a multiple of groups) where
    their types leave it open; after a failed check, stand-ins of agreeing sizes."""
    c, o, cw = xt.shape[1], wt.shape[0], wt.shape[1]
    if all(isinstance(v, int) for v in (c, o, cw)):
        return x, w
    g = ix(b, groups)
    cd, od, cwd = b.dim(x, xt, 1), b.dim(w, wt, 0), b.dim(w, wt, 1)
    want = iop(b, "muli", cwd, g)
    bad_c = b.cmp("ne", cd, want, "index")
    fail_if(b, bad_c, "conv2d: the input has {0} channels, the weight expects {1}", ((cd, "index"), (want, "index")))
    w_sizes, x_sizes = {}, {}
    if isinstance(c, int):
        w_sizes[1] = ix(b, c // groups)
    else:
        x_sizes[1] = want
    bad_w = bad_c
    if not isinstance(o, int) and groups > 1:
        bad_o = b.cmp("ne", iop(b, "remui", od, g), ix(b, 0), "index")
        fail_if(b, bad_o, "conv2d: the weight's {0} output channels are not a multiple of groups ({1})",
                ((od, "index"), (g, "index")))
        w_sizes[0] = iop(b, "muli", iop(b, "divui", od, g), g)
        bad_w = b.binary("arith.ori", bad_c, bad_o, "i1")
    if x_sizes:
        x = stand_in_if(b, bad_c, x, xt, x_sizes)
    if w_sizes:
        w = stand_in_if(b, bad_w, w, wt, w_sizes)
    return x, w


def _split(b, v, vt, sizes, axis: int, groups: int):
    """v with axis `axis` (0 or 1) viewed as (groups, size / groups): (value, type, sizes)."""
    d = vt.shape[axis]
    part = d // groups if isinstance(d, int) else Sym()
    t = TensorType(vt.dtype, vt.shape[:axis] + (groups, part) + vt.shape[axis + 1:])
    s = sizes[:axis] + [ix(b, groups), iop(b, "divui", sizes[axis], ix(b, groups))] + sizes[axis + 1:]
    reassoc = "[[0, 1], [2], [3], [4]]" if axis == 0 else "[[0], [1, 2], [3], [4]]"
    r = b.assign(f"tensor.expand_shape {v} {reassoc} output_shape [{sizes_text(t, s)}] : {vt.mlir()} into {t.mlir()}", "grp")
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


def _marker(op) -> str:
    """The `dg.convolution` attribute of op's plain form (IR text)."""
    stride, _, dil, groups = _conv_attrs(op)
    return (f'{CONVOLUTION} = {{op = "{op.name}", stride = array<i64: {stride[0]}, {stride[1]}>, '
            f'dilation = array<i64: {dil[0]}, {dil[1]}>, groups = {groups} : i64}}')


def _mac(ety):
    def body(bb, a):
        return bb.binary("arith.addf", bb.binary("arith.mulf", a[0], a[1], ety), a[2], ety)

    return body


def _conv_inputs(rng):
    x = rng.standard_normal((2, 4, 7, 6)).astype(np.float32)
    w = rng.standard_normal((6, 2, 3, 2)).astype(np.float32)
    return x, w


# ---------------------------------------------------------------- conv2d
def _conv_rule(types, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    x, w = types[0], types[1]
    check_image("conv2d", x, "input")
    check_image("conv2d", w, "weight")
    if x.dtype != w.dtype:
        raise ShapeError(f"conv2d: the input and the weight have different element types ({x} and {w})")
    check_positive("conv2d", "stride", stride)
    check_positive("conv2d", "padding", padding, 0)
    check_positive("conv2d", "dilation", dilation)
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


def _conv2d(x, w, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    win, out = _grouped(x, w, stride, padding, dilation, groups)
    o, cg, kh, kw = w.shape
    y = np.einsum("ngcyxij,gocij->ngoyx", win, w.reshape(groups, o // groups, cg, kh, kw), optimize=True)
    return np.ascontiguousarray(y.reshape(x.shape[0], o, out[0], out[1]), dtype=x.dtype)


def _lower_conv2d(b, op):
    """y[n, g, o, y, x] = sum over (c, i, j) of xp[n, g, c, y*s + i*d, x*s + j*d] * w[g, o, c, i, j]."""
    (x, xt), (w, wt) = zip(op.operands, op.types)
    out_t = op.result_types[0]
    stride, padding, dil, groups = _conv_attrs(op)
    x, w = _conv_operands(b, x, xt, w, wt, groups)
    kh, kw = wt.shape[2:]
    xp, pt, ps = padded_hw(b, x, xt, padding, 0.0)
    oh = out_len(b, out_t.shape[2], ps[2], kh, stride[0], dil[0])
    ow = out_len(b, out_t.shape[3], ps[3], kw, stride[1], dil[1])
    x5, x5t, _ = _split(b, xp, pt, ps, 1, groups)
    w5, w5t, ws = _split(b, w, wt, sizes_of(b, w, wt), 0, groups)
    y5t = TensorType(out_t.dtype, (xt.shape[0], groups, w5t.shape[1], out_t.shape[2], out_t.shape[3]))
    init = b.fill(y5t, [ps[0], ws[0], ws[1], oh, ow], b.const(0.0, out_t.element))
    x_map = f"d0, d1, d5, {window_index('d3', stride[0], 'd6', dil[0])}, {window_index('d4', stride[1], 'd7', dil[1])}"
    y5 = marked_generic(b, _marker(op), y5t, init, [(x5, x5t), (w5, w5t)], [x_map, "d1, d2, d5, d6, d7"],
                        "d0, d1, d2, d3, d4", [PAR] * 5 + [RED] * 3, _mac(out_t.element))
    return _join(b, y5, y5t, 1, out_t)


def _vjp_conv2d(g, op, d):
    x, w = op.operands
    a = dict(op.attrs)
    return [g.dg_op("conv2d_input_grad", [d, w, x], a), g.dg_op("conv2d_weight_grad", [x, d, w], a)]


def _sample_conv(rng):
    return list(_conv_inputs(rng)), dict(_CONV_SAMPLE)


register(OpDef(
    name="conv2d", impl=_conv2d, nargs=2, attrs=CONV_ATTRS, infer=_conv_rule, batch=batch_rules.images,
    lower=_lower_conv2d,
    vjp=_vjp_conv2d, jvp=bilinear(0, 1), sample=_sample_conv,
    doc=f"""The 2-D convolution (cross-correlation, as PyTorch's) of x [N, C, H, W] with w [O, C/groups, KH, KW].

        %y = "dg.conv2d"(%x, %w) {{{_CONV_IR}}} : (tensor<1x2x5x5xf32>, tensor<3x2x3x3xf32>) -> tensor<1x3x5x5xf32>""",
))


# ---------------------------------------------------------------- conv2d_input_grad
def _conv2d_input_grad(d, w, x, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    n, c = x.shape[:2]
    o, cg, kh, kw = w.shape
    _check_channels(c, o, cg, groups)
    d5 = d.reshape(n, groups, o // groups, d.shape[2], d.shape[3])
    w5 = w.reshape(groups, o // groups, cg, kh, kw)

    def part(i, j):
        return np.einsum("ngoyx,goc->ngcyx", d5, w5[..., i, j], optimize=True).reshape(n, c, d.shape[2], d.shape[3])

    return np.ascontiguousarray(scatter_windows(x.shape, x.dtype, padding, stride, dilation, (kh, kw), part))


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
    xs = sizes_of(b, x, xt)
    ds = sizes_of(b, d, dt)
    ph, pw = padding
    reach = ((kh - 1) * dil[0], (kw - 1) * dil[1])
    ut = TensorType(dt.dtype, dt.shape[:2] + (grown(xt.shape[2], 2 * ph + reach[0]), grown(xt.shape[3], 2 * pw + reach[1])))
    us = ds[:2] + [iop(b, "addi", xs[2], ix(b, 2 * ph + reach[0])), iop(b, "addi", xs[3], ix(b, 2 * pw + reach[1]))]
    zeros = b.fill(ut, us, b.const(0.0, dt.element))
    u = b.assign(f"tensor.insert_slice {d} into {zeros}[0, 0, {reach[0]}, {reach[1]}] [{sizes_text(dt, ds)}] "
                 f"[1, 1, {stride[0]}, {stride[1]}] : {dt.mlir()} into {ut.mlir()}", "spread")
    u5, u5t, _ = _split(b, u, ut, us, 1, groups)
    w5, w5t, ws = _split(b, w, wt, sizes_of(b, w, wt), 0, groups)
    hp, wp = iop(b, "addi", xs[2], ix(b, 2 * ph)), iop(b, "addi", xs[3], ix(b, 2 * pw))
    g5t = TensorType(out_t.dtype, (xt.shape[0], groups, w5t.shape[2], grown(xt.shape[2], 2 * ph), grown(xt.shape[3], 2 * pw)))
    init = b.fill(g5t, [xs[0], ws[0], ws[2], hp, wp], b.const(0.0, out_t.element))
    flip = [f"d{3 + a} - d{6 + a}{f' * {dil[a]}' if dil[a] != 1 else ''} + {reach[a]}" for a in (0, 1)]
    g5 = marked_generic(b, _marker(op), g5t, init, [(u5, u5t), (w5, w5t)],
                        [f"d0, d1, d5, {flip[0]}, {flip[1]}", "d1, d5, d2, d6, d7"], "d0, d1, d2, d3, d4",
                        [PAR] * 5 + [RED] * 3, _mac(out_t.element))
    joined_t = TensorType(out_t.dtype, (xt.shape[0], Sym()) + g5t.shape[3:])
    gp = _join(b, g5, g5t, 1, joined_t)
    crop_t = TensorType(out_t.dtype, (xt.shape[0], Sym()) + xt.shape[2:])
    c = b.dim(gp, joined_t, 1)
    r = b.assign(f"tensor.extract_slice {gp}[0, 0, {ph}, {pw}] [{sizes_text(crop_t, [xs[0], c, xs[2], xs[3]])}] "
                 f"[1, 1, 1, 1] : {joined_t.mlir()} to {crop_t.mlir()}", "crop")
    return cast(b, r, crop_t, out_t)


def _vjp_conv2d_input_grad(g, op, u):
    """conv2d_input_grad(dy, w) is linear in dy and in w: <u, J_x(w)^T dy> = <conv2d(u, w), dy>."""
    d, w, x = op.operands
    a = dict(op.attrs)
    return [g.dg_op("conv2d", [u, w], a), g.dg_op("conv2d_weight_grad", [u, d, w], a), None]


def _sample_input_grad(rng):
    x, w = _conv_inputs(rng)
    return [normal_like(rng, _conv2d(x, w, **_CONV_SAMPLE)), w, x], dict(_CONV_SAMPLE)


register(OpDef(
    name="conv2d_input_grad", impl=_conv2d_input_grad, nargs=3, attrs=CONV_ATTRS, infer=like_rule(2, "conv2d_input_grad"),
    lower=_lower_conv2d_input_grad,
    vjp=_vjp_conv2d_input_grad, jvp=bilinear(0, 1), sample=_sample_input_grad,
    doc=f"""The gradient of conv2d with respect to its input, from the output's gradient dy, the weight
    and the input (for its shape only).

        %y = "dg.conv2d_input_grad"(%a, %b, %c) {{{_CONV_IR}}} : (tensor<1x3x5x5xf32>, tensor<3x2x3x3xf32>, tensor<1x2x5x5xf32>) -> tensor<1x2x5x5xf32>""",
))


# ---------------------------------------------------------------- conv2d_weight_grad
def _conv2d_weight_grad(x, d, w, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    win, out = _grouped(x, w, stride, padding, dilation, groups)
    o, cg, kh, kw = w.shape
    d5 = d.reshape(d.shape[0], groups, o // groups, out[0], out[1])
    g = np.einsum("ngcyxij,ngoyx->gocij", win, d5, optimize=True)
    return np.ascontiguousarray(g.reshape(w.shape), dtype=x.dtype)


def _lower_conv2d_weight_grad(b, op):
    """dw[g, o, c, i, j] = sum over (n, y, x) of xp[n, g, c, y*s + i*d, x*s + j*d] * dy[n, g, o, y, x]."""
    (x, xt), (d, dt), (w, wt) = zip(op.operands, op.types)
    out_t = op.result_types[0]
    stride, padding, dil, groups = _conv_attrs(op)
    x, w = _conv_operands(b, x, xt, w, wt, groups)
    xp, pt, ps = padded_hw(b, x, xt, padding, 0.0)
    x5, x5t, _ = _split(b, xp, pt, ps, 1, groups)
    d5, d5t, _ = _split(b, d, dt, sizes_of(b, d, dt), 1, groups)
    ws = sizes_of(b, w, wt)
    og = iop(b, "divui", ws[0], ix(b, groups))
    g5t = TensorType(out_t.dtype, (groups, d5t.shape[2], x5t.shape[2]) + wt.shape[2:])
    init = b.fill(g5t, [ix(b, groups), og, ws[1], ws[2], ws[3]], b.const(0.0, out_t.element))
    x_map = f"d5, d0, d2, {window_index('d6', stride[0], 'd3', dil[0])}, {window_index('d7', stride[1], 'd4', dil[1])}"
    g5 = marked_generic(b, _marker(op), g5t, init, [(x5, x5t), (d5, d5t)], [x_map, "d5, d0, d1, d6, d7"],
                        "d0, d1, d2, d3, d4", [PAR] * 5 + [RED] * 3, _mac(out_t.element))
    return _join(b, g5, g5t, 0, out_t)


def _vjp_conv2d_weight_grad(g, op, u):
    x, d, w = op.operands
    a = dict(op.attrs)
    return [g.dg_op("conv2d_input_grad", [d, u, x], a), g.dg_op("conv2d", [x, u], a), None]


def _sample_weight_grad(rng):
    x, w = _conv_inputs(rng)
    return [x, normal_like(rng, _conv2d(x, w, **_CONV_SAMPLE)), w], dict(_CONV_SAMPLE)


register(OpDef(
    name="conv2d_weight_grad", impl=_conv2d_weight_grad, nargs=3, attrs=CONV_ATTRS,
    infer=like_rule(2, "conv2d_weight_grad"),
    lower=_lower_conv2d_weight_grad,
    vjp=_vjp_conv2d_weight_grad, jvp=bilinear(0, 1), sample=_sample_weight_grad,
    doc=f"""The gradient of conv2d with respect to its weight, from the input, the output's gradient dy
    and the weight (for its shape only).

        %y = "dg.conv2d_weight_grad"(%a, %b, %c) {{{_CONV_IR}}} : (tensor<1x2x5x5xf32>, tensor<1x3x5x5xf32>, tensor<3x2x3x3xf32>) -> tensor<3x2x3x3xf32>""",
))
