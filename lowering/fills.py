"""Zero fills of contiguous buffers as `memset` (compiled CPU code).

Expects: a module after bufferization, its linalg ops still whole (before
`outline-parallel-loops`, after the passes that fold fills into what they initialize:
`fuse-gemm-updates`, the reductions'). Guarantees: `zero_fills_as_memset(module)` replaces each
`linalg.fill` of a row-major buffer with a zero (all bits 0: +0.0, integer 0, false) by LLVM's
`memset` of its bytes. A fill is otherwise a parallel loop of its own, outlined with its launch,
its context and its pool entry (a recursive model's gradient zeroes its accumulators: 52 of the
181 loops of the Tree-LSTM gradient in benchmarks/compile.py were fills); `memset` is one call,
as fast as memory goes.
"""
from __future__ import annotations

import math

from dg.core.mlir import create, defining_op, downcast, ir, operations_under, row_major


def _zero(value) -> bool:
    """Whether `value` is a constant whose bits are all 0."""
    op = defining_op(value)
    if op is None or op.name != "arith.constant":
        return False
    attr = downcast(op.attributes["value"])
    if isinstance(attr, ir.FloatAttr):
        return attr.value == 0.0 and math.copysign(1.0, attr.value) > 0
    return isinstance(attr, (ir.IntegerAttr, ir.BoolAttr)) and int(attr.value) == 0


def _bytes(t: "ir.MemRefType") -> int | None:
    """The bytes an element of the memref takes in memory (an i1 takes one), or None."""
    width = getattr(downcast(t.element_type), "width", None)
    return 1 if width == 1 else width // 8 if width in (8, 16, 32, 64) else None


def zero_fills_as_memset(module) -> int:
    """Replace the zero fills (see the module's doc); how many."""
    fills = [op for op in operations_under(module.body) if op.name == "linalg.fill" and len(op.operands) == 2
             and not len(op.results)]
    done = 0
    i8, i64, index = ir.IntegerType.get_signless(8), ir.IntegerType.get_signless(64), ir.IndexType.get()
    ptr = ir.Type.parse("!llvm.ptr")
    for op in fills:
        value, buffer = op.operands
        t = downcast(buffer.type)
        if not isinstance(t, ir.MemRefType) or not row_major(t) or not _zero(value):
            continue
        element = _bytes(t)
        if element is None:
            continue
        with op.location, ir.InsertionPoint(op):
            count = create("arith.constant", [i64], value=ir.IntegerAttr.get(i64, element)).result
            for axis, d in enumerate(t.shape):
                if d == ir.ShapedType.get_dynamic_size():
                    at = create("arith.constant", [index], value=ir.IntegerAttr.get(index, axis)).result
                    size = create("memref.dim", [index], [buffer, at]).result
                    size = create("arith.index_cast", [i64], [size]).result
                else:
                    size = create("arith.constant", [i64], value=ir.IntegerAttr.get(i64, d)).result
                count = create("arith.muli", [i64], [count, size]).result
            address = create("memref.extract_aligned_pointer_as_index", [index], [buffer]).result
            address = create("arith.index_cast", [i64], [address]).result
            p = create("llvm.inttoptr", [ptr], [address]).result
            zero = create("llvm.mlir.constant", [i8], value=ir.IntegerAttr.get(i8, 0)).result
            create("llvm.intr.memset", operands=[p, zero, count], isVolatile=ir.BoolAttr.get(False))
        op.erase()
        done += 1
    return done
