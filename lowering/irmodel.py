"""A plain-Python view of a dg module, and a text writer for new dg IR.

Expects: a verified module of `func`, `scf`, `arith` and `dg` ops (what the
emitter makes). Guarantees: `read_module` gives every function as a tree of
`Op`s and `Block`s whose values are `Value`s (identity is the value), with
each op's attributes as MLIR text and, for dg ops, as Python values (the
registry's attribute kinds); `Writer` prints ops in MLIR's generic form with
fresh SSA names, so a pass can copy ops, add new ones and give the module
back as text for MLIR to parse and verify.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from dg.dialects.mlir import ir
from dg.dialects.registry import OPS, attr_text, attr_value
from dg.dsl.types import TensorType, parse_mlir_type


class Value:
    """An SSA value: its MLIR type text and, for tensors/index/i1, its TensorType."""

    __slots__ = ("type", "tt", "name")

    def __init__(self, type_text: str, name: str = ""):
        self.type = type_text
        self.tt = parse_mlir_type(type_text)
        self.name = name  # the SSA name, for values a Writer made

    def __repr__(self) -> str:
        return f"<{self.name or 'value'} : {self.type}>"


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
    attrs = {a.name if hasattr(a, "name") else a: None for a in op.attributes}
    attrs = {k: str(op.attributes[k]) for k in attrs}
    regions = [_read_block(reg.blocks[0], values) for reg in op.regions if len(reg.blocks)]
    out = Op(op.name, operands, results, attrs, regions, str(op.location))
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
            extra = {k: str(op.attributes[k]) for k in (a.name if hasattr(a, "name") else a for a in op.attributes)
                     if k.startswith("dg.")}
            if len(op.regions[0].blocks):
                body = _read_block(op.regions[0].blocks[0], values)
                args = body.args
            else:
                body = None
                args = [Value(str(t)) for t in ft.inputs]
            funcs.append(Func(sym, args, [str(t) for t in ft.results], body, extra, str(op.location)))
    return funcs


def type_text(t: TensorType) -> str:
    if t.dtype in ("index", "i1"):
        return t.dtype
    return t.mlir()


class Writer:
    """Generic-form MLIR text, one op per line, with fresh SSA names."""

    def __init__(self, counter=None):
        self.lines: list[str] = []
        self.indent = 4
        self.counter = counter or itertools.count()
        self.loc = ""  # location text given to ops written without one

    def fresh(self, prefix: str = "v") -> str:
        return f"%{prefix}{next(self.counter)}"

    def value(self, t, prefix: str = "v") -> Value:
        v = Value(t if isinstance(t, str) else type_text(t))
        v.name = self.fresh(prefix)
        return v

    def line(self, text: str) -> None:
        self.lines.append(" " * self.indent + text)

    def op(self, name: str, operands: list, result_types: list, attrs: dict | None = None,
           regions: list | None = None, loc: str | None = None) -> list:
        """Write one op; `regions` are callables that write a block (they get this writer)."""
        results = [self.value(t) for t in result_types]
        if len(results) > 1:
            base = self.fresh("r")
            for i, r in enumerate(results):
                r.name = f"{base}#{i}"
            head = f"{base}:{len(results)} = "
        else:
            head = f"{results[0].name} = " if results else ""
        a = ", ".join(f"{k} = {v}" for k, v in (attrs or {}).items())
        a = f" {{{a}}}" if a else ""
        ins = ", ".join(o.name for o in operands)
        sig = f"({', '.join(o.type for o in operands)}) -> ({', '.join(r.type for r in results)})"
        loc = self.loc if loc is None else loc
        if not regions:
            self.line(f'{head}"{name}"({ins}){a} : {sig} {loc}')
            return results
        self.line(f'{head}"{name}"({ins}) (')
        for i, write_region in enumerate(regions):
            self.line("{")
            write_region(self)
            self.line("}" + ("," if i < len(regions) - 1 else ""))
        self.line(f"){a} : {sig} {loc}")
        return results

    def block_header(self, args: list) -> None:
        self.lines.append(" " * (self.indent - 2) + "^bb0(" + ", ".join(f"{a.name}: {a.type}" for a in args) + "):")

    def dg(self, opname: str, operands: list, attrs: dict | None = None, loc: str | None = None,
           result_types: list | None = None):
        """A dg op; its result types come from the registry's rule. One result -> a Value."""
        opdef = OPS[opname]
        attrs = dict(attrs or {})
        if result_types is None:
            rt = opdef.infer([o.tt for o in operands], **attrs)
            result_types = rt if isinstance(rt, list) else [rt]
        text = {k: attr_text(opdef.attrs[k], v) for k, v in attrs.items()}
        res = self.op(f"dg.{opname}", operands, [type_text(t) if not isinstance(t, str) else t
                                                  for t in result_types], text, loc=loc)
        return res[0] if len(res) == 1 else res
