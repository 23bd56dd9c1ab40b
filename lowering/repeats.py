"""The `merge-repeats` pass: what inlining left computed twice is computed once.

Expects: a module after inlining (linalg on tensors), before bufferization. Guarantees: MLIR's
`cse` has merged equal pure ops; each zero-filled or empty tensor that it made the destination
(`outs`) of several ops is made again for each of them; and a failed-check branch on a condition
that an earlier one, which runs whenever it does, already tests is gone.

Why: a gradient's reverse function recomputes its callee's forward (lowering/ad), and so
does each callee's reverse inside it, so once inlined the same forward ops stand two to four
times in one body: the reverse of a transformer block had 31 matrix products for 24 different
ones, and its LLVM IR 12,500 lines instead of 8,100. Merged at this level they are computed
once, and every later stage has less to do. `cse` alone would also merge the placeholders
that ops write their results into (`tensor.empty`, `linalg.fill`): one buffer written by
several ops, which bufferization would then copy for each; they are made again per writer.
A check repeated on the same condition reports nothing new: the first failure of a call is the
one it raises.
"""
from __future__ import annotations

from dg.core.abi import FAIL
from dg.core.mlir import defining_op, function_bodies, ir, operations_under, run_pipeline, user, walk_in_scope

_PLACEHOLDERS = ("tensor.empty", "linalg.fill")
_DESTINATION_AT = {"tensor.insert_slice": 1, "tensor.insert": 1}  # (ops that are not linalg's)
_CARRIERS = ("scf.for", "scf.while", "scf.yield", "scf.if", "func.call", "func.return")
# What a failed-check branch holds besides its call (the values it reports, made as i64).
_CHECK_BODY = ("func.call", "scf.yield", "arith.index_cast", "arith.extsi", "arith.constant")


def merge_repeats(m) -> tuple:
    """cse, then placeholders made again per writer, then repeated checks dropped: (how many
    placeholders were made again, how many checks dropped)."""
    run_pipeline(m, "builtin.module(cse)")
    return _unshare_placeholders(m), _drop_repeated_checks(m)


def _writes(use) -> bool:
    """Whether the op of `use` may write into the value it is given there (or hand it on to
    what does): a linalg op's `outs`, an insertion's destination, a loop's or a call's operand."""
    op = user(use)
    if op.name.startswith("linalg.") and "operandSegmentSizes" in op.attributes:
        return use.operand_number >= ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"])[0]
    if op.name in _DESTINATION_AT:
        return use.operand_number == _DESTINATION_AT[op.name]
    return op.name in _CARRIERS


def _unshare_placeholders(m) -> int:
    made = 0
    for body in function_bodies(m):
        for op in list(operations_under(body)):
            if op.name not in _PLACEHOLDERS:
                continue
            for use in [u for u in op.results[0].uses if _writes(u)][1:]:
                at = user(use)
                copy = op.clone(ip=ir.InsertionPoint(at))
                if op.name == "linalg.fill":  # a fill of its own placeholder
                    empty = defining_op(op.operands[1])
                    if empty is not None and empty.name == "tensor.empty":
                        copy.operands[1] = empty.clone(ip=ir.InsertionPoint(copy)).results[0]
                at.operands[use.operand_number] = copy.results[0]
                made += 1
    return made


def _is_check(op) -> bool:
    """Whether op is a failed-check branch: `scf.if %cond { call @dg_rt_fail(...) }`."""
    if op.name != "scf.if" or len(op.results) or len(op.regions[1].blocks):
        return False
    inside = [o.operation for o in op.regions[0].blocks[0].operations]
    return all(o.name in _CHECK_BODY for o in inside) and any(
        o.name == "func.call" and ir.FlatSymbolRefAttr(o.attributes["callee"]).value == FAIL for o in inside)


def _drop_repeated_checks(m) -> int:
    repeated = []

    def visit(op, tested: set) -> bool:
        if not _is_check(op):
            return False
        if op.operands[0] in tested:
            repeated.append(op)
        tested.add(op.operands[0])
        return True

    for body in function_bodies(m):
        walk_in_scope(body, visit, set())
    for op in repeated:
        op.erase()
    return len(repeated)
