"""Strided buffer copies as loops instead of calls to MLIR's `memrefCopy`.

Expects: a module after bufferization. Guarantees: `strided_copies_as_loops(module)`
replaces each `memref.copy` whose source or target is not a plain
row-major buffer (a row of a tape, a loop-carried slice) by a `linalg.copy`,
which becomes loops that LLVM vectorizes. MLIR would otherwise lower such a
copy to a call of the `memrefCopy` runtime function, which the executor
serves in Python. Copies between plain buffers stay, and become `memcpy`.
"""
from __future__ import annotations

from dg.core.mlir import create, ir, operations_under, row_major


def _memref(t):
    try:
        return ir.MemRefType(t)
    except ValueError:  # an unranked memref
        return None


def strided_copies_as_loops(module) -> int:
    """Replace the strided `memref.copy` ops; how many."""
    found = []
    for op in operations_under(module.body):
        if op.name == "memref.copy":
            types = [_memref(v.type) for v in op.operands]
            if all(t is not None for t in types) and not all(row_major(t) for t in types):
                found.append(op)
    with module.context:
        for op in found:
            _linalg_copy(op)
            op.erase()
    return len(found)


def _linalg_copy(op) -> None:
    """A `linalg.copy` of the copy's source into its target, before it (built generically, so that
    MLIR's op-definition Python modules need not be imported)."""
    src, dst = op.operands
    elt = ir.MemRefType(src.type).element_type
    with ir.InsertionPoint(op), op.location:
        copy = create("linalg.copy", [], [src, dst], regions=1, operandSegmentSizes=ir.DenseI32ArrayAttr.get([1, 1]))
        block = copy.regions[0].blocks.append(elt, elt)
        with ir.InsertionPoint(block):
            create("linalg.yield", [], [block.arguments[0]])
