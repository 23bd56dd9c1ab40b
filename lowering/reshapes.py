"""Reshapes of row-major buffers as views, without a shape buffer.

Expects: a module after bufferization (and after `blas-matmuls`, which reads the reshapes that
feed batched products). Guarantees: `reshapes_as_views(module)` replaces each `memref.reshape`
of a row-major buffer (the identity layout: a function argument or an allocation) whose shape
is a small buffer allocated for it and filled by constant-index stores (how bufferization
writes `tensor.from_elements`) by a `memref.reinterpret_cast` of the source to those sizes and
their row-major strides; the shape buffer, its stores and its deallocation go (as do those of
shape buffers that nothing reads any more, which `blas-matmuls` leaves). A reshape's
shape buffer is otherwise one heap allocation per reshape and per call (with its guard, its
stores and its free), which the LLVM lowering then reads back with a loop that works out the
strides: a transformer's gradient had 111 of them.
"""
from __future__ import annotations

from dg.core.mlir import constant_value, create, defining_op, int_constant, ir, operations_under, row_major, user

_DYNAMIC = -(2**63)  # (ShapedType::kDynamic, in the static size and stride lists)


def _sizes(shape, reshape) -> list | None:
    """The values stored into the shape buffer at indices 0 .. n-1, each once, all in the
    reshape's block before it, when its other users are only reshapes and its deallocation; else
    None."""
    alloc = defining_op(shape)
    if alloc is None or alloc.name != "memref.alloc" or len(alloc.operands):
        return None
    n = ir.MemRefType(shape.type).shape[0]
    stored = [None] * n
    block = reshape.block
    for use in shape.uses:
        op = user(use)
        if op.name == "memref.store" and use.operand_number == 1 and len(op.operands) == 3:
            k = constant_value(op.operands[2])
            if k is None or not 0 <= k < n or stored[k] is not None or op.block != block:
                return None
            stored[k] = op
        elif op.name not in ("memref.reshape", "memref.dealloc"):
            return None
    if any(s is None for s in stored) or not all(s.is_before_in_block(reshape) for s in stored):
        return None
    return stored


def reshapes_as_views(module) -> int:
    """Replace the reshapes (see the module's doc); how many."""
    found, shapes = [], []
    for op in operations_under(module.body):
        if op.name == "memref.alloc" and not len(op.operands) and str(op.results[0].type).endswith("xindex>"):
            shapes.append(op)
        if op.name == "memref.reshape" and len(op.operands) == 2:
            source = ir.MemRefType(op.operands[0].type)
            result = ir.MemRefType(op.results[0].type)
            if row_major(source) and row_major(result):
                found.append(op)
    done = 0
    with module.context:
        for op in found:
            source, shape = op.operands
            stores = _sizes(shape, op)
            if stores is None:
                continue
            sizes = [s.operands[0] for s in stores]
            dims = ir.MemRefType(op.results[0].type).shape  # (a static size is the type's: the verifier asks)
            index = ir.IndexType.get()
            with ir.InsertionPoint(op), op.location:
                static_sizes = list(dims)
                dynamic_sizes = [v for v, d in zip(sizes, dims) if d == _DYNAMIC]
                # the row-major strides: static as far as the sizes after them are
                static_strides, dynamic_strides, known, value = [], [], 1, None
                for k in range(len(sizes) - 1, -1, -1):
                    static_strides.append(known if value is None else _DYNAMIC)
                    if value is not None:
                        dynamic_strides.append(value)
                    if k == 0:
                        break
                    if dims[k] != _DYNAMIC and value is None:
                        known *= dims[k]
                    else:
                        factor = sizes[k] if value is not None or known == 1 else \
                            create("arith.muli", [index], [sizes[k], int_constant(known)]).result
                        value = factor if value is None else create("arith.muli", [index], [value, factor]).result
                static_strides.reverse()
                dynamic_strides.reverse()
                view = create("memref.reinterpret_cast", [op.results[0].type], [source, *dynamic_sizes, *dynamic_strides],
                              static_offsets=ir.DenseI64ArrayAttr.get([0]),
                              static_sizes=ir.DenseI64ArrayAttr.get(static_sizes),
                              static_strides=ir.DenseI64ArrayAttr.get(static_strides),
                              operandSegmentSizes=ir.DenseI32ArrayAttr.get([1, 0, len(dynamic_sizes), len(dynamic_strides)]))
            op.results[0].replace_all_uses_with(view.result)
            op.erase()
            done += 1
        for alloc in shapes:  # shape buffers no reshape reads now (these, and those blas-matmuls left)
            buffer = alloc.results[0]
            if all(user(u).name in ("memref.store", "memref.dealloc") for u in buffer.uses):
                for dead in [user(u) for u in buffer.uses]:
                    dead.erase()
                alloc.erase()
    return done
