"""Shape ops, indexing, creation, constants and casts.

Sizes that are only known at run time travel as `i64` scalar operands: in a
`shape` attribute, -2 stands for "the next size operand" (and, in
`reshape`, -1 for "inferred", as in NumPy).
"""
from __future__ import annotations

import numpy as np

from dg.core.errors import DgError
from dg.core.types import DTYPES, ShapeError, Sym, TensorType, is_float, is_int, np_dtype

from . import batch_shape
from .batch_rules import elementwise
from .builder import any_of, cast, fail_if, if_else, index_in_range, neither, readable, stand_in_if
from .jvp_rules import linear
from .helpers import DYN, MAX_ELEMENTS, TOO_LARGE, agreeing_operands, bounded, broadcast_maps, check_count, \
    copy_generic, expand_spec, lower_elementwise, reshape_like, shape_from, sizes_from, squeeze_generic, summed_to, \
    truncate_float, type_shape
from .registry import OpDef, register


# ---------------------------------------------------------------- reshape
def _reshape_rule(types, shape=()):
    x = types[0]
    out = list(type_shape(shape))
    if sum(1 for d in out if d == -1) > 1:
        raise ShapeError("reshape allows at most one -1")
    if any(isinstance(d, int) and d < -1 for d in out):
        raise ShapeError(f"reshape to a negative size {list(shape)}")
    known = [d for d in out if isinstance(d, int) and d != -1]
    if x.is_static() and all(isinstance(d, int) for d in out):
        total = int(np.prod(x.shape, dtype=np.int64))
        part = int(np.prod(known, dtype=np.int64))
        if -1 in out:
            if part == 0 or total % part:
                raise ShapeError(f"cannot reshape {x} into {list(shape)}")
            out[out.index(-1)] = total // part
        elif part != total:
            raise ShapeError(f"cannot reshape {x} ({total} elements) into {list(shape)} ({part} elements)")
    elif -1 in out:
        out[out.index(-1)] = Sym()
    return TensorType(x.dtype, tuple(out))


def _reshape(x, *dims, shape=()):
    return np.reshape(x, shape_from(shape, dims))


def _product(b, vals: list) -> str:
    """The product of index values (1 for none)."""
    out = b.const(1, "index")
    for v in vals:
        out = b.binary("arith.muli", out, v, "index")
    return out


def _holding(b, x, xt, have, want):
    """(x, its type) as a flat tensor, checked at run time to hold `want` elements (it holds
    `have`): a located DgRuntimeError where it does not, and until it is raised a fresh flat
    tensor of `want` elements instead of x, so that the reshape reads nothing past x's end.
    (Canonicalization folds the check where the counts are one product.)"""
    bad = b.cmp("ne", have, want, "index")
    fail_if(b, bad, "ValueError: cannot reshape array of size {0} into a shape of {1} elements",
            ((have, "index"), (want, "index")))
    flat_t = TensorType(xt.dtype, (Sym(),))
    flat = x
    if 0 in xt.shape:  # nothing to move (and MLIR folds the collapse of ?x0 to an invalid 0)
        empty_t = TensorType(xt.dtype, (0,))
        flat = b.assign(f"tensor.cast {b.empty(empty_t, [])} : {empty_t.mlir()} to {flat_t.mlir()}", "fl")
    elif xt.mlir() != flat_t.mlir():
        static = all(isinstance(d, int) for d in xt.shape)
        mid_t = TensorType(xt.dtype, (int(np.prod(xt.shape)) if static else Sym(),))
        flat = b.fresh("fl")
        if xt.rank == 0:
            b.emit(f"{flat} = tensor.expand_shape {x} [] output_shape [1] : {xt.mlir()} into {mid_t.mlir()}")
        else:
            groups = ", ".join(str(i) for i in range(xt.rank))
            b.emit(f"{flat} = tensor.collapse_shape {x} [[{groups}]] : {xt.mlir()} into {mid_t.mlir()}")
        if static:
            cast = b.assign(f"tensor.cast {flat} : {mid_t.mlir()} to {flat_t.mlir()}", "fl")
            flat = cast
    return stand_in_if(b, bad, flat, flat_t, {0: want}), flat_t


def _lower_reshape(b, op):
    x, xt = op.operands[0], op.types[0]
    out_t = op.result_types[0]
    shape = list(op.attrs["shape"])
    sizes = []
    dyn = list(zip(op.operands[1:], op.types[1:]))
    infer_at = None
    for k, s in enumerate(shape):
        if s == -1:
            infer_at = k
            sizes.append(None)
        else:
            sizes.extend(sizes_from(b, op, [s], [dyn.pop(0)] if s == DYN else []))
    if DYN in shape:  # together too (their product must not wrap around and match x's count)
        given = iter(bounded(b, [s for s in sizes if s is not None]))
        sizes = [None if s is None else next(given) for s in sizes]
    total = _product(b, [b.dim(x, xt, i) for i in range(xt.rank)])
    if infer_at is not None:
        known = _product(b, [s for k, s in enumerate(sizes) if k != infer_at])
        fail_if(b, b.cmp("eq", known, b.const(0, "index"), "index"),
                "ValueError: cannot reshape: -1 stands for no one size when the other sizes multiply to 0")
        sizes[infer_at] = b.binary("arith.divui", total, b.binary("arith.maxui", known, b.const(1, "index"), "index"), "index")
    # A size the result type fixes is that size, whatever the operand says (conform's casts).
    sizes = [b.const(d, "index") if isinstance(d, int) else s for d, s in zip(out_t.shape, sizes)]
    x, xt = _holding(b, x, xt, total, _product(b, sizes))
    shape_t = f"tensor<{len(sizes)}xindex>"
    st = b.assign(f"tensor.from_elements {', '.join(sizes)} : {shape_t}", "sh")
    return b.assign(f"tensor.reshape {x}({st}) : ({xt.mlir()}, {shape_t}) -> {out_t.mlir()}", "rs")


register(OpDef(
    name="reshape", impl=_reshape, nargs=None, attrs={"shape": "ints"}, infer=_reshape_rule, batch=batch_shape.reshape,
    sample=lambda rng: ([rng.standard_normal((2, 6)).astype(np.float32)], {"shape": (3, -1)}),
    doc="""x with another shape of as many elements: one -1 in `shape` is the size that fits, each -2 the next
    operand (an i64 scalar given at run time).

        %y = "dg.reshape"(%x, %n) {shape = array<i64: -2, 3>} : (tensor<6xf32>, tensor<i64>) -> tensor<?x3xf32>""",
    lower=_lower_reshape,
    vjp=lambda g, op, d: [reshape_like(g, d, op.operands[0])] + [None] * (len(op.operands) - 1), jvp=linear(0),
))


# ---------------------------------------------------------------- transpose
def _transpose_rule(types, perm=()):
    x = types[0]
    if sorted(perm) != list(range(x.rank)):
        raise ShapeError(f"transpose: {list(perm)} is not a permutation of the {x.rank} axes of {x}")
    return TensorType(x.dtype, tuple(x.shape[p] for p in perm))


def _transpose(x, perm=()):
    return np.transpose(x, perm)


def _lower_transpose(b, op):
    x, xt = op.operands[0], op.types[0]
    perm = op.attrs["perm"]
    out_t = op.result_types[0]
    sizes = [b.dim(x, xt, p) for p in perm]
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return copy_generic(b, op, x, xt, out_t, sizes, ", ".join(f"d{inv[j]}" for j in range(xt.rank)))


def _vjp_transpose(g, op, d):
    perm = op.attrs["perm"]
    return [g.dg_op("transpose", [d], {"perm": tuple(int(i) for i in np.argsort(perm))})]


register(OpDef(
    name="transpose", impl=_transpose, attrs={"perm": "ints"}, infer=_transpose_rule, batch=batch_shape.transpose,
    sample=lambda rng: ([rng.standard_normal((2, 3, 4)).astype(np.float32)], {"perm": (2, 0, 1)}),
    doc="""x with its axes permuted: axis i of the result is axis perm[i] of x.

        %y = "dg.transpose"(%x) {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>""",
    lower=_lower_transpose,
    vjp=_vjp_transpose, jvp=linear(0),
))


# ---------------------------------------------------------------- expand_dims / squeeze
def _expand_rule(types, axes=()):
    x = types[0]
    n = x.rank + len(axes)
    if any(not 0 <= a < n for a in axes) or len(set(axes)) != len(axes):
        raise ShapeError(f"expand_dims: bad axes {list(axes)} for {x}")
    it = iter(x.shape)
    return TensorType(x.dtype, tuple(1 if i in axes else next(it) for i in range(n)))


def _expand(x, axes=()):
    return np.expand_dims(x, tuple(axes)) if axes else x


def _lower_expand_dims(b, op):
    x, xt = op.operands[0], op.types[0]
    out_t = op.result_types[0]
    axes = set(op.attrs["axes"])
    sizes, in_map, j = [], [], 0
    for i in range(out_t.rank):
        if i in axes:
            sizes.append(None)
        else:
            sizes.append(b.dim(x, xt, j))
            in_map.append(f"d{i}")
            j += 1
    return copy_generic(b, op, x, xt, out_t, sizes, ", ".join(in_map))


register(OpDef(
    name="expand_dims", impl=_expand, attrs={"axes": "ints"}, infer=_expand_rule, batch=batch_shape.expand_dims,
    sample=lambda rng: ([rng.standard_normal((2, 3)).astype(np.float32)], {"axes": (0, 3)}),
    doc="""x with axes of size 1 inserted (`axes` are the result's).

        %y = "dg.expand_dims"(%x) {axes = array<i64: 0>} : (tensor<3xf32>) -> tensor<1x3xf32>""",
    lower=_lower_expand_dims,
    vjp=lambda g, op, d: [reshape_like(g, d, op.operands[0])], jvp=linear(0),
))


def _squeeze_rule(types, axes=()):
    x = types[0]
    for a in axes:
        if not 0 <= a < x.rank:
            raise ShapeError(f"squeeze: axis {a} out of range for {x}")
        if isinstance(x.shape[a], int) and x.shape[a] != 1:
            raise ShapeError(f"squeeze: axis {a} of {x} has size {x.shape[a]}, not 1")
    return TensorType(x.dtype, tuple(d for i, d in enumerate(x.shape) if i not in axes))


def _squeeze(x, axes=()):
    return np.squeeze(x, tuple(axes)) if axes else x


def _lower_squeeze(b, op):
    """Axes whose size is known only at run time are checked to be 1 (until the error is raised, x
    is replaced by an uninitialised tensor of size 1 on them, so that no read leaves it)."""
    x, xt, axes = op.operands[0], op.types[0], set(op.attrs["axes"])
    checked = [j for j in sorted(axes) if not isinstance(xt.shape[j], int)]
    if checked:
        one = b.const(1, "index")
        bad = any_of(b, [b.cmp("ne", b.dim(x, xt, j), one, "index") for j in checked])
        fail_if(b, bad, "ValueError: cannot select an axis to squeeze out which has size not equal to one")
        x = stand_in_if(b, bad, x, xt, {j: one for j in checked})
    return squeeze_generic(b, x, xt, op.result_types[0], axes)


register(OpDef(
    name="squeeze", impl=_squeeze, attrs={"axes": "ints"}, infer=_squeeze_rule, batch=batch_shape.squeeze,
    sample=lambda rng: ([rng.standard_normal((1, 3, 1)).astype(np.float32)], {"axes": (0, 2)}),
    doc="""x without the given axes, each of size 1 (checked at run time where the type does not say).

        %y = "dg.squeeze"(%x) {axes = array<i64: 0>} : (tensor<1x3xf32>) -> tensor<3xf32>""",
    lower=_lower_squeeze,
    vjp=lambda g, op, d: [reshape_like(g, d, op.operands[0])], jvp=linear(0),
))


# ---------------------------------------------------------------- broadcast_to
def _bto_rule(types, shape=()):
    x = types[0]
    out = type_shape(shape)
    if len(out) < x.rank:
        raise ShapeError(f"cannot broadcast {x} to a rank-{len(out)} shape")
    for d, o in zip(x.shape[::-1], out[::-1]):
        if isinstance(d, int) and isinstance(o, int) and d != 1 and d != o:
            raise ShapeError(f"cannot broadcast {x} to {list(shape)}")
    return TensorType(x.dtype, out)


def _bto(x, *dims, shape=()):
    return np.broadcast_to(x, shape_from(shape, dims))


def _lower_broadcast_to(b, op):
    """x's axes map onto the result's last axes. One declared 1 broadcasts by its indexing map; one
    that may differ from the result's size is checked at run time to equal it or to be 1, and
    broadcasts by the index it reads. Until a failed check is raised, x is replaced by an
    uninitialised tensor of the result's sizes, so that no read leaves it."""
    x, xt = op.operands[0], op.types[0]
    out_t = op.result_types[0]
    sizes = sizes_from(b, op, op.attrs["shape"], zip(op.operands[1:], op.types[1:]))
    lead = out_t.rank - xt.rank
    checked = [j for j, d in enumerate(xt.shape) if d != 1 and not (isinstance(d, int) and d == out_t.shape[lead + j])]
    if not checked:
        return copy_generic(b, op, x, xt, out_t, sizes, broadcast_maps([xt], out_t)[0])
    one = b.const(1, "index")
    ones = {j: b.cmp("eq", b.dim(x, xt, j), one, "index") for j in checked}
    bads = [neither(b, b.dim(x, xt, j), sizes[lead + j]) for j in checked]
    for j, bad_j in zip(checked, bads):
        fail_if(b, bad_j, f"cannot broadcast {xt} to the shape asked for: size {{0}} of axis {j} is "
                          "neither 1 nor the shape's {1} at run time", ((b.dim(x, xt, j), "index"), (sizes[lead + j], "index")))
    bad = any_of(b, bads)
    # Read from a type whose checked axes are dynamic, so that the replacement takes the result's sizes.
    st = xt.with_shape([Sym() if j in checked else d for j, d in enumerate(xt.shape)])
    x, xt = stand_in_if(b, bad, cast(b, x, xt, st), st, {j: sizes[lead + j] for j in checked}), st
    zero = b.const(0, "index")

    def body(bb, args):
        idx = []
        for j, d in enumerate(xt.shape):
            if d == 1:
                idx.append(zero)
                continue
            li = bb.assign(f"linalg.index {lead + j} : index", "li")
            idx.append(bb.select(ones[j], zero, li, "index") if j in checked else li)
        return bb.assign(f"tensor.extract {x}[{', '.join(idx)}] : {xt.mlir()}", "x")

    omap = ", ".join(f"d{i}" for i in range(out_t.rank))
    return b.generic(out_t, b.empty(out_t, sizes), [], [], omap, ["parallel"] * out_t.rank, body)


register(OpDef(
    name="broadcast_to", impl=_bto, nargs=None, attrs={"shape": "ints"}, infer=_bto_rule, batch=batch_shape.broadcast_to,
    sample=lambda rng: ([rng.standard_normal((3, 1)).astype(np.float32)], {"shape": (2, 3, 4)}),
    doc="""x broadcast to `shape` as NumPy does; each -2 in it is the next operand (an i64 scalar).

        %y = "dg.broadcast_to"(%x, %n) {shape = array<i64: -2, 3>} : (tensor<3xf32>, tensor<i64>) -> tensor<?x3xf32>""",
    lower=_lower_broadcast_to,
    vjp=lambda g, op, d: [summed_to(g, d, op.operands[0])] + [None] * (len(op.operands) - 1), jvp=linear(0),
))


# ---------------------------------------------------------------- concat / stack
def _concat_rule(types, axis=0):
    first = types[0]
    if not 0 <= axis < first.rank:
        raise ShapeError(f"concat: axis {axis} out of range for {first}")
    total = 0
    for t in types:
        if t.rank != first.rank:
            raise ShapeError(f"concat: ranks differ ({first} and {t})")
        for i, (a, b) in enumerate(zip(first.shape, t.shape)):
            if i != axis and isinstance(a, int) and isinstance(b, int) and a != b:
                raise ShapeError(f"concat: shapes {first} and {t} differ outside axis {axis}")
        d = t.shape[axis]
        total = total + d if isinstance(total, int) and isinstance(d, int) else Sym()
    shape = list(first.shape)
    shape[axis] = total
    return TensorType(first.dtype, tuple(shape))


def _concat(*xs, axis=0):
    return np.concatenate(xs, axis=axis)


def _lower_concat(b, op):
    (x, xt), (y, yt) = zip(op.operands, op.types)
    out_t = op.result_types[0]
    axis = op.attrs["axis"]
    groups = [[(0, i), (1, i)] for i in range(out_t.rank) if i != axis]
    (x, y), _ = agreeing_operands(b, [x, y], [xt, yt], groups, "ValueError: all the input array dimensions except for the "
                                  "concatenation axis must match exactly, but sizes {0} and {1} differ")
    sizes = []
    for i in range(out_t.rank):
        if i == axis:
            sizes.append(b.binary("arith.addi", b.dim(x, xt, i), b.dim(y, yt, i), "index"))
        else:
            sizes.append(b.dim(x, xt, i))
    e = b.empty(out_t, sizes)
    zero = b.const(0, "index")

    def insert(src, st, dest, offset):
        offs = ", ".join(offset if i == axis else zero for i in range(out_t.rank))
        # Static sizes as literals: the slice type must match the source type.
        szs = ", ".join(str(d) if isinstance(d, int) else b.dim(src, st, i) for i, d in enumerate(st.shape))
        ones = ", ".join("1" for _ in range(st.rank))
        return b.assign(f"tensor.insert_slice {src} into {dest}[{offs}] [{szs}] [{ones}] : {st.mlir()} into {out_t.mlir()}", "ins")

    r = insert(x, xt, e, zero)
    return insert(y, yt, r, b.dim(x, xt, axis))


def _slice_spec(axis, lo, hi):
    return ("s:::",) * axis + (f"s:{lo}:{hi}:",)


def _vjp_concat(g, op, d):
    a, b = op.operands
    axis = op.attrs.get("axis", 0)
    n = a.tt.shape[axis]
    if isinstance(n, int):
        return [g.dg_op("getitem", [d], {"spec": _slice_spec(axis, 0, n)}),
                g.dg_op("getitem", [d], {"spec": _slice_spec(axis, n, "")})]
    na = g.dim(a, axis)
    return [g.dg_op("getitem", [d, na], {"spec": _slice_spec(axis, 0, "$")}),
            g.dg_op("getitem", [d, na], {"spec": _slice_spec(axis, "$", "")})]


register(OpDef(
    name="concat", impl=_concat, nargs=2, attrs={"axis": "int"}, infer=_concat_rule, batch=batch_shape.concat,
    sample=lambda rng: ([rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((2, 5)).astype(np.float32)], {"axis": 1}),
    doc="""Two tensors joined along an existing axis (a concatenation of more is a chain of these).

        %y = "dg.concat"(%a, %b) {axis = 1 : i64} : (tensor<2x3xf32>, tensor<2x5xf32>) -> tensor<2x8xf32>""",
    lower=_lower_concat,
    vjp=_vjp_concat, jvp=linear(),
))


# ---------------------------------------------------------------- take
def _take_rule(types, axis=0):
    x, idx = types
    if not is_int(idx.dtype):
        raise ShapeError(f"take: indices must be integers, got {idx}")
    if not 0 <= axis < x.rank:
        raise ShapeError(f"take: axis {axis} out of range for {x}")
    return TensorType(x.dtype, x.shape[:axis] + idx.shape + x.shape[axis + 1:])


TAKE_OUT_OF_BOUNDS = "take: index {0} is out of bounds for axis {axis} with size {1}"


def _take(x, idx, axis=0):
    n = x.shape[axis]
    bad = (idx < -n) | (idx >= n)
    if np.any(bad):
        raise IndexError(TAKE_OUT_OF_BOUNDS.format(idx[bad].flat[0], n, axis=axis))
    return np.take(x, idx, axis=axis)


def _lower_take(b, op):
    (x, xt), (idx, it) = zip(op.operands, op.types)
    out_t = op.result_types[0]
    axis = op.attrs["axis"]
    sizes = [b.dim(x, xt, i) for i in range(axis)] + [b.dim(idx, it, i) for i in range(it.rank)] + \
        [b.dim(x, xt, i) for i in range(axis + 1, xt.rank)]
    e = b.empty(out_t, sizes)
    n = b.dim(x, xt, axis)
    x, xt = readable(b, x, xt, [axis])
    imap = ", ".join(f"d{axis + i}" for i in range(it.rank))

    def body(bb, args):
        raw = args[0]
        if it.dtype != "i64":
            raw = bb.unary("arith.extsi", raw, "i32 to i64")
        k = index_in_range(bb, raw, n, TAKE_OUT_OF_BOUNDS.replace("{axis}", str(axis)))
        coords = []
        for i in range(xt.rank):
            if i == axis:
                coords.append(k)
            else:
                li = bb.fresh("li")
                o = i if i < axis else i - 1 + it.rank
                bb.emit(f"{li} = linalg.index {o} : index")
                coords.append(li)
        return bb.assign(f"tensor.extract {x}[{', '.join(coords)}] : {xt.mlir()}", "x")

    omap = ", ".join(f"d{i}" for i in range(out_t.rank))
    return b.generic(out_t, e, [(idx, it)], [imap], omap, ["parallel"] * out_t.rank, body)


def _take_grad(g, x, idx, d, axis):
    """The adjoint of take(x, idx, axis): a one-hot contraction (repeated indices add up)."""
    n = g.dg_op("cast", [g.dim(x, axis)], {"dtype": idx.tt.dtype})
    idx = g.where(g.dg_op("lt", [idx, g.const(0, idx)]), g.add(idx, n), idx)
    oh = g.onehot(idx, x, axis)  # idx.shape + [n]
    post = x.tt.rank - axis - 1
    if idx.tt.rank == 0:
        if post:
            oh = g.dg_op("expand_dims", [oh], {"axes": tuple(range(1, 1 + post))})
        return g.mul(g.dg_op("expand_dims", [d], {"axes": (axis,)}), oh)
    if idx.tt.rank > 1:  # the indices as one axis, d's axes of them too
        return _take_grad(g, x, _flat(g, idx, 0, idx.tt.rank), _flat(g, d, axis, idx.tt.rank), axis)
    r = d.tt.rank  # pre + [m] + post
    to_last = tuple(i for i in range(r) if i != axis) + (axis,)
    moved = g.dg_op("matmul", [g.dg_op("transpose", [d], {"perm": to_last}), oh])  # pre + post + [n]
    back = list(range(axis)) + [r - 1] + list(range(axis, r - 1))
    return g.dg_op("transpose", [moved], {"perm": tuple(back)})


def _flat(g, v, start: int, count: int):
    """v with its axes start .. start + count - 1 as one, sizes from v at run time where not static."""
    shape, sizes = [], []
    for i, s in enumerate(v.tt.shape):
        if start < i < start + count:
            continue
        if i == start:
            span = v.tt.shape[start:start + count]
            if all(isinstance(n, int) for n in span):
                shape.append(int(np.prod(span, dtype=np.int64)))
                continue
            n = g.dim(v, start)
            for k in range(start + 1, start + count):
                n = g.mul(n, g.dim(v, k))
            shape.append(DYN)
            sizes.append(n)
        elif isinstance(s, int):
            shape.append(s)
        else:
            shape.append(DYN)
            sizes.append(g.dim(v, i))
    return g.dg_op("reshape", [v] + sizes, {"shape": tuple(shape)})


def _vjp_take(g, op, d):
    """Rows taken (axis 0): what each read, added back at its row (repeated rows add up), in time
    of the rows read; added to an adjoint x already has, only those rows. Else a one-hot
    contraction."""
    x, idx = op.operands
    axis = op.attrs.get("axis", 0)
    if axis % x.tt.rank or x.tt.rank < 1:
        return [_take_grad(g, x, idx, d, axis), None]
    n = g.dg_op("cast", [g.dim(x, 0)], {"dtype": idx.tt.dtype})
    rows = g.where(g.dg_op("lt", [idx, g.const(0, idx)]), g.add(idx, n), idx)
    if rows.tt.rank == 0:  # one row
        rows, d = (g.dg_op("expand_dims", [v], {"axes": (0,)}) for v in (rows, d))
    elif rows.tt.rank != 1:  # the indices as one axis, d's leading axes of them too
        rows, d = _flat(g, rows, 0, rows.tt.rank), _flat(g, d, 0, rows.tt.rank)
    if rows.tt.dtype != "i64":
        rows = g.dg_op("cast", [rows], {"dtype": "i64"})
    return [g.rows_added(x, d, rows), None]


register(OpDef(
    name="take", impl=_take, nargs=2, attrs={"axis": "int"}, infer=_take_rule, batch=batch_shape.take,
    sample=lambda rng: ([rng.standard_normal((4, 3)).astype(np.float32), np.array([3, 0, 1, 1])], {"axis": 0}),
    doc="""np.take: the elements of x at an integer index tensor along `axis` (negative indices count from the end).

        %y = "dg.take"(%x, %i) {axis = 0 : i64} : (tensor<4x3xf32>, tensor<5xi64>) -> tensor<5x3xf32>""",
    lower=_lower_take,
    vjp=_vjp_take, jvp=linear(0),
))


# ---------------------------------------------------------------- indexing
# `spec` has one string per index item:
#   "i:K" / "i:$"        integer index (static K or the next operand)
#   "s:A:B:C"            slice; each of A, B, C is empty, an integer, or $
#   "n"                  new axis (None)
#   "e"                  ellipsis
#   "t:$"                an integer index tensor (the next operand)
def _static_slice(dim, parts):
    start, stop, step = (list(parts) + ["", ""])[:3]
    if start == stop == "" and step in ("", "1"):
        return dim  # the whole axis: the same size (a symbolic one stays the same symbol)
    if not isinstance(dim, int) or any(p == "$" for p in parts):
        return Sym()
    a, b, c = (int(p) if p else None for p in parts)
    if c == 0:
        raise ShapeError("slice step cannot be zero")
    return len(range(*slice(a, b, c).indices(dim)))


def _index_result(x: TensorType, spec, operand_types):
    items = expand_spec(spec, x.rank)
    ops = list(operand_types)
    out = []
    ax = 0
    for it in items:
        kind = it[0]
        if kind == "n":
            out.append(1)
        elif kind == "i":
            val = it[2:]
            if val == "$":
                t = ops.pop(0)
                if not is_int(t.dtype) or t.rank:
                    raise ShapeError(f"an index must be an integer scalar, got {t}")
            else:
                k = int(val)
                d = x.shape[ax]
                if isinstance(d, int) and not -d <= k < d:
                    raise ShapeError(f"index {k} is out of bounds for axis {ax} with size {d}")
            ax += 1
        elif kind == "s":
            parts = it[2:].split(":")
            for p in parts:
                if p == "$":
                    t = ops.pop(0)
                    if not is_int(t.dtype) or t.rank:
                        raise ShapeError(f"a slice bound must be an integer scalar, got {t}")
            out.append(_static_slice(x.shape[ax], parts))
            ax += 1
        elif kind == "t":
            t = ops.pop(0)
            if not is_int(t.dtype):
                raise ShapeError(f"an index tensor must hold integers, got {t}")
            out.extend(t.shape)
            ax += 1
    return tuple(out)


def _np_index(spec, dyn):
    dyn = list(dyn)
    idx = []
    for it in spec:
        kind = it[0]
        if kind == "n":
            idx.append(None)
        elif kind == "e":
            idx.append(Ellipsis)
        elif kind == "i":
            v = it[2:]
            idx.append(int(dyn.pop(0)) if v == "$" else int(v))
        elif kind == "s":
            parts = []
            for p in it[2:].split(":"):
                parts.append(int(dyn.pop(0)) if p == "$" else (int(p) if p else None))
            if parts[2] == 0:
                raise ValueError("slice step cannot be zero")
            idx.append(slice(*parts))
        elif kind == "t":
            idx.append(np.asarray(dyn.pop(0)))
    return tuple(idx)


def _slice_bounds(b, parts, dyn, n):
    """Python slice semantics at run time: (start, step, length) as index values for size n."""
    def part(p):
        if p == "":
            return None
        if p == "$":
            v, t = dyn.pop(0)
            x = b.extract(v, t)
            return b.assign(f"arith.index_cast {x} : i64 to index", "i")
        return int(p)

    a, c, s = part(parts[0]), part(parts[1]), part(parts[2])
    zero, one = b.const(0, "index"), b.const(1, "index")
    if s is None:
        s = 1
    if s == 0:  # a literal 0: the same run-time error as the interpreter's
        fail_if(b, b.const(True, "i1"), "ValueError: slice step cannot be zero")
        s = 1
    if isinstance(s, str):  # a run-time step, of either sign
        zstep = b.cmp("eq", s, zero, "index")
        fail_if(b, zstep, "ValueError: slice step cannot be zero")
        step = b.select(zstep, one, s, "index")
        positive = b.cmp("sgt", step, zero, "index")
    else:
        step, positive = b.const(s, "index"), s > 0

    def norm(v, default, lo, hi):
        if v is None:
            return default
        v = b.const(v, "index") if isinstance(v, int) else v
        neg = b.cmp("slt", v, zero, "index")
        w = b.select(neg, b.binary('arith.addi', v, n, 'index'), v, "index")
        return b.binary("arith.minsi", b.binary("arith.maxsi", w, lo, "index"), hi, "index")

    def forward():
        return norm(a, zero, zero, n), norm(c, n, zero, n)

    def backward():
        mone = b.const(-1, "index")
        top = b.binary("arith.subi", n, one, "index")
        return norm(a, top, mone, top), norm(c, mone, mone, top)

    if positive is True:
        start, stop = forward()
    elif positive is False:
        start, stop = backward()
    else:
        (f0, f1), (b0, b1) = forward(), backward()
        start, stop = b.select(positive, f0, b0, "index"), b.select(positive, f1, b1, "index")
    length = b.binary("arith.ceildivsi", b.binary("arith.subi", stop, start, "index"), step, "index")
    length = b.binary("arith.maxsi", length, zero, "index")
    return start, step, length


def _index_plan(b, x, xt, spec, dyn):
    """Per x axis: ("i", index) or ("s", start, step, length); plus new-axis positions in the result."""
    items = expand_spec(list(spec), xt.rank)
    plan, out_axes = [], []  # out_axes: per result axis, ("x", k) or ("n",)
    k = 0
    for it in items:
        if it == "n":
            out_axes.append(("n",))
            continue
        n = b.dim(x, xt, k)
        if it[0] == "i":
            val = it[2:]
            if val == "$":
                v, t = dyn.pop(0)
                raw = b.extract(v, t)
            else:
                raw = b.const(int(val), "i64")
            plan.append(("i", index_in_range(b, raw, n, f"IndexError: index {{0}} is out of bounds for axis {k} with size {{1}}")))
        else:
            start, step, length = _slice_bounds(b, it[2:].split(":"), dyn, n)
            plan.append(("s", start, step, length))
            out_axes.append(("x", k))
        k += 1
    return plan, out_axes


def _tensor_index_axis(spec, rank):
    """The axis of a lone index tensor among full slices (x[idx], x[:, idx]), else None."""
    items = expand_spec(spec, rank)
    ts = [i for i, s in enumerate(items) if s[0] == "t"]
    if len(ts) == 1 and all(s == "s:::" for i, s in enumerate(items) if i != ts[0]):
        return ts[0]
    return None


def _no_tensor_index(op, what):
    raise DgError(f"the gradient of {what} with an index tensor is only supported for x[idx] along one axis "
                  "(use take())", op.where)


def _getitem_rule(types, spec=()):
    x = types[0]
    if sum(1 for s in spec if s[0] == "t") > 1:
        raise ShapeError("at most one index tensor per subscript")
    return TensorType(x.dtype, _index_result(x, spec, types[1:]))


def _getitem(x, *dyn, spec=()):
    r = x[_np_index(spec, dyn)]
    return np.array(r) if r.base is not None or not isinstance(r, np.ndarray) else r


def _lower_getitem(b, op):
    x, xt = op.operands[0], op.types[0]
    out_t = op.result_types[0]
    plan, out_axes = _index_plan(b, x, xt, op.attrs["spec"], list(zip(op.operands[1:], op.types[1:])))
    x, xt = readable(b, x, xt, [k for k, p in enumerate(plan) if p[0] == "i"])
    sizes = []
    for i, ax in enumerate(out_axes):
        sizes.append(None if ax[0] == "n" else plan[ax[1]][3])
    e = b.empty(out_t, sizes)
    where = {ax[1]: i for i, ax in enumerate(out_axes) if ax[0] == "x"}

    def body(bb, args):
        idx = []
        for k, p in enumerate(plan):
            if p[0] == "i":
                idx.append(p[1])
            else:
                li = bb.assign(f"linalg.index {where[k]} : index", "li")
                idx.append(bb.binary("arith.addi", p[1], bb.binary("arith.muli", li, p[2], "index"), "index"))
        return bb.assign(f"tensor.extract {x}[{', '.join(idx)}] : {xt.mlir()}", "x")

    omap = ", ".join(f"d{i}" for i in range(out_t.rank))
    return b.generic(out_t, e, [], [], omap, ["parallel"] * out_t.rank, body)


def _vjp_getitem(g, op, d):
    x, *dyn = op.operands
    spec = op.attrs["spec"]
    if any(s[0] == "t" for s in spec):
        axis = _tensor_index_axis(spec, x.tt.rank)
        if axis is None:
            _no_tensor_index(op, "indexing")
        dx = _take_grad(g, x, dyn[0], d, axis)
        if dx is None:
            _no_tensor_index(op, "indexing")
        return [dx, None]
    return [g.part(x, d, spec, dyn)] + [None] * len(dyn)


register(OpDef(
    name="getitem", impl=_getitem, nargs=None, attrs={"spec": "strs"}, infer=_getitem_rule, batch=batch_shape.getitem,
    sample=lambda rng: ([rng.standard_normal((4, 5, 6)).astype(np.float32), np.int64(2)],
                        {"spec": ("i:$", "s:1:-1:", "n", "e")}),
    doc="""NumPy basic indexing, `spec` one item per index (see expand_spec); operands: x, then the values
    of its `$`s in order (i64 scalars).

        %y = "dg.getitem"(%x, %i) {spec = ["i:$", "s:1::"]} : (tensor<4x3xf32>, tensor<i64>) -> tensor<2xf32>""",
    lower=_lower_getitem,
    vjp=_vjp_getitem, jvp=linear(0),
))


def _setitem_rule(types, spec=()):
    x, v = types[0], types[1]
    target = _index_result(x, spec, types[2:])
    if v.rank > len(target):
        raise ShapeError(f"cannot assign a {v} to a slice of shape {list(target)}")
    for a, b in zip(v.shape[::-1], target[::-1]):
        if isinstance(a, int) and isinstance(b, int) and a != 1 and a != b:
            raise ShapeError(f"cannot assign a {v} to a slice of shape {list(target)}")
    return x


def _setitem(x, v, *dyn, spec=()):
    out = np.array(x, copy=True)
    out[_np_index(spec, dyn)] = v
    return out


def _unit_steps(spec, xt) -> bool:
    """Whether each item of a basic subscript is an index, a new axis or a slice whose step is
    a positive constant (none written: 1), on an x with no axis of size 0 known now."""
    if 0 in xt.shape:
        return False
    for it in expand_spec(list(spec), xt.rank):
        if it == "n" or it[0] == "i":
            continue
        step = it[2:].split(":")[2] if it[0] == "s" else "$"
        if step != "" and not (step.isdigit() and int(step) > 0):
            return False
    return True


def _store_region(b, x, xt, plan, part):
    """x with the region that `plan` (_index_plan's) selects set to `part(bb, region_type, sizes)`
    (None when every axis is indexed: then `part(bb, None, [])` gives the one element's scalar):
    one element stored (tensor.insert), else the region made and inserted (tensor.insert_slice).
    Bufferization does either in place where x has no later use, so that `y[i] = s` or
    `h[t] = row` in a loop costs the region, not a pass over y. An axis indexed where x has size
    0 (its index check failed) leaves x as it is: nothing is written out of bounds."""
    region = [p[3] for p in plan if p[0] == "s"]

    def store(bb):
        if not region:
            s = part(bb, None, [])
            return bb.assign(f"tensor.insert {s} into {x}[{', '.join(p[1] for p in plan)}] : {xt.mlir()}", "set")
        rt = TensorType(xt.dtype, tuple(Sym() for _ in region))
        filled = part(bb, rt, region)
        offsets = ", ".join(p[1] for p in plan)
        sizes = ", ".join("1" if p[0] == "i" else p[3] for p in plan)
        steps = ", ".join("1" if p[0] == "i" else p[2] for p in plan)
        return bb.assign(f"tensor.insert_slice {filled} into {x}[{offsets}] [{sizes}] [{steps}] : "
                         f"{rt.mlir()} into {xt.mlir()}", "set")

    zero = b.const(0, "index")
    empty = any_of(b, [b.cmp("eq", b.dim(x, xt, k), zero, "index")
                       for k, p in enumerate(plan) if p[0] == "i" and not isinstance(xt.shape[k], int)])
    return store(b) if empty is None else if_else(b, empty, xt.mlir(), lambda bb: x, store)


def _store_scalar(b, x, xt, v, vt, plan):
    """x with the region `plan` selects set to the scalar v (_store_region)."""
    s = b.extract(v, vt)
    return _store_region(b, x, xt, plan, lambda bb, rt, sizes: s if rt is None else bb.fill(rt, sizes, s))


def _store_array(b, x, xt, v, vt, plan, target):
    """x with the region `plan` selects set to v broadcast onto it (_store_region): the region
    made from v (a pass over the region, not over x) and inserted. `target`: the region's axes
    as _lower_setitem lists them (new axes of size 1 among x's sliced ones); v's sizes were
    checked to be 1 or the region's."""
    sliced = [k for k, p in enumerate(plan) if p[0] == "s"]
    tr = len(target)
    v, vt = readable(b, v, vt, range(vt.rank))
    vdims = [b.dim(v, vt, j) for j in range(vt.rank)]
    one = b.const(1, "index")

    def part(bb, rt, sizes):
        def body(b2, args):
            zero = b2.const(0, "index")
            vidx = []
            for j in range(vt.rank):
                ax = target[tr - vt.rank + j]
                t = zero if ax[0] == "n" else b2.assign(f"linalg.index {sliced.index(ax[1])} : index", "li")
                vidx.append(b2.select(b2.cmp("eq", vdims[j], one, "index"), zero, t, "index"))
            return b2.assign(f"tensor.extract {v}[{', '.join(vidx)}] : {vt.mlir()}", "x")

        if rt is None:  # every axis indexed: v has one element
            return body(bb, [])
        omap = ", ".join(f"d{i}" for i in range(rt.rank))
        return bb.generic(rt, bb.empty(rt, sizes), [], [], omap, ["parallel"] * rt.rank, body)

    return _store_region(b, x, xt, plan, part)


def _lower_setitem(b, op):
    x, xt = op.operands[0], op.types[0]
    v, vt = op.operands[1], op.types[1]
    plan, out_axes = _index_plan(b, x, xt, op.attrs["spec"], list(zip(op.operands[2:], op.types[2:])))
    if vt.rank == 0 and b.target == "cpu" and _unit_steps(op.attrs["spec"], xt):
        return _store_scalar(b, x, xt, v, vt, plan)
    # The target region's axes (new axes have size 1) and v broadcast onto them.
    target = [("n",) if ax[0] == "n" else ("x", ax[1]) for ax in out_axes]
    tr = len(target)
    vdims = [b.dim(v, vt, j) for j in range(vt.rank)]
    zero, one = b.const(0, "index"), b.const(1, "index")
    # v's sizes must each be 1 or the region's (the slice's length; 1 for a new axis), as in NumPy.
    # (The reads below stay in bounds either way.)
    lengths = [one if ax[0] == "n" else plan[ax[1]][3] for ax in target[tr - vt.rank:]]
    for j, (vd, n) in enumerate(zip(vdims, lengths)):
        fail_if(b, neither(b, vd, n), f"cannot assign a {vt} value to the indexed region: size {{0}} of "
                                      f"its axis {j} is neither 1 nor the region's {{1}} at run time",
                ((vd, "index"), (n, "index")))
    if b.target == "cpu" and _unit_steps(op.attrs["spec"], xt):
        return _store_array(b, x, xt, v, vt, plan, target)
    sizes = [b.dim(x, xt, k) for k in range(xt.rank)]
    e = b.empty(xt, sizes)
    ety = xt.element
    # v is read (clamped to its sizes) at every element of x: an empty v is not read.
    v, vt = readable(b, v, vt, range(vt.rank))
    vdims = [b.dim(v, vt, j) for j in range(vt.rank)]

    def body(bb, args):
        inside = bb.const(True, "i1")
        coord = {}
        for k, p in enumerate(plan):
            li = bb.assign(f"linalg.index {k} : index", "li")
            if p[0] == "i":
                eq = bb.cmp("eq", li, p[1], "index")
                inside = bb.binary("arith.andi", inside, eq, "i1")
            else:
                start, step, length = p[1], p[2], p[3]
                off = bb.binary("arith.subi", li, start, "index")
                q = bb.binary("arith.divsi", off, step, "index")
                r = bb.binary("arith.remsi", off, step, "index")
                c1 = bb.cmp("eq", r, zero, "index")
                c2 = bb.cmp("sge", q, zero, "index")
                c3 = bb.cmp("slt", q, length, "index")
                inside = bb.binary("arith.andi", inside, bb.binary("arith.andi", c1, bb.binary("arith.andi", c2, c3, "i1"), "i1"), "i1")
                coord[k] = q
        tcoords = [zero if ax[0] == "n" else coord[ax[1]] for ax in target]
        vidx = []
        for j in range(vt.rank):
            t = tcoords[tr - vt.rank + j]
            # Broadcast size-1 axes of v; clamp so that reads stay in bounds outside the region.
            last = bb.binary("arith.subi", vdims[j], one, "index")
            t = bb.binary("arith.maxsi", bb.binary("arith.minsi", t, last, "index"), zero, "index")
            isone = bb.cmp("eq", vdims[j], one, "index")
            sel = bb.select(isone, zero, t, "index")
            vidx.append(sel)
        val = bb.assign(f"tensor.extract {v}[{', '.join(vidx)}] : {vt.mlir()}", "x")
        out = bb.select(inside, val, args[0], ety)
        return out

    imap = ", ".join(f"d{i}" for i in range(xt.rank))
    return b.generic(xt, e, [(x, xt)], [imap], imap, ["parallel"] * xt.rank, body)


def _vjp_setitem(g, op, d):
    x, v, *dyn = op.operands
    spec = op.attrs["spec"]
    if any(s[0] == "t" for s in spec):
        _no_tensor_index(op, "assignment")
    dx = g.dg_op("setitem", [d, g.const(0.0, d)] + dyn, {"spec": spec})
    dv = summed_to(g, g.dg_op("getitem", [d] + dyn, {"spec": spec}), v)
    return [dx, dv] + [None] * len(dyn)


register(OpDef(
    name="setitem", impl=_setitem, nargs=None, nfixed=2, attrs={"spec": "strs"}, infer=_setitem_rule, batch=batch_shape.setitem,
    sample=lambda rng: ([rng.standard_normal((4, 5)).astype(np.float32), np.float32(1.0)], {"spec": ("i:1", "s:::2")}),
    doc="""A copy of x with x[spec] = v (v broadcast to the part); operands: x, v, then the values of spec's `$`s.

        %y = "dg.setitem"(%x, %v) {spec = ["i:0"]} : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>""",
    lower=_lower_setitem,
    vjp=_vjp_setitem, jvp=linear(0, 1),
))


# ---------------------------------------------------------------- dims and creation
def _dim_rule(types, axis=0):
    if not 0 <= axis < types[0].rank:
        raise ShapeError(f"axis {axis} is out of range for {types[0]}")
    return TensorType("i64", ())


def _dim(x, axis=0):
    return np.int64(x.shape[axis])


def _lower_dim(b, op):
    d = b.dim(op.operands[0], op.types[0], op.attrs["axis"])
    s = b.assign(f"arith.index_cast {d} : index to i64", "s")
    return b.scalar_tensor(s, op.result_types[0])


register(OpDef(
    name="dim", impl=_dim, attrs={"axis": "int"}, infer=_dim_rule, batch=batch_shape.dim,
    sample=lambda rng: ([rng.standard_normal((4, 5)).astype(np.float32)], {"axis": 1}),
    doc="""The size of one axis of x, as an i64 scalar.

        %n = "dg.dim"(%x) {axis = 0 : i64} : (tensor<?x3xf32>) -> tensor<i64>""",
    lower=_lower_dim,
))


def _full_rule(types, shape=()):
    v = types[0]
    if v.rank:
        raise ShapeError(f"full: the fill value must be a scalar, got {v}")
    for t in types[1:]:
        if not is_int(t.dtype) or t.rank:
            raise ShapeError(f"a size must be an integer scalar, got {t}")
    if any(s < 0 and s != DYN for s in shape):
        raise ShapeError(f"negative size in shape {list(shape)}")
    return TensorType(v.dtype, type_shape(shape))


def _full(v, *dims, shape=()):
    sh = shape_from(shape, dims)
    if any(s < 0 for s in sh):
        raise ValueError(f"negative size in shape {sh}")
    return np.full(sh, v, dtype=v.dtype)


def _lower_full(b, op):
    t = op.result_types[0]
    v = b.extract(op.operands[0], op.types[0])
    sizes = sizes_from(b, op, op.attrs["shape"], zip(op.operands[1:], op.types[1:]))
    return b.fill(t, sizes, v)


def _vjp_full(g, op, d):
    return [g.dg_op("sum", [d], {"axes": tuple(range(d.tt.rank)), "keepdims": False})] + [None] * (len(op.operands) - 1)


register(OpDef(
    name="full", impl=_full, nargs=None, attrs={"shape": "ints"}, infer=_full_rule, batch=batch_shape.full,
    sample=lambda rng: ([np.float32(1.5), np.int64(3)], {"shape": (2, DYN)}),
    doc="""A tensor of `shape` filled with a scalar; operands: the scalar, then one i64 scalar per -2 in shape.

        %y = "dg.full"(%v, %n) {shape = array<i64: -2, 3>} : (tensor<f32>, tensor<i64>) -> tensor<?x3xf32>""",
    lower=_lower_full,
    vjp=_vjp_full, jvp=linear(0),
))


def _arange_rule(types, size=DYN, dtype="i64"):
    return TensorType(dtype, (size if size >= 0 else Sym(),))


def _arange(start, stop, step, size=DYN, dtype="i64"):
    if step == 0:
        raise ValueError("arange: step cannot be zero")
    check_count([max(0, -((int(start) - int(stop)) // int(step)))])
    return np.arange(start, stop, step).astype(np_dtype(dtype))


def _lower_arange(b, op):
    out_t = op.result_types[0]
    start, stop, step = (b.extract(v, t) for v, t in zip(op.operands, op.types))
    zero = b.const(0, "i64")
    isz = b.cmp("eq", step, zero, "i64")
    fail_if(b, isz, "arange: step cannot be zero")
    one = b.const(1, "i64")
    safe = b.select(isz, one, step, "i64")
    n = b.binary("arith.maxsi", b.binary("arith.ceildivsi", b.binary("arith.subi", stop, start, "i64"), safe, "i64"), zero, "i64")
    # stop - start wraps around in i64 for far apart ends: their count in f64 is checked too
    f = [b.unary("arith.sitofp", v, "i64 to f64") for v in (stop, start, safe)]
    count = b.binary("arith.divf", b.binary("arith.subf", f[0], f[1], "f64"), f[2], "f64")
    too = b.cmp("ogt", count, b.const(float(MAX_ELEMENTS), "f64"), "f64")
    fail_if(b, too, TOO_LARGE)
    n = b.select(too, zero, n, "i64")
    ni = b.assign(f"arith.index_cast {n} : i64 to index", "i")
    e = b.empty(out_t, [ni])
    ety = out_t.element

    def body(bb, args):
        li = bb.assign("linalg.index 0 : index", "li")
        k = bb.assign(f"arith.index_cast {li} : index to i64", "x")
        v = bb.binary("arith.addi", start, bb.binary("arith.muli", k, safe, "i64"), "i64")
        if ety == "i64":
            return v
        if ety.startswith("i"):
            return bb.unary("arith.trunci", v, f"i64 to {ety}")
        return bb.unary("arith.sitofp", v, f"i64 to {ety}")

    return b.generic(out_t, e, [], [], "d0", ["parallel"], body)


register(OpDef(
    name="arange", impl=_arange, nargs=3, attrs={"size": "int", "dtype": "dtype"}, infer=_arange_rule,
    sample=lambda rng: ([np.int64(1), np.int64(7), np.int64(2)], {"size": 3, "dtype": "i64"}),
    doc="""start, start + step, ... up to stop (excluded), of `dtype`; `size` is the length when it is known
    before run time, else -2.

        %y = "dg.arange"(%a, %b, %c) {size = -2 : i64, dtype = i64} : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>""",
    lower=_lower_arange,
))


def _eye_rule(types, size=DYN, dtype=np.float32):
    n = size if size >= 0 else Sym()
    return TensorType(dtype, (n, n))


def _eye(n, size=DYN, dtype=np.float32):
    check_count([max(0, int(n))] * 2)
    return np.eye(int(n), dtype=np_dtype(dtype))


def _lower_eye(b, op):
    out_t = op.result_types[0]
    n = b.extract(op.operands[0], op.types[0])
    ni = b.assign(f"arith.index_cast {n} : i64 to index", "i")
    negative = b.cmp("slt", ni, b.const(0, "index"), "index")
    fail_if(b, negative, "ValueError: negative dimensions are not allowed")
    ni = b.binary("arith.maxsi", ni, b.const(0, "index"), "index")
    ni, _ = bounded(b, [ni, ni])
    e = b.empty(out_t, [ni, ni])
    ety = out_t.element
    one, zero = b.const(1.0 if ety[0] in "fb" else 1, ety), b.const(0.0 if ety[0] in "fb" else 0, ety)

    def body(bb, args):
        i, j = bb.fresh("li"), bb.fresh("li")
        bb.emit(f"{i} = linalg.index 0 : index")
        bb.emit(f"{j} = linalg.index 1 : index")
        return bb.select(bb.cmp("eq", i, j, "index"), one, zero, ety)

    return b.generic(out_t, e, [], [], "d0, d1", ["parallel", "parallel"], body)


register(OpDef(
    name="eye", impl=_eye, nargs=1, attrs={"size": "int", "dtype": "dtype"}, infer=_eye_rule,
    sample=lambda rng: ([np.int64(3)], {"size": 3, "dtype": "f32"}),
    doc="""The identity matrix of size n (an i64 scalar; `size` is n where it is known before run time, else -2).

        %y = "dg.eye"(%n) {size = 3 : i64, dtype = f32} : (tensor<i64>) -> tensor<3x3xf32>""",
    lower=_lower_eye,
))


def _constant_rule(types, value=None):
    arr, t = value
    return t


def _constant(value=None):
    return value[0]


def _lower_constant(b, op):
    return b.assign(f"arith.constant {op.raw['value']}", "k")


register(OpDef(
    name="constant", impl=_constant, nargs=0, attrs={"value": "dense"}, infer=_constant_rule,
    doc="""A tensor constant.

        %y = "dg.constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> tensor<2xf32>""",
    lower=_lower_constant,
))


def _undef_rule(types, shape=(), dtype=np.float32):
    return TensorType(dtype, type_shape(shape))


def _undef(shape=(), dtype=np.float32):
    return np.zeros([0 if s == DYN else s for s in shape], dtype=np_dtype(dtype))


def _lower_undef(b, op):
    t = op.result_types[0]
    sizes = [b.const(0, "index") if not isinstance(d, int) else None for d in t.shape]
    return b.fill(t, sizes, b.const(0, t.element))


register(OpDef(
    name="undef", impl=_undef, nargs=0, attrs={"shape": "ints", "dtype": "dtype"}, infer=_undef_rule,
    sample=lambda rng: ([], {"shape": (2, 3), "dtype": "f32"}),
    doc="""A placeholder for a value some path does not define (zeros; never read); -2 sizes are 0.

        %y = "dg.undef"() {shape = array<i64: -2, 3>, dtype = f32} : () -> tensor<?x3xf32>""",
    lower=_lower_undef,
))


def _cast_rule(types, dtype=np.float32):
    return types[0].with_dtype(dtype)


def _cast(x, dtype=np.float32):
    d = np_dtype(dtype)
    if np.dtype(x.dtype).kind == "f" and d.kind in "iu":
        with np.errstate(invalid="ignore"):
            return np.trunc(x).astype(d)
    return np.asarray(x).astype(d)


def _lower_cast(b, op):
    src, dst = op.types[0].dtype, op.result_types[0].dtype
    ks, kd = DTYPES[src][2], DTYPES[dst][2]
    es, ed = op.types[0].element, op.result_types[0].element
    bits = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64, "i32": 32, "i64": 64, "bool": 1, "u64": 64}

    def scalar(bb, kind, ety, args, _op):
        x = args[0]
        if src == dst:
            return x
        if kd == "b":
            return bb.cmp("une" if ks == "f" else "ne", x, bb.const(0, es), es)
        if ks == "f" and kd == "f":
            if {src, dst} == {"f16", "bf16"}:
                x = bb.unary("arith.extf", x, f"{es} to f32")
                es2 = "f32"
                return bb.unary("arith.truncf", x, f"{es2} to {ed}")
            if bits[dst] > bits[src]:
                return bb.unary("arith.extf", x, f"{es} to {ed}")
            return truncate_float(bb, x, es, ed)
        if ks in "iub" and kd == "f":
            return bb.unary("arith.uitofp" if ks in "bu" else "arith.sitofp", x, f"{es} to {ed}")
        if ks == "f" and kd in "iu":
            return bb.unary("arith.fptosi", x, f"{es} to {ed}")
        # int/bool -> int
        if bits[dst] > bits[src]:
            return bb.unary("arith.extui" if ks in "bu" else "arith.extsi", x, f"{es} to {ed}")
        if bits[dst] < bits[src]:
            return bb.unary("arith.trunci", x, f"{es} to {ed}")
        return x

    return lower_elementwise(scalar)(b, op)


def _vjp_cast(g, op, d):
    x, = op.operands

    return [g.dg_op("cast", [d], {"dtype": x.tt.dtype}) if is_float(x.tt.dtype) else None]


register(OpDef(
    name="cast", impl=_cast, attrs={"dtype": "dtype"}, infer=_cast_rule, batch=elementwise,
    sample=lambda rng: ([rng.standard_normal((3,)).astype(np.float32) * 10], {"dtype": "i32"}),
    doc="""x converted to the element type `dtype` (floats to ints truncate toward zero).

        %y = "dg.cast"(%x) {dtype = i32} : (tensor<3xf32>) -> tensor<3xi32>""",
    lower=_lower_cast,
    vjp=_vjp_cast, jvp=linear(0),
))
