"""dg IR -> linalg/tensor/arith/math/scf IR: the `to-linalg` pass (the "linalg" stage).

Expects: a verified dg module (func, scf, arith index constants, dg ops).
Guarantees: the same module with every dg op replaced by its registry
`lower` facet's ops (or the target's, `lower_for`, where the op has one); func and scf ops are kept as they are (dg values are
builtin tensors, so their types do not change), except that on the CPU a loop or branch
carries a rank-0 tensor as its element (an f64, not a heap buffer per iteration). Functions get
`llvm.emit_c_interface` so the CPU executor can call them. A function that
can call itself first checks the stack left to it (`entry_guard`), and a
loop ends when a check has failed; on the CPU a call that returns with the
first failure inside it records its place. The tables of the checks
(`dg.checks`: place, message, how many values it reports), host calls
(`dg.host_calls`) and call sites (`dg.call_sites`) go into the module.

An op without a lowering raises a `DgError` naming the op and its `.dg`
location: compiled mode never falls back silently.
"""
from __future__ import annotations

from dg.core.abi import FRAME, INTERRUPT, INTERRUPT_DECL, STACK_POINTER, STATE, STATE_DECL, STATE_TYPE
from dg.core.attrs import attr_value, literal_text
from dg.core.errors import DgError
from dg.core.locations import loc_of, loc_row
from dg.core.mlir import attributes, downcast, ir, operations_under
from dg.core.types import TensorType, parse_mlir_type
from dg.core.writer import module_text
from dg.dialects.builder import Builder, LowerOp, fail_if
from dg.dialects.registry import OPS

from .stoppable import STOPPABLE


def run(module: "ir.Module", target: str = "cpu") -> "ir.Module":
    """The to-linalg pass, for a target ("cpu" or "cuda": an op's `lower_for` it has one): a new
    module."""
    return ir.Module.parse(ToLinalg(module, target).text, module.context)


class ToLinalg:
    def __init__(self, module: "ir.Module", target: str = "cpu"):
        self.b = Builder()
        self.target = self.b.target = target
        self.names: dict = {}
        self.call_sites: list = []  # the `.dg` places of the calls that record a failure's call stack
        out = []
        self.recursive = recursive_functions(module)
        for op in module.body.operations:
            if op.operation.name == "func.func":
                self._function(op.operation)
                out += self.b.lines
                self.b.lines = []
        tables = {"dg.checks": self.b.checks, "dg.host_calls": self.b.host_calls, "dg.call_sites": self.call_sites}
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
        sizes = "".join(f", {k} = {fop.attributes[k]}" for k in ("dg.sizes", "dg.donated") if k in fop.attributes)
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
        stop = entry_guard(b, self.target)
        lhs, names = b.results(len(ftype.results))
        rt = ", ".join(str(t) for t in ftype.results)
        b.line(f"{lhs}scf.if {stop}" + (f" -> ({rt})" if rt else "") + " {")
        with b.nested():
            outs = [placeholder(b, parse_mlir_type(str(t))) for t in ftype.results]
            donated = list(ir.DenseI64ArrayAttr(fop.attributes["dg.donated"])) if "dg.donated" in fop.attributes else []
            if len(donated) == len(outs) and all(block.arguments[i].type == t for i, t in zip(donated, ftype.results)):
                # (a gradient's shadows, given back as they came: a placeholder of sizes 1 would
                # make the results' buffers of any layout, copied at every return)
                outs = [self.name(block.arguments[i]) for i in donated]
            b.emit(f"scf.yield {', '.join(outs)} : {rt}" if outs else "scf.yield")
        b.line("} else {")
        with b.nested():
            self._block(block, lambda ret: b.emit(f"scf.yield {', '.join(self.name(v) for v in ret.operands)} : {rt}"
                                                  if ret.operands else "scf.yield"))
        b.line("}")
        self.at(fop)
        b.emit(f"return {', '.join(names)} : {rt}" if names else "return")

    def _block(self, block, on_return=None) -> None:
        """The block's ops, lowered; its `func.return` (when it ends a function) given to `on_return`."""
        for op in block.operations:
            op = op.operation
            if op.name == "func.return" and on_return is not None:
                self.at(op)
                on_return(op)
            else:
                self._op(op)

    def _op(self, op) -> None:
        """One op (not a function's return given to a caller), lowered at its place."""
        self.at(op)
        if op.name.startswith("dg."):
            self._dg(op, op.name[3:])
        elif op.name == "func.call":  # (calls and dg-level loops stay on the host on the GPU too)
            self._call(op)
        elif op.name == "scf.for":
            self._for(op)
        else:
            self._copy(op)

    def _for(self, op) -> None:
        """A dg-level `scf.for`, marked `STOPPABLE`: after bufferization it becomes a loop that also
        ends once a check has failed or Ctrl-C was pressed (`stoppable_loops`)."""
        self._copy(op, {STOPPABLE: "unit"})

    def _call(self, op) -> None:
        """A dg call that, when it returns with the first failed check inside it, records its
        place: the failure's call stack, innermost first (`core.abi.FRAME`)."""
        b = self.b
        g = state(b)
        before = b.cmp("eq", _state_word(b, g, 0), b.const(0, "i64"), "i64")
        self._copy(op)
        after = b.cmp("ne", _state_word(b, g, 0), b.const(0, "i64"), "i64")
        b.runtime_decls.add(f"func.func private @{FRAME}(i64)")
        site = b.const(len(self.call_sites), "i64")
        self.call_sites.append(loc_row(b.where))
        b.line(f"scf.if {b.binary('arith.andi', before, after, 'i1')} {{")
        with b.nested():
            b.emit(f"func.call @{FRAME}({site}) : (i64) -> ()")
        b.line("}")

    def _copy(self, op, extra: dict | None = None) -> None:
        """An op of another dialect (func, scf, arith) as it is, in generic form (with the `extra`
        attributes), the ops of its regions lowered; a while loop's condition also ends it once a
        check has failed or Ctrl-C was pressed. On the CPU, the dg-level loops and branches carry
        rank-0 tensors as their elements (`_scalars`)."""
        b, loc = self.b, self.b.loc
        scalars = self._scalars(op)
        operands = [self.name(v) for v in op.operands]
        types = [str(v.type) for v in op.operands]
        for i in scalars.get("operands", ()):
            operands[i], types[i] = b.assign(f"tensor.extract {operands[i]}[] : {types[i]}", "s"), _element(types[i])
        if op.name == "scf.condition":
            operands[0] = b.binary("arith.andi", operands[0], not_failed(b, self.target), "i1")
        results = [str(r.type) for r in op.results]
        if len(op.results) == 1 and not scalars:
            lhs = f"{self.name(op.results[0])} = "
        else:
            lhs, names = b.results(len(op.results), "m")
            self.names.update(zip(op.results, names))
        for i in scalars.get("results", ()):
            results[i] = _element(results[i])
        attrs = ", ".join(f"{k} = {v}" for k, v in {**attributes(op), **(extra or {})}.items())
        tail = (f" {{{attrs}}}" if attrs else "") + f" : ({', '.join(types)}) -> ({', '.join(results)}) {loc}"
        if not op.regions:
            b.line(f'{lhs}"{op.name}"({", ".join(operands)}){tail}')
            return
        b.line(f'{lhs}"{op.name}"({", ".join(operands)}) (')
        for k, region in enumerate(op.regions):
            b.line("{")
            for block in region.blocks:
                with b.nested():
                    wrapped = [(a, _element(str(a.type))) if scalars and _rank0(a.type) else (a, None)
                               for a in block.arguments]
                    inner = {a: b.fresh("s") for a, e in wrapped if e}
                    b.line(f"^bb0({', '.join(f'{inner[a]}: {e}' if e else f'{self.name(a)}: {a.type}' for a, e in wrapped)}):")
                    with b.nested():
                        b.loc = loc
                        for a, e in wrapped:  # (the element as the rank-0 tensor the ops inside take)
                            if e:
                                b.emit(f"{self.name(a)} = tensor.from_elements {inner[a]} : {a.type}")
                        self._block(block)
            b.line("}" + ("," if k < len(op.regions) - 1 else ""))
        b.line(f"){tail}")
        b.loc = loc
        for i in scalars.get("results", ()):
            r = op.results[i]
            self.names[r] = b.assign(f"tensor.from_elements {self.names[r]} : {r.type}", "t")

    def _scalars(self, op) -> dict:
        """Where a dg-level loop or branch on the CPU carries a rank-0 tensor's element instead:
        {"operands": positions, "results": positions} of its rank-0 values (its block arguments
        of rank 0 too, and those of its terminators'). A rank-0 tensor that a loop carries would
        be a heap buffer per iteration once bufferized; as an element it is a register, and
        canonicalization folds the extracts and from_elements around it."""
        if self.target != "cpu" or op.name not in _CARRIERS or (
                op.name == "scf.yield" and op.parent.name not in _CARRIERS):
            return {}
        first = 1 if op.name == "scf.condition" else 0
        found = {"operands": [i for i, v in enumerate(op.operands) if i >= first and _rank0(v.type)],
                 "results": [i for i, r in enumerate(op.results) if _rank0(r.type)]}
        return {k: v for k, v in found.items() if v}

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


# The dg-level ops that carry values through regions, and their terminators (`ToLinalg._scalars`).
_CARRIERS = ("scf.for", "scf.while", "scf.if", "scf.yield", "scf.condition")


def _rank0(t) -> bool:
    """Whether an MLIR type is a rank-0 tensor (`tensor<f64>`)."""
    t = downcast(t)
    return isinstance(t, ir.RankedTensorType) and t.rank == 0


def _element(t: str) -> str:
    """The element type of a rank-0 tensor type's text."""
    return t[len("tensor<"):-1]


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
    return b.assign(f"memref.get_global @{STATE} : {STATE_TYPE}", "g")


def _state_word(b: Builder, g: str, i: int) -> str:
    return b.assign(f"memref.load {g}[{b.const(i, 'index')}] : {STATE_TYPE}", "w")


def _stop_word(b: Builder, g: str, target: str) -> str:
    """An i64, nonzero once a check has failed in this call or (on the CPU) Ctrl-C was pressed."""
    word = _state_word(b, g, 0)
    if target != "cpu":
        return word
    b.runtime_decls.add(INTERRUPT_DECL)
    flag = b.assign(f"memref.get_global @{INTERRUPT} : memref<i64>", "g")
    return b.binary("arith.ori", word, b.assign(f"memref.load {flag}[] : memref<i64>", "w"), "i64")


def not_failed(b: Builder, target: str = "cpu") -> str:
    """An i1: no check has failed in this call so far, and no Ctrl-C came."""
    return b.cmp("eq", _stop_word(b, state(b), target), b.const(0, "i64"), "i64")


def entry_guard(b: Builder, target: str = "cpu") -> str:
    """At a function's entry: an i1 telling it to return at once, because a check failed already,
    Ctrl-C was pressed, or the dg calls in progress used up their stack (a located error, not a
    crash)."""
    g = state(b)
    failed = b.cmp("ne", _stop_word(b, g, target), b.const(0, "i64"), "i64")
    base, budget = _state_word(b, g, 1), _state_word(b, g, 2)
    b.runtime_decls.add(f"func.func private @{STACK_POINTER}() -> i64")
    spi = b.assign(f"func.call @{STACK_POINTER}() : () -> i64", "sp")
    first = b.cmp("eq", base, b.const(0, "i64"), "i64")
    b.line(f"scf.if {first} {{")
    with b.nested():
        b.emit(f"memref.store {spi}, {g}[{b.const(1, 'index')}] : {STATE_TYPE}")
    b.line("}")
    top = b.select(first, spi, base, "i64")
    deep = b.cmp("sgt", b.binary("arith.subi", top, spi, "i64"), budget, "i64")
    fail_if(b, deep, "recursion too deep (the calls in progress used up the stack dg allows them)")
    return b.binary("arith.ori", failed, deep, "i1")


def placeholder(b: Builder, t: TensorType) -> str:
    """A value of type t (dynamic sizes 1, zeros) returned by a call that stops early."""
    one = b.const(1, "index")
    return b.fill(t, [one] * t.rank, b.const(0, t.element))
