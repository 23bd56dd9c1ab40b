"""The interpreter: dg IR run eagerly with NumPy.

Expects: a verified module of `func`, `scf`, `arith` (index constants and
simple integer ops) and `dg` ops. Guarantees: each function is translated
once into Python source (one statement per op, `scf` regions as Python
`if`/`for`/`while`), compiled, and from then on run without touching the
MLIR bindings; an op costs one Python call into its registry NumPy
implementation. Errors raised by an op become `DgRuntimeError`s at that
op's `.dg` location (found from the failing line of the generated code, so
the lookup costs nothing until something fails).
"""
from __future__ import annotations

import bdb
import functools
import itertools
import sys

import numpy as np

from dg.core.attrs import attr_value, dense_value
from dg.core.deep import room_to_recurse
from dg.core.errors import DgError, DgRuntimeError, Loc, with_call_stack
from dg.core.locations import loc_of
from dg.core.mlir import ir
from dg.core.types import parse_mlir_type
from dg.dialects.helpers import first_member, unknown_groups
from dg.dialects.ops_misc import _print, failure_message
from dg.dialects.registry import OPS

_file_ids = itertools.count()
MAX_LOOPS = 12  # loops nested in one generated Python function (Python's limit: 20)
MAX_INDENT = 48  # its levels of indentation (Python's limit: 100)


class _Console:
    """The line that dg.print ops build, one value at a time, until `end`."""
    parts: list = []
    muted = False  # (while shadow mode's interpreter runs: compiled code has printed the lines)

    @classmethod
    def print(cls, pieces, end, *vals):
        if cls.muted:
            return
        cls.parts.append(_print(*vals, pieces=pieces))
        if end:
            line = " ".join(p for p in cls.parts if p != "")
            cls.parts = []
            print(line, flush=True)


class _Breakpoints:
    pending: list = []

    @classmethod
    def add(cls, name, last, loc, *vals):
        if name:
            cls.pending.append((name, vals[0]))
        if last:
            names = [n for n, _ in cls.pending]
            values = [v for _, v in cls.pending]
            cls.pending = []
            _breakpoint_impl(names, values, loc)


def _breakpoint_impl(names, vals, loc: Loc):
    """pdb, with the dg variables as the locals of a frame of their own. Quitting pdb (`q`) stops
    the call there, a DgRuntimeError at the breakpoint, in both modes."""
    params = ", ".join(names)
    src = f"def __dg_breakpoint__({params}):\n    breakpoint()  # dg variables are the locals here\n"
    ns: dict = {}
    exec(compile(src, f"<dg breakpoint {loc}>", "exec"), ns)
    print(f"{loc}: breakpoint; dg variables: {params or '(none)'}", file=sys.stderr)
    try:
        ns["__dg_breakpoint__"](*(_shown_value(v) for v in vals))
    except bdb.BdbQuit:
        raise DgRuntimeError("stopped at this breakpoint: the debugger was quit", loc) from None


def _shown_value(v):
    """A dg variable as pdb shows it, one form in both modes: a scalar as NumPy's scalar
    (`np.float32(0.1)`), not a 0-d array; an array as a NumPy array."""
    return v[()] if isinstance(v, np.ndarray) and v.ndim == 0 else v


class Translation:
    """Python callables for the functions of one module."""
    def __init__(self, module: "ir.Module"):
        self.ns: dict = {"np": np, "_DgError": DgError, "_divsi": _divsi, "_tap": _untapped, "_finite": _finite}
        self.line_locs: dict = {}  # line of the generated code -> the op's location
        self.def_locs: dict = {}  # the line of a function's `def` -> the function's location
        self.call_lines: set = set()  # the lines of the generated code that call a dg function
        self.filename = f"<dg-interp-{next(_file_ids)}>"
        self.src: list[str] = []
        self.names: dict = {}
        self.counter = itertools.count()
        self.consts = 0
        self.functions: dict = {}
        self.loops = 0  # loops open around the op being translated, in the Python function being written
        self.outlined: list = []  # (name, op, its free values) to write as functions of their own
        with module.context:
            for op in module.body.operations:
                if op.operation.name == "func.func":
                    self._function(op.operation)
            while self.outlined:
                self._outlined(*self.outlined.pop())
        code = compile("\n".join(self.src) + "\n", self.filename, "exec")
        exec(code, self.ns)
        for sym in self.functions:
            self.functions[sym] = self.ns[_pyname(sym)]

    # ---------------------------------------------------------------- helpers
    def _emit(self, indent: int, text: str, loc=None) -> None:
        self.src.append("    " * indent + text)
        if loc is not None:
            self.line_locs[len(self.src)] = loc

    def _name(self, value) -> str:
        key = value
        n = self.names.get(key)
        if n is None:
            n = f"v{next(self.counter)}"
            self.names[key] = n
        return n

    def _const(self, value, prefix="K") -> str:
        name = f"{prefix}{self.consts}"
        self.consts += 1
        self.ns[name] = value
        return name

    # ---------------------------------------------------------------- functions
    def _function(self, fop) -> None:
        sym = ir.StringAttr(fop.attributes["sym_name"]).value
        self.functions[sym] = None
        block = fop.regions[0].blocks[0]
        params = [self._name(a) for a in block.arguments]
        self._emit(0, f"def {_pyname(sym)}({', '.join(params)}):")
        self.def_locs[len(self.src)] = fop.location
        self._block(block, 1)

    def _outlined(self, name: str, op, free: list) -> None:
        """An op of nested regions as a function of its own, taking the values it uses from
        around it and returning its results."""
        self._emit(0, f"def {name}({', '.join(free)}):")
        self.loops = 0
        self._op(op, 1)
        res = [self._name(r) for r in op.results]
        self._emit(1, f"return {', '.join(res)}" if res else "return None")

    def _free_values(self, op) -> list:
        """The names of the values that `op` and the ops in its regions use and do not define."""
        defined, used = set(), list(op.operands)

        def walk(o):
            for region in o.regions:
                for block in region.blocks:
                    defined.update(block.arguments)
                    for inner in block.operations:
                        inner = inner.operation
                        used.extend(inner.operands)
                        defined.update(inner.results)
                        walk(inner)

        walk(op)
        out = []
        for v in used:
            n = self._name(v)
            if v not in defined and n not in out:
                out.append(n)
        return out

    def _block(self, block, indent: int, on_terminator=None) -> None:
        start = len(self.src)
        for op in block.operations:
            op = op.operation
            name = op.name
            if name in ("scf.yield", "scf.condition", "func.return"):
                if on_terminator is not None:
                    on_terminator(op, indent)
                elif name == "func.return":
                    vals = [self._name(v) for v in op.operands]
                    self._emit(indent, f"return {', '.join(vals)}" if vals else "return None")
                continue
            self._op(op, indent)
        if len(self.src) == start:
            self._emit(indent, "pass")

    def _op(self, op, indent: int) -> None:
        name = op.name
        loc = op.location
        res = [self._name(r) for r in op.results]
        lhs = ", ".join(res) + " =" if res else ""
        args = ", ".join(self._name(v) for v in op.operands)
        if name.startswith("dg."):
            self._dg_op(op, name[3:], lhs, args, indent, loc)
        elif name == "func.call":
            callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
            self._emit(indent, f"{lhs} {_pyname(callee)}({args})" if lhs else f"{_pyname(callee)}({args})", loc)
            self.call_lines.add(len(self.src))
        elif name.startswith("scf.") and (self.loops >= MAX_LOOPS or indent >= MAX_INDENT):
            # Python compiles at most 20 nested loops and 100 levels of indentation; dg programs
            # may nest deeper. The op becomes a function of its own, which starts again at none.
            fn = f"region{len(self.outlined)}_{next(self.counter)}"
            free = self._free_values(op)
            self.outlined.append((fn, op, free))
            self._emit(indent, f"{lhs} {fn}({', '.join(free)})" if lhs else f"{fn}({', '.join(free)})", loc)
        elif name == "scf.if":
            self._scf_if(op, res, indent, loc)
        elif name == "scf.for":
            self.loops += 1
            self._scf_for(op, res, indent, loc)
            self.loops -= 1
        elif name == "scf.while":
            self.loops += 1
            self._scf_while(op, res, indent, loc)
            self.loops -= 1
        elif name == "arith.constant":
            attr = op.attributes["value"]
            if isinstance(attr, ir.BoolAttr):
                val = repr(ir.BoolAttr(attr).value)
            elif isinstance(attr, ir.IntegerAttr):
                val = repr(attr.value)
            elif isinstance(attr, ir.FloatAttr):
                val = repr(attr.value)
            else:
                val = self._const(dense_value(attr))
            self._emit(indent, f"{lhs} {val}", loc)
        elif name in _ARITH:
            self._emit(indent, f"{lhs} {_ARITH[name].format(*[self._name(v) for v in op.operands])}", loc)
        else:
            raise DgRuntimeError(f"the interpreter cannot run the op '{name}'", loc_of(loc))

    def _dg_op(self, op, opname, lhs, args, indent, loc):
        opdef = OPS.get(opname)
        if opdef is None:
            raise DgRuntimeError(f"unknown dg op 'dg.{opname}'", loc_of(loc))
        attrs = {}
        for aname, kind in opdef.attrs.items():
            if aname in op.attributes:
                attrs[aname] = attr_value(kind, op.attributes[aname])
        if opname == "constant":
            value = np.asarray(attrs["value"][0])
            value.flags.writeable = False
            self._emit(indent, f"{lhs} {self._const(value, 'C')}", loc)
            return
        if opname == "print":
            fn = self._const(functools.partial(_Console.print, attrs.get("pieces", ()), attrs.get("end", True)))
            self._emit(indent, f"{fn}({args})", loc)
            return
        if opname in ("assert", "check"):
            where = loc_of(loc)
            names = [self._name(v) for v in op.operands]
            msg = failure_message(opname, attrs.get("msg") or "", len(names) > 1)
            err = self._const((msg, where), "A")
            self._emit(indent, f"if not {names[0]}: _assert_failed({err}{''.join(', ' + n for n in names[1:])})", loc)
            self.ns.setdefault("_assert_failed", _assert_failed)
            return
        if opname == "tap":  # (shadow mode sets _tap: the value to go on with)
            self._emit(indent, f"{lhs} _tap({attrs.get('id', 0)}, {args})", loc)
            return
        if opname == "check_finite":
            info = self._const((attrs.get("msg") or "", loc_of(loc)), "N")
            self._emit(indent, f"{lhs} _finite({args}, {info})", loc)
            return
        if opname == "breakpoint":
            where = loc_of(loc)
            fn = self._const(functools.partial(_Breakpoints.add, attrs.get("name", ""), attrs.get("last", True), where))
            self._emit(indent, f"{fn}({args})", loc)
            return
        impl = opdef.impl if not attrs else functools.partial(opdef.impl, **attrs)
        if opdef.agree is not None:
            impl = _agreeing(impl, opdef, op, loc)
        fn = self._const(impl, f"{opname}_")
        call = f"{fn}({args})"
        self._emit(indent, f"{lhs} {call}" if lhs else call, loc)

    # ---------------------------------------------------------------- scf
    def _scf_if(self, op, res, indent, loc):
        cond = self._name(op.operands[0])

        def term(t, ind):
            vals = [self._name(v) for v in t.operands]
            if res:
                self._emit(ind, f"{', '.join(res)} = {', '.join(vals)}")

        self._emit(indent, f"if {cond}:", loc)
        self._block(op.regions[0].blocks[0], indent + 1, term)
        if len(op.regions) > 1 and len(op.regions[1].blocks):
            self._emit(indent, "else:")
            self._block(op.regions[1].blocks[0], indent + 1, term)
        elif res:
            raise DgRuntimeError("scf.if with results needs an else region", loc_of(loc))

    def _scf_for(self, op, res, indent, loc):
        lb, ub, step = (self._name(v) for v in list(op.operands)[:3])
        inits = [self._name(v) for v in list(op.operands)[3:]]
        body = op.regions[0].blocks[0]
        bargs = list(body.arguments)
        iv = self._name(bargs[0])
        carried = [self._name(a) for a in bargs[1:]]
        self._assign(indent, carried, inits)
        self._emit(indent, f"for {iv} in range({lb}, {ub}, {step}):", loc)
        self._block(body, indent + 1, lambda t, ind: self._assign(ind, carried, [self._name(v) for v in t.operands]))
        self._assign(indent, res, carried)

    def _assign(self, indent, names: list, values: list) -> None:
        """`a, b = x, y` (nothing when there are no names)."""
        if names:
            self._emit(indent, f"{', '.join(names)} = {', '.join(values)}")

    def _scf_while(self, op, res, indent, loc):
        inits = [self._name(v) for v in op.operands]
        before = op.regions[0].blocks[0]
        after = op.regions[1].blocks[0]
        bargs = [self._name(a) for a in before.arguments]
        aargs = [self._name(a) for a in after.arguments]
        self._assign(indent, bargs, inits)
        self._emit(indent, "while True:", loc)

        def cond_term(t, ind):
            vals = [self._name(v) for v in list(t.operands)[1:]]
            self._emit(ind, f"if not {self._name(t.operands[0])}:")
            self._assign(ind + 1, res, vals)
            self._emit(ind + 1, "break")
            self._assign(ind, aargs, vals)

        self._block(before, indent + 1, cond_term)
        self._block(after, indent + 1, lambda t, ind: self._assign(ind, bargs, [self._name(v) for v in t.operands]))

    # ---------------------------------------------------------------- errors
    def location_of(self, tb, of_function: bool = False) -> Loc | None:
        """The `.dg` location of the innermost generated line in a traceback (`of_function`: of
        the function that line is in, as compiled code locates a call that runs out of stack)."""
        found = None
        while tb is not None:
            code = tb.tb_frame.f_code
            if code.co_filename == self.filename:  # (an outlined region is no dg function: skipped)
                found = (self.def_locs.get(code.co_firstlineno, found) if of_function
                         else self.line_locs.get(tb.tb_lineno, found))
            tb = tb.tb_next
        return loc_of(found) if found is not None else None

    def call_stack(self, tb) -> list:
        """The `.dg` places of the dg calls a traceback is inside, innermost first."""
        sites = []
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == self.filename and tb.tb_lineno in self.call_lines:
                sites.append(loc_of(self.line_locs[tb.tb_lineno]))
            tb = tb.tb_next
        return sites[::-1]

    def source(self) -> str:
        return "\n".join(self.src)


def _divsi(a: int, b: int) -> int:
    """arith.divsi: integer division rounding toward zero (Python's // rounds down)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _agreeing(impl, opdef, op, loc):
    """impl, first checking the sizes the op's `agree` facet says must be equal at run time (as
    compiled code does): NumPy alone would also broadcast a size that is 1 only at run time."""
    types = [parse_mlir_type(str(v.type)) for v in op.operands]
    groups, message = opdef.agree(types, parse_mlir_type(str(op.results[0].type)))
    groups = unknown_groups(groups, types)
    if not groups:
        return impl
    where = loc_of(loc)

    def checked(*args):
        for g in groups:
            f = first_member(g, types)
            first = np.shape(args[f[0]])[f[1]]
            for k, j in g:
                if np.shape(args[k])[j] != first:
                    raise DgRuntimeError(message.format(first, np.shape(args[k])[j]), where)
        return impl(*args)

    return checked


def _untapped(tap_id, value):
    return value


def _finite(x, info):
    """check_finite: x, or a located DgRuntimeError where it has a NaN or an infinity."""
    if not np.all(np.isfinite(x)):
        msg, where = info
        raise DgRuntimeError(msg.replace("{0}", "a NaN" if np.any(np.isnan(x)) else "an infinity"), where)
    return x


def _assert_failed(info, *values):
    msg, where = info
    raise DgRuntimeError(msg.format(*(int(v) for v in values)) if values else msg, where)


_ARITH = {
    "arith.addi": "{0} + {1}",
    "arith.subi": "{0} - {1}",
    "arith.muli": "{0} * {1}",
    "arith.ceildivsi": "-(-{0} // {1})",
    "arith.divsi": "_divsi({0}, {1})",
    "arith.maxsi": "max({0}, {1})",
    "arith.minsi": "min({0}, {1})",
    "arith.remsi": "({0} - {1} * _divsi({0}, {1}))",
    "arith.index_cast": "int({0})",
    "arith.select": "({1} if {0} else {2})",
    "arith.andi": "({0} and {1})",
    "arith.ori": "({0} or {1})",
    "arith.xori": "({0} != {1})",
}


def _pyname(sym: str) -> str:
    """A Python name for a symbol, one per symbol: ASCII letters and digits stay, `_` doubles,
    anything else is `_<hex code point>_`."""
    return "f_" + "".join(c if c.isascii() and c.isalnum() else "__" if c == "_" else f"_{ord(c):x}_" for c in sym)


def run(translation: Translation, symbol: str, args):
    """Call a translated function; failures become located DgRuntimeErrors."""
    fn = translation.functions[symbol]
    try:
        with np.errstate(all="ignore"), room_to_recurse():
            return fn(*args)
    except DgRuntimeError as e:
        error, tb = e, e.__traceback__
    except DgError:
        raise
    except RecursionError as e:
        error, tb = DgRuntimeError(f"recursion too deep ({e})", translation.location_of(e.__traceback__, True)), e.__traceback__
    except Exception as e:  # an op's NumPy implementation failed
        error, tb = DgRuntimeError(f"{type(e).__name__}: {e}", translation.location_of(e.__traceback__)), e.__traceback__
    raise with_call_stack(error, translation.call_stack(tb)) from None
