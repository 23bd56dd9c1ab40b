"""Object code for a program, from the disk cache or made: at once optimized, or quick first.

Expects: a `Unit` (lowering.codegen.units), the lowering that takes it to LLVM IR
(lowering.codegen.lower: `cpu`, `cuda(arch)`) and its disk cache key. Guarantees: `build(key,
unit, to, quick_start)` is its `Code`: the object code the disk cache holds under the key
(`cache.get_or_build`), else made and stored there: LLVM's level for the program (3, 2 for a
large one: lower.opt_level) or, with `quick_start` and for a program of more than
QUICK_START_LINES lines of LLVM IR, the quick level's code while a worker process optimizes it
(lowering.codegen.optimizer: `Code.optimizing`; the worker's code replaces the quick code in the
cache). Quick code found in the cache has its optimization resumed from the LLVM IR kept beside
it. `cached(key)` is the cache's code or None; `make(unit, to)` is (metadata, object code) at
the level due, with no cache (the tiered start's worker: runtime.tiered), and `keep(key, meta,
blob)` stores such code.
"""
from __future__ import annotations

import contextlib
import itertools
import os
import time

from .. import blas, pipeline
from . import cache, lower, optimizer
from .objects import object_code, quick_object_codes
from .units import LlvmUnit, Unit

# A program whose LLVM IR has more lines than this starts on quick code while a worker optimizes
# it (lowering.codegen.optimizer); its calls take the quick call meanwhile (runtime.fastcall).
# LLVM's -O3 has a high floor: medians of 5 (tests/runtime/test_quick_call.py's functions, and
# benchmarks/compile.py's order=1): 171 lines 52 ms at -O3 against 11 ms quick, 404 lines 120
# against 17, 650 lines 229 against 27, 662 lines (order=1) 139 against 24. Below this size the
# quick code gains less than 50 ms, and a worker process would be started for little.
QUICK_START_LINES = 300


class Code:
    """A program's object code as a JIT links it: `meta` (lower.to_llvm's tables, with LLVM's
    `opt_level` and the `seconds` its making took), `pieces` (one object, or the quick level's
    pieces, made at once), whether it came `from_cache`, and for quick code, the worker that
    `optimizing` it (optimizer.Optimizing), or None."""

    __slots__ = ("meta", "pieces", "from_cache", "optimizing")

    def __init__(self, meta: dict, pieces: list, from_cache: bool, optimizing=None):
        self.meta, self.pieces, self.from_cache, self.optimizing = meta, pieces, from_cache, optimizing

    @property
    def opt_level(self) -> int:
        return self.meta.get("opt_level", 3)


@contextlib.contextmanager
def blas_on_one_thread():
    """Inside, the BLAS that compiled code calls runs each product on one thread (as it was after,
    unless changed meanwhile). For while a worker optimizes a program: an OpenBLAS thread that
    waits for the others gives up its core (sched_yield), and the idle worker then keeps the
    core until the next clock tick. The MLP training step of benchmarks/cpu.py took 88 ms a call
    so on 2 cores, 2-3 ms on one thread, and 1.5-2 ms once optimized, on two."""
    counts = blas.thread_count()
    before = counts[0]() if counts else 1
    if before > 1:
        counts[1](1)
    try:
        yield
    finally:
        if before > 1 and counts[0]() == 1:
            counts[1](before)


def make(unit: Unit, to=lower.cpu) -> tuple[dict, bytes]:
    """(metadata, object code) of a unit, optimized at the level due to it (no cache)."""
    llvm = lower.to_llvm(unit, to)
    return _object_code(llvm, llvm.level)


def build(key: str, unit: Unit, to=lower.cpu, quick_start: bool = False, meanwhile=blas_on_one_thread) -> Code:
    """The unit's code: the disk cache's under `key`, else made by `to` and LLVM, and stored;
    with `quick_start` (and `DG_QUICK_START` not 0), a large program's quick code first, while a
    worker optimizes it (`meanwhile` entered while it runs)."""
    quick_start = quick_start and optimizer.enabled()
    started: list = []

    def fresh() -> tuple[dict, bytes]:
        llvm = lower.to_llvm(unit, to)
        if not quick_start or llvm.lines <= QUICK_START_LINES:  # (LLVM optimizes it about as fast as a worker starts)
            return _object_code(llvm, llvm.level)
        meta, pieces = _object_code(llvm, 0)
        # The quick code goes into the disk cache at once (get_or_build), and the LLVM IR beside it,
        # so that a process that ends before the worker does still spares the next one its compile;
        # the worker's optimized code replaces both.
        cache.store(_llvm_ir_key(key), {"level": llvm.level, "meta": llvm.meta}, llvm.text.encode())
        started.append(llvm)
        return {**meta, "pieces": [len(b) for b in pieces]}, b"".join(pieces)

    meta, blob, hit = cache.get_or_build(key, fresh)
    code = Code(meta, _pieces(meta, blob), from_cache=hit)
    if started:  # (once the quick code is stored: the worker's code is to replace it)
        code.optimizing = optimizer.Optimizing(started[0], key, meanwhile, drop=_llvm_ir_key(key))
    elif hit and quick_start:
        code.optimizing = _resumed(key, code, meanwhile)
    return code


def cached(key: str, quick_start: bool = False, meanwhile=blas_on_one_thread) -> Code | None:
    """The code the disk cache holds under `key` (quick code's optimization resumed, as `build`
    does), or None."""
    hit = cache.load(key)
    if hit is None:
        return None
    code = Code(hit[0], _pieces(*hit), from_cache=True)
    if quick_start and optimizer.enabled():
        code.optimizing = _resumed(key, code, meanwhile)
    return code


def keep(key: str, meta: dict, blob: bytes) -> Code:
    """Code made elsewhere (`make`'s, in a worker process), stored under `key`."""
    cache.store(key, meta, blob)
    return Code(meta, [blob], from_cache=False)


def _resumed(key: str, code: Code, meanwhile) -> "optimizer.Optimizing | None":
    """For quick code from the cache: its optimization, from the LLVM IR kept beside it (an
    earlier process ended before its worker did); None for optimized code."""
    if code.opt_level != 0:
        return None
    kept = cache.load(_llvm_ir_key(key))
    if kept is None:
        return None
    head, text = kept
    return optimizer.Optimizing(LlvmUnit(text.decode(), head["level"], head["meta"]), key, meanwhile,
                                drop=_llvm_ir_key(key))


def _object_code(llvm: LlvmUnit, level: int) -> tuple[dict, bytes | list]:
    """The unit's metadata with LLVM's time and level, and its object code at `level`: at the
    quick level, a list of pieces made at once, one per core (objects.split_module)."""
    t0 = time.perf_counter()
    blob = quick_object_codes(llvm.text, _cores()) if level == 0 else object_code(llvm.text, level)
    took = time.perf_counter() - t0
    pipeline.note_time("LLVM", took)
    return {**llvm.meta, "seconds": {**llvm.meta["seconds"], "llvm": took}, "opt_level": level}, blob


def _pieces(meta: dict, blob: bytes) -> list:
    """The objects one JIT links: quick code's pieces, stored end to end (their lengths in the
    metadata), else the one object."""
    if "pieces" not in meta:
        return [blob]
    ends = list(itertools.accumulate(meta["pieces"]))
    return [blob[end - n:end] for n, end in zip(meta["pieces"], ends)]


def _llvm_ir_key(key: str) -> str:
    """The disk cache key of the LLVM IR kept beside a program's quick code."""
    return cache.derived_key(key, "llvm-ir")


def _cores() -> int:
    """The cores this process may run on (at most 4: pieces of a module below a few thousand
    lines gain nothing)."""
    try:
        return min(4, len(os.sched_getaffinity(0)))
    except AttributeError:
        return min(4, os.cpu_count() or 1)
