"""Ragged values in a batched function: per-example arrays whose first axis differs by example.

A ragged value holds the rows of every example laid end to end (`data`, the
per-example type's rank, no batch axis) and where each example's rows start
and stop (two i64 [B]): the items of a list mapped by `vmap`, their rows
read with an index tensor (`E[words]`), an array made with a size per
example (`zeros((n, H))`). The ops that work on rows one by one work on
`data` as it is; an integer index on the first axis reads one row per
example (a batched value again); `len` and `x.shape[0]` are per example.
An op that would mix rows of different examples (a reduction over the first
axis, a slice of it) is not batched on a ragged value yet: a located error
says so.

An array made with a size per example gets one more row at its end, which no
example owns: a write by an inactive example goes there.
"""
from __future__ import annotations

from dataclasses import dataclass

from dg.core.errors import DgError
from dg.core.locations import loc_of
from dg.core.types import TensorType
from dg.core.writer import Value
from dg.dialects.registry import OPS
from dg.dialects.batch_rules import elementwise
from dg.dialects.rules import DYN, BatchBuilder

RAGGED = "ragged"  # the kind of a ragged value in a batched function's environment
I64 = TensorType("i64", ())


@dataclass(eq=False)
class Ragged:
    data: Value
    start: Value  # i64 [B]
    stop: Value  # i64 [B]
    scratch: bool = False  # a last row no example owns (where inactive examples write)
    # Whether the rows of the examples inactive here are the loop's own (written only where the
    # example is active): a loop then keeps them without a select per row.
    kept: bool = False

    def like(self, data: Value, kept: bool = False) -> "Ragged":
        return Ragged(data, self.start, self.stop, self.scratch, kept)


class _Dense(Exception):
    """No rule on ragged rows here: the op runs on the examples' rows made one batched array."""


def _unsupported(op, why: str):
    raise _Dense(why)


def densified(g: BatchBuilder, r: Ragged, fail) -> Value:
    """A ragged value as a batched array [B, n, ...]: where every example has n rows, laid one
    after another (a list of items of one size, say); a located failure where they are not."""
    i64 = I64
    n = lengths(g, r)
    zero = g.const(0, i64)
    first = g.dg_op("getitem", [r.start, zero], {"spec": ("i:$",)})
    n0 = g.dg_op("getitem", [n, zero], {"spec": ("i:$",)})
    start = g.dg_op("arange", [zero, g.size, g.const(1, i64)], {"size": DYN, "dtype": "i64"})
    laid = g.dg_op("and", [g.dg_op("eq", [n, n0]), g.dg_op("eq", [r.start, g.add(first, g.mul(start, n0))])])
    fail(g.dg_op("not", [laid]), "vmap: this op needs every example's first axis of one size")
    rows = g.dg_op("getitem", [r.data, first, g.add(first, g.mul(g.size, n0))], {"spec": ("s:$:$:",)})
    rest = r.data.tt.shape[1:]
    dims = [g.dim(r.data, 1 + i) for i, d in enumerate(rest) if not isinstance(d, int)]
    shape = (DYN, DYN) + tuple(d if isinstance(d, int) else DYN for d in rest)
    return g.dg_op("reshape", [rows, g.size, n0] + dims, {"shape": shape})


def lengths(g: BatchBuilder, r: Ragged) -> Value:
    return g.sub(r.stop, r.start)


def rows_at(g: BatchBuilder, r: Ragged, i: Value, fail) -> Value:
    """The row index of each example's row i (i shared or per example; negative from the end),
    checked against its length for the active examples (`fail(bad, msg)`); an inactive example's
    points at a row it owns or the scratch row."""
    n = lengths(g, r)
    i = g.where(g.dg_op("lt", [i, g.const(0, i)]), g.add(i, n), i)
    inside = g.dg_op("and", [g.dg_op("ge", [i, g.const(0, i)]), g.dg_op("lt", [i, n])])
    fail(g.dg_op("and", [g.mask, g.dg_op("not", [inside])]), "IndexError: index out of range of the example's rows")
    row = g.add(r.start, i)
    ok = g.dg_op("and", [g.mask, inside])
    if r.scratch:
        last = g.sub(g.dim(r.data, 0), g.const(1, I64))
        return g.where(ok, row, last)
    return g.where(ok, row, g.where(g.dg_op("gt", [n, g.const(0, n)]), r.start, g.const(0, n)))


def _over_examples(g: BatchBuilder, init: Value, step) -> Value:
    """A loop over the examples k = 0 .. B-1 carrying one value: `step(w, k, acc)` gives the next."""
    lo = g.dg_op("to_index", [g.const(0, I64)])
    hi = g.dg_op("to_index", [g.size])
    one = g.dg_op("to_index", [g.const(1, I64)])

    def body(w):
        iv = w.value("index", "b")
        acc = w.value(init.type, "acc")
        w.block_header([iv, acc])
        w.op("scf.yield", [step(w, w.dg_op("from_index", [iv]), acc)], [])

    return g.op("scf.for", [lo, hi, one, init], [init.type], regions=[body])[0]


def _at(w, v: Value, k: Value) -> Value:
    return w.dg_op("getitem", [v, k], {"spec": ("i:$",)})


def offsets_of(g: BatchBuilder, counts: Value) -> tuple[Value, Value]:
    """(start, stop) of examples whose row counts are `counts` (an i64 [B]), laid end to end."""
    zero = g.const(0, I64)
    offs = _over_examples(g, g.dg_op("full", [zero, g.add(g.size, g.const(1, I64))], {"shape": (DYN,)}),
                          lambda w, k, acc: w.dg_op("setitem", [acc, w.add(_at(w, acc, k), _at(w, counts, k)),
                                                                w.add(k, w.const(1, I64))], {"spec": ("i:$",)}))
    start = g.dg_op("getitem", [offs, g.size], {"spec": ("s::$:",)})
    stop = g.dg_op("getitem", [offs, g.const(1, I64)], {"spec": ("s:$::",)})
    return start, stop


def rule(fb, g: BatchBuilder, op, ins: list, fail) -> list:
    """The op with a ragged operand: [(value, kind)] per result; where no rule of ragged rows
    takes it, the op's own batching rule on the ragged operands made batched arrays."""
    try:
        return _ragged_rule(g, op, ins, fail)
    except _Dense as e:
        dense = [(densified(g, v, fail), True) if k == RAGGED else (v, k) for v, k in ins]
        if op.dg in ("dim", "getitem", "setitem", "take", "full"):  # (those that shape rows)
            raise DgError(f"vmap cannot batch dg.{op.dg} here: {e}", loc_of(op.location)) from None
        return fb.dense_op(op, dense, g)


def _ragged_rule(g: BatchBuilder, op, ins: list, fail) -> list:
    vals = [v for v, _ in ins]
    kinds = [k for _, k in ins]
    rag = [v for v, k in ins if k == RAGGED]
    first = rag[0]
    name = op.dg
    if name == "dim":
        if op.py["axis"] == 0:
            return [(lengths(g, first), True)]
        return [(g.dim(first.data, op.py["axis"]), False)]
    if name == "getitem":
        x, *dyn = vals
        spec = tuple(op.py["spec"])
        if kinds[0] == RAGGED and spec and spec[0].startswith("i:") and not any(k == RAGGED for k in kinds[1:]):
            i = dyn[0] if spec[0] == "i:$" else g.const(int(spec[0][2:]), I64)
            rest_dyn = dyn[1:] if spec[0] == "i:$" else dyn
            if any(kinds[2 if spec[0] == "i:$" else 1:]):
                _unsupported(op, "an index per example after the first axis of a ragged value")
            rows = rows_at(g, x, i if i.tt.rank else g.add(g.dg_op("zeros_like", [x.start]), i), fail)
            y = g.dg_op("take", [x.data, rows], {"axis": 0})
            if len(spec) > 1:
                y = g.dg_op("getitem", [y] + rest_dyn, {"spec": ("s:::",) + spec[1:]})
            return [(y, True)]
        if kinds[0] is False and len(dyn) == 1 and kinds[1] == RAGGED and spec[0] == "t:$":
            return [(dyn[0].like(g.dg_op("getitem", [x, dyn[0].data], {"spec": spec})), RAGGED)]
        _unsupported(op, "a slice or several indices of a value whose first axis differs by example")
    if name == "take":
        (x, idx), (kx, ki) = vals, kinds
        if kx is False and ki == RAGGED:
            return [(idx.like(g.dg_op("take", [x, idx.data], op.py)), RAGGED)]
        if kx == RAGGED and ki is False and op.py["axis"] % op.operands[0].tt.rank:
            return [(x.like(g.dg_op("take", [x.data, idx], op.py)), RAGGED)]
        _unsupported(op, "indices along the first axis of a ragged value")
    if name == "setitem":
        x, v, *dyn = vals
        spec = tuple(op.py["spec"])
        if kinds[0] == RAGGED and spec and spec[0] == "i:$" and all(s == "s:::" for s in spec[1:]) \
                and kinds[1] != RAGGED:
            i = dyn[0] if kinds[2] else g.add(g.dg_op("zeros_like", [x.start]), dyn[0])
            rows = rows_at(g, x, i, fail)
            v = v if kinds[1] else g.stacked(v)
            per = op.operands[0].tt.rank - 1  # the rank of one row
            v = g.lift(v, per) if v.tt.rank < per + 1 else v
            shape_like = g.dg_op("take", [x.data, rows], {"axis": 0})
            v = g.add(g.dg_op("zeros_like", [shape_like]), v) if v.tt.shape != shape_like.tt.shape else v
            return [(x.like(g.dg_op("put_rows", [x.data, v, rows]), kept=x.kept), RAGGED)]
        _unsupported(op, "a write that is not one row of each example")
    if name == "matmul":
        if kinds == [RAGGED, False] and op.operands[0].tt.rank >= 2:
            return [(first.like(g.dg_op("matmul", [first.data, vals[1]])), RAGGED)]
        _unsupported(op, "a product whose left operand is not the ragged one")
    if OPS[name].batch is elementwise:
        rank = op.results[0].tt.rank
        for (v, k), o in zip(ins, op.operands):
            if k is True:
                _unsupported(op, "an operand per example beside a value whose first axis differs by example")
            if k is False and o.tt.rank >= rank and not (isinstance(o.tt.shape[0], int) and o.tt.shape[0] == 1):
                _unsupported(op, "an operand of the full rank beside a value whose first axis differs by example")
            if k == RAGGED and (v.start is not first.start or v.stop is not first.stop):
                _unsupported(op, "values whose first axes differ by example in different ways")
        data = [v.data if k == RAGGED else v for v, k in ins]
        return [(first.like(g.dg_op(name, data, op.py)), RAGGED)]
    if name in ("sum", "mean", "max", "min", "prod", "logsumexp", "var", "argmax", "argmin", "softmax", "log_softmax"):
        axes = op.py.get("axes", (op.py.get("axis", -1),))
        r = op.operands[0].tt.rank
        if all(a % r for a in axes):
            return [(first.like(g.dg_op(name, [first.data], op.py)), RAGGED)]
        if name in ("sum", "mean", "max", "min"):
            return [(over_rows(g, first, name, tuple(a % r for a in axes), op.py["keepdims"]), True)]
        _unsupported(op, "a reduction over the first axis of a value whose first axis differs by example")
    _unsupported(op, "its operand's first axis differs by example")
    return []


def made(g: BatchBuilder, op, ins: list) -> list:
    """`full` with a first size per example (`zeros((n, H))`): a ragged value, its rows laid end
    to end, and one scratch row."""
    (v, _), (n, _) = ins[0], ins[1]
    counts = g.dg_op("maximum", [g.where(g.mask, n, g.const(0, n)), g.const(0, n)])
    start, stop = offsets_of(g, counts)
    total = g.add(g.dg_op("sum", [counts], {"axes": (0,), "keepdims": False}), g.const(1, I64))
    shape = (DYN,) + tuple(op.py["shape"][1:])
    data = g.dg_op("full", [v, total] + [x for x, _ in ins[2:]], {"shape": shape})
    return [(Ragged(data, start, stop, scratch=True), RAGGED)]


def segments(g: BatchBuilder, r: Ragged) -> Value:
    """The example that owns each row of r.data (0 for the rows no example owns): an i64 [rows]."""
    seg = g.dg_op("full", [g.const(0, I64), g.dim(r.data, 0)], {"shape": (DYN,)})
    return _over_examples(g, seg, lambda w, k, acc: w.dg_op(
        "setitem", [acc, k, _at(w, r.start, k), _at(w, r.stop, k)], {"spec": ("s:$:$:",)}))


def over_rows(g: BatchBuilder, r: Ragged, name: str, axes: tuple, keepdims: bool) -> Value:
    """A reduction (sum, mean, max, min) over `axes`, the first among them: per example, over its
    own rows. The other axes first; then each example's rows picked by a [B, rows] membership
    (a product for a sum, a masked reduction for max and min)."""
    data = r.data
    rest = tuple(a for a in axes if a)
    if rest:
        data = g.dg_op("sum" if name == "mean" else name, [data], {"axes": rest, "keepdims": True})
    n_rows = g.dim(data, 0)
    pos = g.dg_op("arange", [g.const(0, I64), n_rows, g.const(1, I64)], {"size": DYN, "dtype": "i64"})
    start = g.dg_op("expand_dims", [r.start], {"axes": (1,)})
    stop = g.dg_op("expand_dims", [r.stop], {"axes": (1,)})
    member = g.dg_op("and", [g.dg_op("ge", [pos, start]), g.dg_op("lt", [pos, stop])])  # [B, rows]
    if name in ("sum", "mean"):
        flat = g.dg_op("reshape", [data, n_rows], {"shape": (DYN, -1)})
        y = g.dg_op("matmul", [g.dg_op("cast", [member], {"dtype": data.tt.dtype}), flat])
        dims = [g.dim(data, 1 + i) for i, d in enumerate(data.tt.shape[1:]) if not isinstance(d, int)]
        y = g.dg_op("reshape", [y, g.size] + dims, {"shape": (DYN,) + tuple(d if isinstance(d, int) else DYN
                                                                        for d in data.tt.shape[1:])})
        if name == "mean":
            count = g.mul(g.dg_op("cast", [lengths(g, r)], {"dtype": data.tt.dtype}), g.const(1.0, data))
            for a in rest:
                count = g.mul(count, g.dg_op("cast", [g.dim(r.data, a)], {"dtype": data.tt.dtype}))
            y = g.div(y, g.lift(count, y.tt.rank - 1))
    else:
        wide = g.dg_op("expand_dims", [data], {"axes": (0,)})  # [1, rows, ...]
        keep = member if data.tt.rank == 1 else \
            g.dg_op("expand_dims", [member], {"axes": tuple(range(2, data.tt.rank + 1))})  # [B, rows, 1, ...]
        far = g.const(float("-inf") if name == "max" else float("inf"), data)
        y = g.dg_op(name, [g.where(keep, wide, far)], {"axes": (1,), "keepdims": False})
    if not keepdims:
        y = g.dg_op("squeeze", [y], {"axes": tuple(a for a in rest)}) if rest else y
        return y
    return g.dg_op("expand_dims", [y], {"axes": (1,)})
