"""Emission: the checked AST of a function, for one argument signature, to dg IR.

Expects: `FuncDef`s from the parser (or `embed`), rewritten by
`controlflow.rewrite`. Guarantees: textual MLIR made of `func`, `scf`,
`arith.constant` (index) and `dg` ops, every op with a location from the
`.dg` source (a name location for the variable it defines); or, when the
source has mistakes, every error found, each a located `DgTypeError`.

Checking and emission are one walk: every expression gets a `TensorType`
from the op registry's shape rules, and the same walk writes the op. A
function is emitted once per argument signature (a "specialization");
declared `?` or named dims are `?` in the IR, so other sizes reuse it.
Variables that a branch or loop body redefines become `scf` results and
loop-carried values.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from dg.core.attrs import attr_text
from dg.core.errors import DgErrors, DgTypeError, Loc
from dg.core.types import (
    DTYPES, ShapeError, Sym, TensorType, annotation_type, is_bool, is_float, is_int, np_dtype, promote, py_cast, same_dim,
    scalar,
)
from dg.dialects.ops_shape import expand_spec
from dg.dialects.registry import OPS

from . import ast as A
from . import controlflow
from .builtins import BUILTINS, call_builtin
from .values import (POISON, FuncRef, GradRef, ListVal, ModuleRef, Pullback, Str, Undefined, V, flatten, is_tuple,
                     unflatten_like)

INDEX = TensorType("index", ())
I1 = TensorType("i1", ())

BINOPS = {"+": "add", "-": "sub", "*": "mul", "/": "div", "//": "floordiv", "%": "mod", "**": "pow"}
CMPOPS = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}


def mlir_type(t: TensorType) -> str:
    if t.dtype == "index":
        return "index"
    if t.dtype == "i1":
        return "i1"
    return t.mlir()


def type_key(t: TensorType):
    """The part of a type that selects a specialization (Syms compare by name)."""
    return (t.dtype, tuple(d if isinstance(d, int) else (d.name or "?") for d in t.shape))


@dataclass
class Computed(A.Node):
    """An expression the emitter writes by calling `make()` (rewrites it makes of its own code)."""
    make: object


class NeedsRecursionPass(Exception):
    pass


@dataclass
class Spec:
    """One specialization of a function."""
    symbol: str
    fd: A.FuncDef
    param_types: list
    result_types: list | None = None  # None while unknown (first pass of a recursive function)
    result_proto: object = None  # V or tuple structure of the results
    text: str = ""


# The runtime's functions and globals live in a dg function's module from its lowering on
# (`dg_state`, `dg_rt_fail`, `dg_rt_host_f32`, ...): a dg function named so gets another symbol.
# (Names the later stages add, C library names among them, cannot clash: the CPU lowering gives
# every dg function a dotted symbol, runtime.cpu.LINKED.)
def _unreserved(name: str) -> str:
    return "_" + name if name.startswith("dg_") else name


class ModuleEmitter:
    """Emits the specializations reachable from one entry call into one module."""
    def __init__(self, program, errors: DgErrors | None = None):
        self.program = program  # dg.runtime.program.Program (sources, functions)
        self.errors = errors or DgErrors()
        self.specs: dict = {}
        self.order: list[Spec] = []
        self.in_progress: dict = {}
        self.symbols: set = set()
        self.recursive_unknown: set = set()
        self.stack: list = []  # keys of the specializations being emitted, outermost first
        self.tainted: set = set()
        self.quiet = 0  # >0 while probing loop bodies: errors are not kept
        self.grad_decls: dict = {}  # (kind, of, wrt) -> (symbol, declaration text)

    # ------------------------------------------------------------ errors
    def error(self, msg: str, loc: Loc, cls=DgTypeError):
        if not self.quiet:
            self.errors.add(cls(msg, loc))
        return POISON

    # ------------------------------------------------------------ specializations
    def symbol_for(self, name: str) -> str:
        name = _unreserved(name)
        if name not in self.symbols:
            self.symbols.add(name)
            return name
        for i in itertools.count(1):
            s = f"{name}_{i}"
            if s not in self.symbols:
                self.symbols.add(s)
                return s

    def specialize(self, source, fd: A.FuncDef, param_types: list, loc: Loc | None = None) -> Spec:
        key = (id(source), fd.name, tuple(type_key(t) if t is not None else None for t in param_types),
               self._sym_pattern([t for t in param_types if t is not None]))
        if key in self.specs:
            return self.specs[key]
        if key in self.in_progress:
            spec = self.in_progress[key]
            if spec.result_types is None:
                # A recursive call before the result type is known: this pass is a probe.
                # Everything emitted since `key` started depends on it and is emitted again.
                self.recursive_unknown.add(key)
                self.tainted.update(self.stack[self.stack.index(key) + 1:])
            return spec
        spec = Spec(self.symbol_for(fd.name), fd, param_types)
        if fd.returns is not None:
            declared = FunctionEmitter(self, source, spec).declared_returns()
            if declared is not None:
                spec.result_proto = declared
                spec.result_types = [v.type for v in flatten(declared)]
        self.in_progress[key] = spec
        self.stack.append(key)
        try:
            for attempt in range(4):
                n_err = len(self.errors.errors)
                self.recursive_unknown.discard(key)
                fe = FunctionEmitter(self, source, spec)
                text, proto = fe.emit()
                if key not in self.recursive_unknown:
                    break
                new_types = [v.type for v in flatten(proto)] if proto is not None else []
                if any(t is None for t in new_types):
                    break  # an error made the result unknown; it has been reported
                del self.errors.errors[n_err:]
                # Recursive calls saw no result type yet: assume what the other paths
                # return, with every size dynamic, and emit again.
                spec.result_types = [TensorType(t.dtype, tuple(Sym() for _ in t.shape)) for t in new_types]
                spec.result_proto = proto
        finally:
            del self.in_progress[key]
            self.stack.pop()
        spec.text = text
        spec.result_proto = proto
        spec.result_types = [v.type for v in flatten(proto)] if proto is not None else []
        if key in self.tainted:  # emitted against a result type that was not known yet
            self.tainted.discard(key)
            return spec
        self.specs[key] = spec
        self.order.append(spec)
        return spec

    @staticmethod
    def _types_fit(new, old) -> bool:
        if len(new) != len(old):
            return False
        for a, b in zip(new, old):
            if a is None or b is None:
                continue
            if a.dtype != b.dtype or a.rank != b.rank:
                return False
            for x, y in zip(a.shape, b.shape):
                if isinstance(y, int) and not (isinstance(x, int) and x == y):
                    return False
        return True

    @staticmethod
    def _sym_pattern(types):
        """Which dynamic dims are the same symbol (equal-size constraints)."""
        seen = {}
        out = []
        for t in types:
            for d in t.shape:
                if isinstance(d, Sym):
                    out.append(seen.setdefault(id(d), len(seen)))
        return tuple(out)

    def module_text(self) -> str:
        body = "\n".join([d for _, d in self.grad_decls.values()] + [s.text for s in self.order])
        return "module {\n" + body + "\n}\n"

    def grad_decl(self, kind: str, of: str, wrt: tuple, param_types: list, result_types: list, loc) -> str:
        """The declaration the autodiff pass defines: kind ("grad", "value_and_grad", "vjp") of `of`."""
        key = (kind, of, wrt)
        if key not in self.grad_decls:
            sym = self.symbol_for(f"{of}__{kind}" + "".join(f"_{i}" for i in wrt))
            ins = ", ".join(mlir_type(t) for t in param_types)
            outs = ", ".join(mlir_type(t) for t in result_types)
            attrs = (f'dg.kind = "{kind}", dg.of = "{of}", '
                     f'dg.wrt = array<i64{": " + ", ".join(map(str, wrt)) if wrt else ""}>')
            self.grad_decls[key] = (sym, f"  func.func private @{sym}({ins}) -> ({outs}) "
                                         f"attributes {{{attrs}}} {loc.mlir() if loc else ''}")
        return self.grad_decls[key][0]

    def in_progress_fn(self, source, fd) -> bool:
        return any(s.fd is fd for s in self.in_progress.values())


class _Scope:
    """The names bound at a point of a function: name -> V | tuple | ListVal | ..."""
    def __init__(self, env=None):
        self.env = dict(env or {})


class FunctionEmitter:
    def __init__(self, mod: ModuleEmitter, source, spec: Spec):
        self.mod = mod
        self.source = source
        self.spec = spec
        self.fd = controlflow.rewrite(spec.fd)
        self.lines: list[str] = []
        self.indent = 2
        self.counter = itertools.count()
        self.env: dict = {}
        self.dim_syms: dict = {}
        self.sizes: dict = {}  # size name -> (value, axis) that has it: parameters first (emit)
        self.cur_loc: Loc | None = spec.fd.loc  # the statement being emitted
        self.last_def = None  # (lines, index, ssa name, loc) of the last single-result op

    # ------------------------------------------------------------ small helpers
    def fresh(self) -> str:
        return f"%{next(self.counter)}"

    def line(self, text: str) -> None:
        self.lines.append(" " * self.indent + text)

    def error(self, msg, loc, cls=DgTypeError):
        return self.mod.error(msg, loc, cls)

    @property
    def file(self):
        return self.source.file

    # ------------------------------------------------------------ types from annotations
    def type_from_annotation(self, te, loc) -> TensorType | None:
        try:
            return annotation_type(te, self.dim_syms)
        except ShapeError as e:
            self.error(str(e), te.loc)
            return None

    def declared_returns(self, te=None):
        """The declared result structure (V or nested tuples of V), or None if a type is unknown."""
        te = self.spec.fd.returns if te is None else te
        if isinstance(te, A.TupleTypeExpr):
            parts = [self.declared_returns(e) for e in te.elts]
            return None if any(p is None for p in parts) else tuple(parts)
        t = self.type_from_annotation(te, te.loc)
        return None if t is None else V(None, t)

    # ------------------------------------------------------------ emission of ops
    def materialize(self, v, dtype: str | None = None, loc: Loc | None = None) -> V:
        """A weak literal becomes a `dg.constant` of `dtype` (its own default if None)."""
        if isinstance(v, V) and v.name is None and not v.poison:
            dt = dtype or v.type.dtype
            val = v.const
            if is_int(dt) and isinstance(val, int) and not isinstance(val, bool):
                info = np.iinfo(np_dtype(dt))
                if not info.min <= val <= info.max:
                    return self.error(f"the integer {val} does not fit in {dt}", loc)
            name = self.fresh()
            t = TensorType(dt, v.type.shape if v.type else ())
            arr = np.asarray(val)
            self.line(f'{name} = "dg.constant"() {{value = {attr_text("dense", (arr, t))}}} : () -> {t.mlir()} {self.loc(loc)}')
            return V(name, t, const=val)
        if isinstance(v, V) and dtype and not v.poison and v.dtype != dtype:
            return self.cast(v, dtype, loc)
        return v

    def loc(self, loc: Loc | None, name: str | None = None) -> str:
        if loc is None:
            return ""
        return loc.mlir(name)

    def op(self, opname: str, operands: list, attrs: dict | None = None, loc: Loc | None = None,
           name: str | None = None, result_types=None):
        """Emit `dg.<opname>`; returns a V, a list of V (several results), or None (no result)."""
        opdef = OPS[opname]
        attrs = {k: v for k, v in (attrs or {}).items()}
        if any(isinstance(o, V) and o.poison for o in operands):
            n = opdef.nresults
            return POISON if n == 1 else ([POISON] * (n or 0) if n else None)
        operands = [self.materialize(o, loc=loc) for o in operands]
        types = [o.type for o in operands]
        try:
            rt = opdef.infer(types, **attrs) if result_types is None else result_types
        except ShapeError as e:
            n = opdef.nresults
            msg = str(e)
            self.error(msg if msg.startswith(opname) else f"{opname}: {msg}", loc)
            return POISON if n == 1 else ([POISON] * (n or 0) if n else None)
        rts = rt if isinstance(rt, list) else [rt]
        akind = opdef.attrs
        attr_s = ", ".join(f"{k} = {attr_text(akind[k], v)}" for k, v in attrs.items())
        attr_s = f" {{{attr_s}}}" if attr_s else ""
        args = ", ".join(o.name for o in operands)
        sig = f"({', '.join(mlir_type(t) for t in types)}) -> ({', '.join(mlir_type(t) for t in rts)})"
        if not rts:
            self.line(f'"dg.{opname}"({args}){attr_s} : {sig} {self.loc(loc, name)}')
            return None
        res = self.fresh()
        if len(rts) == 1:
            self.line(f'{res} = "dg.{opname}"({args}){attr_s} : {sig} {self.loc(loc, name)}')
            self.last_def = (self.lines, len(self.lines) - 1, res, loc)
            return V(res, rts[0])
        self.line(f'{res}:{len(rts)} = "dg.{opname}"({args}){attr_s} : {sig} {self.loc(loc, name)}')
        return [V(f"{res}#{i}", t) for i, t in enumerate(rts)]

    def cast(self, v: V, dtype: str, loc) -> V:
        if v.poison or v.dtype == dtype:
            return v
        if v.name is None:
            return self.materialize(V(None, v.type.with_dtype(dtype), const=py_cast(v.const, dtype)), dtype, loc)
        return self.op("cast", [v], {"dtype": dtype}, loc)

    def const(self, value, dtype: str, loc) -> V:
        return self.materialize(V(None, scalar(dtype), const=value), dtype, loc)

    def weak(self, value) -> V:
        if isinstance(value, bool) or isinstance(value, np.bool_):
            return V(None, scalar("bool"), const=bool(value), weak=True)
        if isinstance(value, (int, np.integer)):
            return V(None, scalar("i64"), const=int(value), weak=True)
        return V(None, scalar("f32"), const=float(value), weak=True)

    def index_const(self, n: int, loc: Loc | None = None) -> V:
        name = self.fresh()
        self.line(f"{name} = arith.constant {int(n)} : index {self.loc(loc or self.cur_loc)}")
        return V(name, INDEX, const=int(n))

    # ------------------------------------------------------------ the function
    def emit(self):
        fd = self.fd
        spec = self.spec
        params = []
        for p, t in zip(fd.params, spec.param_types):
            if t is None:  # `dg check` of an unannotated parameter: unknown, errors through it are not reported
                self.env[p.name] = POISON
                continue
            name = f"%{p.name}" if p.name.isidentifier() and p.name.isascii() else self.fresh()
            v = V(name, t)
            self.env[p.name] = v
            for axis, d in enumerate(t.shape):
                if isinstance(d, Sym) and d.name:
                    self.sizes.setdefault(d.name, (v, axis))
            params.append(f"{name}: {mlir_type(t)} {self.loc(p.loc, p.name)}")
        self.lines = []
        self.indent = 4
        self.block(fd.body)
        ret = self.env.get("$return")
        proto = None
        if ret is not None:
            proto, ret_vals = ret
        else:
            ret_vals = []
        types = [v.type for v in ret_vals]
        if any(t is None for t in types):
            types = []
            ret_vals = []
        preset = spec.result_types
        if ret_vals and preset is not None and len(preset) == len(ret_vals) and all(
                t is not None and t.dtype == v.dtype and t.rank == v.rank for t, v in zip(preset, ret_vals)):
            # Recursive calls were typed with the declared or assumed result types.
            ret_vals = [self.conform(v, t, self.env.get("$return_loc", fd.loc)) for v, t in zip(ret_vals, preset)]
            types = [v.type for v in ret_vals]
            proto = unflatten_like(proto, ret_vals)
        ret_loc = self.env.get("$return_loc", fd.loc)
        body = list(self.lines)
        if ret_vals:
            body.append(f"    return {', '.join(v.name for v in ret_vals)} : {', '.join(mlir_type(t) for t in types)} {self.loc(ret_loc)}")
        else:
            body.append(f"    return {self.loc(ret_loc)}")
        rtypes = ", ".join(mlir_type(t) for t in types)
        header = f"  func.func @{spec.symbol}({', '.join(params)}) -> ({rtypes}){_named_sizes(spec.param_types)} {{"
        text = header + "\n" + "\n".join(body) + f"\n  }} {self.loc(fd.loc, fd.name)}"
        return text, proto

    # ------------------------------------------------------------ statements
    def block(self, stmts):
        for s in stmts:
            self.stmt(s)
            if "$return" in self.env:
                break

    def stmt(self, s):
        self.cur_loc = s.loc
        m = getattr(self, "s_" + type(s).__name__, None)
        if m is None:
            self.error(f"unsupported statement {type(s).__name__}", s.loc)
            return
        m(s)

    def s_Pass(self, s):
        pass

    def s_ExprStmt(self, s):
        self.expr(s.value)

    def s_Return(self, s):
        if isinstance(s.value, A.Name) and s.value.id == controlflow.RETVAL and \
                isinstance(self.env.get(s.value.id, Undefined("")), Undefined):
            s = A.Return(s.loc, None)  # no path returns a value (the end-of-function assert reports it)
        if s.value is None:
            self.env["$return"] = (None, [])
        else:
            v = self.expr(s.value)
            v = self.coerce_return(v, s.loc)
            flat = [self.materialize(x, loc=s.loc) for x in flatten(v)]
            for x in flat:
                if not isinstance(x, V):
                    self.error("a function can only return tensors or tuples of tensors", s.loc)
                    flat = [POISON]
            self.env["$return"] = (unflatten_like(v, flat), flat)
        self.env["$return_loc"] = s.loc

    def coerce_return(self, v, loc):
        declared = self.spec.result_proto if self.spec.fd.returns is not None else None
        if declared is None:
            return self.as_value(v, loc)
        if is_tuple(declared) != is_tuple(v) or (is_tuple(v) and len(v) != len(declared)):
            self.error("the returned value does not match the declared return type", loc)
            return POISON
        flat_d, flat_v = flatten(declared), flatten(self.as_value(v, loc))
        if loc == self.fd.loc:  # the return controlflow adds for early returns: point at the type
            loc = getattr(self.spec.fd.returns, "loc", None) or loc
        bound = dict(self.sizes)  # a name only the return type has binds at its first use
        out = [self.coerce(x, d.type, loc, "the return value", bound) for x, d in zip(flat_v, flat_d)]
        return unflatten_like(v, out)

    def coerce(self, v, t: TensorType, loc, what: str, sizes: dict | None = None):
        """Check `v` against a declared type; weak literals take its element type. With `sizes`
        (size name -> (value, axis): this function's parameters', and those bound since), sizes
        not known to match are checked at run time (check_sizes)."""
        if not isinstance(v, V):
            v = self.as_value(v, loc)
        if v.poison or t is None:
            return v
        if v.name is None and v.weak:
            if is_float(v.dtype) and not is_float(t.dtype):
                return self.error(f"{what} is the float {v.const!r}, but {t} was declared", loc)
            if v.rank == 0 and t.rank == 0:
                return self.materialize(V(None, t, const=py_cast(v.const, t.dtype)), t.dtype, loc)
        if v.dtype != t.dtype:
            return self.error(f"{what} has type {v.type}, but {t} was declared", loc)
        if v.rank != t.rank:
            return self.error(f"{what} has type {v.type}, but {t} was declared (rank differs)", loc)
        for a, b in zip(v.type.shape, t.shape):
            if isinstance(a, int) and isinstance(b, int) and a != b:
                return self.error(f"{what} has type {v.type}, but {t} was declared", loc)
        if sizes is not None:
            self.check_sizes(v, t, loc, what, sizes)
        return v

    def check_sizes(self, v: V, t: TensorType, loc, what: str, sizes: dict) -> None:
        """Run-time checks that v's sizes are the declared ones where that is not known: a
        static size, or a name in `sizes`; a name not there yet binds to v's size."""
        for axis, (a, b) in enumerate(zip(v.type.shape, t.shape)):
            if isinstance(b, Sym) and b.name:
                src = sizes.get(b.name)
                if src is None:
                    sizes[b.name] = (v, axis)
                    continue
                if a is src[0].type.shape[src[1]]:  # that very size (a name alone can be a callee's)
                    continue
                want, shown = self.dim(src[0], src[1], loc), f"'{b.name}'"
            elif isinstance(b, int) and not isinstance(a, int):
                want, shown = self.const(b, "i64", loc), str(b)
            else:
                continue
            same = self.op("eq", [self.dim(v, axis, loc), want], {}, loc)
            self.op("check", [same], {"msg": f"{what} has the wrong size in axis {axis}: "
                                              f"{t} was declared, so it must be {shown}"}, loc)

    def s_Assert(self, s):
        c = self.cond_value(s.test, s.loc)
        msg = ""
        if s.msg is not None:
            m = self.expr(s.msg)
            if isinstance(m, Str):
                msg = m.value
            else:
                self.error("an assert message must be a string literal", s.msg.loc)
        self.op("assert", [c], {"msg": msg}, s.loc)

    def s_AnnAssign(self, s):
        t = self.type_from_annotation(s.annotation, s.annotation.loc)
        v = self.expr(s.value)
        v = self.coerce(v, t, s.loc, f"'{s.target.id}'", dict(self.sizes))
        self.bind(s.target, v, s.loc)

    def s_Assign(self, s):
        v = self.expr(s.value)
        for t in s.targets:
            self.assign_target(t, v, s.loc)

    def assign_target(self, target, v, loc):
        if isinstance(target, A.Name):
            self.bind(target, v, loc)
        elif isinstance(target, (A.Tuple, A.List)):
            if isinstance(v, ListVal):
                v = tuple(v.items)
            if isinstance(v, V) and not v.poison and v.rank >= 1 and isinstance(v.type.shape[0], int):
                v = tuple(self.getitem(v, [self.weak(i)], loc) for i in range(v.type.shape[0]))
            if isinstance(v, V) and v.poison:
                v = (POISON,) * len(target.elts)
            if not is_tuple(v):
                self.error("cannot unpack a non-tuple value", loc)
                v = (POISON,) * len(target.elts)
            if len(v) != len(target.elts):
                self.error(f"cannot unpack {len(v)} values into {len(target.elts)} names", loc)
                v = (POISON,) * len(target.elts)
            for t, x in zip(target.elts, v):
                self.assign_target(t, x, loc)
        elif isinstance(target, A.Subscript):
            self.assign_subscript(target, v, loc)
        else:
            self.error("cannot assign to this expression", target.loc)

    def bind(self, target: A.Name, v, loc):
        name = target.id
        if isinstance(v, V) and v.name is not None and not v.poison and not name.startswith("$"):
            self.name_location(v, name)
        self.env[name] = v  # a ListVal stays a list display until used as a value

    def name_location(self, v: V, name: str) -> None:
        """The op that just defined `v` gets a name location: loc("x"(file:line:col))."""
        if self.last_def is None:
            return
        lines, idx, res, loc = self.last_def
        if res != v.name or loc is None or idx >= len(lines):
            return
        plain = self.loc(loc)
        if lines[idx].endswith(plain):
            lines[idx] = lines[idx][: -len(plain)] + self.loc(loc, name)
        self.last_def = None

    def assign_subscript(self, target: A.Subscript, v, loc):
        base = target.value
        if not isinstance(base, A.Name):
            self.error("only a variable can be updated by index (x[i] = e)", target.loc)
            return
        x = self.lookup(base)
        if not isinstance(x, V) or x.poison:
            return
        v = self.as_value(v, loc)
        if isinstance(v, V) and not v.poison:
            v = self.materialize(v, x.dtype, loc) if v.name is None else self.cast(v, x.dtype, loc)
        spec, dyn = self.index_spec(target.items, x, loc)
        if spec is None:
            return
        if "t:$" in spec:
            self.error("assignment through an index tensor (x[idx] = v with an integer tensor idx) is not supported; use where()", loc)
            return
        r = self.op("setitem", [x, v] + dyn, {"spec": spec}, loc, name=base.id)
        self.env[base.id] = r

    def s_AugAssign(self, s):
        if isinstance(s.target, A.Name):
            cur = self.lookup(s.target)
            rhs = self.expr(s.value)
            self.env[s.target.id] = self.binop(s.op, cur, rhs, s.loc)  # as `x = x op e`, like Python
        elif isinstance(s.target, A.Subscript):
            cur = self.expr(s.target)
            rhs = self.expr(s.value)
            r = self.binop(s.op, cur, rhs, s.loc)
            self.assign_subscript(s.target, r, s.loc)
        else:
            self.error("cannot assign to this expression", s.loc)

    # ------------------------------------------------------------ control flow
    def cond_value(self, e, loc) -> V:
        """An expression as a 0-d bool tensor (NumPy truthiness), or a static bool."""
        v = self.as_value(self.expr(e), loc)
        return self.truth(v, e.loc if hasattr(e, "loc") else loc)

    def truth(self, v, loc) -> V:
        if not isinstance(v, V) or v.poison:
            return POISON
        if v.rank != 0:
            return self.error(f"the truth value of a {v.type} tensor is ambiguous: use any/all style reductions or index it", loc)
        if v.name is None:
            return self.weak(bool(v.const))
        if v.dtype == "bool":
            return v
        return self.op("ne", [v, self.const(0, v.dtype, loc)], loc=loc)

    def to_i1(self, c: V, loc) -> V:
        if c.name is None:
            c = self.materialize(c, "bool", loc)
        return self.op("to_i1", [c], loc=loc)

    def s_If(self, s):
        c = self.cond_value(s.test, s.loc)
        if c.poison:
            # Still check both branches for errors.
            saved = dict(self.env)
            self.block(s.body)
            self.env = dict(saved)
            self.block(s.orelse)
            self.env = saved
            return
        if c.name is None:  # static condition: only the branch taken exists
            self.block(s.body if c.const else s.orelse)
            return
        self.emit_if(c, lambda: self.block(s.body), lambda: self.block(s.orelse), s.loc)

    def emit_if(self, c: V, then_fn, else_fn, loc, result_fn=None):
        """scf.if; the results are the names either branch rebinds (or what `result_fn` picks)."""
        before = dict(self.env)
        cond = self.to_i1(c, loc)
        if cond.poison:
            return
        saved_lines, saved_indent = self.lines, self.indent

        def run(fn):
            self.env = dict(before)
            self.lines = []
            self.indent = saved_indent + 2
            out = fn()
            return self.env, self.lines, out

        env_t, lines_t, out_t = run(then_fn)
        env_e, lines_e, out_e = run(else_fn)
        self.lines, self.indent = saved_lines, saved_indent
        self.env = before
        if result_fn is not None:  # expression form: each branch returned a value
            names = []
            pairs = [(out_t, out_e)]
        else:
            names = [n for n in _changed(before, env_t, env_e) if n not in ("$return", "$return_loc")]
            pairs = []
        merged = {}
        yields_t, yields_e, types = [], [], []
        for n in names:
            a, b = env_t.get(n, before.get(n)), env_e.get(n, before.get(n))
            merged[n] = (a, b)
        items = list(merged.items()) + [(None, p) for p in pairs]
        final = {}
        result_vals = []
        out_poison = False
        for n, (a, b) in items:
            ra, rb, t, struct = self.merge_pair(n, a, b, loc)
            if struct is None:
                if n is None:
                    out_poison = True
                else:
                    final[n] = ra  # Undefined / poison / unmergeable: no scf result
                continue
            yields_t.append(ra)
            yields_e.append(rb)
            types.append(t)
            result_vals.append((n, struct, len(ra)))
        # Materialize the yielded values inside their branch (literals, casts, undef).
        ylines_t = self.finish_yields(yields_t, types, lines_t, saved_indent + 2, loc)
        ylines_e = self.finish_yields(yields_e, types, lines_e, saved_indent + 2, loc)
        flat_types = [t for ts in types for t in ts]
        res = self.fresh()
        head = f"{res}:{len(flat_types)} = " if len(flat_types) > 1 else (f"{res} = " if flat_types else "")
        rt = f" -> ({', '.join(mlir_type(t) for t in flat_types)})" if flat_types else ""
        self.line(f"{head}scf.if {cond.name}{rt} {{")
        self.lines += ylines_t
        self.line("} else {")
        self.lines += ylines_e
        self.line(f"}} {self.loc(loc)}")
        k = 0
        out = None
        for n, struct, count in result_vals:
            vals = []
            for t in [t for t in flat_types[k:k + count]]:
                nm = res if len(flat_types) == 1 else f"{res}#{k}"
                vals.append(V(nm, t))
                k += 1
            value = unflatten_like(struct, vals)
            if n is None:
                out = value
            else:
                final[n] = value
        self.env = dict(before)
        self.env.update(final)
        return POISON if out_poison else out

    def merge_pair(self, name, a, b, loc):
        """Line up what two paths bind to one name: (flat a, flat b, flat types, structure) or struct None."""
        internal = name is not None and name.startswith("$")
        if isinstance(a, ListVal):
            a = self.as_value(a, loc)
        if isinstance(b, ListVal):
            b = self.as_value(b, loc)
        ua, ub = a is None or isinstance(a, Undefined), b is None or isinstance(b, Undefined)
        if ua and ub:
            return None, None, None, None
        if ua or ub:
            known = b if ua else a
            if _all_values(known) and any(v.poison for v in flatten(known)):
                return POISON, None, None, None
            if internal and _all_values(known):
                flat = flatten(known)
                types = [v.type for v in flat]
                undef = [("undef", t) for t in types]
                fa, fb = (undef, flat) if ua else (flat, undef)
                return fa, fb, types, known
            why = f"{_show(name)} is not defined on every path that reaches here"
            return Undefined(why, None), None, None, None
        if not (_all_values(a) and _all_values(b)):
            if a is b:
                return a, None, None, None
            return Undefined(f"{_show(name)} has values of different kinds on different paths"), None, None, None
        fa, fb = flatten(a), flatten(b)
        if is_tuple(a) != is_tuple(b) or len(fa) != len(fb):
            self.error(f"{_show(name)} is a tuple of a different length on different paths", loc)
            return POISON, None, None, None
        if self.mod.recursive_unknown:
            # A recursion probe: a path through a recursive call has no type yet; the
            # other path's type is the guess (this pass is emitted again).
            fa = [y if x.poison else x for x, y in zip(fa, fb)]
            fb = [x if y.poison else y for x, y in zip(fa, fb)]
        types = []
        for x, y in zip(fa, fb):
            if x.poison or y.poison:
                return POISON, None, None, None
            t = self.join_types(x, y, name, loc)
            if t is None:
                return POISON, None, None, None
            types.append(t)
        return fa, fb, types, a

    def join_types(self, x: V, y: V, name, loc):
        dx = x.dtype if not (x.weak and x.name is None) else None
        dy = y.dtype if not (y.weak and y.name is None) else None
        if dx and dy and dx != dy:
            if name is None:
                dt = promote(dx, dy)
            else:
                self.error(f"{_show(name)} is {x.type} on one path and {y.type} on another", loc)
                return None
        else:
            dt = dx or dy or promote(x.dtype, y.dtype)
        if x.rank != y.rank:
            self.error(f"{_show(name)} has rank {x.rank} on one path and {y.rank} on another", loc)
            return None
        shape = tuple(a if same_dim(a, b) else Sym() for a, b in zip(x.type.shape, y.type.shape))
        return TensorType(dt, shape)

    def finish_yields(self, vals_lists, types_lists, lines, indent, loc):
        """Append `scf.yield` (with the casts/constants/placeholders it needs) to a branch's lines."""
        saved_lines, saved_indent = self.lines, self.indent
        self.lines, self.indent = lines, indent
        names = []
        flat_types = []
        for vals, types in zip(vals_lists, types_lists):
            for v, t in zip(vals, types):
                flat_types.append(t)
                names.append(self.conform(v, t, loc).name)
        if names:
            self.line(f"scf.yield {', '.join(names)} : {', '.join(mlir_type(t) for t in flat_types)} {self.loc(loc)}")
        else:
            self.line(f"scf.yield {self.loc(loc)}")
        out = self.lines
        self.lines, self.indent = saved_lines, saved_indent
        return out

    def conform(self, v, t: TensorType, loc) -> V:
        """Make a value of exactly type `t` (same dtype, dims generalized to `?` as needed)."""
        if isinstance(v, tuple) and v and v[0] == "undef":
            shape = [d if isinstance(d, int) else -2 for d in t.shape]
            return self.op("undef", [], {"shape": shape, "dtype": t.dtype}, loc,
                           result_types=[t])
        if v.name is None:
            v = self.materialize(v, t.dtype, loc)
        elif v.dtype != t.dtype:
            v = self.cast(v, t.dtype, loc)
        if mlir_type(v.type) != mlir_type(t):
            # Static -> dynamic dims: dg.reshape to the same sizes, the ones t leaves open given at run time.
            dims = [self.dim(v, i, loc) for i, d in enumerate(t.shape) if not isinstance(d, int)]
            shape = [d if isinstance(d, int) else -2 for d in t.shape]
            v = self.op("reshape", [v] + dims, {"shape": shape}, loc, result_types=[t])
        return v

    def dim(self, v: V, axis: int, loc) -> V:
        d = v.type.shape[axis]
        if isinstance(d, int):
            return self.const(d, "i64", loc)
        return self.op("dim", [v], {"axis": axis}, loc)

    # ------------------------------------------------------------ loops
    def loop_carried(self, body_fn, before: dict, loc):
        """Probe a loop body to find what it rebinds and the types that stay stable.

        Each probe runs the body quietly with the carried values typed as found
        so far; a dim that differs between iterations becomes dynamic, until
        nothing changes (dims only ever go from static to dynamic, so this
        ends). Returns [(name, structure, flat types)].
        """
        carried: dict = {}  # name -> (structure, types)
        for attempt in range(64):
            env0 = dict(before)
            for n, (struct, types) in carried.items():
                env0[n] = unflatten_like(struct, [V(f"%probe{i}", t) for i, t in enumerate(types)])
            self.mod.quiet += 1
            saved = (self.lines, self.indent, self.env)
            self.lines, self.env = [], dict(env0)
            try:
                body_fn(probe=True)
                env1 = self.env
            finally:
                self.lines, self.indent, self.env = saved
                self.mod.quiet -= 1
            changed = False
            for n in _changed(env0, env1, env1):
                if n in ("$return", "$return_loc"):
                    continue
                new = self.carry_types(n, before.get(n), carried.get(n), env1.get(n), loc)
                if new is not None and (n not in carried or _pattern(carried[n][1]) != _pattern(new[1])):
                    carried[n] = new
                    changed = True
            if not changed:
                break
        return [(n, struct, types) for n, (struct, types) in carried.items()]

    def carry_types(self, n, first, cur, after, loc):
        """The carried (structure, types) of `n` given its value before the loop (`first`),
        its carried types so far (`cur`), and its value after one iteration; None if not carried."""
        if isinstance(after, ListVal):
            after = self.as_value(after, loc)
        if first is None or isinstance(first, Undefined):
            # First bound in the body: local to it, unless it is a rewrite flag or result.
            if n.startswith("$") and _all_values(after) and all(not x.poison for x in flatten(after)):
                types = [x.type for x in flatten(after)]
                if cur is None or len(cur[1]) != len(types):
                    return cur or (after, types)
                # A later probe (carried values less static) may return other sizes: join them.
                return cur[0], [_join(c, t) if c.rank == t.rank and c.dtype == t.dtype else c
                                for c, t in zip(cur[1], types)]
            return None
        if not (_all_values(first) and _all_values(after)):
            return None
        before_vals = flatten(first) if cur is None else [V("%c", t) for t in cur[1]]
        struct = first if cur is None else cur[0]
        after_vals = flatten(after)
        if is_tuple(struct) != is_tuple(after) or len(before_vals) != len(after_vals):
            self.error(f"{_show(n)} changes its structure inside the loop (a tuple of another length)", loc)
            return None
        if any(x.poison for x in before_vals + after_vals):
            return None
        types = []
        for x, y in zip(before_vals, after_vals):
            x_weak = x.weak and x.name is None
            y_weak = y.weak and y.name is None
            if x.rank != y.rank:
                self.error(f"{_show(n)} changes rank inside the loop ({x.type} before, {y.type} after); "
                           f"give it its final shape before the loop", loc)
                return None
            if not x_weak and not y_weak and x.dtype != y.dtype:
                self.error(f"{_show(n)} changes its element type inside the loop ({x.dtype} before, {y.dtype} after)", loc)
                return None
            dt = y.dtype if x_weak and not y_weak else (x.dtype if not x_weak else promote(x.dtype, y.dtype))
            types.append(_join(x.type, y.type).with_dtype(dt))
        return struct, types

    def carried_inits(self, carried, before, loc):
        inits = []
        for n, struct, types in carried:
            cur = before.get(n)
            if cur is None or isinstance(cur, Undefined):
                inits += [self.conform(("undef",), t, loc) for t in types]
            else:
                if isinstance(cur, ListVal):
                    cur = self.as_value(cur, loc)
                inits += [self.conform(v, t, loc) for v, t in zip(flatten(cur), types)]
        return inits

    def tensors_for_loop(self, body, loc):
        """List displays that the loop rebinds become tensors first (a carried value is a tensor)."""
        for n in set(_assigned_names(body)):
            if isinstance(self.env.get(n), ListVal):
                self.env[n] = self.as_value(self.env[n], loc)

    def s_While(self, s):
        loc = s.loc
        self.tensors_for_loop(s.body, loc)
        before = dict(self.env)

        def body(probe=True):
            self.cond_value(s.test, loc)  # checked, as the loop's "before" region
            self.block(s.body)

        carried = self.loop_carried(body, before, loc)
        inits = self.carried_inits(carried, before, loc)
        flat_types = [t for _, _, ts in carried for t in ts]
        res = self.fresh()
        args = [self.fresh() for _ in flat_types]
        args2 = [self.fresh() for _ in flat_types]
        tys = ", ".join(mlir_type(t) for t in flat_types)
        head = f"{res}:{len(flat_types)} = " if len(flat_types) > 1 else (f"{res} = " if flat_types else "")
        init_s = ", ".join(f"{a} = {v.name}" for a, v in zip(args, inits))
        self.line(f"{head}scf.while ({init_s}) : ({tys}) -> ({tys}) {{")

        def bind_args(names):
            env = dict(before)
            k = 0
            for n, struct, types in carried:
                vals = [V(names[k + i], t) for i, t in enumerate(types)]
                env[n] = unflatten_like(struct, vals)
                k += len(types)
            # Names first bound in the body are local to it.
            return env

        saved_indent = self.indent
        self.indent += 2
        self.env = bind_args(args)
        c = self.cond_value(s.test, loc)
        if not c.poison and c.name is None:
            c = self.materialize(c, "bool", loc)
        ci = self.to_i1(c, loc) if not c.poison else c
        cname = ci.name if not ci.poison else "%poison"
        if flat_types:
            self.line(f"scf.condition({cname}) {', '.join(args)} : {tys} {self.loc(loc)}")
        else:
            self.line(f"scf.condition({cname}) {self.loc(loc)}")
        self.indent = saved_indent
        self.line("} do {")
        block_args = ", ".join(f"{a}: {mlir_type(t)}" for a, t in zip(args2, flat_types))
        self.line(f"^bb0({block_args}):")
        self.indent += 2
        self.env = bind_args(args2)
        self.block(s.body)
        self.close_loop_body(carried, tys, saved_indent, loc)
        self.after_loop(before, carried, res, flat_types, s.body)

    def close_loop_body(self, carried, tys, saved_indent, loc):
        outs = self.carried_outputs(carried, loc)
        if outs:
            self.line(f"scf.yield {', '.join(v.name for v in outs)} : {tys} {self.loc(loc)}")
        else:
            self.line(f"scf.yield {self.loc(loc)}")
        self.indent = saved_indent
        self.line(f"}} {self.loc(loc)}")

    def carried_outputs(self, carried, loc):
        outs = []
        for n, struct, types in carried:
            cur = self.env.get(n)
            if isinstance(cur, ListVal):
                cur = self.as_value(cur, loc)
            if cur is None or isinstance(cur, Undefined) or not _all_values(cur):
                outs += [self.conform(("undef",), t, loc) for t in types]
                continue
            flat = flatten(cur)
            if len(flat) != len(types):
                self.error(f"{_show(n)} changes its structure inside the loop (a tuple of another length)", loc)
                outs += [self.conform(("undef",), t, loc) for t in types]
                continue
            for v, t in zip(flat, types):
                if v.poison:
                    outs.append(self.conform(("undef",), t, loc))
                elif not (v.weak and v.name is None) and (v.dtype != t.dtype or v.rank != t.rank):
                    self.error(f"{_show(n)} changes its type inside the loop ({t} before, {v.type} after)", loc)
                    outs.append(self.conform(("undef",), t, loc))
                else:
                    outs.append(self.conform(v, t, loc))
        return outs

    def after_loop(self, before, carried, res, flat_types, body):
        self.env = dict(before)
        k = 0
        for n, struct, types in carried:
            vals = []
            for t in types:
                nm = res if len(flat_types) == 1 else f"{res}#{k}"
                vals.append(V(nm, t))
                k += 1
            self.env[n] = unflatten_like(struct, vals)
        for n in _assigned_names(body):
            if n not in self.env or isinstance(self.env.get(n), Undefined):
                if not any(n == c[0] for c in carried):
                    self.env[n] = Undefined(f"'{n}' is only defined inside the loop body; define it before the loop to use it after")

    def s_For(self, s):
        loc = s.loc
        self.tensors_for_loop(s.body, loc)
        before = dict(self.env)
        it = s.iter
        target = s.target
        if not isinstance(target, A.Name):
            self.error("a for loop variable must be a single name", target.loc)
            return
        # The trip count and the value of the loop variable for index k.
        if isinstance(it, A.Call) and isinstance(it.func, A.Name) and it.func.id == "range" \
                and "range" not in self.env:
            if it.kwargs or not 1 <= len(it.args) <= 3:
                self.error("range() takes 1 to 3 integer arguments", it.loc)
                return
            vals = [self.as_value(self.expr(a), loc) for a in it.args]
            if any(not isinstance(v, V) or v.poison for v in vals):
                self.block_checked(s.body)
                return
            for v, a in zip(vals, it.args):
                if v.rank != 0 or not (is_int(v.dtype) or is_bool(v.dtype)):
                    self.error(f"range() arguments must be integer scalars, got {v.type}", a.loc)
                    return
            if len(vals) == 1:
                start, stop, step = self.weak(0), vals[0], self.weak(1)
            elif len(vals) == 2:
                start, stop, step = vals[0], vals[1], self.weak(1)
            else:
                start, stop, step = vals
            if step.name is None and step.const == 0:
                self.error("range() step must not be zero", it.loc)
                return
            start, stop, step = (self.cast(self.materialize(v, "i64", loc), "i64", loc) if v.name else v
                                 for v in (start, stop, step))

            def loop_var(k_index):
                k = self.op("from_index", [k_index], loc=loc)
                if step.name is None and step.const == 1 and start.name is None and start.const == 0:
                    return k
                return self.binop("+", start, self.binop("*", k, step, loc), loc)

            if all(v.name is None for v in (start, stop, step)):
                trip = len(range(start.const, stop.const, step.const))
                n_index = self.index_const(trip, loc)
            else:
                n_index = self.op("range_len", [self.materialize(v, "i64", loc) for v in (start, stop, step)], loc=loc)
        else:
            seq = self.as_value(self.expr(it), loc)
            if not isinstance(seq, V) or seq.poison:
                self.block_checked(s.body)
                return
            if seq.rank == 0:
                self.error(f"cannot iterate over a scalar ({seq.type})", it.loc)
                return
            d = seq.type.shape[0]
            n_index = self.index_const(d) if isinstance(d, int) else self.op(
                "to_index", [self.op("dim", [seq], {"axis": 0}, loc)], loc=loc)

            def loop_var(k_index):
                k = self.op("from_index", [k_index], loc=loc)
                return self.getitem(seq, [k], loc)

        def body(probe=False, k_index=None):
            if k_index is None:
                k_index = V("%probe_iv", INDEX)
            self.env[target.id] = loop_var(k_index)
            self.block(s.body)

        if n_index.const == 0:
            return
        if s.stops:
            self.for_until(s, n_index, loop_var, loc)
            return
        carried = self.loop_carried(body, before, loc)
        inits = self.carried_inits(carried, before, loc)
        flat_types = [t for _, _, ts in carried for t in ts]
        res = self.fresh()
        iv = self.fresh()
        zero, one = self.index_const(0, loc), self.index_const(1, loc)
        args = [self.fresh() for _ in flat_types]
        tys = ", ".join(mlir_type(t) for t in flat_types)
        head = f"{res}:{len(flat_types)} = " if len(flat_types) > 1 else (f"{res} = " if flat_types else "")
        iters = ""
        if flat_types:
            iters = " iter_args(" + ", ".join(f"{a} = {v.name}" for a, v in zip(args, inits)) + f") -> ({tys})"
        self.line(f"{head}scf.for {iv} = {zero.name} to {n_index.name} step {one.name}{iters} {{")
        saved_indent = self.indent
        self.indent += 2
        env = dict(before)
        k = 0
        for n, struct, types in carried:
            env[n] = unflatten_like(struct, [V(args[k + i], t) for i, t in enumerate(types)])
            k += len(types)
        self.env = env
        body(k_index=V(iv, INDEX))
        self.close_loop_body(carried, tys, saved_indent, loc)
        self.after_loop(before, carried, res, flat_types, s.body + [A.Assign(loc, [target], A.Const(loc, 0))])

    def for_until(self, s, n_index, loop_var, loc):
        """A `for` that a `break` or `return` may end (controlflow's `stops` flags): a `while` over
        its iterations that also tests the flags, so that it ends when one is set instead of
        running the rest of its trip count with nothing to do."""
        tag = self.fresh()[1:]
        k, n = A.Name(loc, f"$for{tag}_k"), A.Name(loc, f"$for{tag}_n")
        test = A.BoolOp(loc, "and", [A.UnaryOp(loc, "not", A.Name(loc, f)) for f in s.stops]
                        + [A.Compare(loc, k, ["<"], [n])])
        var = Computed(loc, lambda: loop_var(self.op("to_index", [self.env[k.id]], loc=loc)))
        body = [A.Assign(loc, [s.target], var), *s.body, A.Assign(loc, [k], A.BinOp(loc, "+", k, A.Const(loc, 1)))]
        self.block([A.Assign(loc, [n], Computed(loc, lambda: self.op("from_index", [n_index], loc=loc))),
                    A.Assign(loc, [k], Computed(loc, lambda: self.materialize(self.weak(0), "i64", loc))),
                    A.While(loc, test, body)])

    def e_Computed(self, e):
        return e.make()

    def block_checked(self, stmts):
        saved = dict(self.env)
        self.mod.quiet += 1
        try:
            self.block(stmts)
        finally:
            self.mod.quiet -= 1
        self.env = saved

    # ------------------------------------------------------------ expressions
    def expr(self, e):
        m = getattr(self, "e_" + type(e).__name__, None)
        if m is None:
            return self.error(f"unsupported expression {type(e).__name__}", e.loc)
        return m(e)

    def as_value(self, v, loc):
        """ListVal displays become tensors; everything else passes."""
        if isinstance(v, ListVal):
            return self.list_to_tensor(v, loc)
        if isinstance(v, tuple):
            return tuple(self.as_value(x, loc) for x in v)
        return v

    def e_Const(self, e):
        if isinstance(e.value, str):
            return Str(e.value)
        if e.value is None:
            return self.error("None is only allowed as an index (a new axis)", e.loc)
        if not _int_in_reach(e.value):
            return self.error(f"the integer {e.value} does not fit in i64", e.loc)
        return self.weak(e.value)

    def lookup(self, e: A.Name):
        v = self.env.get(e.id)
        if v is None:
            ref = self.source.resolve(e.id)
            if ref is not None:
                return ref
            if e.id in BUILTINS:
                return ("builtin", e.id)
            if e.id in DTYPES and e.id != "u64":
                return ("builtin", e.id)
            return self.error(f"name '{e.id}' is not defined", e.loc)
        if isinstance(v, Undefined):
            return self.error(v.why, e.loc)
        return v

    def e_Name(self, e):
        v = self.lookup(e)
        if isinstance(v, tuple) and len(v) == 2 and v[0] == "builtin":
            return self.error(f"'{e.id}' is a built-in function; call it", e.loc)
        return v

    def e_Tuple(self, e):
        return tuple(self.expr(x) for x in e.elts)

    def e_List(self, e):
        return ListVal([self.expr(x) for x in e.elts], e.loc)

    def list_to_tensor(self, lv: ListVal, loc) -> V:
        const = _const_nested(lv)
        if const is not None:
            arr, dt = const
            return self._const_tensor(arr, dt, lv.loc)
        items = [self.as_value(x, lv.loc) for x in lv.items]
        if not items:
            return self.error("an empty list has no element type; use zeros([0])", lv.loc)
        if any(not isinstance(x, V) for x in items):
            return self.error("a list display must hold tensors or numbers", lv.loc)
        if any(x.poison for x in items):
            return POISON
        strong = [x.dtype for x in items if x.name is not None and not x.weak]
        dt = strong[0] if strong else items[0].dtype
        for d in strong[1:]:
            dt = promote(dt, d)
        if any(x.name is None and is_float(x.dtype) for x in items) and not is_float(dt):
            dt = "f32"
        vals = [self.materialize(x, dt, loc) if x.name is None else self.cast(x, dt, loc) for x in items]
        return self.stack(vals, 0, lv.loc)

    def stack(self, vals: list, axis: int, loc) -> V:
        """np.stack: expand_dims each, then a chain of two-operand concats."""
        for v in vals[1:]:
            if v.rank != vals[0].rank:
                return self.error(f"cannot stack {vals[0].type} and {v.type}", loc)
        parts = [self.op("expand_dims", [v], {"axes": [axis]}, loc) for v in vals]
        out = parts[0]
        for p in parts[1:]:
            out = self.op("concat", [out, p], {"axis": axis}, loc)
        return out

    def _const_tensor(self, arr, dt, loc):
        t = TensorType(dt, tuple(arr.shape))
        name = self.fresh()
        self.line(f'{name} = "dg.constant"() {{value = {attr_text("dense", (arr, t))}}} : () -> {t.mlir()} {self.loc(loc)}')
        return V(name, t)

    def e_BinOp(self, e):
        return self.binop(e.op, self.expr(e.left), self.expr(e.right), e.loc)

    def binop(self, op, a, b, loc):
        a, b = self.as_value(a, loc), self.as_value(b, loc)
        if is_tuple(a) or is_tuple(b):
            if op == "+" and is_tuple(a) and is_tuple(b):
                return a + b
            return self.error(f"unsupported operand types for {op}: tuple", loc)
        if not isinstance(a, V) or not isinstance(b, V):
            return self.error(f"unsupported operands for {op}", loc)
        if a.poison or b.poison:
            return POISON
        if op == "@":
            dt = self.result_dtype(a, b)
            if not is_float(dt) and not is_int(dt):
                return self.error(f"matmul of {a.type} and {b.type}", loc)
            return self.op("matmul", [self.materialize(a, dt, loc), self.materialize(b, dt, loc)], loc=loc)
        if a.name is None and b.name is None and a.rank == 0 and b.rank == 0:
            folded = _fold(op, a.const, b.const)
            if not _int_in_reach(folded):
                return self.error(f"the integer {folded} this computes does not fit in i64", loc)
            if folded is not _NOFOLD:
                v = self.weak(folded)
                if not (a.weak and b.weak):
                    v = V(None, scalar(self.result_dtype(a, b) if op in BINOPS else "bool"), const=folded,
                          weak=False)
                return v
        dt = self.result_dtype(a, b)
        if op in CMPOPS:
            return self.op(CMPOPS[op], [self.materialize(a, dt, loc), self.materialize(b, dt, loc)], loc=loc)
        if op not in BINOPS:
            return self.error(f"unknown operator {op}", loc)
        if op == "/" and not is_float(dt):
            dt = "f32"
        if op in ("//", "%", "**") and is_bool(dt):
            dt = "i64"
        if op in ("+", "-", "*") and is_bool(dt):
            dt = "i64"
        return self.op(BINOPS[op], [self.materialize(a, dt, loc), self.materialize(b, dt, loc)], loc=loc)

    def result_dtype(self, a: V, b: V) -> str:
        wa, wb = a.weak and a.name is None, b.weak and b.name is None
        if wa and not wb:
            return _weak_join(a.dtype, b.dtype)
        if wb and not wa:
            return _weak_join(b.dtype, a.dtype)
        return promote(a.dtype, b.dtype)

    def e_UnaryOp(self, e):
        v = self.as_value(self.expr(e.operand), e.loc)
        if not isinstance(v, V) or v.poison:
            return POISON if isinstance(v, V) else self.error(f"bad operand for unary {e.op}", e.loc)
        if e.op == "+":
            return v
        if e.op == "-":
            if v.name is None:
                return V(None, v.type, const=-v.const if not isinstance(v.const, bool) else -int(v.const), weak=v.weak) \
                    if not isinstance(v.const, bool) else self.weak(-int(v.const))
            if is_bool(v.dtype):
                return self.error("cannot negate a bool tensor (use not)", e.loc)
            return self.op("neg", [v], loc=e.loc)
        if e.op == "not":
            if v.rank == 0:
                c = self.truth(v, e.loc)
                if c.name is None:
                    return self.weak(not c.const)
                return self.op("not", [c], loc=e.loc)
            if not is_bool(v.dtype):
                return self.error(f"'not' of a {v.type} tensor is ambiguous", e.loc)
            return self.op("not", [v], loc=e.loc)
        return self.error(f"unknown unary operator {e.op}", e.loc)

    def e_BoolOp(self, e):
        vals = e.values
        acc = self.as_value(self.expr(vals[0]), e.loc)
        for rhs_e in vals[1:]:
            acc = self.boolop(e.op, acc, rhs_e, e.loc)
        return acc

    def boolop(self, op, a, rhs_e, loc):
        if not isinstance(a, V) or a.poison:
            self.expr(rhs_e)
            return POISON
        if a.rank == 0:
            ca = self.truth(a, loc)
            if ca.name is None:  # static: Python short-circuit
                if (op == "and" and not ca.const) or (op == "or" and ca.const):
                    return ca
                return self.truth(self.as_value(self.expr(rhs_e), loc), loc)
            if isinstance(rhs_e, (A.Name, A.Const)) or (isinstance(rhs_e, A.UnaryOp) and isinstance(rhs_e.operand, A.Name)):
                cb = self.truth(self.as_value(self.expr(rhs_e), loc), loc)
                if cb.poison:
                    return POISON
                if cb.name is None:
                    cb = self.materialize(cb, "bool", loc)
                return self.op(op, [ca, cb], loc=loc)
            # Short-circuit: the right side runs only when it decides the value.
            if op == "and":
                return self.emit_if(ca, lambda: self.truth(self.as_value(self.expr(rhs_e), loc), loc),
                                    lambda: self.weak(False), loc, result_fn=True)
            return self.emit_if(ca, lambda: self.weak(True),
                                lambda: self.truth(self.as_value(self.expr(rhs_e), loc), loc), loc, result_fn=True)
        b = self.as_value(self.expr(rhs_e), loc)
        if not isinstance(b, V) or b.poison:
            return POISON
        if not is_bool(a.dtype) or not is_bool(b.dtype):
            return self.error(f"'{op}' of tensors needs bool tensors, got {a.type} and {b.type}", loc)
        return self.op(op, [a, self.materialize(b, "bool", loc)], loc=loc)

    def e_Compare(self, e):
        left = self.expr(e.left)
        result = None
        for op, comp in zip(e.ops, e.comparators):
            right = self.expr(comp)
            r = self.binop(op, left, right, e.loc)
            if result is None:
                result = r
            else:
                result = self.binop_logical("and", result, r, e.loc)
            left = right
        return result

    def binop_logical(self, op, a, b, loc):
        if not isinstance(a, V) or not isinstance(b, V) or a.poison or b.poison:
            return POISON
        if a.name is None and b.name is None:
            return self.weak(bool(a.const) and bool(b.const)) if op == "and" else self.weak(bool(a.const) or bool(b.const))
        return self.op(op, [self.materialize(a, "bool", loc), self.materialize(b, "bool", loc)], loc=loc)

    def e_IfExp(self, e):
        c = self.cond_value(e.test, e.loc)
        if c.poison:
            self.expr(e.body)
            self.expr(e.orelse)
            return POISON
        if c.name is None:
            return self.expr(e.body if c.const else e.orelse)
        return self.emit_if(c, lambda: self.as_value(self.expr(e.body), e.loc),
                            lambda: self.as_value(self.expr(e.orelse), e.loc), e.loc, result_fn=True)

    def e_Attribute(self, e):
        if isinstance(e.value, A.Name) and e.value.id not in self.env:
            base = self.lookup(e.value)
            if isinstance(base, ModuleRef):
                ref = base.module.resolve(e.attr, exported_only=True)
                if ref is None:
                    return self.error(f"module '{e.value.id}' has no function '{e.attr}'", e.loc)
                return ref
        v = self.as_value(self.expr(e.value), e.loc)
        if not isinstance(v, V):
            return self.error(f"no attribute '{e.attr}' here", e.loc)
        if v.poison:
            return POISON
        if e.attr == "shape":
            return tuple(self.shape_dim(v, i, e.loc) for i in range(v.rank))
        if e.attr == "ndim":
            return self.weak(v.rank)
        if e.attr == "T":
            return self.op("transpose", [v], {"perm": list(range(v.rank))[::-1]}, e.loc)
        if e.attr == "dtype":
            return self.error("x.dtype is not a value in dg; use a cast such as f32(x)", e.loc)
        return self.error(f"tensors have no attribute '{e.attr}' (only shape, ndim, T)", e.loc)

    def shape_dim(self, v: V, i: int, loc) -> V:
        d = v.type.shape[i]
        if isinstance(d, int):
            return self.weak(d)
        return self.op("dim", [v], {"axis": i}, loc)

    def e_Subscript(self, e):
        base = self.as_value(self.expr(e.value), e.loc)
        if is_tuple(base):
            if len(e.items) != 1:
                return self.error("a tuple takes a single index", e.loc)
            idx = self.as_value(self.expr(e.items[0]), e.loc) if not isinstance(e.items[0], A.Slice) else None
            if isinstance(e.items[0], A.Slice):
                sl = e.items[0]
                parts = [None if p is None else self.as_value(self.expr(p), e.loc) for p in (sl.lower, sl.upper, sl.step)]
                if any(p is not None and (not isinstance(p, V) or p.name is not None) for p in parts):
                    return self.error("a tuple slice needs constant bounds", e.loc)
                return base[slice(*(p.const if p is not None else None for p in parts))]
            if not isinstance(idx, V) or idx.name is not None or not isinstance(idx.const, int):
                return self.error("a tuple index must be a constant integer", e.loc)
            if not -len(base) <= idx.const < len(base):
                return self.error(f"tuple index {idx.const} is out of range for a tuple of {len(base)}", e.loc)
            return base[idx.const]
        if not isinstance(base, V):
            return self.error("this value cannot be indexed", e.loc)
        if base.poison:
            return POISON
        if base.name is None:
            base = self.materialize(base, loc=e.loc)
        return self.getitem_items(base, e.items, e.loc)

    def getitem(self, x: V, idx_values: list, loc) -> V:
        """x[i] for an int V (used by `for row in x` and unpacking)."""
        spec, dyn = [], []
        for v in idx_values:
            if v.name is None:
                spec.append(f"i:{int(v.const)}")
            else:
                spec.append("i:$")
                dyn.append(v)
        return self.op("getitem", [x] + dyn, {"spec": spec}, loc)

    def getitem_items(self, x: V, items, loc):
        spec, dyn = self.index_spec(items, x, loc)
        if spec is None:
            return POISON
        tensors = [i for i, s in enumerate(spec) if s == "t:$"]
        if not tensors:
            return self.op("getitem", [x] + dyn, {"spec": spec}, loc)
        if len(tensors) > 1:
            return self.error("at most one index tensor per subscript", loc)
        # x[..., idx, ...] with one integer tensor = basic indexing, then take on that axis.
        k = tensors[0]
        n_dyn_before = sum(s.count("$") for s in spec[:k])
        idx = dyn[n_dyn_before]
        dyn = dyn[:n_dyn_before] + dyn[n_dyn_before + 1:]
        basic = list(spec)
        basic[k] = "s:::"
        try:
            expanded = expand_spec(basic, x.rank)
        except ShapeError as e:
            return self.error(str(e), loc)
        # The position of item k in the expanded spec: ellipsis items before it expand.
        pos = 0
        for i, s in enumerate(basic):
            if i == k:
                break
            pos += (x.rank - sum(1 for t in basic if t[0] in "ist")) if s == "e" else 1
        axis = sum(1 for s in expanded[:pos] if s[0] in "sn")
        if all(s == "s:::" for s in basic) and not dyn:
            base = x
        else:
            base = self.op("getitem", [x] + dyn, {"spec": basic}, loc)
        return self.op("take", [base, idx], {"axis": axis}, loc)

    def index_spec(self, items, x: V, loc):
        spec, dyn = [], []
        ok = True
        for it in items:
            if isinstance(it, A.EllipsisLit):
                spec.append("e")
            elif isinstance(it, A.Const) and it.value is None:
                spec.append("n")
            elif isinstance(it, A.Slice):
                parts = []
                for p in (it.lower, it.upper, it.step):
                    if p is None:
                        parts.append("")
                        continue
                    v = self.as_value(self.expr(p), loc)
                    if not isinstance(v, V) or v.poison:
                        ok = False
                        parts.append("")
                        continue
                    if v.rank != 0 or not (is_int(v.dtype) or is_bool(v.dtype)):
                        self.error(f"slice bounds must be integer scalars, got {v.type}", p.loc)
                        ok = False
                        parts.append("")
                        continue
                    if v.name is None:
                        parts.append(str(int(v.const)))
                    else:
                        parts.append("$")
                        dyn.append(self.cast(v, "i64", loc))
                spec.append("s:" + ":".join(parts))
            else:
                v = self.as_value(self.expr(it), loc)
                if is_tuple(v):
                    self.error("a tuple cannot be an index", it.loc)
                    ok = False
                    continue
                if not isinstance(v, V) or v.poison:
                    ok = False
                    continue
                if not (is_int(v.dtype) or (is_bool(v.dtype) and v.rank == 0)):
                    self.error(f"an index must be an integer, got {v.type}", it.loc)
                    ok = False
                    continue
                if v.rank == 0:
                    if v.name is None:
                        spec.append(f"i:{int(v.const)}")
                    else:
                        spec.append("i:$")
                        dyn.append(self.cast(v, "i64", loc))
                else:
                    spec.append("t:$")
                    dyn.append(v)
        return (spec, dyn) if ok else (None, None)

    def e_Slice(self, e):
        return self.error("a slice is only allowed inside [...]", e.loc)

    def e_EllipsisLit(self, e):
        return self.error("... is only allowed inside [...]", e.loc)

    def e_Call(self, e):
        f = e.func
        if isinstance(f, A.Name):
            target = self.lookup(f)
        elif isinstance(f, A.Attribute):
            target = self.e_Attribute(f)
        elif isinstance(f, (A.Call, A.Subscript)):
            target = self.expr(f)  # grad(f)(x), vjp(f, x)[1](ct)
        else:
            return self.error("only named functions can be called", e.loc)
        if isinstance(target, V) and target.poison:
            for a in e.args:
                self.expr(a)
            return POISON
        if isinstance(target, tuple) and len(target) == 2 and target[0] == "builtin":
            return call_builtin(self, target[1], e)
        if isinstance(target, (FuncRef, GradRef, Pullback)):
            args = [self.expr(a) for a in e.args]
            kwargs = {k.name: (self.expr(k.value), k.loc) for k in e.kwargs}
            if isinstance(target, Pullback):
                return self.call_pullback(target, args, kwargs, e.loc)
            return self.call_user(target, args, kwargs, e.loc)
        return self.error("this value is not callable", e.loc)

    def call_user(self, ref, args, kwargs, loc):
        r = self.resolve_call(ref, args, kwargs, loc)
        if r is None:
            return POISON
        return self.emit_call(*r, loc)

    def emit_call(self, symbol, vals, res_types, proto, loc):
        res = self.fresh()
        head = f"{res}:{len(res_types)} = " if len(res_types) > 1 else (f"{res} = " if res_types else "")
        self.line(f"{head}func.call @{symbol}({', '.join(v.name for v in vals)}) : "
                  f"({', '.join(mlir_type(v.type) for v in vals)}) -> ({', '.join(mlir_type(t) for t in res_types)}) {self.loc(loc)}")
        outs = [V(res if len(res_types) == 1 else f"{res}#{i}", t) for i, t in enumerate(res_types)]
        if proto is None:
            return None
        return unflatten_like(proto, outs)

    def resolve_call(self, ref, args, kwargs, loc):
        """(symbol, argument values, result types, result structure) of a call, or None after an error."""
        if isinstance(ref, GradRef):
            return self.resolve_grad(ref, args, kwargs, loc)
        return self.resolve_user(ref, args, kwargs, loc)

    def resolve_grad(self, ref: GradRef, args, kwargs, loc):
        base = self.resolve_call(ref.fn, args, kwargs, loc)
        if base is None:
            return None
        sym, vals, res_types, _ = base
        single = not isinstance(ref.wrt, tuple)
        wrt = (ref.wrt,) if single else ref.wrt
        for i in wrt:
            if not 0 <= i < len(vals):
                self.error(f"{ref.kind}(): wrt={i} is out of range for a function of {len(vals)} arguments", loc)
                return None
            if not is_float(vals[i].dtype):
                self.error(f"{ref.kind}(): cannot differentiate with respect to argument {i}: "
                           f"it is {vals[i].type}, not a float tensor", loc)
                return None
        if len(res_types) != 1 or res_types[0].rank or not is_float(res_types[0].dtype):
            shown = ", ".join(str(t) for t in res_types) or "nothing"
            self.error(f"{ref.kind}() needs a function that returns one float scalar; it returns {shown}", loc)
            return None
        gtypes = [vals[i].type for i in wrt]
        gproto = V(None, gtypes[0]) if single else tuple(V(None, t) for t in gtypes)
        if ref.kind == "grad":
            out_types, proto = gtypes, gproto
        else:
            out_types, proto = res_types + gtypes, (V(None, res_types[0]), gproto)
        dsym = self.mod.grad_decl(ref.kind, sym, tuple(wrt), [v.type for v in vals], out_types, loc)
        return dsym, vals, out_types, proto

    def call_pullback(self, pb: Pullback, args, kwargs, loc):
        if kwargs or len(args) != 1:
            return self.error("a vjp pullback takes one argument: the cotangent of the function's result", loc)
        cts = flatten(args[0])
        if len(cts) != len(pb.result_types):
            return self.error(f"the cotangent has {len(cts)} parts; the function returns {len(pb.result_types)}", loc)
        floats = [i for i, t in enumerate(pb.result_types) if is_float(t.dtype)]
        ct_vals = []
        for i in floats:
            c = self.as_value(cts[i], loc)
            if not isinstance(c, V) or c.poison:
                return self.error("a cotangent must be a tensor", loc) if not isinstance(c, V) else POISON
            c = self.coerce(c, pb.result_types[i], loc, "the cotangent")
            if c.poison:
                return POISON
            ct_vals.append(self.conform(c, pb.result_types[i], loc))
        wrt = tuple(i for i, v in enumerate(pb.vals) if is_float(v.dtype))
        types = [pb.vals[i].type for i in wrt]
        dsym = self.mod.grad_decl("vjp", pb.symbol, wrt, [v.type for v in pb.vals] +
                                  [pb.result_types[i] for i in floats], types, loc)
        grads = self.emit_call(dsym, list(pb.vals) + ct_vals, types, tuple(V(None, t) for t in types), loc)
        it = iter(grads)
        return tuple(next(it) if is_float(v.dtype) else self.op("zeros_like", [v], loc=loc) for v in pb.vals)

    def resolve_user(self, ref: FuncRef, args, kwargs, loc):
        fd = ref.module.funcs[ref.name]
        bound = bind_arguments(self, fd, args, kwargs, loc)
        if bound is None:
            return None
        values, types = [], []
        names: dict = {}  # the callee's named dims, shared across its parameters
        recursive = self.mod.in_progress_fn(ref.module, fd)
        for p, v in zip(fd.params, bound):
            v = self.as_value(v, loc)
            if not isinstance(v, V):
                self.error(f"argument '{p.name}' must be a tensor", loc)
                return None
            if v.poison:
                return None
            try:
                declared = annotation_type(p.annotation, names)
            except ShapeError as e:
                return self.error(str(e), p.annotation.loc)
            if declared is not None:
                v = self.coerce(v, declared, loc, f"argument '{p.name}' of {fd.name}()")
                if v.poison:
                    return None
                t = declared
            else:
                v = self.materialize(v, loc=loc)
                t = v.type
            values.append(v)
            # A recursive call gets all-dynamic sizes, so recursion needs one specialization.
            types.append(_dynamic(t) if recursive else t)
        spec = self.mod.specialize(ref.module, fd, types, loc)
        if spec.result_types is None:
            return None
        if any(t is None for t in spec.result_types):
            return None
        vals = [self.conform(v, t, loc) for v, t in zip(values, spec.param_types)]
        return spec.symbol, vals, spec.result_types, spec.result_proto


def bind_arguments(em, fd: A.FuncDef, args, kwargs, loc):
    """Positional, keyword and default arguments -> one value per parameter."""
    params = fd.params
    if len(args) > len(params):
        em.error(f"{fd.name}() takes {len(params)} arguments but {len(args)} were given", loc)
        return None
    out = list(args) + [None] * (len(params) - len(args))
    for name, (v, kloc) in kwargs.items():
        idx = next((i for i, p in enumerate(params) if p.name == name), None)
        if idx is None:
            em.error(f"{fd.name}() has no parameter '{name}'", kloc)
            return None
        if out[idx] is not None:
            em.error(f"{fd.name}() got two values for '{name}'", kloc)
            return None
        out[idx] = v
    for i, p in enumerate(params):
        if out[i] is None:
            if p.default is None:
                em.error(f"{fd.name}() is missing the argument '{p.name}'", loc)
                return None
            out[i] = em.weak(p.default.value)
    return out


def _dynamic(t: TensorType) -> TensorType:
    return TensorType(t.dtype, tuple(Sym() for _ in t.shape))



def _join(t: TensorType, u: TensorType) -> TensorType:
    """t's type with the sizes it does not share with u made dynamic (a symbolic size is kept)."""
    return t.with_shape(p if isinstance(p, Sym) else (p if isinstance(q, int) and p == q else Sym())
                        for p, q in zip(t.shape, u.shape))


def _pattern(types) -> list:
    """Types as MLIR sees them (every symbolic size is `?`)."""
    return [mlir_type(t) for t in types]


def _show(name) -> str:
    """A variable's name for messages; the control-flow rewrite's own names read as what they stand for."""
    if name is None:
        return "the value"
    if name == controlflow.RETVAL:
        return "the returned value"
    if name.startswith("$"):
        return "a loop flag"
    return f"'{name}'"


def _all_values(x) -> bool:
    return all(isinstance(v, V) for v in flatten(x)) if isinstance(x, (V, tuple)) else False


def _changed(before, env_a, env_b):
    names = []
    for env in (env_a, env_b):
        for n, v in env.items():
            if before.get(n) is not v and n not in names:
                names.append(n)
    return names


def _assigned_names(stmts):
    out = []
    for s in stmts:
        if isinstance(s, (A.Assign,)):
            for t in s.targets:
                out += _target_names(t)
        elif isinstance(s, (A.AnnAssign, A.AugAssign)):
            out += _target_names(s.target)
        elif isinstance(s, A.If):
            out += _assigned_names(s.body) + _assigned_names(s.orelse)
        elif isinstance(s, (A.For, A.While)):
            if isinstance(s, A.For):
                out += _target_names(s.target)
            out += _assigned_names(s.body)
    return out


def _target_names(t):
    if isinstance(t, A.Name):
        return [t.id]
    if isinstance(t, (A.Tuple, A.List)):
        return [n for e in t.elts for n in _target_names(e)]
    return []


def _named_sizes(param_types) -> str:
    """The function attribute `dg.sizes` naming the arguments' symbolic sizes, one list of axis
    names ("" for a static or unnamed axis) per argument, when any has a name. A call from
    Python checks that equal names are equal sizes; the lowering relies on it (lowering.sizes)."""
    def name(d):
        plain = isinstance(d, Sym) and d.name and d.name.isprintable() and not set(d.name) & set('"\\')
        return d.name if plain else ""  # a name MLIR's string syntax would need escapes for stays out

    named = [[name(d) for d in t.shape] if t is not None else [] for t in param_types]
    if not any(n for axes in named for n in axes):
        return ""
    text = ", ".join("[" + ", ".join(f'"{n}"' for n in axes) + "]" for axes in named)
    return f" attributes {{dg.sizes = [{text}]}}"


def _weak_join(weak_dt: str, strong_dt: str) -> str:
    if is_float(weak_dt) and not is_float(strong_dt):
        return "f32"
    if is_int(weak_dt) and is_bool(strong_dt):
        return "i64"
    return strong_dt


def _const_nested(lv: ListVal):
    """A list display of literals (nested to any depth) -> (array, dtype), else None."""
    def leaves(x):
        if isinstance(x, ListVal):
            sub = [leaves(i) for i in x.items]
            if any(s is None for s in sub):
                return None
            return sub
        if isinstance(x, V) and x.name is None and x.weak and not x.poison:
            return x.const
        return None

    vals = leaves(lv)
    if vals is None:
        return None
    try:
        arr = np.array(vals)
    except ValueError:
        return None
    if arr.dtype == object or arr.size == 0:
        return None
    if arr.dtype.kind == "f":
        return arr.astype(np.float32), "f32"
    if arr.dtype.kind == "b":
        return arr, "bool"
    return arr.astype(np.int64), "i64"


_NOFOLD = object()


def _int_in_reach(v) -> bool:
    """Whether a Python value is no int, or an int that i64 holds, or its negation does (2**63, of
    the literal -2**63; materialize checks the dtype a constant finally gets)."""
    return not isinstance(v, int) or isinstance(v, bool) or -(1 << 63) <= v <= 1 << 63


def _fold(op, a, b):
    try:
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op == "/":
            return a / b if b != 0 else _NOFOLD
        if op == "//":
            return a // b if b != 0 else _NOFOLD
        if op == "%":
            return a % b if b != 0 else _NOFOLD
        if op == "**":
            if isinstance(a, int) and isinstance(b, int) and b < 0:
                return _NOFOLD
            r = a ** b
            return r if not isinstance(r, complex) else _NOFOLD
        if op in CMPOPS:
            return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b}[op]
    except (OverflowError, ZeroDivisionError, TypeError):
        return _NOFOLD
    return _NOFOLD

