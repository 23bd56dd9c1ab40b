"""Batching rules of the shape, indexing and conversion ops (their registry entries name them).

Each rule takes the batched operands at axis 0 (dialects/batch_rules.py) and
writes the op for the whole batch; where an operand that shapes the result
(a size, an index that picks a slice) differs by example and the op has no
batched form, the rule falls back on the loop over examples.
"""
from __future__ import annotations

from dg.core.types import TensorType

from .batch_rules import batched_axis, per_example
from .helpers import expand_spec
from .rules import DYN, BatchBuilder, OpView, Shared

I64 = TensorType("i64", ())


def reshape(g: BatchBuilder, op: OpView, batched: list) -> list:
    if any(batched[1:]):
        return per_example(g, op, batched)
    return [g.dg_op("reshape", [op.operands[0], g.size] + op.operands[1:], {"shape": (DYN,) + tuple(op.attrs["shape"])})]


def transpose(g: BatchBuilder, op: OpView, batched: list) -> list:
    r = op.types[0].rank
    return [g.dg_op("transpose", [op.operands[0]], {"perm": (0,) + tuple(p % r + 1 for p in op.attrs["perm"])})]


def expand_dims(g: BatchBuilder, op: OpView, batched: list) -> list:
    r = op.result_types[0].rank
    return [g.dg_op("expand_dims", [op.operands[0]], {"axes": tuple(batched_axis(a, r) for a in op.attrs["axes"])})]


def squeeze(g: BatchBuilder, op: OpView, batched: list) -> list:
    r = op.types[0].rank
    return [g.dg_op("squeeze", [op.operands[0]], {"axes": tuple(batched_axis(a, r) for a in op.attrs["axes"])})]


def broadcast_to(g: BatchBuilder, op: OpView, batched: list) -> list:
    if any(batched[1:]):
        return per_example(g, op, batched)
    x = g.lift(op.operands[0], op.result_types[0].rank)
    return [g.dg_op("broadcast_to", [x, g.size] + op.operands[1:], {"shape": (DYN,) + tuple(op.attrs["shape"])})]


def concat(g: BatchBuilder, op: OpView, batched: list) -> list:
    ins = [v if b else g.stacked(v) for v, b in zip(op.operands, batched)]
    return [g.dg_op("concat", ins, {"axis": batched_axis(op.attrs["axis"], op.types[0].rank)})]


def dim(g: BatchBuilder, op: OpView, batched: list) -> list:
    return [Shared(g.dg_op("dim", [op.operands[0]], {"axis": op.attrs["axis"] + 1}))]


def full(g: BatchBuilder, op: OpView, batched: list) -> list:
    if any(batched[1:]):
        return per_example(g, op, batched)
    v = g.lift(op.operands[0], len(op.attrs["shape"]))
    return [g.dg_op("broadcast_to", [v, g.size] + op.operands[1:], {"shape": (DYN,) + tuple(op.attrs["shape"])})]


def _moved_to_front(g: BatchBuilder, y, axis: int):
    """y with its axis `axis` moved to the front."""
    if axis == 0:
        return y
    perm = (axis,) + tuple(i for i in range(y.tt.rank) if i != axis)
    return g.dg_op("transpose", [y], {"perm": perm})


def _taken(g: BatchBuilder, x, xb: bool, idx, ib: bool, axis: int, rank: int):
    """np.take(x, idx, axis) per example (`rank`: x's per-example rank); None where only the loop
    over examples does it."""
    if xb and not ib:
        return g.dg_op("take", [x, idx], {"axis": batched_axis(axis, rank)})
    idx = g.active(idx, 0)
    if not xb:  # one array, an index per example: the batch axis comes where the axis was
        return _moved_to_front(g, g.dg_op("take", [x, idx], {"axis": axis % rank}), axis % rank)
    if axis % rank:
        return None
    # Both batched, along the first axis: rows of x laid end to end, each example's indices
    # shifted to its own rows.
    n = g.dim(x, 1)
    rest = x.tt.shape[2:]
    dims = [g.dim(x, 2 + i) for i, d in enumerate(rest) if not isinstance(d, int)]
    flat = g.dg_op("reshape", [x] + dims, {"shape": (-1,) + tuple(d if isinstance(d, int) else DYN for d in rest)})
    wrapped = g.where(g.dg_op("lt", [idx, g.const(0, idx)]), g.add(idx, n), idx)
    start = g.dg_op("arange", [g.const(0, I64), g.size, g.const(1, I64)], {"size": DYN, "dtype": "i64"})
    offset = g.lift(g.mul(start, n), idx.tt.rank - 1)
    return g.dg_op("take", [flat, g.add(wrapped, offset)], {"axis": 0})


def take(g: BatchBuilder, op: OpView, batched: list) -> list:
    (x, idx), (xb, ib) = op.operands, batched
    y = _taken(g, x, xb, idx, ib, op.attrs["axis"], op.types[0].rank)
    return per_example(g, op, batched) if y is None else [y]


def _lone_index(spec, rank):
    """The axis of an indexing that is one integer index `$` among whole axes (x[i], x[:, i]),
    else None."""
    items = expand_spec(list(spec), rank)
    picks = [k for k, s in enumerate(items) if s[0] != "s" or s != "s:::"]
    if len(picks) == 1 and items[picks[0]] == "i:$":
        return picks[0]
    return None


def getitem(g: BatchBuilder, op: OpView, batched: list) -> list:
    x, *dyn = op.operands
    spec = tuple(op.attrs["spec"])
    if not any(batched[1:]):
        return [g.dg_op("getitem", [x] + dyn, {"spec": ("s:::",) + spec})]
    axis = _lone_index(spec, op.types[0].rank)
    if axis is not None:  # x[i] with i per example: a take of one index per example
        y = _taken(g, x, batched[0], dyn[0], True, axis, op.types[0].rank)
        if y is not None:
            return [y]
    return per_example(g, op, batched)


def _indexed_rank(spec, rank: int, dyn_types) -> int:
    """The rank of x[spec] for an x of rank `rank` (`dyn_types`: the types of spec's operands)."""
    out, k = 0, 0
    for it in expand_spec(list(spec), rank):
        if it[0] in "sn":
            out += 1
        if it[0] == "t":
            out += dyn_types[k].rank
        k += it.count("$")
    return out


def setitem(g: BatchBuilder, op: OpView, batched: list) -> list:
    x, v, *dyn = op.operands
    if any(batched[2:]):
        return per_example(g, op, batched)
    x = x if batched[0] else g.stacked(x)
    v = g.lift(v, _indexed_rank(op.attrs["spec"], op.types[0].rank, op.types[2:])) if batched[1] else v
    return [g.dg_op("setitem", [x, v] + dyn, {"spec": ("s:::",) + tuple(op.attrs["spec"])})]


def sum_to(g: BatchBuilder, op: OpView, batched: list) -> list:
    """Undo broadcasting per example: the axes broadcasting added (after the batch axis) and those
    it stretched from 1 summed."""
    if not batched[0]:
        return per_example(g, op, batched)
    d = op.operands[0]
    t, like = op.types
    lead = t.rank - like.rank
    if lead > 0:
        d = g.dg_op("sum", [d], {"axes": tuple(range(1, 1 + lead)), "keepdims": False})
    stretched = tuple(i + 1 for i, (a, b) in enumerate(zip(t.shape[lead:], like.shape))
                      if isinstance(b, int) and b == 1 and not (isinstance(a, int) and a == 1))
    if stretched:
        d = g.dg_op("sum", [d], {"axes": stretched, "keepdims": True})
    if d.tt.dtype != like.dtype:
        d = g.dg_op("cast", [d], {"dtype": like.dtype})
    return [d]


# ---------------------------------------------------------------- scalars of control flow
def as_tensor(g: BatchBuilder, op: OpView, batched: list) -> list:
    """to_i1, from_i1, to_index, from_index: a batched i1 is a bool [B] and a batched index an
    i64 [B], so these are the batched value itself."""
    return [op.operands[0]]


def range_len(g: BatchBuilder, op: OpView, batched: list) -> list:
    """len(range(a, b, s)) per example: max(0, (b - a + s - sign(s)) // s), an i64 [B]."""
    a, b, s = op.operands
    sign = g.where(g.dg_op("gt", [s, g.const(0, s)]), g.const(1, s), g.const(-1, s))
    n = g.dg_op("floordiv", [g.sub(g.add(g.sub(b, a), s), sign), s])
    return [g.dg_op("maximum", [n, g.const(0, n)])]
