"""The targets compiled code runs on, side by side: the CPU (runtime.cpu) and CUDA
(runtime.cuda_program).

Expects: a `Unit` (lowering.codegen.units: a specialization's `grad`-stage IR and its entry).
Guarantees: `build(target, unit)` is the target's program for it, ready to `call(symbol,
arrays)`: its object code from the disk cache, else made (`target.compile`: lowering.codegen),
then loaded (`target.load`); the compile log says which and how long it took. `cached(target,
unit)` is the program only where the disk cache holds its code, else None. `TARGETS` names them.
"""
from __future__ import annotations

import time
from typing import Protocol

from dg.lowering.codegen import cache
from dg.lowering.codegen.tiers import Code
from dg.lowering.codegen.units import Unit

from . import compile_log
from .cpu import CPU
from .cuda_program import CUDA


class Program(Protocol):
    from_cache: bool

    def call(self, symbol: str, arrays: list):
        """The function `symbol` run on NumPy arrays: its results as NumPy arrays (one, a tuple,
        or None), or a located DgRuntimeError."""


class Target(Protocol):
    """What compiles and runs a unit: its disk cache key, its object code (from the cache or
    made; or only from the cache), and that code loaded as a program."""

    name: str

    def key(self, unit: Unit) -> str: ...

    def compile(self, unit: Unit) -> Code: ...

    def cached(self, unit: Unit) -> Code | None: ...

    def load(self, code: Code) -> Program: ...


TARGETS: dict = {CPU.name: CPU, CUDA.name: CUDA}


def build(target: Target, unit: Unit) -> Program:
    """The target's program for the unit (see the module's docstring)."""
    t0 = time.perf_counter()
    code = target.compile(unit)
    program = target.load(code)
    log_built(unit.entry, code, t0)
    return program


def cached(target: Target, unit: Unit) -> Program | None:
    """The target's program for the unit where the disk cache holds its code, else None."""
    t0 = time.perf_counter()
    code = target.cached(unit)
    if code is None:
        return None
    program = target.load(code)
    log_built(unit.entry, code, t0)
    return program


def log_built(entry: str | None, code: Code, t0: float) -> None:
    """The compile log's line for code made ready since `t0`: loaded from the disk cache, or
    compiled (the passes' and LLVM's seconds, and why)."""
    name = entry or "module"
    worker = code.optimizing
    if code.from_cache:
        why = f": quick code, which a worker optimizes at -O{worker.level}" if worker is not None else ""
        compile_log.log(f"{name}: loaded from the disk cache in {time.perf_counter() - t0:.3g} s{why}")
        return
    if worker is not None:
        why = f"a worker process optimizes it at -O{worker.level}, and its code runs the calls once it is done"
    else:
        why = "disk cache miss" if cache.folder() is not None else "disk cache off"
    took = code.meta["seconds"]
    compile_log.log(f"{name}: compiled in {time.perf_counter() - t0:.3g} s: passes {took['passes']:.3g} s, "
                    f"LLVM -O{code.opt_level} {took['llvm']:.3g} s ({why})")
