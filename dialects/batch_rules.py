"""Batching rules: the rules that families of ops share as their `batch` facet.

The batch pass (lowering/batching) maps a function over a batch: every value
of the function it writes is either *shared* (the same for every example,
the type the original had) or *batched* (one per example, stacked along a new
leading axis 0). An op none of whose operands is batched is copied as it is;
otherwise its `batch` facet writes the batched op:

    rule(g: BatchBuilder, op: OpView, batched: list[bool]) -> list of Values

`op` is the original op with its operands mapped (a batched operand's type has
the leading batch axis; `op.types` and `op.result_types` are the per-example
types), `batched` says which operands are. `BatchBuilder` (dialects/rules.py,
the rule API) is a RuleBuilder with the batch's size and mask, and the pieces
rules share (`lift`, `stacked`, `any`, `active`). The rule gives the results, each
batched (leading axis B), unless it wraps one in `Shared` (the same for every
example: `dim` of a batched array). `g.size` is the batch size (an i64
scalar) and `g.mask` the examples active where the op runs (a bool [B]:
inside a branch that some examples did not take, or a loop some have left);
results for inactive examples are never used, but a rule must not fail on
them (an index an inactive example holds is taken as 0).

`per_example` is the rule every op can fall back on: a loop over the
examples, each running the op once, the results stacked. It is what an op
without a rule of its own gets, and it is correct for every op whose results
have one shape across examples.
"""
from __future__ import annotations

from dg.core.types import Sym, TensorType

from .rules import DYN, BatchBuilder, OpView, Shared, write_op


def batched_axis(a: int, rank: int) -> int:
    """An axis of a per-example value of rank `rank`, as an axis of its batched value."""
    return (a % rank if rank else 0) + 1


# ---------------------------------------------------------------- shared rules
def elementwise(g: BatchBuilder, op: OpView, batched: list) -> list:
    """Ops that broadcast their operands and work element by element: each batched operand gets
    axes after the batch axis up to the result's rank; shared ones broadcast as they are."""
    rank = op.result_types[0].rank
    ins = [g.lift(v, rank) if b else v for v, b in zip(op.operands, batched)]
    return [g.dg_op(op.name, ins, op.attrs)]


def same_op(g: BatchBuilder, op: OpView, batched: list) -> list:
    """Ops whose one operand can be a whole batch: the op on the batch is the op per example
    (stop_gradient, a collective summing across processes, a finiteness check)."""
    return [g.dg_op(op.name, list(op.operands), op.attrs)]


def over_axes(g: BatchBuilder, op: OpView, batched: list) -> list:
    """Reductions over `axes`: the same axes, one further along."""
    r = op.types[0].rank
    axes = tuple(batched_axis(a, r) for a in op.attrs["axes"])
    return [g.dg_op(op.name, [op.operands[0]], {**op.attrs, "axes": axes})]


def over_axis(g: BatchBuilder, op: OpView, batched: list) -> list:
    """Ops along one `axis` (softmax): the same axis, one further along."""
    return [g.dg_op(op.name, [op.operands[0]], {**op.attrs, "axis": batched_axis(op.attrs["axis"], op.types[0].rank)})]


def per_example(g: BatchBuilder, op: OpView, batched: list) -> list:
    """A loop over the examples: example 0's results give the stack's shape, examples 1 to B-1
    are set into it one by one (an empty batch: empty results). Correct for any op whose results
    have one shape across examples (a result shaped by the example's data fails at the stack, as
    a list would be needed)."""
    zero = g.const(0, TensorType("i64", ()))
    types = [TensorType(t.dtype, (Sym(),) + tuple(t.shape)) for t in op.result_types]

    def loop(w):
        w.op("scf.yield", _per_example_loop(w, op, batched, zero), [])

    def empty(w):
        w.op("scf.yield", [w.dg_op("undef", [], {"shape": tuple(d if isinstance(d, int) else DYN for d in t.shape),
                                                 "dtype": t.dtype}, result_types=[t]) for t in types], [])

    some = g.dg_op("to_i1", [g.dg_op("gt", [g.size, zero])])
    return g.op("scf.if", [some], [t.mlir() for t in types], regions=[loop, empty])


def _per_example_loop(g: BatchBuilder, op: OpView, batched: list, zero) -> list:

    def one(k):
        ins = [g.dg_op("getitem", [v, k], {"spec": ("i:$",)}) if b else v for v, b in zip(op.operands, batched)]
        # (each example's operands and results have the op's own types: a key stays a key)
        out, _ = write_op(g, op.name, ins, list(op.types), op.attrs, result_types=list(op.result_types))
        return out

    firsts = one(zero)
    stacks = [g.stacked(r) for r in firsts]
    lo = g.dg_op("to_index", [g.const(1, TensorType("i64", ()))])
    hi = g.dg_op("to_index", [g.size])
    step = g.dg_op("to_index", [g.const(1, TensorType("i64", ()))])

    def body(w):
        iv = w.value("index", "b")
        accs = [w.value(s.type, "acc") for s in stacks]
        w.block_header([iv] + accs)
        k = w.dg_op("from_index", [iv])
        outs = one(k)
        new = [w.dg_op("setitem", [a, r, k], {"spec": ("i:$",)}) for a, r in zip(accs, outs)]
        w.op("scf.yield", new, [])

    res = g.op("scf.for", [lo, hi, step] + stacks, [s.type for s in stacks], regions=[body])
    return res


def matmul(g: BatchBuilder, op: OpView, batched: list) -> list:
    """a @ b: a vector made a matrix of one row (b: of one column), the batch axis leading as
    the product's broadcast batch axes, the added axis squeezed again."""
    (a, b), (ta, tb) = op.operands, op.types
    if ta.rank == 2 and tb.rank == 1 and not batched[0]:  # W @ x per example: the batch's x @ W.T, one product
        return [g.dg_op("matmul", [b, g.dg_op("transpose", [a], {"perm": (1, 0)})])]
    ra, rb = max(ta.rank, 2), max(tb.rank, 2)
    if ta.rank == 1:
        a = g.dg_op("expand_dims", [a], {"axes": (a.tt.rank - 1,)})
    if tb.rank == 1:
        b = g.dg_op("expand_dims", [b], {"axes": (b.tt.rank,)})
    r = max(ra, rb)
    a = g.lift(a, r) if batched[0] else a
    b = g.lift(b, r) if batched[1] else b
    y = g.dg_op("matmul", [a, b])
    squeeze = ((y.tt.rank - 2,) if ta.rank == 1 else ()) + ((y.tt.rank - 1,) if tb.rank == 1 else ())
    if squeeze:
        y = g.dg_op("squeeze", [y], {"axes": squeeze})
    return [y]


def outer(g: BatchBuilder, op: OpView, batched: list) -> list:
    (a, b), (ta, tb) = op.operands, op.types
    a = g.dg_op("reshape", [a, g.dim(a, 0)], {"shape": (DYN, -1, 1)}) if batched[0] else \
        g.dg_op("expand_dims", [g.dg_op("reshape", [a], {"shape": (-1,)})], {"axes": (1,)})
    b = g.dg_op("reshape", [b, g.dim(b, 0)], {"shape": (DYN, 1, -1)}) if batched[1] else \
        g.dg_op("reshape", [b], {"shape": (-1,)})
    return [g.dg_op("mul", [a, b])]


def images(g: BatchBuilder, op: OpView, batched: list) -> list:
    """Convolutions and pools of a batch of images with shared weights: the examples' images as
    one batch of images (B x N), the op once, the result split back."""
    if batched[1:] and any(batched[1:]):
        return per_example(g, op, batched)
    x = op.operands[0]
    n = g.dim(x, 1)
    many = g.dg_op("reshape", [x, g.mul(g.size, n)] + [g.dim(x, i) for i in (2, 3, 4) if not isinstance(x.tt.shape[i], int)],
                   {"shape": (DYN,) + tuple(d if isinstance(d, int) else DYN for d in x.tt.shape[2:])})
    y = g.dg_op(op.name, [many] + list(op.operands[1:]), op.attrs)
    dims = [g.dim(y, i) for i in (1, 2, 3) if not isinstance(y.tt.shape[i], int)]
    return [g.dg_op("reshape", [y, g.size, n] + dims,
                    {"shape": (DYN, DYN) + tuple(d if isinstance(d, int) else DYN for d in y.tt.shape[1:])})]


def cross_entropy(g: BatchBuilder, op: OpView, batched: list) -> list:
    """Each example's mean over its rows of -log softmax(logits)[label]."""
    logits, labels = op.operands
    if not batched[0]:
        logits = g.stacked(logits)
    if not batched[1]:
        labels = g.stacked(labels)
    lsm = g.dg_op("log_softmax", [logits], {"axis": logits.tt.rank - 1})
    picked = g.dg_op("sum", [g.mul(lsm, g.onehot(labels, lsm, lsm.tt.rank - 1))], {"axes": (lsm.tt.rank - 1,),
                                                                                  "keepdims": False})
    return [g.neg(g.dg_op("mean", [picked], {"axes": tuple(range(1, picked.tt.rank)), "keepdims": False})
                  if picked.tt.rank > 1 else picked)]
