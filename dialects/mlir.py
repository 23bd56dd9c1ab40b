"""The one place dg imports MLIR's Python bindings from.

Prefers the official `mlir` package when it is installed; otherwise uses the
copy of the upstream bindings that the `torch-mlir` wheel carries.
"""
import functools
import sys
import types

try:  # pragma: no cover - depends on what is installed
    from mlir import ir, passmanager  # type: ignore
    from mlir.dialects import irdl, func, scf, arith  # type: ignore
    from mlir.dialects import llvm as llvm_dialect  # type: ignore
    from mlir.dialects.ext import Pure  # type: ignore
    from mlir.execution_engine import ExecutionEngine  # type: ignore

    SOURCE = "mlir"
except ImportError:
    from torch_mlir import ir, passmanager  # type: ignore
    from torch_mlir.dialects import irdl, func, scf, arith  # type: ignore
    from torch_mlir.dialects import llvm as llvm_dialect  # type: ignore
    from torch_mlir.dialects.ext import Pure  # type: ignore
    from torch_mlir.execution_engine import ExecutionEngine  # type: ignore

    SOURCE = "torch_mlir"

# The bindings look for the Python module of each dialect whose ops they wrap
# (`<package>.dialects.<namespace>`) and, when there is none, try the import again for every op:
# dg's ops have no generated classes, so an empty module stands in for them (a compile made a
# hundred failed imports, 10% of its time in the passes).
_DG_OPS = f"{SOURCE}.dialects.dg"
sys.modules.setdefault(_DG_OPS, types.ModuleType(_DG_OPS))

try:
    from importlib.metadata import version as _version

    VERSION = f"{SOURCE} {_version(SOURCE.replace('_', '-'))}"
except Exception:  # pragma: no cover - a source checkout without metadata
    VERSION = SOURCE

# LLVM options for the bindings' own LLVM (the one their ExecutionEngine optimizes with). The SLP
# vectorizer is off: on some functions its cost model ran for minutes (a loop with an early
# return of a 10-tuple: 35 to 200 s against about 1 s without it), and the benchmarks gained
# nothing from it; the loop vectorizer stays on.
LLVM_OPTIONS = ("-vectorize-slp=false",)


@functools.cache
def set_llvm_options() -> None:
    """Give LLVM_OPTIONS to the library that carries the bindings' LLVM (once per process)."""
    import ctypes
    from pathlib import Path

    libs = Path(ir.__file__).resolve().parent / "_mlir_libs"
    for path in sorted(libs.glob("lib*.so*")):
        try:
            fn = ctypes.CDLL(str(path)).LLVMParseCommandLineOptions
        except (OSError, AttributeError):
            continue
        argv = (ctypes.c_char_p * (1 + len(LLVM_OPTIONS)))(b"dg", *(o.encode() for o in LLVM_OPTIONS))
        fn(len(argv), argv, None)
        return


__all__ = ["ir", "passmanager", "irdl", "func", "scf", "arith", "llvm_dialect", "Pure", "ExecutionEngine", "SOURCE", "VERSION",
           "LLVM_OPTIONS", "set_llvm_options"]
