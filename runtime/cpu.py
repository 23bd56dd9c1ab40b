"""The CPU target: compiled dg code called on NumPy arrays.

Expects: the dg IR of one specialization at the `grad` stage (a `Unit`: what the emitter made,
with its gradients). Guarantees: `CPU.compile(unit)` is its object code (lowering.codegen: from
the disk cache, else the pipeline to the LLVM dialect, LLVM through llvmlite, and the cache; a
large program's quick code first while a worker optimizes it), and `CPU.load(code)` the
`CpuProgram` whose `call(symbol, arrays)` runs a compiled function on NumPy arrays and returns
NumPy arrays (runtime.targets.build does both). A later process that finds the code in the
disk cache skips the emitter, MLIR and LLVM altogether.
Arguments travel as memref descriptors (runtime.descriptors: int64 words, all of a call's in
one buffer) pointing at the arrays' data (no copy); a dense result buffer becomes its NumPy
array's memory, other results are copied out (one-shot bufferization with ownership-based
deallocation makes returned buffers the caller's). Compiled code reaches Python through
process-wide runtime symbols (runtime.linking: print, breakpoint, MLIR's `memrefCopy`) that
dispatch to the program being called. A failed check stays in compiled code: it is recorded
in the program's state global (`core.abi.STATE`), which the executor resets before a call and
reads after it. Repeated calls of the same shapes take the quick call (runtime.fastcall).
"""
from __future__ import annotations

import ctypes
import threading
import time

import numpy as np

from dg.core.abi import GUARDED, INNER_FRAMES, LINKED, MAX_FRAMES
from dg.core.errors import DgError, DgRuntimeError, with_call_stack
from dg.core.locations import loc_from_row
from dg.core.types import np_dtype, parse_mlir_type
from dg.lowering import pipeline
from dg.lowering.codegen import cache, lower, tiers
from dg.lowering.codegen.units import Unit

from . import compile_log, fastcall, interrupt
from .descriptors import ArgumentTooLarge, Layout
from .interp import _Breakpoints, _Console
from .linking import HOST_STOPPED, THREAD_CALLS, Loaded

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))  # what a Python float argument can be in a quick call

_NEVER_STALE = ctypes.c_int64(0)  # (the stale word of code that nothing replaces: CpuProgram.stale_word)


class CpuTarget:
    """Compiled code for this CPU (runtime.targets.Target)."""

    name = "cpu"

    def key(self, unit: Unit) -> str:
        """The unit's disk cache key."""
        return cache.key(unit.text, pipeline.identity() + f"|entry={unit.entry}")

    def compile(self, unit: Unit) -> tiers.Code:
        """The unit's object code: from the disk cache, else made and stored there; a large
        program's quick code first, while a worker optimizes it (codegen.tiers)."""
        return tiers.build(self.key(unit), unit, lower.cpu, quick_start=True)

    def cached(self, unit: Unit) -> tiers.Code | None:
        """The unit's object code if the disk cache holds it, else None."""
        return tiers.cached(self.key(unit), quick_start=True)

    def keep(self, unit: Unit, meta: dict, blob: bytes) -> tiers.Code:
        """Object code made for the unit elsewhere (codegen.tiers.make's, in runtime.tiered's
        worker), stored in the disk cache."""
        return tiers.keep(self.key(unit), meta, blob)

    def load(self, code: tiers.Code) -> "CpuProgram":
        return CpuProgram(code)


CPU = CpuTarget()


class Entry:
    """How to call one compiled function: its C entry point, the program's state words in the
    code it belongs to, its descriptors' `layout`, and a pool of buffers for them (one per call
    in flight; a call takes one and gives it back)."""

    __slots__ = ("fn", "state", "layout", "pool")

    def __init__(self, fn, state, layout: Layout):
        self.fn, self.state, self.layout = fn, state, layout
        self.pool: list = []


class CpuProgram:
    """A compiled dg module loaded: its functions callable on NumPy arrays. `free` frees the
    buffers its results come in (None: the C library's free)."""

    def __init__(self, code: tiers.Code, free=None):
        meta = code.meta
        self.free = free
        self.from_cache = code.from_cache
        self.signatures = {sym: ([parse_mlir_type(t) for t in ins], [parse_mlir_type(t) for t in outs])
                           for sym, (ins, outs) in meta["signatures"].items()}
        self.checks = [(loc_from_row(place), message, n) for place, message, n in meta["checks"]]
        self.alloc_sites = [loc_from_row(place) for place in meta["alloc_sites"]]
        self.host_calls = meta["host_calls"]
        self.call_sites = [loc_from_row(place) for place in meta["call_sites"]]
        self.opt_level = code.opt_level
        self._retired: list = []  # the code that optimized code replaced (a call may still run it)
        self._use(Loaded(code.pieces))
        self.optimized = code.optimizing  # optimizer.Optimizing while a worker optimizes this quick code
        self._lock = threading.RLock()
        # The id of the thread whose call of this program runs, else 0 (the general path takes
        # it under the lock, the quick call only when free: runtime.fastcall)
        self.busy = ctypes.c_int64(0)
        self.waiting = ctypes.c_int64(0)  # 1 while the general path waits for `busy` (under the lock)
        self.on_tap = _untapped  # (tap id, value): where shadow mode's taps go
        self._interrupted = interrupt.flag()

    def _use(self, loaded: Loaded) -> None:
        """The loaded code runs the calls from now on."""
        self.loaded, self.state = loaded, loaded.state
        self._entry: dict = {}

    def _take_optimized(self) -> None:
        """Between calls: the optimized code the worker made runs the calls from now on."""
        with self._lock:
            done, self.optimized = self.optimized, None
            if done is not None and done.blob is not None:
                try:
                    loaded = Loaded([done.blob])
                except DgError as e:  # (the quick code goes on running the calls)
                    compile_log.logger.warning("dg: the optimized code is not used: %s", e.raw_message)
                    return
                self._retired.append(self.loaded)
                self._use(loaded)
                self.opt_level = done.level

    # ------------------------------------------------------------ callbacks from compiled code
    def host(self, hid: int, *value) -> None:
        """print or breakpoint from compiled code, as the interpreter does them. Once a check has
        failed the call only winds down: its prints and breakpoints no longer happen (the
        interpreter stops at the failure). An exception here (pdb quit, Ctrl-C) cannot pass
        through the compiled frames: it is kept, the call winds down, and `call` raises it."""
        state = self.state
        if (state is not None and state[0]) or THREAD_CALLS.host_error is not None:
            return
        kind, *payload = self.host_calls[hid]
        try:
            if kind == "tap":
                self.on_tap(payload[0], *value)
            elif kind == "print":
                pieces, end = payload
                _Console.print(tuple(pieces), end, *value)
            else:
                name, last, where = payload
                _Breakpoints.add(name, last, loc_from_row(where), *value)
        except BaseException as e:  # raised again by `call`, after the compiled frames
            THREAD_CALLS.host_error = e
            if state is not None:  # (a program with loops or checks has one: it stops them early)
                state[0] = HOST_STOPPED

    # ------------------------------------------------------------ calls
    def entry(self, symbol: str) -> Entry:
        """Entry `symbol` of the code that runs the calls now."""
        e = self._entry.get(symbol)
        if e is None:
            ins, outs = self.signatures[symbol]
            fn = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p)(self.loaded.function(GUARDED + LINKED + symbol))
            layout = Layout([np.dtype(np_dtype(t.dtype)) for t in ins], [t.rank for t in ins], outs, self.free)
            e = self._entry[symbol] = Entry(fn, self.state, layout)
        return e

    def call(self, symbol: str, arrays: list):
        if self.optimized is not None and self.optimized.done and not THREAD_CALLS.stack:
            self._take_optimized()
        e = self._entry.get(symbol) or self.entry(symbol)
        layout = e.layout
        try:  # (another thread may take the last spare between a test and a pop)
            bufs = e.pool.pop()
        except IndexError:
            bufs = layout.buffers()
        descs, res, argv = bufs
        keep = arrays
        inputs = layout.pack(arrays, descs)  # arrays that need nothing done: their addresses
        if inputs is None:
            try:
                keep, inputs = layout.pack_any(arrays, descs)
            except ArgumentTooLarge:
                e.pool.append(bufs)
                raise
        local = THREAD_CALLS
        stack, budget = local.stack, local.budget
        # One call of a program at a time: its shared state (core.abi.STATE: the first failed
        # check, the stack in use) belongs to that call. A call made from a callback inside it
        # (a breakpoint) nests: it saves the outer call's state and puts it back.
        failed = None
        state = e.state
        if not stack:  # the outermost dg call on this thread: Ctrl-C stops it
            interrupt.arm()
        with self._lock:
            nested = self in stack
            me = 0 if nested else threading.get_ident()
            try:
                if me:
                    self._claim(me)
                saved = tuple(state) if state is not None and nested else None
                if state is not None:
                    state[0] = state[1] = 0
                    state[2] = budget
                stack.append(self)
                try:
                    no_memory = e.fn(argv)
                finally:
                    stack.pop()
                    if state is not None:
                        failed = (state[0] - 1, state[3], state[4], state[5:]) if state[0] else None
                        if saved is not None:
                            state[:] = saved
            finally:
                if me and self.busy.value == me:
                    self.busy.value = 0
        try:  # (`keep` holds the copies the descriptors point into until the results are out)
            return self.outcome(e, no_memory, res, inputs, failed, not stack)
        finally:
            e.pool.append(bufs)
            del keep

    def stale_word(self) -> ctypes.c_int64:
        """The word that turns nonzero once this program has newer code than it runs now (the
        worker's optimized code, for quick-start code): a quick call made now stops there."""
        optimizing = self.optimized
        return _NEVER_STALE if optimizing is None else optimizing.finished_word

    def quick(self, symbol: str, args: tuple, proto) -> "fastcall.Quick | None":
        """The quick call (runtime.fastcall) of entry `symbol` for arguments shaped as `args` (a
        call's, just run) whose results `signature.to_python` arranges as `proto`; None where
        only the general path can make the call: for a program with prints or breakpoints or
        results freed by other than the C library (the CUDA target's host code), results in
        records or nested tuples, arguments that are not all arrays of the entry's dtypes, or
        on a thread already inside a dg call. On quick-start code, it runs the calls until the
        optimized code has arrived (`stale_word`)."""
        if self.host_calls or self.free is not None or THREAD_CALLS.stack:
            return None
        e = self._entry.get(symbol) or self.entry(symbol)
        layout = e.layout
        leaves = fastcall._leaves(args)
        if leaves is None or len(leaves) != len(layout.dtypes) or any(
                (dt not in _FLOATS or rank) if type(a) is float else
                (a.dtype != dt or np.dtype(a.dtype.str) != a.dtype or a.ndim != rank)
                for (_, _, a), dt, rank in zip(leaves, layout.dtypes, layout.ranks)):
            return None
        if proto is None:
            protos, single = [], False
        elif type(proto) is tuple and not any(isinstance(p, tuple) for p in proto):
            protos, single = list(proto), False
        elif isinstance(proto, tuple):
            return None
        else:
            protos, single = [proto], True
        if len(protos) != len(layout.results):
            return None
        outs = []
        for (_, _, dtype), p in zip(layout.results, protos):
            if getattr(p, "dtype", None) == "u64" and dtype == np.int64:  # (compiled code holds keys as i64)
                dtype = np.dtype(np.uint64)
            if np.dtype(dtype.str) != dtype:
                return None
            outs.append(dtype)
        return fastcall.Quick(self, e, leaves, len(args), outs, single, THREAD_CALLS.budget)

    def _claim(self, me: int) -> None:
        """The program taken for a call on thread `me` (under the lock): once a quick call on
        another thread has given it back (which takes no new call while this waits)."""
        if fastcall.claim(self.busy, me):
            return
        self.waiting.value = 1
        try:
            while not fastcall.claim(self.busy, me):
                time.sleep(5e-5)
        finally:
            self.waiting.value = 0

    def outcome(self, e: Entry, no_memory: int, res, inputs, failed, outermost: bool):
        """What a call of entry `e` that ran gives (or raises): its results from the results struct
        `res` (`inputs` the arguments' addresses), `failed` the failed check's (id, values, frames)
        from the state words, or None; `outermost` when no other dg call is in progress on the
        thread (only then does a Ctrl-C raise)."""
        # (after a failed allocation the results were never written; what the call had allocated is lost)
        layout = e.layout
        out = None if no_memory else layout.adopt(layout.out_struct.unpack_from(res), inputs)
        if self._interrupted.value and outermost:  # (the loops ended early: the results are not all there)
            raise KeyboardInterrupt
        local = THREAD_CALLS
        if no_memory and failed is None:  # (else a check that failed before: its stand-in may be what did not fit)
            raise DgRuntimeError("out of memory: the value computed here does not fit in memory",
                                 self.alloc_sites[no_memory - 1])
        error = local.host_error
        if error is not None:
            local.host_error = None
            raise error
        if failed is not None:
            check, a, b, frames = failed
            loc, message, n = self.checks[check]
            error = DgRuntimeError(message.format(a, b) if n else message, loc)
            raise with_call_stack(error, [self.call_sites[k] if k >= 0 else -k for k in _call_stack(frames)])
        if not layout.results:
            return None
        return out[0] if len(out) == 1 else tuple(out)


def _untapped(tap_id, value) -> None:
    pass


def _call_stack(frames: list) -> list:
    """The call sites' ids in state words [5:] (core.abi's layout), innermost first; where the
    middle of a deep stack was not kept, minus how many calls are missing there."""
    n, slots = frames[0], frames[1:]
    if n <= MAX_FRAMES:
        return list(slots[:n])
    ring = MAX_FRAMES - INNER_FRAMES
    outer = [slots[INNER_FRAMES + (k - INNER_FRAMES) % ring] for k in range(n - ring, n)]
    return list(slots[:INNER_FRAMES]) + [-(n - MAX_FRAMES)] + outer
