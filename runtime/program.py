"""Loaded dg programs: sources, imports, functions, specializations, modes.

A `Source` is one parsed `.dg` file (or `@dg.function` body) with its
imports resolved. A `DgFunction` is what `m.forward` is: calling it turns
the Python arguments into a signature (`runtime.signature`), emits and
verifies the IR for that signature once, prepares it for the mode (the
interpreter translates it to Python), caches it, and runs it.
"""
from __future__ import annotations

import contextlib
import gc
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from dg.core.config import DEVICES, MODES, config
from dg.core.deep import deeply
from dg.core.errors import DgError, DgErrors, DgRuntimeError, DgTypeError, Loc
from dg.core.tracebacks import for_user, placed, user_facing
from dg.dsl import ast as A
from dg.dsl.emit import ModuleEmitter
from dg.dsl.parser import parse
from dg.dsl.values import ConstRef, FuncRef, ModuleRef
from dg.lowering.pipeline import SHOWN

from . import compile_log, html, modes, signature
from .descriptors import ArgumentTooLarge
from .fastcall import NOT_RUN, RAN
from .graph import draw as draw_graph
from .linking import THREAD_CALLS


def default_mode() -> str:
    return config.mode


def default_device(mode: str = "compiled") -> str:
    """`DG_DEVICE` (else the CPU) for compiled code; the interpreter and shadow mode run on the CPU
    whatever it says (only a device asked for by name is refused for them)."""
    if mode != "compiled":
        return "cpu"
    return config.device


def default_check_numerics() -> bool:
    return config.check_numerics


def check_mode(mode: str, device: str) -> None:
    if mode not in MODES:
        raise DgError(f"unknown mode '{mode}' (expected one of {', '.join(MODES)})")
    if device not in DEVICES:
        raise DgError(f"unknown device '{device}' (expected one of {', '.join(DEVICES)})")


class Source:
    """One `.dg` file: its functions and what its imports bring in."""

    _cache: dict = {}

    def __init__(self, module: A.Module, search_dir: Path | None):
        self.file = module.file
        self.ast = module
        self.search_dir = search_dir
        self.funcs: dict = {}
        self.imported: dict = {}  # name -> FuncRef | ModuleRef | ConstRef
        self.consts: dict = {}  # name -> the expression of a top-level constant
        errors = DgErrors()
        for fd in module.funcs:
            if fd.name in self.funcs:
                errors.add(DgTypeError(f"function '{fd.name}' is defined twice", fd.loc))
            self.funcs[fd.name] = fd
        for c in module.consts:
            name = c.targets[0].id
            if name in self.funcs or name in self.consts:
                errors.add(DgTypeError(f"'{name}' is defined twice at the top level", c.loc))
            self.consts[name] = c.value
        for imp in module.imports:
            try:
                src = load_import(imp.module, search_dir, imp.loc)
            except DgError as e:
                errors.add(e)
                continue
            if imp.names is None:
                self.imported[imp.alias or imp.module] = ModuleRef(src)
            else:
                for n in imp.names:
                    ref = src.resolve(n, exported_only=True)
                    if ref is None:
                        errors.add(DgTypeError(f"module '{imp.module}' has no function or constant '{n}'", imp.loc))
                    else:
                        self.imported[n] = ref
        errors.raise_if_any()

    def resolve(self, name: str, exported_only: bool = False):
        if name in self.funcs:
            return FuncRef(self, name)
        if name in self.consts:
            return ConstRef(self, name)
        if not exported_only and name in self.imported:
            return self.imported[name]
        return None


_LOADING: list = []


def load_import(name: str, search_dir: Path | None, loc: Loc) -> Source:
    dirs = ([search_dir] if search_dir else [Path.cwd()]) + [
        *config.path] + [
        Path(__file__).resolve().parent.parent / "stdlib"]  # the standard library, package dg.stdlib, last
    for d in dirs:
        f = Path(d) / f"{name}.dg"
        if f.is_file():
            key = str(f.resolve())
            if key in _LOADING:
                raise DgTypeError(f"circular import of '{name}'", loc)
            cached = Source._cache.get(key)
            mtime = f.stat().st_mtime_ns
            if cached is not None and cached[0] == mtime:
                return cached[1]
            _LOADING.append(key)
            try:
                src = source_from_file(f)
            finally:
                _LOADING.pop()
            Source._cache[key] = (mtime, src)
            return src
    raise DgTypeError(f"cannot find module '{name}' ({name}.dg in {', '.join(str(d) for d in dirs)})", loc)


def source_from_text(text: str, file: str, search_dir: Path | None) -> Source:
    return Source(parse(text, file), search_dir)


def source_from_file(path) -> Source:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise DgError(f"cannot read {path}: {e.strerror}") from None
    return source_from_text(text, str(path), path.parent)


@dataclass
class Compiled:
    """One specialization, ready to run in one mode."""

    symbol: str
    sig: signature.Signature
    ir_text: str  # the dg stage, as emitted
    result_proto: object
    runner: object = None
    stages: dict = field(default_factory=dict)  # stage -> its parsed module, made when asked for (runtime.modes)


class DgModule:
    """What `dg.load` returns: its functions are attributes."""

    def __init__(self, source: Source, mode: str | None = None, device: str | None = None,
                 check_numerics: bool | None = None, autobatch: bool | None = None):
        self._source = source
        self._autobatch = autobatch
        self._mode = mode or default_mode()
        self._device = device or default_device(self._mode)
        self._check_numerics = default_check_numerics() if check_numerics is None else bool(check_numerics)
        check_mode(self._mode, self._device)
        self._functions: dict = {}

    def __getattr__(self, name: str) -> "DgFunction":
        if name.startswith("_"):
            raise AttributeError(name)
        fn = self._functions.get(name)
        if fn is None:
            if name not in self._source.funcs:
                raise AttributeError(f"{self._source.file} has no function '{name}'")
            fn = DgFunction(self._source, name, self._mode, self._device, self._check_numerics, self._autobatch)
            self._functions[name] = fn
            # (an attribute from now on: Python finds it without calling here, a microsecond a call)
            self.__dict__[name] = fn
        return fn

    def __dir__(self):
        return self.functions

    @property
    def functions(self) -> list:
        """The functions the source defines (not those dg.grad and dg.vjp add to it)."""
        return [n for n in self._source.funcs if not n.startswith("__dg_")]

    def _repr_html_(self) -> str:
        return html.module_html(html.module_summary(self))


@contextlib.contextmanager
def _collector_paused():
    """No garbage collection while a specialization is built: building makes many short-lived
    objects and few cycles, and in a process that holds many objects (a framework or two
    imported beside dg) the collections it triggers cost a sixth of a cold compile."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class DgFunction:
    """A dg function callable from Python; specialized per argument signature."""

    def __init__(self, source: Source, name: str, mode: str, device: str, check_numerics: bool = False,
                 autobatch: bool | None = None):
        self.source = source
        self.name = name
        self.fd = source.funcs[name]
        self.mode = mode
        self.device = device
        self.check_numerics = check_numerics
        self.autobatch = config.autobatch if autobatch is None else bool(autobatch)
        self._cache: dict = {}
        self._seen: dict = {}  # signature.fingerprint of positional arguments -> (Compiled, signature.weak_floats)
        self._last = None
        # The quick call (runtime.fastcall) for arguments shaped as the last ones the general path
        # took, and the quick calls made before, by fingerprint.
        self._quick = None
        self._quicks: dict = {}
        self.gradients: dict = {}  # dg.grad expression -> the dg function running it (autodiff_api)
        self.__name__ = name
        self.__doc__ = f"dg function {name} from {source.file}"

    def __repr__(self) -> str:
        return f"<dg function {self.name} ({self.mode}, {self.device}) from {self.source.file}>"

    def _repr_html_(self) -> str:
        return html.function_html(html.function_summary(self))

    # ------------------------------------------------------------ specialization
    def specialize(self, args, kwargs=None, run: bool = True) -> tuple:
        """(Compiled, marshalled arguments) for these Python arguments; with `run`, prepared to
        run in this function's mode and device (else only its IR is asked for)."""
        values = signature.bind_python_args(self.fd, args, kwargs or {})
        sig, arrays = signature.make_signature(self.fd, values)
        return self._compiled(sig, run), arrays

    def _compiled(self, sig, run: bool = True) -> Compiled:
        comp = self._cache.get(sig.key)
        if comp is None:
            t0 = time.perf_counter()
            before = len(self._cache)
            comp = self._cache[sig.key] = self._deeply(self._build, sig)
            why = "first call" if not before else f"new signature ({before} made before)"
            compile_log.log(f"{self._shown(sig)}: {why}: emitted in {time.perf_counter() - t0:.3g} s")
        if run and comp.runner is None:
            t0 = time.perf_counter()
            self._deeply(lambda: modes.prepare(comp, self.mode, self.device, numerics=self.check_numerics))
            compile_log.log(f"{self._shown(sig)}: ready to run ({self.mode}, {self.device}) in "
                            f"{time.perf_counter() - t0:.3g} s")
        self._last = comp
        return comp

    def _shown(self, sig) -> str:
        """The function and its signature for the compile log, cut at 200 characters (a model's
        record of parameters would fill screens)."""
        text = f"{self.name}({', '.join(signature.shown_type(t) for t in sig.param_types)})"
        return text if len(text) <= 200 else text[:199] + "…)"

    def _deeply(self, fn, *args):
        """fn(*args) with room for deep recursion (core.deep) and the garbage collector paused."""
        with _collector_paused():
            try:
                return deeply(fn, *args)
            except RecursionError:
                raise DgError(f"{self.name}() calls functions nested too deeply to compile (more than "
                              f"a few thousand calls in one chain)", self.fd.loc) from None

    def _build(self, sig) -> Compiled:
        errors = DgErrors()
        me = ModuleEmitter(errors, autobatch=self.autobatch)
        spec = me.specialize(self.source, self.fd, sig.param_types)
        errors.raise_if_any()
        text = me.module_text()
        return Compiled(spec.symbol, sig, text, spec.result_proto)

    def __call__(self, *args, **kwargs):
        comp = fp = hit = None
        try:
            quick = self._quick
            if quick is not None and not kwargs and not THREAD_CALLS.stack:
                out = quick.fn(*args)
                if out is not NOT_RUN:
                    self._last = comp = quick.comp
                    return out if type(out) is not RAN else signature.to_python(quick.finish(out), comp.result_proto)
            if not kwargs and len(args) == len(self.fd.params):
                # Arrays of dtypes and shapes seen before go straight to their specialization.
                fp, arrays = signature.fingerprint(args)
                hit = self._seen.get(fp)
                if hit is not None:
                    comp, floats = hit
                    arrays = signature.with_weak_floats(arrays, floats)
            if comp is None:
                raw = arrays if fp is not None else None
                comp, arrays = self.specialize(args, kwargs)
                if fp is not None and not signature.same_leaves(raw, arrays):
                    fp = None  # (a structure that a parameter takes as one array: the slow way each time)
                if fp is not None:
                    if len(self._seen) >= 64:  # many shapes: keep the newest
                        self._seen.clear()
                        self._quicks.clear()
                    self._seen[fp] = (comp, signature.weak_floats(raw, arrays))
            self._last = comp
            try:
                out = modes.execute(comp, self.mode, self.device, arrays)
            except ArgumentTooLarge as e:
                i, path = signature.leaf_owner(comp.sig, e.index)
                p = self.fd.params[i]
                gib = math.prod(e.shape) * e.dtype.itemsize / 2**30
                raise DgRuntimeError(f"argument '{p.name}{path}' of {self.name}() ({'x'.join(map(str, e.shape))} {e.dtype}) is "
                                     f"a view that compiled code needs as one contiguous array, and {gib:.3g} GiB do not "
                                     f"fit in memory", p.loc) from None
            out = signature.to_python(out, comp.result_proto)
            if hit is not None:  # (a second call of its kind: the first call does not wait for a quick call)
                self._quicken(comp, fp, args)
            return out
        except (DgError, KeyboardInterrupt) as e:
            raise for_user(placed(e, sys._getframe(1)))  # (dg's frames below this one are hidden:
            # DG_TRACEBACK_FILTERING=off shows them)

    def _quicken(self, comp, fp, args) -> None:
        """After the general path ran a call whose fingerprint it had seen before: the quick call
        for arguments shaped as these (made once per fingerprint where the mode and the program
        allow one, and made again once the program's code was replaced: quick-start code by the
        optimized code) takes the next calls."""
        quick = self._quicks.get(fp)
        if quick is None or quick.program is not comp.runner or quick.stale.value:
            quick = modes.quick(comp, self.mode, self.device, args)
            if quick is not None:
                quick.comp = comp
                self._quicks[fp] = quick
        self._quick = quick

    # ------------------------------------------------------------ IR at a stage
    @user_facing
    def ir(self, stage: str = "dg", args=None) -> str:
        if stage not in SHOWN:
            raise DgError(f"unknown stage '{stage}' (expected one of {', '.join(SHOWN)})")
        if args is not None:
            comp, _ = self.specialize(tuple(args), run=False)  # IR needs no device (PTX needs no GPU)
        else:
            comp = self._last
            if comp is None:
                if all(p.annotation is not None or p.default is not None for p in self.fd.params):
                    comp = self._compiled(signature.declared_signature(self.fd), run=False)
                else:
                    raise DgError(f"{self.name}() has not been called yet and its parameters are not all "
                                  f"annotated: pass args=(...) to choose a signature")
        return self._deeply(modes.stage_text, comp, stage)

    @user_facing
    def graph(self, args=None, grad=False):
        """The function's dataflow graph (`runtime.graph.Graph`: `.save("f.svg")`, `.source`, SVG
        in notebooks) for the signature `.ir` would show; with `grad` (True, or `wrt` positions), its
        gradient's."""
        text = self.ir("dg", args=args)
        return draw_graph(text, self.name, signature.leaf_names(self.fd, self._last.sig), grad)



def check_source(source: Source) -> None:
    """Type-check every function with its declared parameter types (unannotated ones unknown)."""
    try:
        deeply(_check_source, source)
    except RecursionError:
        raise DgError("the program's functions call each other nested too deeply to check (more than a few "
                      "thousand calls in one chain)", Loc(source.file, 1, 1)) from None


def _check_source(source: Source) -> None:
    errors = DgErrors()
    me = ModuleEmitter(errors)
    for fd in source.ast.funcs:
        sig = signature.declared_signature(fd, unknown_ok=True)
        me.specialize(source, fd, sig.param_types)
    errors.raise_if_any()
