"""dg IR -> linalg/tensor/arith/math/scf IR: the `to-linalg` pass (the "linalg" stage).

Expects: a verified dg module (func, scf, arith index constants, dg ops).
Guarantees: the same module with every dg op replaced by its registry
`lower` facet's ops (or the target's, `lower_for`, where the op has one); func and scf ops are kept as they are (dg values are
builtin tensors, so their types do not change). Functions get
`llvm.emit_c_interface` so the CPU executor can call them. A function that
can call itself first checks the stack left to it (`entry_guard`), and a
loop ends when a check has failed. The tables of the checks (`dg.checks`:
place, message) and host calls (`dg.host_calls`) go into the module.

An op without a lowering raises a `DgError` naming the op and its `.dg`
location: compiled mode never falls back silently.
"""
from __future__ import annotations

from dg.core.abi import STACK_POINTER, STATE, STATE_DECL
from dg.core.attrs import attr_value, literal_text
from dg.core.errors import DgError
from dg.core.locations import loc_of
from dg.core.mlir import ir, operations_under
from dg.core.types import TensorType, parse_mlir_type
from dg.core.writer import module_text
from dg.dialects.builder import Builder, LowerOp, fail_if
from dg.dialects.registry import OPS

TERMINATORS = ("scf.yield", "scf.condition", "func.return")


def run(module: "ir.Module", target: str = "cpu") -> "ir.Module":
    """The to-linalg pass, for a target ("cpu" or "cuda": an op's `lower_for` it has one): a new
    module."""
    return ir.Module.parse(ToLinalg(module, target).text, module.context)


class ToLinalg:
    def __init__(self, module: "ir.Module", target: str = "cpu"):
        self.b = Builder()
        self.target = target
        self.names: dict = {}
        out = []
        self.recursive = recursive_functions(module)
        for op in module.body.operations:
            if op.operation.name == "func.func":
                self._function(op.operation)
                out += self.b.lines
                self.b.lines = []
        tables = {"dg.checks": self.b.checks, "dg.host_calls": self.b.host_calls}
        attrs = ", ".join(f"{k} = {literal_text(v)}" for k, v in tables.items() if v)
        text = module_text([f"  {d}" for d in sorted(self.b.runtime_decls)] + out)
        self.text = text.replace("module {", f"module attributes {{{attrs}}} {{", 1) if attrs else text

    def name(self, v) -> str:
        n = self.names.get(v)
        if n is None:
            n = self.names[v] = self.b.fresh("v")
        return n

    def at(self, op) -> None:
        """Write what follows at the location of `op` (an op or a function)."""
        self.b.loc, self.b.where = str(op.location), loc_of(op.location)

    def _function(self, fop) -> None:
        b = self.b
        sym = ir.StringAttr(fop.attributes["sym_name"]).value
        ftype = ir.FunctionType(ir.TypeAttr(fop.attributes["function_type"]).value)
        block = fop.regions[0].blocks[0]
        params = ", ".join(f"{self.name(a)}: {a.type}" for a in block.arguments)
        results = ", ".join(str(t) for t in ftype.results)
        b.indent = 2
        sizes = f", dg.sizes = {fop.attributes['dg.sizes']}" if "dg.sizes" in fop.attributes else ""
        b.line(f"func.func @{sym}({params}) -> ({results}) attributes {{llvm.emit_c_interface{sizes}}} {{")
        with b.nested():
            if sym in self.recursive:
                self._guarded_body(fop, block, ftype)
            else:
                self._block(block)
        b.line(f"}} {fop.location}")

    def _guarded_body(self, fop, block, ftype) -> None:
        """A function that can call itself checks the stack it has left, and returns placeholders
        at once when that is used up or when a check failed already."""
        b = self.b
        self.at(fop)
        stop = entry_guard(b)
        lhs, names = b.results(len(ftype.results))
        rt = ", ".join(str(t) for t in ftype.results)
        b.line(f"{lhs}scf.if {stop}" + (f" -> ({rt})" if rt else "") + " {")
        with b.nested():
            outs = [placeholder(b, parse_mlir_type(str(t))) for t in ftype.results]
            b.emit(f"scf.yield {', '.join(outs)} : {rt}" if outs else "scf.yield")
        b.line("} else {")
        self._region(block, self._yield)
        b.line("}")
        self.at(fop)
        b.emit(f"return {', '.join(names)} : {rt}" if names else "return")

    def _block(self, block, on_terminator=None) -> None:
        for op in block.operations:
            op = op.operation
            if op.name in TERMINATORS:
                self.at(op)
                (on_terminator or (lambda t: self._yield(t, "return")))(op)
                continue
            self._op(op)

    def _results(self, op) -> str:
        if len(op.results) == 1:
            return f"{self.name(op.results[0])} = "
        lhs, names = self.b.results(len(op.results), "m")
        self.names.update(zip(op.results, names))
        return lhs

    def _op(self, op) -> None:
        b = self.b
        name = op.name
        self.at(op)
        if name.startswith("dg."):
            return self._dg(op, name[3:])
        if name == "arith.constant":
            b.emit(f"{self.name(op.results[0])} = arith.constant {op.attributes['value']}")
            return
        if name.startswith("arith.") and len(op.results) == 1 and not op.regions:
            # index arithmetic (the autodiff pass counts loop iterations with it): kept as it is
            args = ", ".join(self.name(v) for v in op.operands)
            b.emit(f"{self.name(op.results[0])} = {name} {args} : {op.results[0].type}")
            return
        if name == "func.call":
            callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
            lhs = self._results(op)
            args = ", ".join(self.name(v) for v in op.operands)
            ts = ", ".join(str(v.type) for v in op.operands)
            rs = ", ".join(str(r.type) for r in op.results)
            b.emit(f"{lhs}func.call @{callee}({args}) : ({ts}) -> ({rs})")
            return
        if name == "scf.if":
            return self._scf_if(op)
        if name == "scf.for":
            return self._scf_for(op)
        if name == "scf.while":
            return self._scf_while(op)
        raise DgError(f"compiled mode cannot lower the op '{name}'", b.where)

    def _yield(self, op, keyword="scf.yield"):
        vals = [self.name(v) for v in op.operands]
        if vals:
            self.b.emit(f"{keyword} {', '.join(vals)} : {', '.join(str(v.type) for v in op.operands)}")
        else:
            self.b.emit(keyword)

    def _region(self, block, on_terminator):
        with self.b.nested():
            self._block(block, on_terminator)

    def _scf_if(self, op):
        b = self.b
        loc = b.loc
        lhs = self._results(op)
        rt = ", ".join(str(r.type) for r in op.results)
        b.line(f"{lhs}scf.if {self.name(op.operands[0])}" + (f" -> ({rt})" if rt else "") + " {")
        self._region(op.regions[0].blocks[0], self._yield)
        b.line("} else {")
        if len(op.regions[1].blocks):
            self._region(op.regions[1].blocks[0], self._yield)
        else:
            with b.nested():
                b.line("scf.yield")
        b.line(f"}} {loc}")

    def _scf_for(self, op):
        b = self.b
        loc = b.loc
        ops = list(op.operands)
        lb, ub, st = (self.name(v) for v in ops[:3])
        body = op.regions[0].blocks[0]
        args = list(body.arguments)
        lhs = self._results(op)
        iters = ""
        if len(ops) > 3:
            pairs = ", ".join(f"{self.name(a)} = {self.name(v)}" for a, v in zip(args[1:], ops[3:]))
            iters = f" iter_args({pairs}) -> ({', '.join(str(v.type) for v in ops[3:])})"
        b.line(f"{lhs}scf.for {self.name(args[0])} = {lb} to {ub} step {st}{iters} {{")
        self._region(body, self._yield)
        b.line(f"}} {loc}")

    def _scf_while(self, op):
        b = self.b
        loc = b.loc
        before, after = op.regions[0].blocks[0], op.regions[1].blocks[0]
        lhs = self._results(op)
        inits = ", ".join(f"{self.name(a)} = {self.name(v)}" for a, v in zip(before.arguments, op.operands))
        ts = ", ".join(str(v.type) for v in op.operands)
        rts = ", ".join(str(r.type) for r in op.results)
        b.line(f"{lhs}scf.while ({inits}) : ({ts}) -> ({rts}) {{")

        def cond(t):
            vals = list(t.operands)
            c = b.binary("arith.andi", self.name(vals[0]), not_failed(b), "i1")  # a failed check ends the loop
            rest = vals[1:]
            if rest:
                b.emit(f"scf.condition({c}) {', '.join(self.name(v) for v in rest)} : {', '.join(str(v.type) for v in rest)}")
            else:
                b.emit(f"scf.condition({c})")

        self._region(before, cond)
        b.line("} do {")
        b.line(f"^bb0({', '.join(f'{self.name(a)}: {a.type}' for a in after.arguments)}):")
        self._region(after, self._yield)
        b.line(f"}} {loc}")

    def _dg(self, op, opname):
        b = self.b
        opdef = OPS.get(opname)
        lower = opdef.lower_for.get(self.target, opdef.lower) if opdef is not None else None
        if lower is None:
            raise DgError(f"compiled mode cannot run 'dg.{opname}' yet (no lowering)", b.where)
        present = [a for a in opdef.attrs if a in op.attributes]
        lop = LowerOp(
            name=opname,
            operands=[self.name(v) for v in op.operands],
            types=[parse_mlir_type(str(v.type)) for v in op.operands],
            result_types=[parse_mlir_type(str(r.type)) for r in op.results],
            attrs={a: attr_value(opdef.attrs[a], op.attributes[a]) for a in present},
            loc=b.loc,
            where=b.where,
            raw={a: str(op.attributes[a]) for a in present},
        )
        outs = lower(b, lop)
        if outs is None:
            outs = []
        if isinstance(outs, str):
            outs = [outs]
        for r, o in zip(op.results, outs):
            self.names[r] = o


def recursive_functions(module: "ir.Module") -> set:
    """The functions that can call themselves, directly or through others."""
    graph = {}
    for op in module.body.operations:
        op = op.operation
        if op.name == "func.func":
            graph[ir.StringAttr(op.attributes["sym_name"]).value] = {
                ir.FlatSymbolRefAttr(o.attributes["callee"]).value
                for b in op.regions[0].blocks for o in operations_under(b) if o.name == "func.call"}
    found = set()
    for f in graph:
        seen, todo = set(), list(graph[f])
        while todo:
            g = todo.pop()
            if g == f:
                found.add(f)
                break
            if g not in seen:
                seen.add(g)
                todo += graph.get(g, ())
    return found


def state(b: Builder) -> str:
    b.runtime_decls.add(STATE_DECL)
    return b.assign(f"memref.get_global @{STATE} : memref<3xi64>", "g")


def _state_word(b: Builder, g: str, i: int) -> str:
    return b.assign(f"memref.load {g}[{b.const(i, 'index')}] : memref<3xi64>", "w")


def not_failed(b: Builder) -> str:
    """An i1: no check has failed in this call so far."""
    return b.cmp("eq", _state_word(b, state(b), 0), b.const(0, "i64"), "i64")


def entry_guard(b: Builder) -> str:
    """At a function's entry: an i1 telling it to return at once, because a check failed already or
    because the dg calls in progress used up their stack (a located error, not a crash)."""
    g = state(b)
    failed = b.cmp("ne", _state_word(b, g, 0), b.const(0, "i64"), "i64")
    base, budget = _state_word(b, g, 1), _state_word(b, g, 2)
    b.runtime_decls.add(f"func.func private @{STACK_POINTER}() -> i64")
    spi = b.assign(f"func.call @{STACK_POINTER}() : () -> i64", "sp")
    first = b.cmp("eq", base, b.const(0, "i64"), "i64")
    b.line(f"scf.if {first} {{")
    with b.nested():
        b.emit(f"memref.store {spi}, {g}[{b.const(1, 'index')}] : memref<3xi64>")
    b.line("}")
    top = b.select(first, spi, base, "i64")
    deep = b.cmp("sgt", b.binary("arith.subi", top, spi, "i64"), budget, "i64")
    fail_if(b, deep, "recursion too deep (the calls in progress used up the stack dg allows them)")
    return b.binary("arith.ori", failed, deep, "i1")


def placeholder(b: Builder, t: TensorType) -> str:
    """A value of type t (dynamic sizes 1, zeros) returned by a call that stops early."""
    one = b.const(1, "index")
    return b.fill(t, [one] * t.rank, b.const(0, t.element))
