"""dg IR -> linalg/tensor/arith/math/scf IR (the "linalg" stage).

Expects: a verified dg module (func, scf, arith index constants, dg ops).
Guarantees: the same module with every dg op replaced by its registry
`lower` facet's ops; func and scf ops are kept as they are (dg values are
builtin tensors, so their types do not change). Functions get
`llvm.emit_c_interface` so the CPU executor can call them.

An op without a lowering raises a `DgError` naming the op and its `.dg`
location: compiled mode never falls back silently.
"""
from __future__ import annotations

from dg.dialects.mlir import ir
from dg.dialects.registry import OPS, attr_value
from dg.dsl.types import parse_mlir_type
from dg.errors import DgError, loc_from_mlir

from .builder import Builder, LowerOp, entry_guard, not_failed, placeholder


def _type_text(t) -> str:
    return str(t)


class ToLinalg:
    def __init__(self, module: "ir.Module"):
        self.b = Builder()
        self.names: dict = {}
        self.locs: list = []  # location texts, indexed by loc_id (runtime checks report these)
        out = []
        with module.context:
            self.recursive = recursive_functions(module)
            for op in module.body.operations:
                if op.operation.name == "func.func":
                    self._function(op.operation)
                    out += self.b.lines
                    self.b.lines = []
        head = ["module {"]
        if self.b.checks:
            head.append("  func.func private @dg_rt_fail(i64) attributes {llvm.emit_c_interface}")
        head += [f"  {d}" for d in sorted(self.b.runtime_decls)]
        self.checks = self.b.checks
        self.host_calls = self.b.host_calls
        self.text = "\n".join(head + out + ["}"]) + "\n"

    def name(self, v) -> str:
        n = self.names.get(v)
        if n is None:
            n = f"%v{len(self.names)}"
            self.names[v] = n
        return n

    def _function(self, fop) -> None:
        b = self.b
        sym = ir.StringAttr(fop.attributes["sym_name"]).value
        ftype = ir.FunctionType(ir.TypeAttr(fop.attributes["function_type"]).value)
        block = fop.regions[0].blocks[0]
        params = ", ".join(f"{self.name(a)}: {a.type}" for a in block.arguments)
        results = ", ".join(str(t) for t in ftype.results)
        b.indent = 2
        b.loc = ""
        sizes = f", dg.sizes = {fop.attributes['dg.sizes']}" if "dg.sizes" in fop.attributes else ""
        b.emit(f"func.func @{sym}({params}) -> ({results}) attributes {{llvm.emit_c_interface{sizes}}} {{")
        b.indent = 4
        if sym in self.recursive:
            self._guarded_body(fop, block, ftype)
        else:
            self._block(block)
        b.indent = 2
        b.lines.append(f"  }} {fop.location}")

    def _guarded_body(self, fop, block, ftype) -> None:
        """A function that can call itself checks the stack it has left, and returns placeholders
        at once when that is used up or when a check failed already."""
        b = self.b
        b.loc = str(fop.location)
        stop = entry_guard(b)
        lhs, names = self._results_of(len(ftype.results))
        rt = ", ".join(str(t) for t in ftype.results)
        b.lines.append(" " * b.indent + f"{lhs}scf.if {stop}" + (f" -> ({rt})" if rt else "") + " {")
        b.indent += 2
        outs = [placeholder(b, parse_mlir_type(str(t))) for t in ftype.results]
        b.emit(f"scf.yield {', '.join(outs)} : {rt}" if outs else "scf.yield")
        b.indent -= 2
        b.lines.append(" " * b.indent + "} else {")
        self._region(block, self._yield)
        b.lines.append(" " * b.indent + "}")
        b.loc = str(fop.location)
        b.emit(f"return {', '.join(names)} : {rt}" if names else "return")

    def _results_of(self, n: int, prefix: str = "r") -> tuple:
        """(`%r:n = `, `%r = ` or nothing, the result names) for n new values."""
        if not n:
            return "", []
        r = self.b.fresh(prefix)
        if n == 1:
            return f"{r} = ", [r]
        return f"{r}:{n} = ", [f"{r}#{i}" for i in range(n)]

    def _block(self, block, on_terminator=None) -> None:
        for op in block.operations:
            op = op.operation
            if op.name in ("scf.yield", "scf.condition", "func.return"):
                self.b.loc = str(op.location)
                if on_terminator is not None:
                    on_terminator(op)
                else:
                    vals = [self.name(v) for v in op.operands]
                    types = [str(v.type) for v in op.operands]
                    self.b.emit(f"return {', '.join(vals)} : {', '.join(types)}" if vals else "return")
                continue
            self._op(op)

    def _results(self, op) -> str:
        if len(op.results) == 1:
            return f"{self.name(op.results[0])} = "
        lhs, names = self._results_of(len(op.results), "m")
        self.names.update(zip(op.results, names))
        return lhs

    def _op(self, op) -> None:
        b = self.b
        name = op.name
        b.loc = str(op.location)
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
        raise DgError(f"compiled mode cannot lower the op '{name}'", loc_from_mlir(b.loc))

    def _yield(self, op, keyword="scf.yield"):
        vals = [self.name(v) for v in op.operands]
        if vals:
            self.b.emit(f"{keyword} {', '.join(vals)} : {', '.join(str(v.type) for v in op.operands)}")
        else:
            self.b.emit(keyword)

    def _region(self, block, on_terminator):
        self.b.indent += 2
        self._block(block, on_terminator)
        self.b.indent -= 2

    def _scf_if(self, op):
        b = self.b
        loc = b.loc
        lhs = self._results(op)
        rt = ", ".join(str(r.type) for r in op.results)
        b.lines.append(" " * b.indent + f"{lhs}scf.if {self.name(op.operands[0])}" + (f" -> ({rt})" if rt else "") + " {")
        self._region(op.regions[0].blocks[0], self._yield)
        b.lines.append(" " * b.indent + "} else {")
        if len(op.regions[1].blocks):
            self._region(op.regions[1].blocks[0], self._yield)
        else:
            b.lines.append(" " * (b.indent + 2) + "scf.yield")
        b.lines.append(" " * b.indent + f"}} {loc}")

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
        b.lines.append(" " * b.indent + f"{lhs}scf.for {self.name(args[0])} = {lb} to {ub} step {st}{iters} {{")
        self._region(body, self._yield)
        b.lines.append(" " * b.indent + f"}} {loc}")

    def _scf_while(self, op):
        b = self.b
        loc = b.loc
        before, after = op.regions[0].blocks[0], op.regions[1].blocks[0]
        lhs = self._results(op)
        inits = ", ".join(f"{self.name(a)} = {self.name(v)}" for a, v in zip(before.arguments, op.operands))
        ts = ", ".join(str(v.type) for v in op.operands)
        rts = ", ".join(str(r.type) for r in op.results)
        b.lines.append(" " * b.indent + f"{lhs}scf.while ({inits}) : ({ts}) -> ({rts}) {{")

        def cond(t):
            vals = list(t.operands)
            c = b.binary("arith.andi", self.name(vals[0]), not_failed(b), "i1")  # a failed check ends the loop
            rest = vals[1:]
            if rest:
                b.emit(f"scf.condition({c}) {', '.join(self.name(v) for v in rest)} : {', '.join(str(v.type) for v in rest)}")
            else:
                b.emit(f"scf.condition({c})")

        self._region(before, cond)
        b.lines.append(" " * b.indent + "} do {")
        bargs = ", ".join(f"{self.name(a)}: {a.type}" for a in after.arguments)
        b.lines.append(" " * b.indent + f"^bb0({bargs}):")
        self._region(after, self._yield)
        b.lines.append(" " * b.indent + f"}} {loc}")

    def _dg(self, op, opname):
        b = self.b
        opdef = OPS.get(opname)
        if opdef is None or opdef.lower is None:
            raise DgError(f"compiled mode cannot run 'dg.{opname}' yet (no lowering)", loc_from_mlir(b.loc))
        attrs = {}
        for aname, kind in opdef.attrs.items():
            if aname in op.attributes:
                attrs[aname] = attr_value(kind, op.attributes[aname])
        lop = LowerOp(
            name=opname,
            operands=[self.name(v) for v in op.operands],
            types=[parse_mlir_type(str(v.type)) for v in op.operands],
            result_types=[parse_mlir_type(str(r.type)) for r in op.results],
            attrs=attrs,
            loc=b.loc,
            loc_id=len(self.locs),
            raw={a: str(op.attributes[a]) for a in opdef.attrs if a in op.attributes},
        )
        self.locs.append(b.loc)
        outs = opdef.lower(b, lop)
        if outs is None:
            outs = []
        if isinstance(outs, str):
            outs = [outs]
        for r, o in zip(op.results, outs):
            self.names[r] = o


def recursive_functions(module: "ir.Module") -> set:
    """The functions that can call themselves, directly or through others."""
    from dg.dialects.dialect import operations_under

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


def to_linalg(module: "ir.Module") -> ToLinalg:
    return ToLinalg(module)
