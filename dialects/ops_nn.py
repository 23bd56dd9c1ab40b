"""Linear algebra and NN ops: matmul (NumPy semantics, batched), softmax,
log_softmax, cross_entropy; and the functional random-number ops.

Random numbers are counter based, so both modes (and every backend) give
the same bits: a key is a `u64` scalar; element i of a draw is
splitmix64(key + (i + 1) * golden), turned into a float in [0, 1) from its
top 24 bits; `normal` uses the Box-Muller transform on two such streams.
"""
from __future__ import annotations

import numpy as np

from dg.core.types import ShapeError, Sym, TensorType, broadcast_shapes, is_float, is_int, np_dtype

from . import batch_rules
from .builder import index_in_range, readable
from .jvp_rules import bilinear, reduction
from .helpers import DYN, BROADCAST_ONLY_DECLARED, agreeing_operands, contracted_operands, count_of, drop_kept, \
    lse_keep, map_generic, max_keep, shape_from, sizes_from, sum_keep, truncate_float, type_shape
from .registry import OpDef, register


# ---------------------------------------------------------------- matmul
def _matmul_rule(types):
    a, b = types
    if a.rank == 0 or b.rank == 0:
        raise ShapeError(f"matmul needs tensors of rank >= 1, got {a} and {b}")
    ash = a.shape if a.rank > 1 else (1,) + a.shape
    bsh = b.shape if b.rank > 1 else b.shape + (1,)
    k1, k2 = ash[-1], bsh[-2]
    if isinstance(k1, int) and isinstance(k2, int) and k1 != k2:
        raise ShapeError(f"matmul: inner sizes differ: {a} @ {b} ({k1} != {k2})")
    batch = broadcast_shapes(ash[:-2], bsh[:-2])
    out = batch + (ash[-2], bsh[-1])
    if a.rank == 1:
        out = out[:-2] + out[-1:]
    if b.rank == 1:
        out = out[:-1]
    return TensorType(a.dtype, out)


def _matmul(a, b):
    return np.matmul(a, b)


def _batch_rank(types, out_t) -> int:
    return out_t.rank - sum(1 for t in types if t.rank >= 2)


def _batch_exprs(t, out_t, batch) -> list:
    """The indexing expressions of an operand's batch axes: "0" for one declared 1 that broadcasts."""
    nb = t.rank - (2 if t.rank >= 2 else 1)
    exprs = []
    for j in range(nb):
        i = batch - nb + j
        exprs.append("0" if isinstance(t.shape[j], int) and t.shape[j] == 1 and not (
            isinstance(out_t.shape[i], int) and out_t.shape[i] == 1) else f"d{i}")
    return exprs


def _lower_matmul(b, op):
    """2-D x 2-D as linalg.matmul; other ranks as a linalg.generic contraction. Sizes the
    annotations leave unrelated (the inner sizes, the batch sizes) are checked at run time."""
    vals, types = list(op.operands), list(op.types)
    at, ct = types
    out_t = op.result_types[0]
    ety = out_t.element
    isf = ety.startswith("f") or ety == "bf16"
    zero = b.const(0.0 if isf else 0, ety)
    inner = [(0, at.rank - 1), (1, max(ct.rank - 2, 0))]
    vals = contracted_operands(b, vals, types, inner, "matmul: inner sizes {0} and {1} differ at run time")
    if at.rank == 2 and ct.rank == 2:
        a, c = vals
        sizes = [b.dim(a, at, 0), b.dim(c, ct, 1)]
        init = b.fill(out_t, sizes, zero)
        return b.assign(f"linalg.matmul ins({a}, {c} : {at.mlir()}, {ct.mlir()}) outs({init} : {out_t.mlir()}) -> {out_t.mlir()}", "mm")
    if at.rank > 2 and ct.rank == 2 and 0 not in at.shape and 0 not in out_t.shape:
        return _collapsed_matmul(b, vals, types, out_t, zero)
    if sorted((at.rank, ct.rank)) == [1, 2] and 0 not in at.shape + ct.shape:
        return _vector_matmul(b, vals, types, out_t, zero)
    # General NumPy matmul: batch dims broadcast; 1-D operands drop their axis.
    R = out_t.rank
    batch = _batch_rank(types, out_t)
    k = R  # the contraction dim index
    out_dims = [f"d{i}" for i in range(R)]
    m_dim = f"d{batch}" if at.rank >= 2 else None
    n_dim = f"d{R - 1}" if ct.rank >= 2 else None
    a_batch, c_batch = (_batch_exprs(t, out_t, batch) for t in types)
    vals, batch_sizes = agreeing_operands(b, vals, types, *_batch_groups(types, out_t))
    a, c = vals
    a_map = a_batch + ([m_dim] if m_dim else []) + [f"d{k}"]
    c_map = c_batch + [f"d{k}"] + ([n_dim] if n_dim else [])
    sizes = []
    for i, od in enumerate(out_t.shape):
        if isinstance(od, int):
            sizes.append(None)
        elif i < batch:
            sizes.append(batch_sizes[i])
        elif m_dim and i == batch:
            sizes.append(b.dim(a, at, at.rank - 2))
        else:
            sizes.append(b.dim(c, ct, ct.rank - 1))
    if (at.rank > 2 and ct.rank == at.rank and all(e == f"d{i}" for ex in (a_batch, c_batch) for i, e in enumerate(ex))
            and 0 not in at.shape and 0 not in ct.shape and 0 not in out_t.shape):
        return _batched_matmul(b, a, at, c, ct, out_t, batch_sizes, sizes[batch:], zero)
    init = b.fill(out_t, sizes, zero)
    its = ["parallel"] * R + ["reduction"]

    def body(bb, args):
        p = bb.binary("arith.mulf" if isf else "arith.muli", args[0], args[1], ety)
        return bb.binary("arith.addf" if isf else "arith.addi", p, args[2], ety)

    return b.generic(out_t, init, [(a, at), (c, ct)], [", ".join(a_map), ", ".join(c_map)],
                     ", ".join(out_dims), its, body)


def _mm_reshape(b, v, vt, t: TensorType, sizes: list) -> str:
    """v read as type t (`sizes` the index names of t's axes): a `tensor.reshape`, which MLIR's
    elementwise fusion leaves beside a linalg.matmul (an expand/collapse_shape would be folded
    into it and make it a generic loop that no BLAS call replaces)."""
    shape = b.assign(f"tensor.from_elements {', '.join(sizes)} : tensor<{len(sizes)}xindex>", "shape")
    return b.assign(f"tensor.reshape {v}({shape}) : ({vt.mlir()}, tensor<{len(sizes)}xindex>) -> {t.mlir()}", "rs")


def _collapsed_matmul(b, vals, types, out_t, zero) -> str:
    """[..., m, k] @ [k, n] as one 2-D linalg.matmul (one BLAS gemm) over the leading axes
    collapsed: a read as [(...)*m, k], the product reshaped back to [..., m, n]."""
    (a, c), (at, ct) = vals, types
    lead = [b.dim(a, at, i) for i in range(at.rank - 1)]
    rows = lead[0]
    for s in lead[1:]:
        rows = b.binary("arith.muli", rows, s, "index")
    static = all(isinstance(d, int) for d in at.shape[:-1])
    m = int(np.prod(at.shape[:-1])) if static else Sym()
    a2t = TensorType(at.dtype, (m, at.shape[-1]))
    a2 = _mm_reshape(b, a, at, a2t, [rows, b.dim(a, at, at.rank - 1)])
    n = b.dim(c, ct, 1)
    o2t = TensorType(out_t.dtype, (m, out_t.shape[-1]))
    init = b.fill(o2t, [rows, n], zero)
    mm = b.assign(f"linalg.matmul ins({a2}, {c} : {a2t.mlir()}, {ct.mlir()}) outs({init} : {o2t.mlir()}) -> {o2t.mlir()}", "mm")
    return _mm_reshape(b, mm, o2t, out_t, lead + [n])


def _vector_matmul(b, vals, types, out_t, zero) -> str:
    """v @ W and W @ v as one 2-D linalg.matmul (a BLAS gemm) of the vector read as a matrix of
    one row ([1, k] @ [k, n]) or one column ([m, k] @ [k, 1]), the product read back as a vector."""
    (a, c), (at, ct) = vals, types
    one = b.const(1, "index")
    if at.rank == 1:
        a2t, m, n = TensorType(at.dtype, (1, at.shape[0])), one, b.dim(c, ct, 1)
        a = _mm_reshape(b, a, at, a2t, [one, b.dim(a, at, 0)])
        at = a2t
        o2t = TensorType(out_t.dtype, (1, out_t.shape[0]))
    else:
        c2t, m, n = TensorType(ct.dtype, (ct.shape[0], 1)), b.dim(a, at, 0), one
        c = _mm_reshape(b, c, ct, c2t, [b.dim(c, ct, 0), one])
        ct = c2t
        o2t = TensorType(out_t.dtype, (out_t.shape[0], 1))
    init = b.fill(o2t, [m, n], zero)
    mm = b.assign(f"linalg.matmul ins({a}, {c} : {at.mlir()}, {ct.mlir()}) outs({init} : {o2t.mlir()}) -> {o2t.mlir()}", "mm")
    return _mm_reshape(b, mm, o2t, out_t, [n if at.shape[0] == 1 else m])


def _batched_matmul(b, a, at, c, ct, out_t, batch_sizes, mn, zero) -> str:
    """[..., m, k] @ [..., k, n] (the same batch axes) as one linalg.batch_matmul over the batch
    axes collapsed (which the BLAS pass makes a loop of gemm calls), reshaped back."""
    nb = len(batch_sizes)
    lead = [s or b.dim(a, at, i) for i, s in enumerate(batch_sizes)]
    rows = lead[0]
    for s in lead[1:]:
        rows = b.binary("arith.muli", rows, s, "index")
    static = all(isinstance(d, int) for d in out_t.shape[:nb])
    n3 = int(np.prod(out_t.shape[:nb])) if static else Sym()

    def three(v, vt):
        if nb == 1:  # (already three axes: a reshape would only make bufferization copy a sliced operand)
            return v, vt
        t = TensorType(vt.dtype, (n3,) + tuple(vt.shape[nb:]))
        return _mm_reshape(b, v, vt, t, [rows, b.dim(v, vt, nb), b.dim(v, vt, nb + 1)]), t

    (a3, a3t), (c3, c3t) = three(a, at), three(c, ct)
    m = mn[0] or b.dim(a, at, nb)
    n = mn[1] or b.dim(c, ct, nb + 1)
    o3t = TensorType(out_t.dtype, (n3,) + tuple(out_t.shape[nb:]))
    init = b.fill(o3t, [rows, m, n], zero)
    mm = b.assign(f"linalg.batch_matmul ins({a3}, {c3} : {a3t.mlir()}, {c3t.mlir()}) outs({init} : {o3t.mlir()}) -> {o3t.mlir()}", "bmm")
    return mm if nb == 1 else _mm_reshape(b, mm, o3t, out_t, lead + [m, n])


def _batch_groups(types, out_t) -> tuple:
    """The `agree` facet of matmul: per batch axis of the result, the operand axes on it that are
    not declared 1."""
    batch = _batch_rank(types, out_t)
    exprs = [_batch_exprs(t, out_t, batch) for t in types]
    groups = [[(n, j) for n, ex in enumerate(exprs) for j, e in enumerate(ex) if e == f"d{i}"]
              for i in range(batch)]
    return groups, f"matmul: batch sizes could not be broadcast together: sizes {{0}} and {{1}} differ at run time ({BROADCAST_ONLY_DECLARED})"


def _vjp_matmul(g, op, d):
    a, b = op.operands
    if a.tt.rank == 1 and b.tt.rank == 1:  # dot product
        return [g.mul(d, b), g.mul(d, a)]
    if a.tt.rank == 1:  # [k] @ [..., k, n] -> [..., n]
        da = g.dg_op("matmul", [b, g.dg_op("expand_dims", [d], {"axes": (d.tt.rank,)})])  # [..., k, 1]
        da = g.dg_op("squeeze", [da], {"axes": (da.tt.rank - 1,)})
        db = g.mul(g.dg_op("expand_dims", [a], {"axes": (1,)}), g.dg_op("expand_dims", [d], {"axes": (d.tt.rank - 1,)}))
        return [da, db]
    if b.tt.rank == 1:  # [..., m, k] @ [k] -> [..., m]
        da = g.mul(g.dg_op("expand_dims", [d], {"axes": (d.tt.rank,)}), b)
        # d as a row times a ([..., 1, m] @ [..., m, k]): a read as it is, not a transposed copy of it
        db = g.dg_op("matmul", [g.dg_op("expand_dims", [d], {"axes": (d.tt.rank - 1,)}), a])
        db = g.dg_op("squeeze", [db], {"axes": (db.tt.rank - 2,)})
        return [da, db]
    if a.tt.rank > 2 and b.tt.rank == 2:  # db: one [k, (...)*m] @ [(...)*m, n] product
        da = g.dg_op("matmul", [d, g.transpose_last(b)])
        # both row counts one value (the inner sizes then agree at compile time); d's reshape
        # first, so that a's transpose feeds the product directly (a BLAS flag, not a copy)
        rows = _row_count(g, a)
        d2 = _rows(g, d, rows)
        return [da, g.dg_op("matmul", [g.transpose_last(_rows(g, a, rows)), d2])]
    return [g.dg_op("matmul", [d, g.transpose_last(b)]), g.dg_op("matmul", [g.transpose_last(a), d])]


def _row_count(g, x):
    """The product of x's leading sizes (all but the last): an int where static, else a dg value."""
    shape = x.tt.shape
    if all(isinstance(s, int) for s in shape[:-1]):
        return int(np.prod(shape[:-1]))
    rows = g.dim(x, 0)
    for i in range(1, x.tt.rank - 1):
        rows = g.mul(rows, g.dim(x, i))
    return rows


def _rows(g, x, rows):
    """x [..., m, k] as a matrix [rows, k], `rows` (from `_row_count`) the product of its leading sizes."""
    k = x.tt.shape[-1]
    dyn = [] if isinstance(rows, int) else [rows]
    dyn += [] if isinstance(k, int) else [g.dim(x, x.tt.rank - 1)]
    return g.dg_op("reshape", [x] + dyn, {"shape": (rows if isinstance(rows, int) else DYN, k if isinstance(k, int) else DYN)})


register(OpDef(
    name="matmul", impl=_matmul, nargs=2, infer=_matmul_rule, batch=batch_rules.matmul,
    sample=lambda rng: ([rng.standard_normal((2, 3, 4)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)], {}),
    doc="""The matrix product with NumPy's rules (1-D operands, batch axes broadcast).

        %y = "dg.matmul"(%a, %b) : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>""",
    lower=_lower_matmul,
    agree=_batch_groups,
    vjp=_vjp_matmul, jvp=bilinear(0, 1),
))


def _outer_rule(types):
    a, b = types
    return TensorType(a.dtype, (a.shape[0] if a.rank else 1, b.shape[0] if b.rank else 1)) if a.rank <= 1 and b.rank <= 1 \
        else TensorType(a.dtype, (Sym(), Sym()))


def _outer(a, b):
    return np.outer(a, b)


def _lower_outer(b, op):
    (x, xt), (y, yt) = zip(op.operands, op.types)
    out_t = op.result_types[0]
    e = b.empty(out_t, [b.dim(x, xt, 0), b.dim(y, yt, 0)])
    ety = out_t.element
    mul = "arith.mulf" if ety.startswith("f") or ety == "bf16" else "arith.muli"
    return b.generic(out_t, e, [(x, xt), (y, yt)], ["d0", "d1"], "d0, d1", ["parallel", "parallel"],
                     lambda bb, a: bb.binary(mul, a[0], a[1], ety))


def _vjp_outer(g, op, d):
    a, b = op.operands
    return [g.dg_op("matmul", [d, b]), g.dg_op("matmul", [g.dg_op("transpose", [d], {"perm": (1, 0)}), a])]


register(OpDef(
    name="outer", impl=_outer, nargs=2, infer=_outer_rule, batch=batch_rules.outer,
    sample=lambda rng: ([rng.standard_normal((3,)).astype(np.float32), rng.standard_normal((4,)).astype(np.float32)], {}),
    doc="""The outer product of two vectors.

        %y = "dg.outer"(%a, %b) : (tensor<2xf32>, tensor<3xf32>) -> tensor<2x3xf32>""",
    lower=_lower_outer,
    vjp=_vjp_outer, jvp=bilinear(0, 1),
))


# ---------------------------------------------------------------- softmax family
def _axis_rule(types, axis=-1):
    t = types[0]
    if not is_float(t.dtype):
        raise ShapeError(f"needs a float tensor, got {t}")
    if not 0 <= axis < t.rank:
        raise ShapeError(f"axis {axis} is out of range for {t}")
    return t


def _softmax(x, axis=-1):
    m = np.max(x, axis=axis, keepdims=True, initial=-np.inf)  # (an empty axis gives an empty result)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def _log_softmax(x, axis=-1):
    m = np.max(x, axis=axis, keepdims=True, initial=-np.inf)
    s = x - m
    return s - np.log(np.sum(np.exp(s), axis=axis, keepdims=True))


def _lower_softmax_family(log):
    def lower(b, op):
        """exp(x - m) / sum(exp(x - m)), or (x - m) - log(sum(exp(x - m))), with m the max."""
        x, xt = op.operands[0], op.types[0]
        ety = xt.element
        axes = (op.attrs["axis"],)
        m, kt = max_keep(b, x, xt, axes)
        sh = map_generic(b, xt, [(x, xt), (m, kt)], lambda bb, a: bb.binary("arith.subf", a[0], a[1], ety))
        e = map_generic(b, xt, [(sh, xt)], lambda bb, a: bb.unary("math.exp", a[0], ety))
        s, _ = sum_keep(b, e, xt, axes)
        if log:
            return map_generic(b, xt, [(sh, xt), (s, kt)],
                               lambda bb, a: bb.binary("arith.subf", a[0], bb.unary("math.log", a[1], ety), ety))
        return map_generic(b, xt, [(e, xt), (s, kt)], lambda bb, a: bb.binary("arith.divf", a[0], a[1], ety))

    return lower


def _vjp_softmax(g, op, d):
    y = op.results[0]
    axis = op.attrs.get("axis", -1) % max(y.tt.rank, 1)
    s = g.dg_op("sum", [g.mul(d, y)], {"axes": (axis,), "keepdims": True})
    return [g.mul(y, g.sub(d, s))]


def _vjp_log_softmax(g, op, d):
    y = op.results[0]
    axis = op.attrs.get("axis", -1) % max(y.tt.rank, 1)
    s = g.dg_op("sum", [d], {"axes": (axis,), "keepdims": True})
    return [g.sub(d, g.mul(g.dg_op("exp", [y]), s))]


def _jvp_log_softmax(g, op, ts):
    y = op.results[0]
    axis = op.attrs.get("axis", -1) % max(y.tt.rank, 1)
    return g.sub(ts[0], g.dg_op("sum", [g.mul(g.dg_op("exp", [y]), ts[0])], {"axes": (axis,), "keepdims": True}))


# softmax's Jacobian, diag(y) - y y^T, is symmetric: its VJP rule is its JVP rule too.
for _name, _impl, _vjp, _jvp in [("softmax", _softmax, _vjp_softmax, lambda g, op, ts: _vjp_softmax(g, op, ts[0])[0]),
                                 ("log_softmax", _log_softmax, _vjp_log_softmax, _jvp_log_softmax)]:
    register(OpDef(
        name=_name, impl=_impl, attrs={"axis": "int"}, infer=_axis_rule, batch=batch_rules.over_axis,
        lower=_lower_softmax_family(_name == "log_softmax"), vjp=_vjp, jvp=_jvp,
        sample=lambda rng: ([rng.standard_normal((3, 5)).astype(np.float32)], {"axis": 1}),
        doc=f"""{_name} along `axis`, computed from x - max(x) (no overflow).

        %y = "dg.{_name}"(%x) {{axis = 1 : i64}} : (tensor<2x5xf32>) -> tensor<2x5xf32>""",
    ))


def _ce_rule(types):
    logits, labels = types
    if not is_float(logits.dtype) or logits.rank != 2:
        raise ShapeError(f"cross_entropy: logits must be a float [batch, classes] tensor, got {logits}")
    if not is_int(labels.dtype) or labels.rank != 1:
        raise ShapeError(f"cross_entropy: labels must be an integer [batch] tensor, got {labels}")
    a, b = logits.shape[0], labels.shape[0]
    if isinstance(a, int) and isinstance(b, int) and a != b:
        raise ShapeError(f"cross_entropy: {a} rows of logits but {b} labels")
    return TensorType(logits.dtype, ())


LABEL_OUTSIDE = "cross_entropy: label {0} is outside [0, {1})"


def _cross_entropy(logits, labels):
    n, c = logits.shape
    bad = (labels < 0) | (labels >= c)
    if np.any(bad):
        raise IndexError(LABEL_OUTSIDE.format(labels[bad].flat[0], c))
    if labels.shape[0] != n:
        raise ValueError(f"cross_entropy: {n} rows of logits but {labels.shape[0]} labels")
    lsm = _log_softmax(logits, axis=1)
    return np.asarray(-np.mean(lsm[np.arange(n), labels]), dtype=logits.dtype)


def _lower_cross_entropy(b, op):
    """mean over rows of lse(logits[i]) - logits[i, labels[i]]; labels checked in range."""
    (x, xt), (y, yt) = zip(op.operands, op.types)
    ety = xt.element
    lse, kt = lse_keep(b, x, xt, (1,))  # [N, 1]
    c = b.dim(x, xt, 1)
    xr, xrt = readable(b, x, xt, [1])  # the logit a label picks
    rows_t = TensorType(xt.dtype, (xt.shape[0],))

    def picked(bb, a):
        lab = a[1] if yt.dtype == "i64" else bb.unary("arith.extsi", a[1], "i32 to i64")
        k = index_in_range(bb, lab, c, LABEL_OUTSIDE, wrap=False)
        li = bb.assign("linalg.index 0 : index", "li")
        v = bb.assign(f"tensor.extract {xr}[{li}, {k}] : {xrt.mlir()}", "x")
        return bb.binary("arith.subf", a[0], v, ety)

    lse_rows = drop_kept(b, lse, kt, rows_t, (1,))
    losses = map_generic(b, rows_t, [(lse_rows, rows_t), (y, yt)], picked)
    total, tt = sum_keep(b, losses, rows_t, (0,))
    n = count_of(b, losses, rows_t, (0,), ety)
    out_t = op.result_types[0]
    scalar = drop_kept(b, total, tt, out_t, (0,))
    return map_generic(b, out_t, [(scalar, out_t)], lambda bb, a: bb.binary("arith.divf", a[0], n, ety))


def _vjp_cross_entropy(g, op, d):
    logits, labels = op.operands
    p = g.dg_op("softmax", [logits], {"axis": 1})
    oh = g.onehot(labels, logits, 1)
    n = g.dg_op("cast", [g.dim(logits, 0)], {"dtype": logits.tt.dtype})
    return [g.mul(g.sub(p, oh), g.div(d, n)), None]


register(OpDef(
    name="cross_entropy", impl=_cross_entropy, nargs=2, infer=_ce_rule, batch=batch_rules.cross_entropy,
    sample=lambda rng: ([rng.standard_normal((4, 3)).astype(np.float32), np.array([0, 2, 1, 2])], {}),
    doc="""The mean softmax cross-entropy of logits [N, C] against integer labels [N].

        %y = "dg.cross_entropy"(%x, %t) : (tensor<4x3xf32>, tensor<4xi64>) -> tensor<f32>""",
    lower=_lower_cross_entropy,
    vjp=_vjp_cross_entropy, jvp=reduction,
))


# ---------------------------------------------------------------- random
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def splitmix64(z):
    z = np.asarray(z, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = z + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _i64(v: int) -> int:
    """A uint64 constant as the signed i64 with the same bits."""
    return v - (1 << 64) if v >= (1 << 63) else v


def splitmix_ir(b, z):
    """splitmix64 on an i64 scalar (wrapping multiply, logical shifts), as `splitmix64` above."""
    def shr_xor(v, k):
        return b.binary("arith.xori", v, b.binary("arith.shrui", v, b.const(k, "i64"), "i64"), "i64")

    z = b.binary("arith.addi", z, b.const(_i64(int(_GOLDEN)), "i64"), "i64")
    z = b.binary("arith.muli", shr_xor(z, 30), b.const(_i64(0xBF58476D1CE4E5B9), "i64"), "i64")
    z = b.binary("arith.muli", shr_xor(z, 27), b.const(_i64(0x94D049BB133111EB), "i64"), "i64")
    return shr_xor(z, 31)


def split_ir(b, k):
    return (splitmix_ir(b, b.binary("arith.xori", k, b.const(1, "i64"), "i64")),
            splitmix_ir(b, b.binary("arith.xori", k, b.const(2, "i64"), "i64")))


def _key(seed):
    return splitmix64(np.asarray(seed).astype(np.uint64))


def _lower_key(b, op):
    s = b.extract(op.operands[0], op.types[0])
    return b.scalar_tensor(splitmix_ir(b, s), op.result_types[0])


register(OpDef(
    name="key", impl=_key, infer=lambda types: TensorType("u64", ()),
    sample=lambda rng: ([np.int64(42)], {}),
    doc="""A random key (u64, an i64 in MLIR) from an integer seed.

        %k = "dg.key"(%s) : (tensor<i64>) -> tensor<i64>""",
    lower=_lower_key,
))


def _split(k):
    return splitmix64(k ^ np.uint64(1)), splitmix64(k ^ np.uint64(2))


def _lower_split(b, op):
    k = b.extract(op.operands[0], op.types[0])
    return [b.scalar_tensor(v, t) for v, t in zip(split_ir(b, k), op.result_types)]


register(OpDef(
    name="split", impl=_split, nresults=2,
    infer=lambda types: [TensorType("u64", ()), TensorType("u64", ())],
    sample=lambda rng: ([np.uint64(7)], {}),
    doc="""Two independent keys from one.

        %k:2 = "dg.split"(%k0) : (tensor<i64>) -> (tensor<i64>, tensor<i64>)""",
    lower=_lower_split,
))


def _bits(k, n):
    with np.errstate(over="ignore"):
        ctr = (np.arange(1, n + 1, dtype=np.uint64) * _GOLDEN) + np.asarray(k, np.uint64)
    return splitmix64(ctr)


def uniform_bits(k, shape):
    n = int(np.prod(shape, dtype=np.int64))
    u = (_bits(k, n) >> np.uint64(40)).astype(np.float64) * (1.0 / (1 << 24))
    return u.reshape(shape)


def _rand_rule(types, shape=(), dtype=np.float32):
    if types[0].dtype != "u64":
        raise ShapeError(f"expected a key (from key(seed) or split), got {types[0]}")
    return TensorType(dtype, type_shape(shape))


def _uniform(k, *dims, shape=(), dtype=np.float32):
    return uniform_bits(k, shape_from(shape, dims)).astype(np_dtype(dtype))


def _normal(k, *dims, shape=(), dtype=np.float32):
    sh = shape_from(shape, dims)
    k1, k2 = _split(k)
    u1 = uniform_bits(k1, sh)
    u2 = uniform_bits(k2, sh)
    z = np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(2.0 * np.pi * u2)
    return z.astype(np_dtype(dtype))


def _uniform_f64(bb, key, flat_i64):
    ctr = bb.binary("arith.addi", bb.binary("arith.muli", bb.binary("arith.addi", flat_i64, bb.const(1, "i64"), "i64"),
                                              bb.const(_i64(int(_GOLDEN)), "i64"), "i64"), key, "i64")
    bits = bb.binary("arith.shrui", splitmix_ir(bb, ctr), bb.const(40, "i64"), "i64")
    u = bb.unary("arith.uitofp", bits, "i64 to f64")
    return bb.binary("arith.mulf", u, bb.const(1.0 / (1 << 24), "f64"), "f64")


def _lower_random(normal):
    def lower(b, op):
        out_t = op.result_types[0]
        ety = out_t.element
        key = b.extract(op.operands[0], op.types[0])
        keys = split_ir(b, key) if normal else (key,)
        sizes = sizes_from(b, op, op.attrs["shape"], zip(op.operands[1:], op.types[1:]))
        e = b.empty(out_t, sizes)
        strides = []
        for i in range(out_t.rank):
            s = b.const(1, "index")
            for j in range(i + 1, out_t.rank):
                s = b.binary("arith.muli", s, sizes[j], "index")
            strides.append(s)

        def body(bb, args):
            flat = bb.const(0, "index")
            for i, s in enumerate(strides):
                li = bb.assign(f"linalg.index {i} : index", "li")
                flat = bb.binary("arith.addi", flat, bb.binary("arith.muli", li, s, "index"), "index")
            fi = bb.assign(f"arith.index_cast {flat} : index to i64", "x")
            if normal:
                u1, u2 = (_uniform_f64(bb, k, fi) for k in keys)
                r = bb.unary("math.sqrt", bb.binary("arith.mulf", bb.const(-2.0, "f64"), bb.unary(
                    "math.log1p", bb.unary("arith.negf", u1, "f64"), "f64"), "f64"), "f64")
                c = bb.unary("math.cos", bb.binary("arith.mulf", bb.const(2.0 * np.pi, "f64"), u2, "f64"), "f64")
                v = bb.binary("arith.mulf", r, c, "f64")
            else:
                v = _uniform_f64(bb, keys[0], fi)
            return v if ety == "f64" else truncate_float(bb, v, "f64", ety)

        omap = ", ".join(f"d{i}" for i in range(out_t.rank))
        return b.generic(out_t, e, [], [], omap, ["parallel"] * out_t.rank, body)

    return lower


for _name, _impl in {"uniform": _uniform, "normal": _normal}.items():
    register(OpDef(
        name=_name, impl=_impl, nargs=None, attrs={"shape": "ints", "dtype": "dtype"}, infer=_rand_rule,
        lower=_lower_random(_name == "normal"),
        sample=lambda rng: ([np.uint64(3), np.int64(4)], {"shape": (DYN, 2), "dtype": "f32"}),
        doc=f"""{_name} random numbers of `shape` from a key; operands: the key, then one i64 scalar per -2
    in shape.

        %y = "dg.{_name}"(%k, %n) {{shape = array<i64: -2, 2>, dtype = f32}} : (tensor<i64>, tensor<i64>) -> tensor<?x2xf32>""",
    ))
