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
from dg.core.mlir import append_parsed, create, get_global, ir, operations_under

from .parallel import PREFIX as PARALLEL_LOOPS

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


def stopped(loc) -> "ir.Value":
    """An i64 (at the insertion point), nonzero once a check failed or Ctrl-C was pressed."""
    i64, index = ir.IntegerType.get_signless(64), ir.IndexType.get()
    with loc:
        state = get_global(STATE, STATE_TYPE)
        zero = create("arith.constant", [index], value=ir.IntegerAttr.get(index, 0)).result
        failed = create("memref.load", [i64], [state, zero]).result
        flag_ref = get_global(INTERRUPT, "memref<i64>")
        flag = create("memref.load", [i64], [flag_ref]).result
        return create("arith.ori", [i64], [failed, flag]).result


def _as_while(op) -> None:
    loc = op.location
    i1, i64 = ir.IntegerType.get_signless(1), ir.IntegerType.get_signless(64)
    lb, ub, step, *inits = list(op.operands)
    types = [lb.type] + [v.type for v in inits]
    with ir.InsertionPoint(op), loc:
        w = create("scf.while", types, [lb, *inits], regions=2)
    before = w.regions[0].blocks.append(*types)
    with ir.InsertionPoint(before), loc:
        iv = before.arguments[0]
        in_range = create("arith.cmpi", [i1], [iv, ub], predicate=ir.IntegerAttr.get(i64, _SLT)).result
        zero = create("arith.constant", [i64], value=ir.IntegerAttr.get(i64, 0)).result
        going = create("arith.cmpi", [i1], [stopped(loc), zero], predicate=ir.IntegerAttr.get(i64, _EQ)).result
        go = create("arith.andi", [i1], [in_range, going]).result
        create("scf.condition", [], [go, *before.arguments])
    after = w.regions[1].blocks.append(*types)
    body = op.regions[0].blocks[0]
    for old, new in zip(body.arguments, after.arguments):
        old.replace_all_uses_with(new)
    for inner in list(body.operations):
        after.append(inner.operation)
    yield_op = after.operations[len(after.operations) - 1].operation
    with ir.InsertionPoint(yield_op), yield_op.location:
        nxt = create("arith.addi", [lb.type], [after.arguments[0], step]).result
        create("scf.yield", [], [nxt, *yield_op.operands])
    yield_op.erase()
    for old, new in zip(op.results, list(w.results)[1:]):
        old.replace_all_uses_with(new)
    op.erase()


def volatile_stop_flag(m) -> None:
    """After the lowering to LLVM: every read of the Ctrl-C flag (`core.abi.INTERRUPT`) is
    volatile. The runtime sets the flag while a loop runs; in a loop whose body touches no
    memory (one that carries scalars), LLVM would move the read before the loop, and the loop
    would never see the flag. (The parallel loops' functions read no flag.)"""
    volatile = ir.UnitAttr.get()
    for f in m.body.operations:
        f = f.operation
        if f.name != "llvm.func" or not f.regions[0].blocks or \
                ir.StringAttr(f.attributes["sym_name"]).value.startswith(PARALLEL_LOOPS):
            continue
        for block in f.regions[0].blocks:
            for op in operations_under(block):
                if op.name == "llvm.mlir.addressof" and \
                        ir.FlatSymbolRefAttr(op.attributes["global_name"]).value == INTERRUPT:
                    _mark_loads(op.result, volatile)


def _mark_loads(address, volatile) -> None:
    """Make volatile the loads from `address` and from the addresses computed from it."""
    for use in address.uses:
        owner = use.owner
        owner = getattr(owner, "operation", owner)
        if owner.name == "llvm.load":
            owner.attributes["volatile_"] = volatile
        elif owner.name == "llvm.getelementptr":
            _mark_loads(owner.results[0], volatile)
