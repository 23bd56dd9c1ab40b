"""Pooling over NCHW images: max_pool2d, avg_pool2d and the ops their gradients are made of
(max_pool2d_grad, avg_pool2d_grad), one block per op (its rule, NumPy implementation, lowering,
VJP and JVP, then its registration) after the pieces they share.

Expects: float tensors of rank 4 (images [N, C, H, W]); `kernel`, `stride` and `padding` are
static pairs (height, width), the padding at most half the kernel. N, C, H and W may be
symbolic. An output size is floor((H + 2p - k) / s) + 1, static where H is.

Guarantees: both modes compute the same thing, as PyTorch's `max_pool2d` (padding with -inf;
the gradient goes to the first largest element of a window, row-major, as PyTorch's CPU kernel)
and `avg_pool2d` (padded cells count in the divisor k_h * k_w) with `ceil_mode` off. Sizes the
types leave open are checked at run time (a located DgRuntimeError in both modes).

The NumPy implementations are vectorized: windows through `sliding_window_view`; gradients
scatter with one strided slice per kernel position. The pools lower to one generic each that
reduces over the window; their gradients gather over each pixel's windows inside a generic
(max_pool2d_grad's first finds the index of each window's largest element). max_pool2d_grad's
gather is marked `dg.max_pool2d_grad` (kernel, stride, padding): where the windows tile the
input (stride = kernel, no padding) the tiled-max-pool-grads pass (lowering/pool_grads.py)
replaces it by one element-wise generic over the windows' cells that writes dx in place.
"""
from __future__ import annotations

import numpy as np

from dg.core.types import ShapeError, Sym, TensorType

from . import batch_rules
from .builder import if_else
from .helpers import (PAR, RED, check_image, check_positive, ix, iop, like_rule, map_generic, marked_generic,
                      normal_like, out_dim, out_hw, out_len, pad_hw, padded_hw, scatter_windows, sizes_of,
                      window_index, windows)
from .jvp_rules import linear
from .registry import OpDef, register

POOL_ATTRS = {"kernel": "ints", "stride": "ints", "padding": "ints"}
# The marker on the gather of max_pool2d_grad's plain form: {kernel, stride, padding} (array<i64: h, w>).
MAX_POOL_GRAD = "dg.max_pool2d_grad"
_POOL_IR = 'kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0>'
_POOL_SAMPLE = {"kernel": (3, 2), "stride": (2, 1), "padding": (1, 1)}


# ---------------------------------------------------------------- shared by the pools and their gradients
def _pool_rule(name):
    def rule(types, kernel=(1, 1), stride=(1, 1), padding=(0, 0)):
        x = types[0]
        check_image(name, x, "input")
        check_positive(name, "the kernel size", kernel)
        check_positive(name, "stride", stride)
        check_positive(name, "padding", padding, 0)
        if any(2 * p > k for p, k in zip(padding, kernel)):
            raise ShapeError(f"{name}: padding {tuple(padding)} is more than half the kernel {tuple(kernel)}")
        oh = out_dim(name, x.shape[2], kernel[0], stride[0], padding[0])
        ow = out_dim(name, x.shape[3], kernel[1], stride[1], padding[1])
        return TensorType(x.dtype, x.shape[:2] + (oh, ow))

    return rule


def _pool_windows(x, kernel, stride, padding, fill):
    out = out_hw(x.shape, kernel, stride, padding)
    return windows(pad_hw(x, padding, fill), kernel, stride, (1, 1), out)


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
    xp, pt, ps = padded_hw(b, x, xt, padding, fill)
    oh = out_len(b, out_t.shape[2], ps[2], kernel[0], stride[0])
    ow = out_len(b, out_t.shape[3], ps[3], kernel[1], stride[1])
    win, wint = _window(b, kernel, op.types[0].dtype)
    init = b.fill(out_t, [ps[0], ps[1], oh, ow], b.const(fill, ety))
    x_map = f"d0, d1, {window_index('d2', stride[0], 'd4', 1)}, {window_index('d3', stride[1], 'd5', 1)}"
    return b.generic(out_t, init, [(xp, pt), (win, wint)], [x_map, "d4, d5"], "d0, d1, d2, d3",
                     [PAR] * 4 + [RED] * 2, lambda bb, a: combine(bb, a[0], a[2], ety)), (xp, pt, oh, ow)


def _gather_grad(b, op, x, xt, d, dt, contribution, marker=None):
    """dx[n, c, h, w] = sum over the windows (i, j) that hold pixel (h, w), i.e. (h + p - i) =
    y * s with 0 <= y < OH (likewise w), of contribution(b, n, c, y, x, i, j): a gather, one
    pixel at a time (its generic marked with `marker`, IR text, where given)."""
    kernel, stride, padding = _pool_attrs(op)
    out_t = op.result_types[0]
    ety = out_t.element
    ds = sizes_of(b, d, dt)
    win, wint = _window(b, kernel, xt.dtype)
    init = b.fill(out_t, sizes_of(b, x, xt), b.const(0.0, ety))

    def body(bb, a):
        n, c, h, w, i, j = (bb.assign(f"linalg.index {k} : index", "li") for k in range(6))
        place, ok = [], None
        for pix, k, s, p, size in ((h, i, stride[0], padding[0], ds[2]), (w, j, stride[1], padding[1], ds[3])):
            t = iop(bb, "subi", iop(bb, "addi", pix, ix(bb, p)), k)
            y = iop(bb, "floordivsi", t, ix(bb, s))
            fits = [bb.cmp("sge", t, ix(bb, 0), "index"), bb.cmp("slt", y, size, "index")]
            if s != 1:
                fits.append(bb.cmp("eq", iop(bb, "remsi", t, ix(bb, s)), ix(bb, 0), "index"))
            for f in fits:
                ok = f if ok is None else bb.binary("arith.andi", ok, f, "i1")
            place.append(y)
        add = if_else(bb, ok, ety, lambda b2: contribution(b2, n, c, place[0], place[1], i, j),
                      lambda b2: b2.const(0.0, ety))
        return bb.binary("arith.addf", a[1], add, ety)

    args = (out_t, init, [(win, wint)], ["d4, d5"], "d0, d1, d2, d3", [PAR] * 4 + [RED] * 2, body)
    return marked_generic(b, marker, *args) if marker else b.generic(*args)


def _padded_in_dg(g, v, padding, fill: float):
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


def _at_largest(g, x, y, t, attrs):
    """t (shaped as x) at each window's first largest element of x (row-major; the first NaN where
    there is one), shaped as y = max_pool2d(x), as max_pool2d_grad sends the gradient: the cells
    compared with y, one window offset at a time, the first match winning (offsets visited last
    to first, each overwriting)."""
    kernel = attrs.get("kernel", (1, 1))
    stride = attrs.get("stride", (1, 1))
    padding = attrs.get("padding", (0, 0))
    xp, tp = _padded_in_dg(g, x, padding, float("-inf")), _padded_in_dg(g, t, padding, 0.0)
    out = g.zeros_like(y)
    for at in reversed([(i, j) for i in range(kernel[0]) for j in range(kernel[1])]):
        cell = _window_cells(g, xp, y, at, stride)
        hit = g.dg_op("or", [g.dg_op("eq", [y, cell]), g.dg_op("ne", [cell, cell])])
        out = g.where(hit, _window_cells(g, tp, y, at, stride), out)
    return out


def _pool_input(rng):
    return rng.standard_normal((2, 3, 7, 5)).astype(np.float32)


def _sample_pool(rng):
    return [_pool_input(rng)], dict(_POOL_SAMPLE)


# ---------------------------------------------------------------- max_pool2d
def _max_pool2d(x, kernel=(1, 1), stride=(1, 1), padding=(0, 0)):
    return np.ascontiguousarray(np.max(_pool_windows(x, kernel, stride, padding, -np.inf), axis=(4, 5)))


def _lower_max_pool2d(b, op):
    return _pool_generic(b, op, float("-inf"), lambda bb, v, acc, ety: bb.binary("arith.maximumf", v, acc, ety))[0]


def _jvp_max_pool2d(g, op, ts):
    """The tangent at each window's first largest element (`_at_largest`)."""
    return None if ts[0] is None else _at_largest(g, op.operands[0], op.results[0], ts[0], op.attrs)


register(OpDef(
    name="max_pool2d", impl=_max_pool2d, attrs=POOL_ATTRS, infer=_pool_rule("max_pool2d"), batch=batch_rules.images,
    lower=_lower_max_pool2d,
    vjp=lambda g, op, d: [g.dg_op("max_pool2d_grad", [op.operands[0], d], dict(op.attrs))], jvp=_jvp_max_pool2d,
    sample=_sample_pool,
    doc=f"""The largest element of each KH x KW window of x [N, C, H, W] (padding with -inf).

        %y = "dg.max_pool2d"(%x) {{{_POOL_IR}}} : (tensor<1x2x4x4xf32>) -> tensor<1x2x2x2xf32>""",
))


# ---------------------------------------------------------------- max_pool2d_grad
def _max_pool2d_grad(x, d, kernel=(1, 1), stride=(1, 1), padding=(0, 0)):
    win = _pool_windows(x, kernel, stride, padding, -np.inf)
    arg = np.argmax(win.reshape(win.shape[:4] + (-1,)), axis=4)  # the first largest (or NaN)
    return np.ascontiguousarray(scatter_windows(x.shape, x.dtype, padding, stride, (1, 1), kernel,
                                         lambda i, j: np.where(arg == i * kernel[1] + j, d, 0).astype(x.dtype)))


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
    x_map = f"d0, d1, {window_index('d2', stride[0], 'd4', 1)}, {window_index('d3', stride[1], 'd5', 1)}"
    maps = ", ".join(f"affine_map<({dims}) -> ({m})>" for m in (x_map, "d4, d5", "d0, d1, d2, d3", "d0, d1, d2, d3"))
    its = ", ".join(f'"{t}"' for t in [PAR] * 4 + [RED] * 2)
    r = b.fresh("am")
    b.emit(f"{r}:2 = linalg.generic {{indexing_maps = [{maps}], iterator_types = [{its}]}} "
           f"ins({xp}, {win} : {pt.mlir()}, {wint.mlir()}) outs({vinit}, {iinit} : {out_t.mlir()}, {it.mlir()}) {{")
    a, _w, bv, bi = b.fresh("a"), b.fresh("a"), b.fresh("o"), b.fresh("o")
    b.line(f"^bb0({a}: {ety}, {_w}: {wint.element}, {bv}: {ety}, {bi}: i64):")
    with b.nested():
        i, j = (b.assign(f"linalg.index {k} : index", "li") for k in (4, 5))
        flat = iop(b, "addi", iop(b, "muli", i, ix(b, kernel[1])), j)
        fi = b.assign(f"arith.index_cast {flat} : index to i64", "x")
        better = b.cmp("ogt", a, bv, ety)
        nan_new, nan_old = b.cmp("uno", a, a, ety), b.cmp("uno", bv, bv, ety)
        better = b.binary("arith.andi", b.binary("arith.ori", better, nan_new, "i1"),
                          b.binary("arith.xori", nan_old, b.const(True, "i1"), "i1"), "i1")
        take = b.binary("arith.ori", better, b.cmp("slt", bi, b.const(0, "i64"), "i64"), "i1")
        b.emit(f"linalg.yield {b.select(take, a, bv, ety)}, {b.select(take, fi, bi, 'i64')} : {ety}, i64")
    b.line(f"}} -> ({out_t.mlir()}, {it.mlir()}) {b.loc}")
    return f"{r}#1", it


def _lower_max_pool2d_grad(b, op):
    (x, xt), (d, dt) = zip(op.operands, op.types)
    kernel, stride, padding = _pool_attrs(op)
    fill = float("-inf")
    xp, pt, ps = padded_hw(b, x, xt, padding, fill)
    oh, ow = b.dim(d, dt, 2), b.dim(d, dt, 3)
    arg, it = _argmax_windows(b, op, xp, pt, oh, ow)
    ety = dt.element

    def contribution(bb, n, c, y, x_, i, j):
        at = bb.assign(f"tensor.extract {arg}[{n}, {c}, {y}, {x_}] : {it.mlir()}", "x")
        flat = iop(bb, "addi", iop(bb, "muli", i, ix(bb, kernel[1])), j)
        hit = bb.cmp("eq", at, bb.assign(f"arith.index_cast {flat} : index to i64", "x"), "i64")
        v = bb.assign(f"tensor.extract {d}[{n}, {c}, {y}, {x_}] : {dt.mlir()}", "x")
        return bb.select(hit, v, bb.const(0.0, ety), ety)

    marker = (f"{MAX_POOL_GRAD} = {{kernel = array<i64: {kernel[0]}, {kernel[1]}>, stride = array<i64: {stride[0]}, "
              f"{stride[1]}>, padding = array<i64: {padding[0]}, {padding[1]}>}}")
    return _gather_grad(b, op, x, xt, d, dt, contribution, marker)


def _vjp_max_pool2d_grad(g, op, u):
    """max_pool2d_grad(x, d) is linear in d, and constant in x between ties: d's adjoint is the
    adjoint u (shaped as x) at each window's first largest element; x has none."""
    x = op.operands[0]
    return [None, _at_largest(g, x, g.dg_op("max_pool2d", [x], dict(op.attrs)), u, op.attrs)]


def _sample_max_grad(rng):
    x = _pool_input(rng)
    return [x, normal_like(rng, _max_pool2d(x, **_POOL_SAMPLE))], dict(_POOL_SAMPLE)


register(OpDef(
    name="max_pool2d_grad", impl=_max_pool2d_grad, nargs=2, attrs=POOL_ATTRS, infer=like_rule(0, "max_pool2d_grad"),
    lower=_lower_max_pool2d_grad, vjp=_vjp_max_pool2d_grad, jvp=linear(1), sample=_sample_max_grad,
    doc=f"""The gradient of max_pool2d with respect to x, from x and the output's gradient: each window's
    gradient goes to its first largest element (row-major).

        %y = "dg.max_pool2d_grad"(%a, %b) {{{_POOL_IR}}} : (tensor<1x2x4x4xf32>, tensor<1x2x2x2xf32>) -> tensor<1x2x4x4xf32>""",
))


# ---------------------------------------------------------------- avg_pool2d
def _avg_pool2d(x, kernel=(1, 1), stride=(1, 1), padding=(0, 0)):
    s = np.sum(_pool_windows(x, kernel, stride, padding, 0.0), axis=(4, 5))
    return np.ascontiguousarray(s / np.asarray(kernel[0] * kernel[1], dtype=x.dtype), dtype=x.dtype)


def _lower_avg_pool2d(b, op):
    kernel = _pool_attrs(op)[0]
    out_t = op.result_types[0]
    ety = out_t.element
    s = _pool_generic(b, op, 0.0, lambda bb, v, acc, e: bb.binary("arith.addf", v, acc, e))[0]
    k = b.const(float(kernel[0] * kernel[1]), ety)
    return map_generic(b, out_t, [(s, out_t)], lambda bb, a: bb.binary("arith.divf", a[0], k, ety))


register(OpDef(
    name="avg_pool2d", impl=_avg_pool2d, attrs=POOL_ATTRS, infer=_pool_rule("avg_pool2d"), batch=batch_rules.images,
    lower=_lower_avg_pool2d,
    vjp=lambda g, op, d: [g.dg_op("avg_pool2d_grad", [d, op.operands[0]], dict(op.attrs))], jvp=linear(0),
    sample=_sample_pool,
    doc=f"""The mean of each KH x KW window of x [N, C, H, W]; padded cells count (zeros) in the divisor.

        %y = "dg.avg_pool2d"(%x) {{{_POOL_IR}}} : (tensor<1x2x4x4xf32>) -> tensor<1x2x2x2xf32>""",
))


# ---------------------------------------------------------------- avg_pool2d_grad
def _avg_pool2d_grad(d, x, kernel=(1, 1), stride=(1, 1), padding=(0, 0)):
    share = d / np.asarray(kernel[0] * kernel[1], dtype=d.dtype)
    return np.ascontiguousarray(scatter_windows(x.shape, x.dtype, padding, stride, (1, 1), kernel, lambda i, j: share))


def _lower_avg_pool2d_grad(b, op):
    (d, dt), (x, xt) = zip(op.operands, op.types)
    kernel = _pool_attrs(op)[0]
    ety = dt.element

    def contribution(bb, n, c, y, x_, i, j):
        v = bb.assign(f"tensor.extract {d}[{n}, {c}, {y}, {x_}] : {dt.mlir()}", "x")
        return bb.binary("arith.divf", v, bb.const(float(kernel[0] * kernel[1]), ety), ety)

    return _gather_grad(b, op, x, xt, d, dt, contribution)


def _vjp_avg_pool2d_grad(g, op, u):
    d, x = op.operands
    return [g.dg_op("avg_pool2d", [u], dict(op.attrs)), None]


def _sample_avg_grad(rng):
    x = _pool_input(rng)
    return [normal_like(rng, _avg_pool2d(x, **_POOL_SAMPLE)), x], dict(_POOL_SAMPLE)


register(OpDef(
    name="avg_pool2d_grad", impl=_avg_pool2d_grad, nargs=2, attrs=POOL_ATTRS, infer=like_rule(1, "avg_pool2d_grad"),
    lower=_lower_avg_pool2d_grad,
    vjp=_vjp_avg_pool2d_grad, jvp=linear(0), sample=_sample_avg_grad,
    doc=f"""The gradient of avg_pool2d with respect to x, from the output's gradient and x (for its shape
    only): each window's gradient spread evenly over it.

        %y = "dg.avg_pool2d_grad"(%a, %b) {{{_POOL_IR}}} : (tensor<1x2x2x2xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>""",
))
