"""Strided buffer copies as loops instead of calls to MLIR's `memrefCopy`.

Expects: a module after bufferization. Guarantees: `strided_copies_as_loops(module)`
replaces each `memref.copy` whose source or target is not a plain
row-major buffer (a row of a tape, a loop-carried slice) by a `linalg.copy`,
which becomes loops that LLVM vectorizes. MLIR would otherwise lower such a
copy to a call of the `memrefCopy` runtime function, which the executor
serves in Python. Copies between plain buffers stay, and become `memcpy`.
"""
from __future__ import annotations


def _memref(t):
    from dg.dialects.mlir import ir

    try:
        return ir.MemRefType(t)
    except ValueError:  # an unranked memref
        return None


def _plain(t) -> bool:
    """A ranked memref with the identity layout (row-major, no offset)."""
    dims = ", ".join(f"d{i}" for i in range(t.rank))
    return str(t.layout) == f"affine_map<({dims}) -> ({dims})>"


def strided_copies_as_loops(module) -> int:
    """Replace the strided `memref.copy` ops; how many."""
    from dg.dialects.dialect import operations_under
    from dg.dialects.mlir import ir, linalg

    found = []
    for op in operations_under(module.body):
        if op.name == "memref.copy":
            types = [_memref(v.type) for v in op.operands]
            if all(t is not None for t in types) and not all(_plain(t) for t in types):
                found.append(op)
    with module.context:
        for op in found:
            with ir.InsertionPoint(op), op.location:
                linalg.copy(op.operands[0], outs=[op.operands[1]])
            op.erase()
    return len(found)
