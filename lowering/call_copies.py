"""The copies bufferization makes of what a call is passed, gone where the callee only reads it.

Expects: a module just bufferized by MLIR's One-Shot Bufferize (function boundaries included),
before its deallocations are made. Guarantees: `drop_call_copies(module)`: where a call is passed
a buffer that was allocated and copied from another (`%a = memref.alloc`, `memref.copy %src, %a`)
only to be passed, and the callee neither writes that argument nor returns it, the call is passed
`%src` itself, and the allocation and copy go. Between the copy and the call nothing may write
memory (only allocations, copies into them, sizes and arithmetic), so the callee reads what the
copy would have held.

One-Shot Bufferize knows which arguments a function writes once it has analyzed the function,
and it analyzes callees first; but a function that calls itself, or that a cycle of calls
reaches, is called before it is analyzed, and bufferization then takes every buffer the call is
passed for written: it copies them all. A recursive model's parameters were copied so at every
call (the Tree-LSTM gradient of benchmarks/compile.py: 14 copies before each of its calls of
the forward, 172 copies in all). dg finds which arguments each function may write
(`written_arguments`, through the calls it makes, a function that calls itself included).
"""
from __future__ import annotations

from dg.core.mlir import defining_op, downcast, function_bodies, ir, operations_under, user

from .deallocs import FRESH, VIEWS, base, returned_arguments

# Ops that only read the memref they are given.
_READS = {"memref.load", "memref.dim", "memref.extract_aligned_pointer_as_index", "memref.rank", "vector.load",
          "vector.transfer_read"}
# What may stand between a copy and the call it is made for: nothing that writes memory.
_BETWEEN = {"memref.alloc", "memref.copy", "memref.dim", "arith.constant", "arith.index_cast", "arith.muli",
            "arith.addi", "arith.subi", "arith.maxsi", "arith.minsi", "arith.select", "arith.cmpi"}


def written_arguments(m, returns: dict | None = None) -> dict:
    """Each function's name (those with a body) -> the positions of the memref arguments it may
    write (or pass to a call that may write them, or return: what the caller does with a
    result is the caller's). Found again for every function until none grows, from none: a
    write is an op's, and only an op's."""
    returns = returned_arguments(m) if returns is None else returns
    functions = {ir.StringAttr(body.owner.attributes["sym_name"]).value: body for body in function_bodies(m)}
    written: dict = {name: frozenset() for name in functions}
    changed = True
    while changed:
        changed = False
        for name, body in functions.items():
            found = frozenset(i for i, a in enumerate(body.arguments)
                              if isinstance(downcast(a.type), ir.MemRefType) and _may_write(a, written, returns))
            if found != written[name]:
                written[name], changed = found, True
    return written


def _may_write(value, written: dict, returns: dict) -> bool:
    """Whether the buffer of `value` may be written through it: by an op it is given to, or
    through a view of it (anything not known to read only counts as a write)."""
    for use in value.uses:
        op, at = user(use), use.operand_number
        name = op.name
        if name in _READS or name == "func.return":
            continue
        if name in VIEWS or name == "arith.select" and at > 0:  # (a view's buffer, or what a select may be)
            if any(_may_write(r, written, returns) for r in op.results if isinstance(downcast(r.type), ir.MemRefType)):
                return True
            continue
        parent = op.parent.operation if name == "scf.yield" else None
        if parent is not None and parent.name == "scf.if":  # (the if's result may be this buffer)
            if _may_write(parent.results[at], written, returns):
                return True
            continue
        if name == "memref.copy":
            if at == 1:
                return True
            continue
        if name.startswith("linalg.") and "operandSegmentSizes" in op.attributes:
            ins = ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"])[0]
            if at >= ins:
                return True
            continue
        if name == "func.call":
            callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
            if callee not in written or at in written[callee] or _returns(returns.get(callee), at):
                return True
            continue
        return True
    return False


def _returns(returned, at: int) -> bool:
    """Whether a function that returns `returned` (returned_arguments') may return argument `at`."""
    return returned is None or (returned != FRESH and at in returned)


def drop_call_copies(m) -> int:
    """Pass calls the buffers their copies were made from (see the module's doc); how many."""
    returns = returned_arguments(m)
    written = written_arguments(m, returns)
    dropped = 0
    for body in function_bodies(m):
        for call in [op for op in operations_under(body) if op.name == "func.call"]:
            callee = ir.FlatSymbolRefAttr(call.attributes["callee"]).value
            if callee in written:
                dropped += _drop(call, written[callee], returns.get(callee))
    return dropped


def _drop(call, written: frozenset, returned) -> int:
    """Drop the copies made only to be passed to `call` (of a function that writes the arguments
    `written` and returns `returned`) in its block before it, with nothing that writes memory
    between (only ops of _BETWEEN, copies only into buffers just allocated)."""
    ops = [op.operation for op in call.block.operations]
    k = next(i for i, op in enumerate(ops) if op == call) - 1
    copies: dict = {}  # the buffer copied into -> the copy
    while k >= 0 and ops[k].name in _BETWEEN:
        op = ops[k]
        if op.name == "memref.copy":
            into = defining_op(op.operands[1])
            if into is None or into.name != "memref.alloc":
                break
            copies[op.operands[1]] = op
        k -= 1
    dropped = 0
    operands = list(call.operands)
    # What the callee writes must not be the buffer a dropped copy was made from: the callee
    # would read what it wrote. Only buffers just allocated are known not to be.
    writes = [base(operands[i]) for i in written]
    if any(defining_op(w) is None or defining_op(w).name != "memref.alloc" for w in writes):
        return 0
    for at, v in enumerate(operands):
        copy = copies.get(v)
        if copy is None or at in written or _returns(returned, at):
            continue
        src = copy.operands[0]
        uses = [user(u) for u in v.uses]
        if src.type != v.type or src in copies or len(uses) != 2 or not any(op == call for op in uses) \
                or base(src) in writes:
            continue
        alloc = defining_op(v)
        call.operands[at] = src
        copy.erase()
        alloc.erase()
        dropped += 1
    return dropped

