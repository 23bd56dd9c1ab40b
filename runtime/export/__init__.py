"""`dg export`: compiled dg functions as a native library with a C header, run with no Python.

Expects: dg functions (of `dg.load`, `@dg.function`, or `dg.grad`/`value_and_grad`/`jvp`/
`checkpoint`/`vmap` of one) and, for each, example arguments that choose its specialization
(as a first call would: declared `?` and named sizes stay dynamic). Guarantees: `export(fns,
path, example_args)` writes into the folder `path` a shared library `lib<name>.so`, a static
archive `lib<name>.a` and a header `<name>.h` (runtime.export.cabi), and returns their paths.
Each function's code is the code the JIT runs (lowering.codegen: the same pipeline, LLVM
level and target CPU), with the program's mutable globals (its state words, the thread pool's
context, the allocation guard's) made thread-local so that threads may call at once, and the
names of the runtime's functions replaced by what the library links: the C library's setjmp
and longjmp, the BLAS's product (or dg's own loops: `blas="none"`), the thread pool and a world
of one for the collectives (runtime/ll, compiled here), and runtime/export/runtime.c. Each
function and its wrapper are linked into one object whose symbols, but for its C function,
are made local, so that entries (and libraries) do not share state. Building needs a C
compiler (`CC`, else `cc`) and binutils (`ld`, `objcopy`, `ar`); a DgError says which is
missing. A function that prints or stops at a breakpoint is refused (a library has no
console).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from dg.core.abi import GRAIN, LONGJMP, PARALLEL_FOR, SETJMP, STATE
from dg.core.errors import DgError
from dg.core.mpi import World
from dg.lowering import blas
from dg.lowering.codegen import lower
from dg.lowering.codegen.objects import object_code

from .. import collectives, modes, signature
from ..autodiff_api import _Derived
from ..natives import native_object
from ..program import DgFunction
from . import cabi

RUNTIME_C = Path(__file__).resolve().parent / "runtime.c"
VERSION = "0.1.0"


@dataclass
class Exported:
    """What `export` wrote: the shared library, the static archive and the header."""

    shared: Path
    static: Path
    header: Path
    entries: list


def export(fns, path, example_args, name: str | None = None, blas_choice: str = "auto") -> Exported:
    """Write `lib<name>.so`, `lib<name>.a` and `<name>.h` into folder `path` for `fns` (one
    function, a list, or a dict C name -> function) specialized for `example_args` (one tuple for
    one function; else a list in the same order, or a dict by C name). `name` defaults to the
    first function's source file's stem; `blas_choice`: "auto" (the BLAS dg calls in this
    process, linked in), "none" (dg's own loops for products)."""
    named = _named(fns)
    examples = _examples(named, example_args)
    if blas_choice not in ("auto", "none"):
        raise DgError(f"dg export: blas must be 'auto' or 'none', got {blas_choice!r}")
    lib_blas = None if blas_choice == "none" else blas.locate()
    lib = cabi.c_name(name or Path(_source_file(next(iter(named.values())))).stem)
    tools = _tools()
    entries, objects = [], []
    for cname, fn in named.items():
        entry, text, level = _lowered(cname, fn, examples[cname], blas_choice == "none")
        entries.append(entry)
        objects.append((_for_library(text, lib_blas), level))
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dg-export-") as tmp:
        tmp = Path(tmp)
        parts = []
        for k, ((text, level), entry) in enumerate(zip(objects, entries)):
            (tmp / f"entry{k}.o").write_bytes(object_code(text, level))
            (tmp / f"wrap{k}.c").write_text(cabi.wrapper(lib, [entry], first=k))
            _run(tools, "cc", "-c", "-O2", "-fPIC", "-o", tmp / f"wrap{k}.o", tmp / f"wrap{k}.c")
            _run(tools, "ld", "-r", "-o", tmp / f"part{k}.o", tmp / f"wrap{k}.o", tmp / f"entry{k}.o")
            _run(tools, "objcopy", f"--keep-global-symbol={lib}_{entry.name}", tmp / f"part{k}.o")
            parts.append(tmp / f"part{k}.o")
        (tmp / "pool.o").write_bytes(native_object("thread_pool", {"GRAIN": GRAIN, "PARALLEL_FOR": PARALLEL_FOR}))
        (tmp / "world.o").write_bytes(native_object(*collectives.helper(World())))
        (tmp / "api.c").write_text(cabi.library_functions(lib))
        _run(tools, "cc", "-c", "-O2", "-fPIC", "-o", tmp / "runtime.o", RUNTIME_C)
        _run(tools, "cc", "-c", "-O2", "-fPIC", "-o", tmp / "api.o", tmp / "api.c")
        whole = tmp / f"lib{lib}.o"
        _run(tools, "ld", "-r", "-o", whole, *parts, tmp / "runtime.o", tmp / "api.o", tmp / "pool.o", tmp / "world.o")
        api = [f"{lib}_{e.name}" for e in entries] + [f"{lib}_last_error", "dg_last_error", "dg_free"]
        _run(tools, "objcopy", *[f"--keep-global-symbol={s}" for s in api], whole)
        static = out / f"lib{lib}.a"
        static.unlink(missing_ok=True)
        _run(tools, "ar", "rcs", static, whole)
        shared = out / f"lib{lib}.so"
        _run(tools, "cc", "-shared", "-o", shared, whole, *_links(lib_blas), "-Wl,-z,noexecstack",
             f"-Wl,-soname,lib{lib}.so")
    header = out / f"{lib}.h"
    header.write_text(cabi.header(lib, entries, _notes(lib, named, entries, objects, lib_blas)))
    return Exported(shared, static, header, entries)


def _named(fns) -> dict:
    """C name -> dg function (DgFunction or a function value made from one)."""
    if isinstance(fns, dict):
        items = list(fns.items())
    elif isinstance(fns, (list, tuple)):
        items = [(None, f) for f in fns]
    else:
        items = [(None, fns)]
    named = {}
    for key, f in items:
        if not isinstance(f, (DgFunction, _Derived)):
            raise DgError(f"dg export: {f!r} is not a dg function (from dg.load, @dg.function, or dg.grad of one)")
        if key is None:
            key = f.name if isinstance(f, DgFunction) else f"{f.kind}_{f.root.name}"
        key = cabi.c_name(str(key))
        if key in named:
            raise DgError(f"dg export: two functions are named '{key}' (pass a dict of names)")
        named[key] = f
    return named


def _source_file(f) -> str:
    """The source file of a dg function or of the function a function value is made from."""
    return str((f.root if isinstance(f, _Derived) else f).source.file)


def _examples(named: dict, example_args) -> dict:
    """C name -> the example arguments' tuple (None: the function's annotations)."""
    if example_args is None:
        return dict.fromkeys(named)
    if len(named) == 1 and isinstance(example_args, tuple):
        return {next(iter(named)): example_args}
    if isinstance(example_args, dict):
        missing = [k for k in named if k not in example_args]
        if missing:
            raise DgError(f"dg export: no example arguments for {', '.join(missing)}")
        return {k: None if example_args[k] is None else tuple(example_args[k]) for k in named}
    if isinstance(example_args, list) and len(example_args) == len(named):
        return {k: None if a is None else tuple(a) for k, a in zip(named, example_args)}
    raise DgError("dg export: example_args must be a tuple (one function), or a list or dict of tuples, one per function")


def _lowered(cname: str, f, args: tuple, loops: bool):
    """(Entry, LLVM IR text, LLVM level) of function `f` specialized for `args`."""
    fn = f._fn() if isinstance(f, _Derived) else f
    if args is None:
        comp = fn._compiled(signature.declared_signature(fn.fd), run=False)
    else:
        comp, _ = fn.specialize(args, run=False)
    unit = modes.compiled_unit(comp)
    if loops:
        with blas.products_as_loops():
            llvm = lower.to_llvm(unit)
    else:
        llvm = lower.to_llvm(unit)
    meta = llvm.meta
    if meta["host_calls"]:
        raise DgError(f"dg export: {fn.name}() prints or stops at a breakpoint, and an exported library has no "
                      f"console: take the print or breakpoint out of the code it calls", fn.fd.loc)
    args_ = []
    for p, t in zip(fn.fd.params, comp.sig.param_types):
        args_ += cabi.leaves_of(t, p.name, p.name, p.loc)
    results = cabi.leaves_of(comp.result_proto, "out", "result") if comp.result_proto is not None else []
    if len(results) == 1:
        results[0].name = "out"
    names = [leaf.name for leaf in args_ + results]
    if len(set(names)) != len(names):
        raise DgError(f"dg export: the parameters of {fn.name}() make two C names alike ({', '.join(names)})", fn.fd.loc)
    shown = getattr(f, "__name__", fn.name) if isinstance(f, _Derived) else fn.name
    entry = cabi.Entry(cname, shown, f"{shown}({', '.join(p.name for p in fn.fd.params)})", comp.symbol, args_, results,
                       meta, stateful=re.search(rf"^@{STATE} = ", llvm.text, re.M) is not None)
    return entry, llvm.text, llvm.level


_MUTABLE = re.compile(r"^(@[-\w.$]+ = (?:internal |private )?)((?:unnamed_addr )?global )", re.M)


def _for_library(text: str, lib_blas) -> str:
    """The LLVM IR of a function for the library (see the module's docstring): its mutable
    globals thread-local, the runtime's setjmp/longjmp and BLAS names the libraries'."""
    text = _MUTABLE.sub(r"\1thread_local \2", text)
    text = re.sub(rf"@{re.escape(SETJMP)}\b", "@_setjmp", text)
    text = re.sub(rf"@{re.escape(LONGJMP)}\b", "@longjmp", text)
    for ours, theirs in (lib_blas.names if lib_blas else ()):
        text = re.sub(rf"@{ours}\b", f"@{theirs}", text)
    return text


def _links(lib_blas) -> list:
    """What the shared library links besides the C library: libm, pthreads, the BLAS (by path,
    found again at run time through the library's run path)."""
    out = ["-lm", "-lpthread"]
    if lib_blas is not None:
        out += [lib_blas.path, f"-Wl,-rpath,{Path(lib_blas.path).parent}"]
    return out


def _notes(lib: str, named: dict, entries: list, objects: list, lib_blas) -> list:
    import llvmlite.binding as llvm

    files = sorted({_source_file(f) for f in named.values()})
    levels = sorted({level for _, level in objects})
    notes = [f"lib{lib}: made by `dg export` (dg {VERSION}) from {', '.join(files)}.",
             f"Functions: {', '.join(f'{lib}_{e.name} ({e.shown})' for e in entries)}.",
             f"Target: {llvm.get_process_triple()}, CPU {llvm.get_host_cpu_name()} (the code uses its features: it "
             f"runs on this CPU model and newer), LLVM -O{'/-O'.join(map(str, levels))}, as the JIT optimizes it.",
             "Links: the C library, libm and pthreads; " + (
                 f"the BLAS {lib_blas.path} ({', '.join(t for _, t in lib_blas.names)}, "
                 f"{'64' if lib_blas.int_type == 'i64' else '32'}-bit sizes)." if lib_blas else
                 "no BLAS (products run as dg's own loops: --blas none)."),
             f"Static archive: link lib{lib}.a with {' '.join(_links(lib_blas))}",
             "Threads: any thread may call any function, at once; products and large loops run on a pool of "
             "DG_NUM_THREADS threads (default: the CPUs the process may use).",
             "Errors: a function returns DG_OK (0) or an error code, and dg_last_error() gives the message."]
    return notes


def _tools() -> dict:
    """The programs building a library needs, found on the PATH (`CC` names the C compiler)."""
    found, missing = {}, []
    for tool, name in (("cc", os.environ.get("CC", "cc")), ("ld", "ld"), ("objcopy", "objcopy"), ("ar", "ar")):
        path = shutil.which(name)
        if path is None:
            missing.append(name)
        found[tool] = path
    if missing:
        raise DgError(f"dg export needs a C compiler and binutils: {', '.join(missing)} not found on the PATH")
    return found


def _run(tools: dict, tool: str, *args) -> None:
    done = subprocess.run([tools[tool], *map(str, args)], capture_output=True, text=True)
    if done.returncode != 0:
        raise DgError(f"dg export: {tool} failed ({done.returncode}):\n{done.stderr.strip() or done.stdout.strip()}")
