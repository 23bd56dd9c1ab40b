"""Stand-ins of failed size checks as views of what the op reads anyway: no buffer, no copy.

Expects: a module on tensors whose element-wise ops MLIR has fused (linalg-fuse-elementwise-ops),
not yet bufferized. Guarantees: `stand_ins_as_views(module)`: each stand-in that feeds a
`linalg.generic`, `arith.select %failed, %fresh, %v` where `%fresh` is a `tensor.empty`, selects
instead another input of that generic, of the same type and read through the same
indexing map (and moves before the generic, where that input is defined); the `tensor.empty`
goes where nothing else uses it. Returns how many it changed.

Until a failed size check is raised the call winds down, and an operand that may be smaller than
the sizes the op iterates over is replaced by an uninitialised tensor of those sizes
(dialects/builder.stand_in_if), so that no loop reads past its end. That tensor cost a buffer at
run time, and more: the lowering writes it as a `tensor.empty` of the op's own sizes, which
canonicalization may merge with the op's result's, and One-Shot Bufferize then copied the
operand whole, to keep the result's buffer from being read as it is written. Another input the
generic reads through the same map reads the same elements, all of them inside it: the op is
safe only if they are (its stand-ins see to that), so it serves as well, and costs nothing. The
rewrite waits for fusion, because MLIR fuses an element-wise op into its user only where that is
its only use: a stand-in that used a producer's result before fusion would keep it unfused.
"""
from __future__ import annotations

from dg.core.mlir import defining_op, downcast, ir, one_use, operations_under, user


def stand_ins_as_views(m) -> int:
    changed = 0
    for op in operations_under(m.body):
        if op.name != "arith.select" or not isinstance(downcast(op.results[0].type), ir.RankedTensorType):
            continue
        fresh = defining_op(op.operands[1])
        if fresh is None or fresh.name != "tensor.empty" or not one_use(op.results[0]):
            continue
        use = next(iter(op.results[0].uses))
        generic = user(use)
        if generic.name != "linalg.generic":
            continue
        other = _same_reads(generic, use.operand_number, op.results[0])
        if other is None:
            continue
        op.move_before(generic)
        op.operands[1] = other
        if not any(True for _ in fresh.results[0].uses):
            fresh.erase()
        changed += 1
    return changed


def _same_reads(generic, slot: int, value):
    """An input of `generic` other than `value` (its input `slot`) of value's type, read through
    the same indexing map, or None."""
    inputs = len(generic.operands) - len(generic.results)
    if slot >= inputs:
        return None
    maps = ir.ArrayAttr(generic.attributes["indexing_maps"])
    mine = str(maps[slot])
    for i in range(inputs):
        x = generic.operands[i]
        if i != slot and x != value and x.type == value.type and str(maps[i]) == mine:
            return x
    return None
