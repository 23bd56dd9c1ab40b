"""Stand-ins of failed size checks as views of what the op reads anyway: no buffer, no copy.

Expects: a module on tensors whose element-wise ops MLIR has fused (linalg-fuse-elementwise-ops),
not yet bufferized. Guarantees: `stand_ins_as_views(module)`: each stand-in that feeds a
`linalg.generic`, `arith.select %failed, %fresh, %v` where `%fresh` is a `tensor.empty` and %v a
tensor of its own (_own_tensor: no view of another, no loop's carried value), selects instead
another input of that generic of its own, of the same type and read through the same indexing
map (and moves before the generic, where that input is defined); the `tensor.empty` goes where
nothing else uses it. Returns how many it changed.

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

from dg.core.mlir import defining_op, downcast, ir, is_function_argument, one_use, operations_under, user


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
        if not _own_tensor(op.operands[2]):
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
    the same indexing map, that is a tensor of its own (_own_tensor), or None."""
    inputs = len(generic.operands) - len(generic.results)
    if slot >= inputs:
        return None
    maps = ir.ArrayAttr(generic.attributes["indexing_maps"])
    mine = str(maps[slot])
    for i in range(inputs):
        x = generic.operands[i]
        if i != slot and x != value and x.type == value.type and str(maps[i]) == mine and _own_tensor(x):
            return x
    return None


# Ops whose result is a part or a reshape of their operand (bufferized as a view of its buffer).
_VIEWS = ("tensor.extract_slice", "tensor.collapse_shape", "tensor.expand_shape", "tensor.cast", "tensor.reshape")


def _own_tensor(x) -> bool:
    """Whether x is a function's argument or the result of an op that does not view another
    tensor: neither a part or reshape of one (a row of a tape) nor a loop's carried value.
    One-Shot Bufferize takes a select's result to alias both its operands, and joins their
    alias sets; a stand-in that joined a fresh op's result to a view of a gradient's tape, or to
    a loop's carried value, let every write to one look like a write to the other, and the tape
    was copied whole to write its last row. The stand-in and the value it stands in for are
    both tensors of their own, or the fresh tensor stays."""
    op = defining_op(x)
    return is_function_argument(x) if op is None else op.name not in _VIEWS
