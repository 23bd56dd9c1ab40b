"""New IR for a rewrite of a parsed module, written as text with the lowering's builder and spliced
in where it goes: how the passes that give an op's marked plain form a target's own strategy
(`convolutions`, `pool_grads`) write it, with the same pieces the dialect's lowerings use.

`Spliced(op)` writes at op's location; `tensor(v)` names a value of the module as an argument of
the text (with its type and its sizes as index names); `splice(before, result, type)` parses the
text as a function and moves its ops before `before` (`core.mlir.splice_function`), giving the
value `result` names.
"""
from __future__ import annotations

from dg.core.mlir import defining_op, ir, splice_function
from dg.core.types import parse_mlir_type
from dg.dialects.builder import Builder


def only_user(v):
    """The one op that reads v, or None (no reader, or several uses)."""
    uses = list(v.uses)
    if len(uses) != 1:
        return None
    owner = uses[0].owner
    return getattr(owner, "operation", owner)


def source(v, name: str):
    """The first operand of the op `name` that defines v, or None."""
    op = defining_op(v)
    return op.operands[0] if op is not None and op.name == name else None


def made_with(v) -> dict:
    """{axis: the index value v's size on that axis was made with}, for the dynamic sizes of a
    value that is a tensor.empty, a fill of one, or an insert_slice into one of those."""
    op = defining_op(v)
    while op is not None and op.name in ("linalg.fill", "tensor.insert_slice"):
        op = defining_op(op.operands[len(op.operands) - 1] if op.name == "linalg.fill" else op.operands[1])
    if op is None or op.name != "tensor.empty":
        return {}
    dyn = iter(op.operands)
    shape = ir.RankedTensorType(op.results[0].type).shape
    return {axis: next(dyn) for axis, d in enumerate(shape) if d == ir.ShapedType.get_dynamic_size()}


class Spliced:
    """A function whose arguments are the module's values that the new IR reads, written with the
    lowering's builder (`b`) at the location of the op it replaces."""

    def __init__(self, at):
        self.b = Builder()
        self.b.loc = str(at.location)
        self.values: list = []
        self.types: list = []

    def arg(self, v) -> str:
        """The name of the module's value v in the text."""
        for k, u in enumerate(self.values):
            if u == v:
                return f"%arg{k}"
        self.values.append(v)
        self.types.append(str(v.type))
        return f"%arg{len(self.values) - 1}"

    def tensor(self, v) -> tuple:
        """(name, TensorType, sizes) of a tensor of the module: its sizes as index names, constants
        where the type has them, else the values they were made with (`made_with`), else a
        tensor.dim."""
        name, t = self.arg(v), parse_mlir_type(str(v.type))
        made = made_with(v)
        sizes = [self.b.const(d, "index") if isinstance(d, int) else self.arg(made[i]) if i in made
                 else self.b.dim(name, t, i) for i, d in enumerate(t.shape)]
        return name, t, sizes

    def splice(self, before, result: str, type_text: str) -> "ir.Value":
        """The text's ops moved before the op `before`; the value `result` (of type `type_text`)."""
        params = ", ".join(f"%arg{k}: {t}" for k, t in enumerate(self.types))
        text = "\n".join([f"func.func @spliced({params}) -> {type_text} {{", *self.b.lines,
                          f"  return {result} : {type_text}", "}"])
        return splice_function(before, text, self.values)[0]
