"""The `mpi-collectives` pass: a collective's marked copy becomes a call that reduces or broadcasts
into the copy's fresh buffer.

Expects: a bufferized CPU module where each collective (dialects.ops_dist) is a `linalg.copy`
into a fresh buffer, marked `dg.collective = "allreduce:<op>:<type>:<group>"`,
`"bcast:<root>:<type>:<group>"`, `"allgather:0:<type>:<group>"`,
`"reduce_scatter:<op>:<type>:<group>"`, `"all_to_all:0:<type>:<group>"` or
`"iallreduce:<op>:<type>:<group>"` (the group's code: its index in core.mpi.GROUPS), or
`"wait:..."`, a copy that reads a buffer an iallreduce started on. An iallreduce's call starts the
reduction in place (`MPI_IALLREDUCE`); a wait's call, before its copy, waits for it (`MPI_WAIT`
with the source's address). Guarantees: unless a check has failed or Ctrl-C was pressed, a
call of `core.abi.MPI_ALLREDUCE`, `MPI_BCAST`, `MPI_ALLGATHER`, `MPI_REDUCE_SCATTER` or
`MPI_ALL_TO_ALL` with that buffer (its address, its element count, the code of its element
type, of its reduction or its root where it has one, and of its group). An allreduce whose source is contiguous reads it directly (its
address is the call's first argument) and the copy goes; any other keeps the copy and reduces
in place (first argument 0). A broadcast keeps the copy: the root's buffer is what it sends.
The marker is dropped. A destination that is not a fresh contiguous buffer is an internal
error (bufferization allocates it).
"""
from __future__ import annotations

from dg.core.abi import (INTERRUPT_DECL, MPI_ALL_TO_ALL, MPI_ALLGATHER, MPI_ALLREDUCE, MPI_BCAST, MPI_IALLREDUCE,
                         MPI_REDUCE_SCATTER, MPI_WAIT, STATE_DECL)
from dg.core.mlir import append_parsed, create, ir, operations_under

from .stoppable import stopped

COLLECTIVE = "dg.collective"
DECLS = (f"func.func private @{MPI_ALLREDUCE}(i64, i64, i64, i32, i32, i32)\n"
         f"func.func private @{MPI_BCAST}(i64, i64, i32, i64, i32)\n"
         f"func.func private @{MPI_ALLGATHER}(i64, i64, i32, i32)\n"
         f"func.func private @{MPI_REDUCE_SCATTER}(i64, i64, i32, i32, i32)\n"
         f"func.func private @{MPI_ALL_TO_ALL}(i64, i64, i32, i32)\n"
         f"func.func private @{MPI_IALLREDUCE}(i64, i64, i32, i32, i32)\n"
         f"func.func private @{MPI_WAIT}(i64)\n")
# kind -> (the runtime's function, the type of its last argument: the op code or the root; None: none)
CALLS = {"allreduce": (MPI_ALLREDUCE, 32), "bcast": (MPI_BCAST, 64), "allgather": (MPI_ALLGATHER, None),
         "reduce_scatter": (MPI_REDUCE_SCATTER, 32), "all_to_all": (MPI_ALL_TO_ALL, None),
         "iallreduce": (MPI_IALLREDUCE, 32)}


def mpi_collectives(m) -> None:
    with m.context:
        copies = [op for op in operations_under(m.body) if op.name == "linalg.copy" and COLLECTIVE in op.attributes]
        if not copies:
            return
        append_parsed(m, DECLS + STATE_DECL + "\n" + INTERRUPT_DECL + "\n")
        for op in copies:
            _call_after(op)


def _call_after(op) -> None:
    kind, arg, dtype, group = ir.StringAttr(op.attributes[COLLECTIVE]).value.split(":")
    del op.attributes[COLLECTIVE]
    dst = op.operands[1]
    t = ir.MemRefType(dst.type)
    if not _contiguous(t):
        raise RuntimeError(f"a collective's buffer is not contiguous: {t}")
    i32, i64, index = (ir.IntegerType.get_signless(32), ir.IntegerType.get_signless(64), ir.IndexType.get())
    with ir.InsertionPoint(op), op.location:
        def const(v, ty):
            return create("arith.constant", [ty], value=ir.IntegerAttr.get(ty, int(v))).result

        count = const(1, index)
        for axis, d in enumerate(t.shape):
            size = const(d, index) if d != ir.ShapedType.get_dynamic_size() else \
                create("memref.dim", [index], [dst, const(axis, index)]).result
            count = create("arith.muli", [index], [count, size]).result
        def address(buffer):
            at = create("memref.extract_aligned_pointer_as_index", [index], [buffer]).result
            return create("arith.index_cast", [i64], [at]).result

        src = op.operands[0]
        if kind == "wait":  # (before the copy reads the buffer: the reduction started on it, waited for)
            create("func.call", [], [address(src)], callee=ir.FlatSymbolRefAttr.get(MPI_WAIT))
            return
        direct = kind == "allreduce" and _contiguous(src.type)  # the reduction reads src itself: no copy
        args = [address(src) if direct else const(0, i64)] if kind == "allreduce" else []
        args += [address(dst), create("arith.index_cast", [i64], [count]).result, const(dtype, i32)]
        symbol, last_bits = CALLS[kind]
        last = [] if last_bits is None else [const(arg, i32 if last_bits == 32 else i64)]
        last.append(const(group, i32))
        going = create("arith.cmpi", [ir.IntegerType.get_signless(1)], [stopped(op.location), const(0, i64)],
                       predicate=ir.IntegerAttr.get(i64, 0)).result  # eq
        guard = create("scf.if", [], [going], regions=2)
        then = guard.regions[0].blocks.append()
        with ir.InsertionPoint(then):
            create("func.call", [], args + last, callee=ir.FlatSymbolRefAttr.get(symbol))
            create("scf.yield")
    # The ops were made before the copy (they only read its destination's sizes and address);
    # the call must come after it, and only while no check has failed: after a failure nothing
    # runs, a collective least of all (the other processes would go on with this one's stand-in).
    guard.move_after(op)
    if direct:
        op.erase()


def _contiguous(t) -> bool:
    t = ir.MemRefType(t)
    return ir.AffineMapAttr(t.layout).value == ir.AffineMap.get_identity(t.rank)
