"""Specializations: each function emitted once per argument signature into one module, recursion
typed by probing, and the declarations of the gradients the module asks for."""
from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

from dg.core.abi import RESERVED
from dg.core.errors import DgErrors, DgTypeError, Loc
from dg.core.types import Sym, TensorType

from .. import ast as A
from ..controlflow import returns_a_value
from ..values import POISON, flatten
from .function import FunctionEmitter
from .types import leaf_types, tree_key, type_key  # noqa: F401 (type_key: part of the package's API)


@dataclass
class Spec:
    """One specialization of a function."""
    symbol: str
    fd: A.FuncDef
    param_types: list
    result_types: list | None = None  # None while unknown (first pass of a recursive function)
    result_proto: object = None  # TypedValue or tuple structure of the results
    return_dtypes: list | None = None  # element types weak literals returned early take (per result)
    text: str = ""


def _unreserved(name: str) -> str:
    """The symbol of a dg function: its name, but for the runtime's names (core.abi.RESERVED),
    and with each letter beyond ASCII (`def fé`) spelled `$` and its code point in hex, since an
    MLIR bare identifier is ASCII and starts with a letter or `_` (`fé` is `f$e9`, `π` is `_$3c0`;
    a dg name has no `$`)."""
    name = "_" + name if name.startswith(RESERVED) or not name[0].isascii() else name
    return "".join(c if c.isascii() else f"${ord(c):x}" for c in name)


class ModuleEmitter:
    """Emits the specializations reachable from one entry call into one module."""
    def __init__(self, errors: DgErrors | None = None, autobatch: bool = False):
        self.errors = errors or DgErrors()
        self.autobatch = autobatch  # a `for` over a list that only adds up runs as a vmap (autobatch.py)
        self.specs: dict = {}
        self.order: list[Spec] = []
        self.in_progress: dict = {}
        self.symbols: set = set()
        self.recursive_unknown: set = set()
        self.stack: list = []  # keys of the specializations being emitted, outermost first
        self.tainted: set = set()
        self.quiet = 0  # >0 while probing the loop bodies of the function being emitted: errors are not kept
        self.grad_decls: dict = {}  # (kind, of, wrt, slots) -> (symbol, declaration text)
        self._recursive: dict = {}  # id(source) -> (source, the names of its recursive functions)

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
        key = (id(source), fd.name, tuple(tree_key(t) for t in param_types),
               self._sym_pattern([t for t in leaf_types(param_types) if t is not None]))
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
        # A function first called from a probe of a loop is still emitted for real: its text is
        # kept, and so are its errors.
        quiet, self.quiet = self.quiet, 0
        try:
            for attempt in range(6):
                n_err = len(self.errors.errors)
                self.recursive_unknown.discard(key)
                fe = FunctionEmitter(self, source, spec)
                text, proto = fe.emit()
                if self._weak_returns_typed(spec, fe, n_err):
                    continue
                if key not in self.recursive_unknown:
                    break
                new_types = [v.type for v in flatten(proto)] if proto is not None else []
                unknown = any(t is None for t in new_types) or not new_types
                if unknown and len(self.errors.errors) == n_err and returns_a_value(fd.body):
                    # No error made the result unknown: every return gives the probed call's.
                    self.error(f"what {fd.name}() returns cannot be inferred: every value it returns comes from a "
                               f"call that recurses back into {fd.name}(), so it would never return; "
                               "annotate its result type (-> T)", fd.loc)
                    break
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
            self.quiet = quiet
        spec.text = text
        spec.result_proto = proto
        spec.result_types = [v.type for v in flatten(proto)] if proto is not None else []
        if key in self.tainted:  # emitted against a result type that was not known yet
            self.tainted.discard(key)
            return spec
        self.specs[key] = spec
        self.order.append(spec)
        return spec

    def _weak_returns_typed(self, spec, fe, n_err) -> bool:
        """After an emission that failed where an early return gave a weak literal and the other
        returns one element type: that type for the literal (spec.return_dtypes), and True (the
        errors dropped, to emit again)."""
        if spec.return_dtypes is not None or not fe.weak_returns or len(self.errors.errors) == n_err:
            return False
        dtypes = []
        for i in range(max(fe.weak_returns | set(fe.strong_returns)) + 1):
            found = fe.strong_returns.get(i, set())
            dtypes.append(next(iter(found)) if len(found) == 1 else None)
        if all(dtypes[i] is None for i in fe.weak_returns):
            return False
        spec.return_dtypes = dtypes
        if spec.fd.returns is None:  # a result type assumed for recursive calls: found again
            spec.result_types = spec.result_proto = None
        del self.errors.errors[n_err:]
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

    def grad_decl(self, kind: str, of: str, wrt: tuple, param_types: list, result_types: list, loc,
                  slots: int | None = None, ragged: tuple = ()) -> str:
        """The declaration the autodiff or batch pass defines: kind ("grad", "value_and_grad", "vjp",
        "jvp", "checkpoint" with its `slots`, "vmap" with the `ragged` arguments: a list's items,
        each given as its packed rows and offsets) of `of`."""
        key = (kind, of, wrt, slots, ragged)
        if key not in self.grad_decls:
            sym = self.symbol_for(f"{of}__{kind}" + "".join(f"_{i}" for i in wrt) + (f"_{slots}" if slots else ""))
            ins = ", ".join(t.mlir() for t in param_types)
            outs = ", ".join(t.mlir() for t in result_types)
            attrs = (f'dg.kind = "{kind}", dg.of = "{of}", '
                     f'dg.wrt = array<i64{": " + ", ".join(map(str, wrt)) if wrt else ""}>'
                     + (f", dg.slots = {slots} : i64" if slots is not None else "")
                     + (f", dg.ragged = array<i64: {', '.join(map(str, ragged))}>" if ragged else ""))
            self.grad_decls[key] = (sym, f"  func.func private @{sym}({ins}) -> ({outs}) "
                                         f"attributes {{{attrs}}} {loc.mlir() if loc else ''}")
        return self.grad_decls[key][0]

    def in_progress_fn(self, source, fd) -> bool:
        return any(s.fd is fd for s in self.in_progress.values())

    def recurses(self, source, fd) -> bool:
        """Whether fd calls itself by name, directly or through other functions of its source."""
        found = self._recursive.get(id(source))
        if found is None:
            found = self._recursive[id(source)] = (source, recursive_functions(source.funcs))
        return fd.name in found[1]


def recursive_functions(funcs: dict) -> set:
    """The names of the functions (name -> FuncDef) that a chain of calls by name leads back to."""
    calls = {name: _called_names(fd.body) & funcs.keys() for name, fd in funcs.items()}
    out = set()
    for name in funcs:
        seen, todo = set(), list(calls[name])
        while todo:
            g = todo.pop()
            if g not in seen:
                seen.add(g)
                todo += calls[g]
        if name in seen:
            out.add(name)
    return out


def _called_names(node, out=None) -> set:
    """The names that calls under an AST node (or a list of them) call."""
    out = set() if out is None else out
    if isinstance(node, list):
        for x in node:
            _called_names(x, out)
    elif isinstance(node, A.Node):
        if isinstance(node, A.Call) and isinstance(node.func, A.Name):
            out.add(node.func.id)
        for f in dataclasses.fields(node):
            _called_names(getattr(node, f.name), out)
    return out
