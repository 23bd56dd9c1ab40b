"""The `convolutions-as-matmuls` pass (compiled CPU code): a convolution with groups = 1 becomes an
im2col copy and one `linalg.matmul`, which the blas-matmuls pass makes a BLAS gemm (about 10x
the plain generic; `benchmarks/lenet.py`), as MLIR's linalg rewrites a named convolution into
im2col and a matmul.

Expects: a module at the linalg stage (tensors, before bufferization) in which to-linalg wrote
conv2d, conv2d_input_grad and conv2d_weight_grad in their plain form (dialects/ops_conv.py): one
linalg.generic marked `dg.convolution = {op, stride, dilation, groups}`, whose two inputs are
tensor.expand_shapes that view the channels as (groups, channels per group) — of the padded
input and the weight (conv2d), of the padded input and the output gradient (conv2d_weight_grad),
of the output gradient spread out by the stride into zeros (a strided tensor.insert_slice) and
the weight (conv2d_input_grad) — whose output is a fill of a tensor.empty, and whose one user is
the tensor.collapse_shape that joins groups and channels again (then at most a tensor.cast).

Guarantees: each marked generic with groups = 1, except conv2d with one input channel, is
replaced (with the ops of its plain form that nothing else reads) by

    col[c, i, j, n, y, x] = xp[n, c, y*s + i*d, x*s + j*d]    (im2col, a [C*KH*KW, N*OH*OW] copy)
    conv2d:              y = W [O, C*KH*KW] @ col, then [O, N, ...] -> [N, O, ...]
    conv2d_weight_grad:  dw = dy' [O, N*OH*OW] @ col^T        (dy' = dy as [O, N, OH, OW])
    conv2d_input_grad:   dxp = col2im(W^T @ dy'): each kernel position (i, j) of the product
                         added into a strided slice of the padded input's gradient (KH * KW
                         vectorizable adds), which the plain form's crop then cuts (without
                         padding, dxp is the gradient: the crop, which would cut nothing, goes)

The transposes are the matmul's indexing maps (a BLAS transpose flag, no copy); the reshapes are
`tensor.reshape`s (an expand/collapse_shape would be folded into the matmul by elementwise fusion
and make it a generic, which no BLAS call replaces). The sizes are the plain form's own (those its
tensor.empty ops were made with), so the run-time checks it wrote before the generic still guard
them. conv2d with one input channel keeps its generic: the gemm's depth would be only KH * KW and
the copy KH * KW times the input (LeNet's first layer: 0.7 ms as the generic, 1.1 ms as a gemm);
so do grouped convolutions. Every `dg.convolution` marker is dropped.
"""
from __future__ import annotations

from dg.core.mlir import erase_unused, ir, operations_under
from dg.core.types import TensorType, parse_mlir_type
from dg.dialects.builder import cast
from dg.dialects.helpers import PAR, iop, ix, size_product, sizes_text, window_index
from dg.dialects.ops_conv import CONVOLUTION

from .spliced import Spliced, only_user, source


def convolutions_as_matmuls(m) -> int:
    """Rewrite the marked convolutions of groups = 1 (see the module's doc); how many."""
    count = 0
    for op in [o for o in operations_under(m.body) if o.name == "linalg.generic" and CONVOLUTION in o.attributes]:
        marker = ir.DictAttr(op.attributes[CONVOLUTION])
        del op.attributes[CONVOLUTION]
        count += _rewrite(op, marker)
    return count


def _rewrite(generic, marker) -> int:
    kind = ir.StringAttr(marker["op"]).value
    stride = tuple(ir.DenseI64ArrayAttr(marker["stride"]))
    dil = tuple(ir.DenseI64ArrayAttr(marker["dilation"]))
    if ir.IntegerAttr(marker["groups"]).value != 1 or len(generic.results) != 1:
        return 0
    join = only_user(generic.results[0])
    if join is None or join.name != "tensor.collapse_shape":
        return 0
    target = join
    after = only_user(join.results[0])
    if after is not None and after.name == "tensor.cast":
        target = after
    a, c = (source(v, "tensor.expand_shape") for v in generic.operands[:2])
    init = generic.operands[2]
    if a is None or c is None:
        return 0
    text = Spliced(generic)
    out_t = parse_mlir_type(str(target.results[0].type))
    if kind == "conv2d":
        if parse_mlir_type(str(c.type)).shape[1] == 1:
            return 0
        r = _conv2d(text, a, c, init, out_t, stride, dil)
    elif kind == "conv2d_weight_grad":
        r = _weight_grad(text, a, c, init, out_t, stride, dil)
    elif kind == "conv2d_input_grad":
        d = source(a, "tensor.insert_slice")
        if d is None:
            return 0
        crop = _full_crop(target)
        if crop is not None:  # no padding: the padded gradient is the gradient
            target, out_t = crop, parse_mlir_type(str(crop.results[0].type))
        r = _input_grad(text, d, c, init, out_t, stride, dil)
    else:
        return 0
    new = text.splice(generic, r, out_t.mlir())
    target.results[0].replace_all_uses_with(new)
    erase_unused([target])  # and the plain form's ops that only it read
    return 1


def _full_crop(joined):
    """The plain form's crop of the input gradient's padding (a tensor.extract_slice of `joined`,
    sized by a tensor.dim of it) where it cuts nothing (offsets 0: no padding), else None."""
    users = [getattr(use.owner, "operation", use.owner) for use in joined.results[0].uses]
    crops = [u for u in users if u.name == "tensor.extract_slice"]
    if len(crops) != 1 or crops[0].operands[0] != joined.results[0]:
        return None
    offsets = ir.DenseI64ArrayAttr(crops[0].attributes["static_offsets"])
    return crops[0] if all(o == 0 for o in offsets) else None


# ---------------------------------------------------------------- the three strategies
def _reshape(b, v, vt, t: TensorType, sizes: list) -> str:
    """v (contiguous) read as type t, `sizes` the index names of t's axes. A `tensor.reshape`, not
    an expand/collapse_shape: MLIR's elementwise fusion would fold those into a neighbouring
    matmul and make it a generic, which no BLAS call replaces."""
    shape = b.assign(f"tensor.from_elements {', '.join(sizes)} : tensor<{len(sizes)}xindex>", "shape")
    return b.assign(f"tensor.reshape {v}({shape}) : ({vt.mlir()}, tensor<{len(sizes)}xindex>) -> {t.mlir()}", "rs")


def _flat(b, v, vt, sizes: list, lead: int):
    """v as a matrix: its first `lead` axes as the rows, the others as the columns: (value, type)."""
    def prod(ss):
        return ss[0] if len(ss) == 1 else iop(b, "muli", ss[0], prod(ss[1:]))

    t = TensorType(vt.dtype, (size_product(vt.shape[:lead]), size_product(vt.shape[lead:])))
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
    x_map = f"d3, d0, {window_index('d4', stride[0], 'd1', dil[0])}, {window_index('d5', stride[1], 'd2', dil[1])}"
    col = b.generic(t, init, [(xp, pt)], [x_map], "d0, d1, d2, d3, d4, d5", [PAR] * 6, lambda bb, a: a[0])
    return _flat(b, col, t, [ps[1], ix(b, k[0]), ix(b, k[1]), ps[0]] + list(out_sizes), 3)


def _swap01(b, v, vt, sizes):
    """v [A, B, H, W] as [B, A, H, W] (a copy): (value, type)."""
    t = TensorType(vt.dtype, (vt.shape[1], vt.shape[0]) + vt.shape[2:])
    init = b.empty(t, [sizes[1], sizes[0]] + sizes[2:])
    return b.generic(t, init, [(v, vt)], ["d1, d0, d2, d3"], "d0, d1, d2, d3", [PAR] * 4, lambda bb, a: a[0]), t


def _channels_first(b, d, dt, ds):
    """dy [N, O, OH, OW] as dy' [O, N*OH*OW]: (value, type)."""
    v, t = _swap01(b, d, dt, ds)
    return _flat(b, v, t, [ds[1], ds[0]] + ds[2:], 1)


def _conv2d(text, xp_v, w_v, init, out_t, stride, dil) -> str:
    """y = W @ im2col(x), as [O, N, OH, OW] turned to [N, O, OH, OW] (of type out_t)."""
    b = text.b
    xp, pt, ps = text.tensor(xp_v)
    w, wt, ws = text.tensor(w_v)
    _, yt5, ys5 = text.tensor(init)  # [N, 1, O, OH, OW]
    oh, ow = ys5[3:]
    col, colt = _im2col(b, xp, pt, ps, wt.shape[2:], stride, dil, yt5.shape[3:], [oh, ow])
    w2, w2t = _flat(b, w, wt, ws, 1)
    y2t = TensorType(out_t.dtype, (wt.shape[0], colt.shape[1]))
    y2 = _matmul(b, w2, w2t, col, colt, y2t, [ws[0], b.dim(col, colt, 1)])
    y4t = TensorType(out_t.dtype, (wt.shape[0], pt.shape[0]) + yt5.shape[3:])
    y4 = _reshape(b, y2, y2t, y4t, [ws[0], ps[0], oh, ow])
    y, yt = _swap01(b, y4, y4t, [ws[0], ps[0], oh, ow])
    return cast(b, y, yt, out_t)


def _weight_grad(text, xp_v, d_v, init, out_t, stride, dil) -> str:
    """dw = dy' @ im2col(x)^T, as [O, C, KH, KW] (of type out_t)."""
    b = text.b
    xp, pt, ps = text.tensor(xp_v)
    d, dt, ds = text.tensor(d_v)
    _, gt5, gs5 = text.tensor(init)  # [1, O, C, KH, KW]
    ws = [b.const(n, "index") if isinstance(n, int) else s for n, s in zip(out_t.shape, gs5[1:])]
    col, colt = _im2col(b, xp, pt, ps, gt5.shape[3:], stride, dil, dt.shape[2:], ds[2:])
    dp, dpt = _channels_first(b, d, dt, ds)
    g2t = TensorType(out_t.dtype, (out_t.shape[0], size_product(out_t.shape[1:])))
    g2 = _matmul(b, dp, dpt, col, colt, g2t, [ws[0], b.dim(col, colt, 0)], trans=(False, True))
    return _reshape(b, g2, g2t, out_t, ws)


def _input_grad(text, d_v, w_v, init, out_t, stride, dil) -> str:
    """dcol = W^T @ dy' [C*KH*KW, N*OH*OW]; dxp = the sum over (i, j) of dcol[:, i, j] added into
    zeros of the padded input's shape at rows i*d + y*s, columns j*d + x*s (of type out_t: the
    plain form's joined [N, C, H + 2p, W + 2p], which it crops)."""
    b = text.b
    d, dt, ds = text.tensor(d_v)
    w, wt, ws = text.tensor(w_v)
    _, gt5, gs5 = text.tensor(init)  # [N, 1, C, H + 2p, W + 2p]
    kh, kw = wt.shape[2:]
    dp, dpt = _channels_first(b, d, dt, ds)
    w2, w2t = _flat(b, w, wt, ws, 1)
    ckk = iop(b, "muli", ws[1], ix(b, kh * kw))
    dct = TensorType(out_t.dtype, (w2t.shape[1], dpt.shape[1]))
    dc = _matmul(b, w2, w2t, dp, dpt, dct, [ckk, b.dim(dp, dpt, 1)], trans=(True, False))
    d6t = TensorType(out_t.dtype, (wt.shape[1], kh, kw, dt.shape[0]) + dt.shape[2:])
    d6 = _reshape(b, dc, dct, d6t, [ws[1], ix(b, kh), ix(b, kw)] + [ds[0]] + ds[2:])
    acc_t = TensorType(out_t.dtype, (gt5.shape[0], wt.shape[1]) + gt5.shape[3:])
    acc = b.fill(acc_t, [gs5[0], ws[1]] + gs5[3:], b.const(0.0, out_t.element))
    part_t = TensorType(out_t.dtype, (gt5.shape[0], wt.shape[1]) + dt.shape[2:])
    part_s = sizes_text(part_t, [gs5[0], ws[1], ds[2], ds[3]])
    ety = out_t.element
    for i in range(kh):
        for j in range(kw):
            at = f"[0, 0, {i * dil[0]}, {j * dil[1]}] [{part_s}] [1, 1, {stride[0]}, {stride[1]}]"
            part = b.assign(f"tensor.extract_slice {acc}{at} : {acc_t.mlir()} to {part_t.mlir()}", "part")
            added = b.generic(part_t, part, [(d6, d6t)], [f"d1, {i}, {j}, d0, d2, d3"], "d0, d1, d2, d3", [PAR] * 4,
                              lambda bb, a: bb.binary("arith.addf", a[1], a[0], ety))
            acc = b.assign(f"tensor.insert_slice {added} into {acc}{at} : {part_t.mlir()} into {acc_t.mlir()}", "acc")
    return cast(b, acc, acc_t, out_t)
