"""Sizes known to be equal before run time, made one SSA value, and the slices that take all
of their source dropped.

Expects: a module on tensors, canonicalized. Guarantees: `share_argument_dims(module)`
makes every `tensor.dim` of a function's argument on one axis one op at the top
of the function (one for all the axes of one named size, in a function that only
Python calls), so that canonicalization folds the run-time size checks between
them (dg runs no cse: see runtime/cpu.py). `fold_full_slices(module)`
replaces each `tensor.extract_slice` that starts at 0, has unit strides and takes
on every axis the source's own size (a static size, `tensor.dim` of the source on
that axis, or the value the source's size was made from) by its source. The run-time size checks of element-wise ops and
matmul (dialects/helpers.agreeing_operands) slice operands to the
smallest of their sizes; where canonicalization proves the sizes equal, the
slices take everything, and MLIR does not fold slices with dynamic sizes.
"""
from __future__ import annotations

from dg.core.mlir import constant_value, create, defining_op, ir, operations_under


def _mixed_sizes(op) -> list:
    """The sizes of a tensor.extract_slice: ints, and SSA values for the dynamic ones."""
    dynamic = ir.ShapedType.get_dynamic_size()
    offsets = list(ir.DenseI64ArrayAttr(op.attributes["static_offsets"]))
    sizes = list(ir.DenseI64ArrayAttr(op.attributes["static_sizes"]))
    rest = iter(list(op.operands)[1 + sum(1 for o in offsets if o == dynamic):])
    return [next(rest) if s == dynamic else s for s in sizes]


def _size(value, axis: int):
    """The size of tensor `value` on `axis` as MLIR's shape reification sees it: an int, the SSA
    value it was made from (through destination-passing ops, tensor.empty and slices), or None."""
    t = ir.RankedTensorType(value.type)
    if not t.is_dynamic_dim(axis):
        return t.shape[axis]
    op = defining_op(value)
    if op is None:
        return None
    if op.name.startswith("linalg.") and len(op.results):
        init = op.operands[len(op.operands) - len(op.results) + ir.OpResult(value).result_number]
        return _size(init, axis)
    if op.name == "tensor.empty":
        return op.operands[sum(1 for i in range(axis) if t.is_dynamic_dim(i))]
    if op.name == "tensor.extract_slice" and ir.RankedTensorType(op.operands[0].type).rank == t.rank:
        return _mixed_sizes(op)[axis]  # (a rank-reducing slice lists its sizes by source axis)
    return None


def _same(size, source, axis: int) -> bool:
    """True when the SSA value or int `size` is the size of `source` on `axis`."""
    if isinstance(size, int):
        return size == _size(source, axis)
    op = defining_op(size)
    if op is not None and op.name == "tensor.dim" and op.operands[0] == source and constant_value(op.operands[1]) == axis:
        return True
    known = _size(source, axis)
    return known is not None and not isinstance(known, int) and known == size


def _takes_all(op) -> bool:
    offsets = list(ir.DenseI64ArrayAttr(op.attributes["static_offsets"]))
    strides = list(ir.DenseI64ArrayAttr(op.attributes["static_strides"]))
    source = op.operands[0]
    if any(o != 0 for o in offsets) or any(s != 1 for s in strides):
        return False
    if str(op.results[0].type) != str(source.type):
        return False
    return all(_same(s, source, axis) for axis, s in enumerate(_mixed_sizes(op)))


def _called(module) -> set:
    """The symbols that some func.call in the module calls."""
    return {ir.FlatSymbolRefAttr(op.attributes["callee"]).value
            for op in operations_under(module.body) if op.name == "func.call"}


def _size_names(fop) -> dict:
    """(argument number, axis) -> name, from the function's `dg.sizes` attribute (dsl/emit.py)."""
    if "dg.sizes" not in fop.attributes:
        return {}
    out = {}
    for arg, axes in enumerate(ir.ArrayAttr(fop.attributes["dg.sizes"])):
        for axis, name in enumerate(ir.ArrayAttr(axes)):
            if ir.StringAttr(name).value:
                out[arg, axis] = ir.StringAttr(name).value
    return out


def share_argument_dims(module) -> int:
    """Make the `tensor.dim` ops of each function argument on one axis one op, placed at the top
    of the function; where the function is called only from Python, whose calls check that sizes
    the annotations name alike are equal (runtime/signature.py), one op for each name. How many
    ops were replaced."""
    index = ir.IndexType.get(module.context)
    called = _called(module)
    replaced = 0
    for fop in module.body.operations:
        fop = fop.operation
        if fop.name != "func.func" or not len(fop.regions[0].blocks):
            continue
        entry = fop.regions[0].blocks[0]
        names = {} if ir.StringAttr(fop.attributes["sym_name"]).value in called else _size_names(fop)
        first = {}  # name -> its first (argument number, axis)
        for key in sorted(names):
            first.setdefault(names[key], key)
        groups: dict = {}  # the (argument number, axis) whose size it is -> [tensor.dim ops]
        for op in operations_under(entry):
            if op.name != "tensor.dim":
                continue
            source, axis = op.operands[0], constant_value(op.operands[1])
            if axis is None or not isinstance(source, ir.BlockArgument) or source.owner != entry:
                continue
            key = (source.arg_number, axis)
            groups.setdefault(first.get(names.get(key), key), []).append((key, op))
        for (arg, axis), ops in groups.items():
            if len(ops) == 1 and ops[0][0] == (arg, axis):
                continue
            with ir.InsertionPoint.at_block_begin(entry), ops[0][1].location:
                c = create("arith.constant", [index], value=ir.IntegerAttr.get(index, axis))
                d = create("tensor.dim", [index], [entry.arguments[arg], c.result])
            for _, op in ops:
                op.results[0].replace_all_uses_with(d.result)
                op.erase()
                replaced += 1
    return replaced


def fold_full_slices(module) -> int:
    """Replace the slices that take all of their source by the source; how many."""
    found = [op for op in operations_under(module.body)
             if op.name == "tensor.extract_slice" and _takes_all(op)]
    for op in found:
        op.results[0].replace_all_uses_with(op.operands[0])
        op.erase()
    return len(found)
