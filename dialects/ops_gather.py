"""NumPy advanced indexing by integer index tensors: reads (`gather`), their adjoint
(`scatter_add`) and functional writes (`index_put`).

The three ops share one layout. Operands hold x (or its adjoint) and k integer index tensors
(i64, of any rank, all of one type: the emitter broadcasts them together first; their shape is B) that index the distinct axes `axes` of x,
one tensor per axis. The result of reading, `x[...]`, has x's other axes ("the rest", in order)
with B inserted at position `at` among them: `at` is where the first indexed axis stood when the
indexed axes are adjacent in the subscript, else 0 (NumPy's rule; the emitter chooses). Negative
indices count from the end; an index out of range is a located IndexError naming the index and
the size, in both modes.
"""
from __future__ import annotations

import numpy as np

from dg.core.types import ShapeError, TensorType, broadcast_shapes, is_int

from .builder import fail_if, index_in_range, neither, readable
from .helpers import BROADCAST_ONLY_DECLARED, agreeing_operands, reshape_like, summed_to
from .jvp_rules import linear
from .registry import OpDef, register

OUT_OF_BOUNDS = "IndexError: index {0} is out of bounds for axis {axis} with size {1}"
VALUE_MISFIT = ("cannot assign the value to the indexed part: size {0} of its axis {axis} is neither 1 nor the "
                "part's {1} at run time")
NOT_BROADCAST = ("shape mismatch: index tensors could not be broadcast together: sizes {0} and {1} differ at run "
                 f"time ({BROADCAST_ONLY_DECLARED})")


# ---------------------------------------------------------------- the layout
def _check_layout(x: TensorType, idx: list, axes, at) -> tuple:
    """B (the index tensors' broadcast shape) and the rest of x's shape; a ShapeError if they do not fit."""
    if len(axes) != len(idx) or not idx:
        raise ShapeError(f"{len(idx)} index tensors for the axes {list(axes)}")
    if len(set(axes)) != len(axes) or any(not 0 <= a < x.rank for a in axes):
        raise ShapeError(f"index tensors on the axes {list(axes)} of a rank-{x.rank} tensor")
    for t in idx:
        if not is_int(t.dtype):
            raise ShapeError(f"an index tensor must hold integers, got {t}")
    try:
        bshape = broadcast_shapes(*[t.shape for t in idx])
    except ShapeError as e:
        raise ShapeError(f"shape mismatch: index tensors could not be broadcast together ({e})") from None
    rest = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    if not 0 <= at <= len(rest):
        raise ShapeError(f"position {at} of the index dims is out of range")
    return tuple(bshape), rest


def _part_shape(bshape, rest, at) -> tuple:
    """The shape of x[...]: the rest with B at `at`."""
    return tuple(rest[:at]) + tuple(bshape) + tuple(rest[at:])


def _part_layout(rank: int, axes, at: int, nb: int) -> list:
    """Per axis of x[...]: ("x", axis of x) or ("b", axis of B)."""
    rest = [("x", i) for i in range(rank) if i not in axes]
    return rest[:at] + [("b", j) for j in range(nb)] + rest[at:]


def _index_groups(idx_types, bshape, first: int) -> list:
    """Per axis of B, the (operand, axis) pairs on it not declared 1 (operands numbered from `first`)."""
    nb = len(bshape)
    return [[(first + k, j - nb + t.rank) for k, t in enumerate(idx_types)
             if j - nb + t.rank >= 0 and t.shape[j - nb + t.rank] != 1] for j in range(nb)]


def _index_maps(idx_types, bshape, shift: int) -> list:
    """Indexing maps of the index tensors, broadcast onto B's loop dims d{shift}...."""
    nb = len(bshape)
    maps = []
    for t in idx_types:
        exprs = []
        for j, d in enumerate(t.shape):
            i = nb - t.rank + j
            exprs.append("0" if d == 1 and bshape[i] != 1 else f"d{i + shift}")
        maps.append(", ".join(exprs))
    return maps


def _checked_indices(b, idx, its, bshape):
    """The index tensors checked to broadcast together at run time, and B's sizes (None: static)."""
    idx, sizes = agreeing_operands(b, list(idx), list(its), _index_groups(its, bshape, 0), NOT_BROADCAST)
    return idx, [None if isinstance(d, int) else s for d, s in zip(bshape, sizes)]


def _np_in_range(x, idx, axes):
    for i, a in zip(idx, axes):
        n = x.shape[a]
        bad = (i < -n) | (i >= n)
        if np.any(bad):
            raise IndexError(OUT_OF_BOUNDS.split(": ", 1)[1].format(np.asarray(i)[bad].flat[0], n, axis=a))


def _moved(a, axes):
    return np.moveaxis(a, list(axes), list(range(len(axes))))


def _b_first(part, at, nb):
    """x[...] (B at `at`) with B's axes first."""
    return np.moveaxis(part, list(range(at, at + nb)), list(range(nb)))


def _index_sample(rng):
    x = rng.standard_normal((4, 3, 5)).astype(np.float32)
    return [x, np.array([[0, 3], [-1, 0]]), np.array([[4, 4], [0, -2]])], {"axes": (0, 2), "at": 0}


# ---------------------------------------------------------------- gather
def _gather_rule(types, axes=(), at=0):
    x, idx = types[0], types[1:]
    bshape, rest = _check_layout(x, idx, axes, at)
    return TensorType(x.dtype, _part_shape(bshape, rest, at))


def _gather_agree(types, out_t):
    bshape = broadcast_shapes(*[t.shape for t in types[1:]])
    return _index_groups(types[1:], bshape, 1), NOT_BROADCAST


def _gather(x, *idx, axes=(), at=0):
    _np_in_range(x, idx, axes)
    r = _moved(x, axes)[tuple(idx)]
    nb = r.ndim - (x.ndim - len(axes))
    return np.ascontiguousarray(np.moveaxis(r, list(range(nb)), list(range(at, at + nb))))


def _lower_gather(b, op):
    x, xt = op.operands[0], op.types[0]
    axes, at = tuple(op.attrs["axes"]), op.attrs["at"]
    out_t = op.result_types[0]
    bshape = broadcast_shapes(*[t.shape for t in op.types[1:]])
    idx, bsizes = _checked_indices(b, op.operands[1:], op.types[1:], bshape)
    layout = _part_layout(xt.rank, axes, at, len(bshape))
    sizes = [b.dim(x, xt, v) if k == "x" else bsizes[v] for k, v in layout]
    e = b.empty(out_t, sizes)
    ns = [b.dim(x, xt, a) for a in axes]
    x, xt = readable(b, x, xt, axes)

    def body(bb, args):
        coords = [None] * xt.rank
        for k, a in enumerate(axes):
            coords[a] = index_in_range(bb, args[k], ns[k], OUT_OF_BOUNDS.replace("{axis}", str(a)))
        for p, (kind, v) in enumerate(layout):
            if kind == "x":
                coords[v] = bb.assign(f"linalg.index {p} : index", "li")
        return bb.assign(f"tensor.extract {x}[{', '.join(coords)}] : {xt.mlir()}", "x")

    omap = ", ".join(f"d{i}" for i in range(out_t.rank))
    return b.generic(out_t, e, list(zip(idx, op.types[1:])), _index_maps(op.types[1:], bshape, at), omap,
                     ["parallel"] * out_t.rank, body)


def _vjp_gather(g, op, d):
    x, *idx = op.operands
    return [g.dg_op("scatter_add", [d, x] + idx, dict(op.attrs))] + [None] * len(idx)


register(OpDef(
    name="gather", impl=_gather, nargs=None, attrs={"axes": "ints", "at": "int"}, infer=_gather_rule,
    agree=_gather_agree, sample=_index_sample,
    doc="""NumPy advanced indexing: x read at integer index tensors (broadcast together to B) on `axes`, B's
    axes placed at `at` among x's other axes (see the module's docstring).

        %y = "dg.gather"(%x, %i, %j) {axes = array<i64: 0, 2>, at = 0 : i64} : (tensor<4x3x5xf32>, tensor<2x2xi64>, tensor<2x2xi64>) -> tensor<2x2x3xf32>""",
    lower=_lower_gather,
    vjp=_vjp_gather, jvp=linear(0),
))


# ---------------------------------------------------------------- scatter_add
def _scatter_add_rule(types, axes=(), at=0):
    d, x, idx = types[0], types[1], types[2:]
    bshape, rest = _check_layout(x, idx, axes, at)
    if d.rank != len(rest) + len(bshape) or d.dtype != x.dtype:
        raise ShapeError(f"scatter_add: {d} does not fit x[...] of {x}")
    return x


def _scatter_add(d, x, *idx, axes=(), at=0):
    out = np.zeros_like(x)
    bshape = np.broadcast_shapes(*[np.shape(i) for i in idx])
    np.add.at(_moved(out, axes), tuple(idx), _b_first(np.asarray(d), at, len(bshape)))
    return out


def _lower_scatter_add(b, op):
    d, dt = op.operands[0], op.types[0]
    x, xt = op.operands[1], op.types[1]
    idx, its = op.operands[2:], op.types[2:]
    axes, at = tuple(op.attrs["axes"]), op.attrs["at"]
    r = xt.rank
    bshape = broadcast_shapes(*[t.shape for t in its])
    layout = _part_layout(r, axes, at, len(bshape))
    ety = xt.element
    zero = b.const(0.0, ety)
    init = b.fill(xt, [b.dim(x, xt, i) for i in range(r)], zero)
    ns = [b.dim(x, xt, a) for a in axes]
    dmap = ", ".join(f"d{v}" if k == "x" else f"d{r + v}" for k, v in layout)

    def body(bb, args):
        hit = bb.const(True, "i1")
        izero = bb.const(0, "index")
        for k, a in enumerate(axes):
            i = bb.assign(f"arith.index_cast {args[1 + k]} : i64 to index", "i")
            neg = bb.cmp("slt", i, izero, "index")
            i = bb.select(neg, bb.binary("arith.addi", i, ns[k], "index"), i, "index")
            li = bb.assign(f"linalg.index {a} : index", "li")
            hit = bb.binary("arith.andi", hit, bb.cmp("eq", i, li, "index"), "i1")
        return bb.binary("arith.addf", args[-1], bb.select(hit, args[0], zero, ety), ety)

    omap = ", ".join(f"d{i}" for i in range(r))
    return b.generic(xt, init, [(d, dt)] + list(zip(idx, its)), [dmap] + _index_maps(its, bshape, r), omap,
                     ["parallel"] * r + ["reduction"] * len(bshape), body)


def _vjp_scatter_add(g, op, dd):
    _, _, *idx = op.operands
    return [g.dg_op("gather", [dd] + idx, dict(op.attrs)), None] + [None] * len(idx)


def _scatter_sample(rng):
    (x, i, j), attrs = _index_sample(rng)
    return [rng.standard_normal((2, 2, 3)).astype(np.float32), x, i, j], attrs


register(OpDef(
    name="scatter_add", impl=_scatter_add, nargs=None, nfixed=2, attrs={"axes": "ints", "at": "int"},
    infer=_scatter_add_rule, sample=_scatter_sample,
    doc="""The adjoint of gather: zeros shaped like x (the second operand, read for its shape), with d
    (shaped like gather's result) added at the indexed places; repeated indices add up.

        %y = "dg.scatter_add"(%d, %x, %i) {axes = array<i64: 0>, at = 0 : i64} : (tensor<5x3xf32>, tensor<4x3xf32>, tensor<5xi64>) -> tensor<4x3xf32>""",
    lower=_lower_scatter_add,
    vjp=_vjp_scatter_add, jvp=linear(0),
))


# ---------------------------------------------------------------- index_put
def _index_put_rule(types, axes=(), at=0):
    x, v, idx = types[0], types[1], types[2:]
    bshape, rest = _check_layout(x, idx, axes, at)
    target = _part_shape(bshape, rest, at)
    if v.rank > len(target) or any(isinstance(a, int) and isinstance(c, int) and a != 1 and a != c
                                   for a, c in zip(v.shape[::-1], target[::-1])):
        raise ShapeError(f"cannot assign a {v} to a part of shape {list(target)}")
    return x


def _index_put_agree(types, out_t):
    idx = types[2:]
    bshape = broadcast_shapes(*[t.shape for t in idx])
    return _index_groups(idx, bshape, 2), NOT_BROADCAST


def _value_fits(v, target):
    """NumPy's broadcasting of the assigned value onto the part, with compiled code's message."""
    v = np.asarray(v)
    for j, n in enumerate(v.shape):
        want = target[len(target) - v.ndim + j]
        if n != 1 and n != want:
            raise ValueError(VALUE_MISFIT.format(n, want, axis=j))


def _index_put(x, v, *idx, axes=(), at=0):
    _np_in_range(x, idx, axes)
    out = np.array(x, copy=True)
    bshape = np.broadcast_shapes(*[np.shape(i) for i in idx])
    rest = [s for i, s in enumerate(x.shape) if i not in axes]
    target = _part_shape(bshape, rest, at)
    _value_fits(v, target)
    _moved(out, axes)[tuple(idx)] = _b_first(np.broadcast_to(v, target), at, len(bshape))
    return out


def _winners(b, x, xt, idx, its, axes, bshape, bsizes):
    """Per element of x, the position in B (row-major) of the last index that writes it, or -1."""
    r = xt.rank
    pt = TensorType("i64", xt.shape)
    init = b.fill(pt, [b.dim(x, xt, i) for i in range(r)], b.const(-1, "i64"))
    ns = [b.dim(x, xt, a) for a in axes]
    bs = [b.const(d, "index") if isinstance(d, int) else s for d, s in zip(bshape, bsizes)]

    def body(bb, args):
        hit = bb.const(True, "i1")
        for k, a in enumerate(axes):
            i = index_in_range(bb, args[k], ns[k], OUT_OF_BOUNDS.replace("{axis}", str(a)))
            li = bb.assign(f"linalg.index {a} : index", "li")
            hit = bb.binary("arith.andi", hit, bb.cmp("eq", i, li, "index"), "i1")
        lin = bb.const(0, "index")
        for j, s in enumerate(bs):
            lj = bb.assign(f"linalg.index {r + j} : index", "li")
            lin = bb.binary("arith.addi", bb.binary("arith.muli", lin, s, "index"), lj, "index")
        lin = bb.assign(f"arith.index_cast {lin} : index to i64", "i")
        return bb.select(hit, bb.binary("arith.maxsi", args[-1], lin, "i64"), args[-1], "i64")

    omap = ", ".join(f"d{i}" for i in range(r))
    return b.generic(pt, init, list(zip(idx, its)), _index_maps(its, bshape, r), omap,
                     ["parallel"] * r + ["reduction"] * len(bshape), body), pt, bs


def _lower_index_put(b, op):
    x, xt = op.operands[0], op.types[0]
    v, vt = op.operands[1], op.types[1]
    axes, at = tuple(op.attrs["axes"]), op.attrs["at"]
    r = xt.rank
    bshape = broadcast_shapes(*[t.shape for t in op.types[2:]])
    idx, bsizes = _checked_indices(b, op.operands[2:], op.types[2:], bshape)
    pos, pt, bs = _winners(b, x, xt, idx, op.types[2:], axes, bshape, bsizes)
    layout = _part_layout(r, axes, at, len(bshape))
    lengths = [b.dim(x, xt, val) if k == "x" else bs[val] for k, val in layout]
    tr = len(layout)
    # v's sizes must each be 1 or the part's, as in NumPy.
    for j in range(vt.rank):
        vd, n = b.dim(v, vt, j), lengths[tr - vt.rank + j]
        fail_if(b, neither(b, vd, n), "ValueError: " + VALUE_MISFIT.replace("{axis}", str(j)),
                ((vd, "index"), (n, "index")))
    v, vt = readable(b, v, vt, range(vt.rank))
    vdims = [b.dim(v, vt, j) for j in range(vt.rank)]
    e = b.empty(xt, [b.dim(x, xt, i) for i in range(r)])

    def body(bb, args):
        xv, p = args[0], args[1]
        zero, one = bb.const(0, "index"), bb.const(1, "index")
        hit = bb.cmp("sge", p, bb.const(0, "i64"), "i64")
        q = bb.assign(f"arith.index_cast {p} : i64 to index", "i")
        q = bb.binary("arith.maxsi", q, zero, "index")
        bc = [None] * len(bs)
        for j in reversed(range(len(bs))):
            s = bb.binary("arith.maxsi", bs[j], one, "index")
            bc[j] = bb.binary("arith.remsi", q, s, "index")
            q = bb.binary("arith.divsi", q, s, "index")
        tcoords = [bb.assign(f"linalg.index {val} : index", "li") if k == "x" else bc[val] for k, val in layout]
        vidx = []
        for j in range(vt.rank):
            t = tcoords[tr - vt.rank + j]
            last = bb.binary("arith.subi", vdims[j], one, "index")
            t = bb.binary("arith.maxsi", bb.binary("arith.minsi", t, last, "index"), zero, "index")
            vidx.append(bb.select(bb.cmp("eq", vdims[j], one, "index"), zero, t, "index"))
        val = bb.assign(f"tensor.extract {v}[{', '.join(vidx)}] : {vt.mlir()}", "x")
        return bb.select(hit, val, xv, xt.element)

    imap = ", ".join(f"d{i}" for i in range(r))
    return b.generic(xt, e, [(x, xt), (pos, pt)], [imap, imap], imap, ["parallel"] * r, body)


def _positions(g, i):
    """An i64 tensor shaped like i: each element's row-major position."""
    n = g.const(1, i)
    for j in range(i.tt.rank):
        n = g.mul(n, g.dim(i, j))
    size = 1
    for s in i.tt.shape:
        size = size * s if isinstance(s, int) and isinstance(size, int) else -2
    ar = g.dg_op("arange", [g.const(0, i), n, g.const(1, i)], {"size": size, "dtype": "i64"})
    return reshape_like(g, ar, i)


def _vjp_index_put(g, op, d):
    """dx: d with the written places zero. dv: d read at the indices, where an index repeats only at
    its last (winning) write, summed to v's shape."""
    x, v, *idx = op.operands
    axes, at = tuple(op.attrs["axes"]), op.attrs["at"]
    dx = g.dg_op("index_put", [d, g.const(0.0, d)] + idx, dict(op.attrs))
    layout = _part_layout(x.tt.rank, axes, at, idx[0].tt.rank)
    rest = tuple(p for p, (k, _) in enumerate(layout) if k == "x")
    pos = _positions(g, idx[0])
    if rest:
        pos = g.dg_op("expand_dims", [pos], {"axes": rest})  # on the part's axes
    owner = g.dg_op("index_put", [g.dg_op("cast", [g.zeros_like(x)], {"dtype": "i64"}), pos] + idx, dict(op.attrs))
    won = g.dg_op("eq", [g.dg_op("gather", [owner] + idx, dict(op.attrs)), pos])
    part = g.dg_op("gather", [d] + idx, dict(op.attrs))
    dv = summed_to(g, g.where(won, part, g.zeros_like(part)), v)
    return [dx, dv] + [None] * len(idx)


register(OpDef(
    name="index_put", impl=_index_put, nargs=None, nfixed=2, attrs={"axes": "ints", "at": "int"},
    infer=_index_put_rule, agree=_index_put_agree, sample=lambda rng: ([rng.standard_normal((4, 3)).astype(np.float32),
                                                np.float32(1.0), np.array([3, 0])], {"axes": (0,), "at": 0}),
    doc="""A copy of x with x[...] = v (v broadcast to the part gather would read), the indices as in gather;
    where indices repeat, the last write (in B's row-major order) wins, as NumPy does.

        %y = "dg.index_put"(%x, %v, %i) {axes = array<i64: 0>, at = 0 : i64} : (tensor<4x3xf32>, tensor<f32>, tensor<2xi64>) -> tensor<4x3xf32>""",
    lower=_lower_index_put,
    vjp=_vjp_index_put, jvp=linear(0, 1),
))


# ---------------------------------------------------------------- put_rows
def _put_rows_rule(types):
    x, v, rows = types
    if x.rank < 1 or v.rank != x.rank or rows.rank != 1 or not is_int(rows.dtype) or v.dtype != x.dtype:
        raise ShapeError(f"put_rows takes x, rows of x's rank and an integer vector, got {x}, {v}, {rows}")
    return x


def _rows_checked(x, v, rows) -> None:
    """put_rows' and add_rows' checks, with compiled code's messages."""
    n = x.shape[0]
    if np.any((rows < 0) | (rows >= n)):
        raise IndexError(OUT_OF_BOUNDS.format(int(rows[(rows < 0) | (rows >= n)][0]), n, axis=0))
    if len(v) != len(rows):
        raise ValueError(VALUE_MISFIT.format(v.shape[0], len(rows), axis=0))
    for i in range(1, x.ndim):
        if v.shape[i] != x.shape[i]:
            raise ValueError(VALUE_MISFIT.format(v.shape[i], x.shape[i], axis=i))


def _put_rows(x, v, rows):
    _rows_checked(x, v, rows)
    out = np.array(x, copy=True)
    for k in range(len(rows)):  # (a repeated row: the last write wins)
        out[rows[k]] = v[k]
    return out


def _lower_put_rows(b, op, add: bool = False):
    """A copy of x, then one row written (or, with `add`, added) per index: time in the rows
    written, not in x's size."""
    x, v, rows = op.operands
    xt, vt, rt = op.types
    n = b.dim(x, xt, 0)
    k_n = b.dim(rows, rt, 0)
    fail_if(b, b.cmp("ne", b.dim(v, vt, 0), k_n, "index"),
            "ValueError: " + VALUE_MISFIT.replace("{axis}", "0"), ((b.dim(v, vt, 0), "index"), (k_n, "index")))
    sizes = [b.dim(x, xt, i) for i in range(1, xt.rank)]
    for i in range(1, xt.rank):
        fail_if(b, b.cmp("ne", b.dim(v, vt, i), sizes[i - 1], "index"),
                "ValueError: " + VALUE_MISFIT.replace("{axis}", str(i)), ((b.dim(v, vt, i), "index"), (sizes[i - 1], "index")))
    zero, one = b.const(0, "index"), b.const(1, "index")
    acc, k, out = b.fresh("acc"), b.fresh("k"), b.fresh("put")
    t = xt.mlir()
    row_t = TensorType(xt.dtype, (1,) + tuple(xt.shape[1:])).mlir()
    b.line(f"{out} = scf.for {k} = {zero} to {k_n} step {one} iter_args({acc} = {x}) -> ({t}) {{")
    with b.nested():
        r = b.assign(f"tensor.extract {rows}[{k}] : {rt.mlir()}", "r")
        i = index_in_range(b, r, n, OUT_OF_BOUNDS.replace("{axis}", "0"))
        offs = lambda at: ", ".join([at] + ["0"] * len(sizes))  # noqa: E731
        szs = ", ".join(["1"] + [str(d) if isinstance(d, int) else s for d, s in zip(xt.shape[1:], sizes)])
        ones = ", ".join(["1"] * xt.rank)
        row = b.assign(f"tensor.extract_slice {v}[{offs(k)}] [{szs}] [{ones}] : {vt.mlir()} to {row_t}", "row")
        if add:  # the row there, plus v's row
            have = b.assign(f"tensor.extract_slice {acc}[{offs(i)}] [{szs}] [{ones}] : {t} to {row_t}", "have")
            row = b.assign(f"linalg.add ins({have}, {row} : {row_t}, {row_t}) outs({have} : {row_t}) -> {row_t}", "sum")
        put = b.assign(f"tensor.insert_slice {row} into {acc}[{offs(i)}] [{szs}] [{ones}] : {row_t} into {t}", "p")
        b.line(f"scf.yield {put} : {t}")
    b.line("}")
    return out


def _vjp_put_rows(g, op, d):
    """dx: d with the written rows zero; dv: d's written rows, where a row is written twice only at
    its last (winning) write."""
    x, v, rows = op.operands
    dx = g.dg_op("put_rows", [d, g.zeros_like(v), rows])
    zero, one = g.const(0, rows), g.const(1, rows)
    pos = g.dg_op("arange", [zero, g.dim(rows, 0), one], {"size": -2, "dtype": "i64"})
    owner = g.dg_op("put_rows", [g.dg_op("full", [zero, g.dim(x, 0)], {"shape": (-2,)}), pos, rows])
    won = g.dg_op("eq", [g.dg_op("take", [owner, rows], {"axis": 0}), pos])
    part = g.dg_op("take", [d, rows], {"axis": 0})
    won = g.dg_op("reshape", [won], {"shape": (-1,) + (1,) * (part.tt.rank - 1)}) if part.tt.rank > 1 else won
    return [dx, g.where(won, part, g.zeros_like(part)), None]


register(OpDef(
    name="put_rows", impl=_put_rows, nargs=3, infer=_put_rows_rule,
    sample=lambda rng: ([rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal((2, 3)).astype(np.float32),
                         np.array([3, 0])], {}),
    doc="""A copy of x with row rows[k] set to v[k], for each k (a repeated row: the last write wins);
    time in the rows written. What a batch writes, one row per example.

        %y = "dg.put_rows"(%x, %v, %r) : (tensor<5x3xf32>, tensor<2x3xf32>, tensor<2xi64>) -> tensor<5x3xf32>""",
    lower=_lower_put_rows,
    vjp=_vjp_put_rows, jvp=linear(0, 1),
))


def _add_rows(x, v, rows):
    _rows_checked(x, v, rows)
    out = np.array(x, copy=True)
    np.add.at(out, rows, v)
    return out


register(OpDef(
    name="add_rows", impl=_add_rows, nargs=3, infer=_put_rows_rule,
    sample=lambda rng: ([rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal((3, 3)).astype(np.float32),
                         np.array([3, 0, 3])], {}),
    doc="""A copy of x with v[k] added to row rows[k], for each k (repeated rows add up); time in the
    rows added. The gradient of a take of rows: what it read, added back where it read it.

        %y = "dg.add_rows"(%x, %v, %r) : (tensor<5x3xf32>, tensor<3x3xf32>, tensor<3xi64>) -> tensor<5x3xf32>""",
    lower=lambda b, op: _lower_put_rows(b, op, add=True),
    vjp=lambda g, op, d: [d, g.dg_op("take", [d, op.operands[2]], {"axis": 0}), None], jvp=linear(0, 1),
))
