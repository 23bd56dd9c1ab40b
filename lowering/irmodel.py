"""A plain-Python view of a dg module, for passes that write a new module.

Expects: a verified module of `func`, `scf`, `arith` and `dg` ops (what the
emitter makes). Guarantees: `read_module` gives every function as a tree of
`Op`s and `Block`s whose values are `core.writer.Value`s (identity is the
value), with each op's attributes as MLIR text and, for dg ops, as Python
values (the registry's attribute kinds), and its location as text (to write)
and as the bindings' object (to report). A pass copies ops through a
`core.writer.Writer`, adds new ones and gives the module back as text for
MLIR to parse and verify.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from dg.core.attrs import attr_value
from dg.core.mlir import attributes, ir
from dg.core.writer import Value
from dg.dialects.registry import OPS


@dataclass(eq=False)
class Block:
    args: list
    ops: list


@dataclass(eq=False)
class Op:
    name: str  # e.g. "dg.add", "scf.for", "func.call"
    operands: list
    results: list
    attrs: dict  # name -> MLIR attribute text
    regions: list  # of Block (one block per region)
    loc: str
    location: object  # the bindings' location (core.locations.loc_of reads it)
    py: dict = field(default_factory=dict)  # dg ops: attribute name -> Python value

    @property
    def dg(self) -> str | None:
        return self.name[3:] if self.name.startswith("dg.") else None


@dataclass(eq=False)
class Func:
    sym: str
    args: list
    result_types: list  # MLIR type texts
    body: Block | None  # None for a declaration
    attrs: dict  # discardable attributes (e.g. dg.grad's) as text
    loc: str
    location: object


def _read_block(block, values: dict) -> Block:
    args = []
    for a in block.arguments:
        v = Value(str(a.type))
        values[a] = v
        args.append(v)
    ops = [_read_op(op.operation, values) for op in block.operations]
    return Block(args, ops)


def _read_op(op, values: dict) -> Op:
    operands = [values[o] for o in op.operands]
    results = []
    for r in op.results:
        v = Value(str(r.type))
        values[r] = v
        results.append(v)
    attrs = {k: str(v) for k, v in attributes(op).items()}
    regions = [_read_block(reg.blocks[0], values) for reg in op.regions if len(reg.blocks)]
    out = Op(op.name, operands, results, attrs, regions, str(op.location), op.location)
    if out.dg is not None:
        kinds = OPS[out.dg].attrs
        out.py = {k: attr_value(kinds[k], op.attributes[k]) for k in kinds if k in attrs}
    return out


def read_module(module: "ir.Module") -> list[Func]:
    funcs = []
    with module.context:
        values: dict = {}
        for op in module.body.operations:
            op = op.operation
            if op.name != "func.func":
                continue
            sym = ir.StringAttr(op.attributes["sym_name"]).value
            ft = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
            extra = {k: str(v) for k, v in attributes(op).items() if k.startswith("dg.")}
            if len(op.regions[0].blocks):
                body = _read_block(op.regions[0].blocks[0], values)
                args = body.args
            else:
                body = None
                args = [Value(str(t)) for t in ft.inputs]
            funcs.append(Func(sym, args, [str(t) for t in ft.results], body, extra, str(op.location), op.location))
    return funcs
