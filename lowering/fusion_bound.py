"""The `bound-fusion` pass: element-wise fusion gathers at most FUSED_OPS ops into one loop.

Expects: a module of linalg on tensors, before bufferization (whose first step is MLIR's
`linalg-fuse-elementwise-ops`). Guarantees: wherever a chain of element-wise `linalg.generic`
ops, each the one use of the one before, would fuse into a body of more than FUSED_OPS ops,
the chain is cut there by a `linalg.copy` of the value, which that fusion does not fuse through;
the values are the same.

Why: fusing a producer into its consumer makes a new op with both bodies, so a chain of n ops
fused one by one copies about n^2/2 ops: a straight-line body of 1,600 element-wise ops and its
gradient spent 34 s in that pass (0.8 s for 400 ops). Cut every FUSED_OPS ops, the work is
linear, and the cut costs one pass over the value's memory per FUSED_OPS ops of arithmetic.
"""
from __future__ import annotations

from dg.core.mlir import create, function_bodies, int_constant, ir, one_use, operations_under

FUSED_OPS = 1024


def bound_fusion(m, ops: str | None = None) -> int:
    """Cut the chains that would fuse into bodies larger than FUSED_OPS ops (or `ops`: the
    option `bound-fusion{ops=N}`); how many cuts."""
    most = int(ops) if ops is not None else FUSED_OPS
    return sum(_bound(body, most) for body in function_bodies(m))


def _iterators(op) -> list:
    return [str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]


def _parallel(op) -> bool:
    return op.name == "linalg.generic" and all("parallel" in t for t in _iterators(op))


def _bound(body, most: int) -> int:
    size: dict = {}  # a generic's result -> the ops its body would have, fused with its producers
    cuts = 0
    for op in list(operations_under(body)):
        if not _parallel(op):
            continue
        inputs = ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"])[0]
        total = len(op.regions[0].blocks[0].operations)
        parts = []
        for i in range(inputs):
            v = op.operands[i]
            if v in size and one_use(v):
                parts.append((size[v], i))
                total += size[v]
        for part, i in sorted(parts, reverse=True):
            if total <= most:
                break
            with op.location, ir.InsertionPoint(op):
                op.operands[i] = _copy(op.operands[i])
            total -= part
            cuts += 1
        for r in op.results:
            size[r] = total
    return cuts


def _copy(v) -> "ir.Value":
    """`linalg.copy` of the tensor v into a new one, at the insertion point."""
    t = ir.RankedTensorType(v.type)
    dynamic = ir.ShapedType.get_dynamic_size()
    sizes = [create("tensor.dim", [ir.IndexType.get()], [v, int_constant(k)]).result
             for k, d in enumerate(t.shape) if d == dynamic]
    empty = create("tensor.empty", [t], sizes).result
    copy = create("linalg.copy", [t], [v, empty], regions=1,
                  operandSegmentSizes=ir.DenseI32ArrayAttr.get([1, 1]))
    block = copy.regions[0].blocks.append(t.element_type, t.element_type)
    with ir.InsertionPoint(block):
        create("linalg.yield", [], [block.arguments[0]])
    return copy.result
