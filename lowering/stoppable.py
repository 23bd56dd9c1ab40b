"""The `stoppable-loops` pass: a dg loop ends early once a check has failed or Ctrl-C was pressed.

Expects: a bufferized CPU module whose dg-level `scf.for` loops carry the `dg.stoppable` marker
(`to_linalg` puts it there). Guarantees: each such loop is an `scf.while` over the same body
whose condition is also false once the state word of the first failed check
(`core.abi.STATE`, word 0) or the Ctrl-C flag (`core.abi.INTERRUPT`) is nonzero: no iteration
starts after a failure, and a long loop stops at once. The rewrite waits for bufferization
because a `scf.while` over tensors bufferizes with a copy of what it carries on every
iteration; over buffers it costs two loads and a test per iteration.
"""
from __future__ import annotations

from dg.core.abi import INTERRUPT, INTERRUPT_DECL, STATE, STATE_DECL, STATE_TYPE
from dg.core.mlir import append_parsed, ir, operations_under

STOPPABLE = "dg.stoppable"  # the marker on a dg-level loop
_EQ, _SLT = 0, 2  # arith.cmpi predicates


def stoppable_loops(m) -> None:
    with m.context, ir.Location.unknown():
        loops = [op for op in operations_under(m.body) if op.name == "scf.for" and STOPPABLE in op.attributes]
        if not loops:
            return
        append_parsed(m, f"{STATE_DECL}\n{INTERRUPT_DECL}\n")
        for op in loops:
            _as_while(op)


def _create(name: str, operands=(), results=(), attributes=None, loc=None):
    return ir.Operation.create(name, results=list(results), operands=list(operands),
                               attributes=attributes or {}, loc=loc).results


def stopped(loc) -> "ir.Value":
    """An i64 (at the insertion point), nonzero once a check failed or Ctrl-C was pressed."""
    i64, index = ir.IntegerType.get_signless(64), ir.IndexType.get()
    state = _create("memref.get_global", results=[ir.Type.parse(STATE_TYPE)],
                    attributes={"name": ir.FlatSymbolRefAttr.get(STATE)}, loc=loc)[0]
    zero = _create("arith.constant", results=[index], attributes={"value": ir.IntegerAttr.get(index, 0)}, loc=loc)[0]
    failed = _create("memref.load", [state, zero], [i64], loc=loc)[0]
    flag_ref = _create("memref.get_global", results=[ir.Type.parse("memref<i64>")],
                       attributes={"name": ir.FlatSymbolRefAttr.get(INTERRUPT)}, loc=loc)[0]
    flag = _create("memref.load", [flag_ref], [i64], loc=loc)[0]
    return _create("arith.ori", [failed, flag], [i64], loc=loc)[0]


def _as_while(op) -> None:
    loc = op.location
    i1, i64 = ir.IntegerType.get_signless(1), ir.IntegerType.get_signless(64)
    lb, ub, step, *inits = list(op.operands)
    types = [lb.type] + [v.type for v in inits]
    with ir.InsertionPoint(op):
        w = ir.Operation.create("scf.while", results=types, operands=[lb, *inits], regions=2, loc=loc)
    before = w.regions[0].blocks.append(*types)
    with ir.InsertionPoint(before):
        iv = before.arguments[0]
        pred = ir.IntegerType.get_signless(64)
        in_range = _create("arith.cmpi", [iv, ub], [i1], {"predicate": ir.IntegerAttr.get(pred, _SLT)}, loc)[0]
        zero = _create("arith.constant", results=[i64], attributes={"value": ir.IntegerAttr.get(i64, 0)}, loc=loc)[0]
        going = _create("arith.cmpi", [stopped(loc), zero], [i1], {"predicate": ir.IntegerAttr.get(pred, _EQ)}, loc)[0]
        go = _create("arith.andi", [in_range, going], [i1], loc=loc)[0]
        ir.Operation.create("scf.condition", operands=[go, *before.arguments], loc=loc)
    after = w.regions[1].blocks.append(*types)
    body = op.regions[0].blocks[0]
    for old, new in zip(body.arguments, after.arguments):
        old.replace_all_uses_with(new)
    for inner in list(body.operations):
        after.append(inner.operation)
    yield_op = after.operations[len(after.operations) - 1].operation
    with ir.InsertionPoint(yield_op):
        nxt = _create("arith.addi", [after.arguments[0], step], [lb.type], loc=loc)[0]
        ir.Operation.create("scf.yield", operands=[nxt, *yield_op.operands], loc=yield_op.location)
    yield_op.erase()
    for old, new in zip(op.results, list(w.results)[1:]):
        old.replace_all_uses_with(new)
    op.erase()
