"""The CPU executor: compiled dg code called on NumPy arrays.

Expects: the dg IR of one specialization at the `grad` stage (what the
emitter made, with its gradients). Guarantees:
`CpuProgram.build(text, module).call(symbol, arrays)` runs the compiled
function on NumPy arrays and returns NumPy arrays. The module goes down the
pipeline to the LLVM dialect (`lowering.pipeline`, stage `llvm`); LLVM (through
llvmlite) optimizes and compiles its translation (`object_code`) and its
object code is kept in the on-disk cache (`runtime.cache`); the object is
loaded and linked with llvmlite's JIT, so a later process that finds it
skips the emitter, MLIR and LLVM altogether.
Arguments travel as memref descriptors (int64 words, all of a call's in
one buffer) pointing at the arrays' data (no copy); a dense result buffer
becomes its NumPy array's memory, other results are copied out
(one-shot bufferization with ownership-based deallocation makes returned
buffers the caller's). Compiled code reaches Python through process-wide
runtime symbols (print, breakpoint, MLIR's `memrefCopy`) that dispatch to
the program being called. A failed check stays in compiled code: it is
recorded in the program's state global (`core.abi.STATE`), which the
executor resets before a call and reads after it.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
import threading
import time

import numpy as np

from dg.core.abi import GUARDED, HOST, INNER_FRAMES, INTERRUPT, LINKED, LONGJMP, MAX_FRAMES, SETJMP, STATE, STATE_WORDS
from dg.core.errors import DgError, DgRuntimeError, with_call_stack
from dg.core.locations import loc_from_row
from dg.core.types import MLIR_TO_DG, np_dtype, parse_mlir_type
from dg.lowering import blas, pipeline
from dg.lowering.codegen import cache, lower, tiers
from dg.lowering.codegen.object_room import refuse_unplaceable
from dg.lowering.codegen.units import Unit

from . import collectives, compile_log, fastcall, interrupt, threads
from .interp import _Breakpoints, _Console

_libc = ctypes.CDLL(ctypes.util.find_library("c"))
_libc.free.argtypes = [ctypes.c_void_p]
_libc.free.restype = None

_SIZES_AND_STRIDES: dict = {}
_SMALL_RESULT = 16 << 10  # bytes: results up to this size are copied out (see _adopter)

# mallopt(3) parameters (glibc's malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def keep_freed_memory() -> bool:
    """Have glibc's malloc keep the memory a call frees for the next call, rather than hand it
    back to the kernel and fault it in again: compiled code allocates its temporaries (megabytes
    for a convolutional network's step) with malloc, and by default blocks of 128 KiB and more
    are mmap'd and unmapped at every call, which took two thirds of a LeNet step's time. Blocks
    up to 32 MiB (glibc's largest threshold) come from the heap, and the heap is trimmed only
    beyond 512 MiB free. Once per process, when the first program is loaded; `DG_KEEP_MEMORY=0`
    leaves malloc as it was. True if it was set."""
    if os.environ.get("DG_KEEP_MEMORY", "1") == "0" or not hasattr(_libc, "mallopt"):
        return False
    _libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    _libc.mallopt.restype = ctypes.c_int
    return bool(_libc.mallopt(_M_MMAP_THRESHOLD, 32 << 20)) and bool(_libc.mallopt(_M_TRIM_THRESHOLD, 512 << 20))


def _sizes_and_strides(shape: tuple) -> tuple:
    """The sizes and (row-major) strides words of a C-contiguous array's memref descriptor."""
    t = _SIZES_AND_STRIDES.get(shape)
    if t is None:
        strides, n = [], 1
        for d in reversed(shape):
            strides.append(n)
            n *= d
        if len(_SIZES_AND_STRIDES) >= 4096:  # many shapes: start again
            _SIZES_AND_STRIDES.clear()
        t = _SIZES_AND_STRIDES[shape] = (*shape, *reversed(strides))
    return t


class _Memory:
    """A strided block of `dtype` elements at `address` as a NumPy-readable buffer (byte strides,
    the first element at `address`); with `owned`, the malloc'd block that is freed when the last
    array on it goes. (Not a ctypes array: each new length of those makes a new ctypes type, which
    only a garbage collection reclaims. Not `as_strided`: that costs ten times as much.)"""

    __slots__ = ("__array_interface__", "owned", "__weakref__")

    def __init__(self, address: int, shape: tuple, typestr: str, strides=None, owned: int = 0):
        self.__array_interface__ = {"data": (address, False), "shape": shape, "typestr": typestr,
                                    "strides": strides, "version": 3}
        self.owned = owned

    def __del__(self):
        if self.owned and _libc is not None:
            _libc.free(self.owned)


def _array(address: int, shape: tuple, dtype: np.dtype, strides=None, owned: int = 0) -> np.ndarray:
    """An array on memory at `address` (C order unless byte `strides` are given)."""
    a = np.asarray(_Memory(address, shape, dtype.str, strides, owned))
    return a if a.dtype == dtype else a.view(dtype)  # bf16's typestr is raw bytes ('<V2')


def _adopt(words: tuple, outs: list, inputs: set, free=None) -> list:
    """NumPy arrays for a call's results (`outs`: word offset, rank, dtype each), copying only when needed.

    A dense result buffer the call allocated becomes the array's memory and is freed when
    the array goes (with `free` other than the C library's, it is copied and freed by `free`).
    Results that are views of an argument, a buffer an earlier result already took, strided or
    0-d results are copied out (and their buffers freed here).
    (Written for few steps: this runs after the compiled code has pushed Python's data out of
    the caches.)
    """
    free = free or _libc.free
    own = free is _libc.free  # (else every result is copied out)
    taken: set = set()
    out = []
    for off, rank, dtype in outs:
        alloc, aligned, offset = words[off:off + 3]
        shape = words[off + 3:off + 3 + rank]
        address = aligned + offset * dtype.itemsize
        if (own and rank and alloc and alloc not in inputs and alloc not in taken and 0 not in shape
                and words[off + 3:off + 3 + 2 * rank] == _sizes_and_strides(shape)):
            taken.add(alloc)
            out.append(_array(address, shape, dtype, owned=alloc))
        elif not aligned or 0 in shape:
            out.append(np.zeros(shape, dtype=dtype))
        elif not rank:  # a scalar: its bytes, read at once (a view and a copy cost ten times as much)
            out.append(np.frombuffer(ctypes.string_at(address, dtype.itemsize), dtype).reshape(()))
        else:
            item = dtype.itemsize
            strides = tuple(st * item for st in words[off + 3 + rank:off + 3 + 2 * rank])
            out.append(_array(address, shape, dtype, strides).copy())
    for off, _, _ in outs:
        alloc = words[off]
        if alloc and alloc not in inputs and alloc not in taken:
            taken.add(alloc)
            free(alloc)
    return out


class _Unranked(ctypes.Structure):
    _fields_ = [("rank", ctypes.c_int64), ("descriptor", ctypes.c_void_p)]


def _view(u: _Unranked, item: int) -> np.ndarray:
    """A NumPy view (of raw bytes, `item` wide) on an unranked memref's data."""
    rank = u.rank
    raw = (ctypes.c_int64 * (3 + 2 * rank)).from_address(u.descriptor)
    aligned, offset = raw[1], raw[2]
    shape, strides = tuple(raw[3:3 + rank]), tuple(raw[3 + rank:3 + 2 * rank])
    if 0 in shape:
        return np.zeros(shape, dtype=f"V{item}")
    return _array(aligned + offset * item, shape, np.dtype(f"V{item}"), tuple(st * item for st in strides))


def _memref_copy(item, src, dst):
    """MLIR's `memrefCopy` runtime function (strided copies that are not one memcpy). A Ctrl-C that
    Python raises in here must not leave the copy undone (compiled code goes on with the data):
    the copy is made again, and the KeyboardInterrupt raised after the call."""
    while True:
        try:
            np.copyto(_view(dst.contents, item), _view(src.contents, item))
            return
        except KeyboardInterrupt as e:
            if _Runtime.local.host_error is None:
                _Runtime.local.host_error = e


def _stack_budget() -> int:
    """Bytes of stack a call's dg functions may use on this thread: half of what the thread has
    (a new thread gets RLIMIT_STACK from glibc, or what threading.stack_size set). Worked out once
    per thread: a thread's stack does not change size."""
    import resource

    soft = resource.getrlimit(resource.RLIMIT_STACK)[0]
    limit = soft if 0 < soft < (1 << 40) else 0
    if threading.current_thread() is threading.main_thread():
        size = limit or 8 << 20
    else:
        size = threading.stack_size() or limit or 2 << 20
    return min(size, 64 << 20) // 2


class _ThreadState(threading.local):
    """What each thread keeps for its calls: the programs being called (innermost last), the stack
    budget (worked out once per thread: a thread's stack does not change size) and an exception a
    callback raised while compiled frames were in the way."""

    host_error = None

    def __init__(self):
        self.stack: list = []
        self.budget = _stack_budget()


class _Runtime:
    """The symbols compiled code calls back into; each call goes to the program being run."""

    local = _ThreadState()
    symbols: dict = {}  # name -> address, complete once set
    keep: list = []
    lock = threading.Lock()

    @classmethod
    def active(cls) -> "CpuProgram":
        return cls.local.stack[-1]

    @classmethod
    def install(cls) -> dict:
        """The symbols, registered with LLVM once per process: the first caller does it under
        the lock, and every other waits for it rather than compile against a partial set."""
        if cls.symbols:
            return cls.symbols
        with cls.lock:
            if not cls.symbols:
                keep_freed_memory()
                cls.symbols = cls._register()
        return cls.symbols

    @classmethod
    def _register(cls) -> dict:
        import llvmlite.binding as llvm

        symbols = {}

        def add(name, cfunc):
            cls.keep.append(cfunc)
            symbols[name] = ctypes.cast(cfunc, ctypes.c_void_p).value

        add("memrefCopy", ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.POINTER(_Unranked),
                                           ctypes.POINTER(_Unranked))(_memref_copy))
        add(f"_mlir_ciface_{HOST}none", ctypes.CFUNCTYPE(None, ctypes.c_int64)(lambda hid: cls.active().host(hid)))
        for elt, dg_dtype in MLIR_TO_DG.items():
            def cb(hid, u, dt=np_dtype(dg_dtype)):
                value = _view(u.contents, dt.itemsize).view(dt).copy()
                cls.active().host(hid, value if value.ndim else value[()])

            add(f"_mlir_ciface_{HOST}{elt}", ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.POINTER(_Unranked))(cb))
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        lib = blas.locate()
        for name, addr in lib.addresses if lib else ():
            symbols[name] = addr
        symbols.update(threads.symbols())
        symbols[INTERRUPT] = interrupt.flag_address()
        symbols.update(collectives.symbols())
        libc = ctypes.CDLL(None)  # the C library's setjmp and longjmp, for the allocation guards
        symbols[SETJMP] = ctypes.cast(libc._setjmp, ctypes.c_void_p).value
        symbols[LONGJMP] = ctypes.cast(libc.longjmp, ctypes.c_void_p).value
        for name, addr in symbols.items():
            llvm.add_symbol(name, addr)
        return symbols



_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))  # what a Python float argument can be in a quick call

# Each thread's dg calls in progress (`.stack`, innermost last).
THREAD_CALLS = _Runtime.local

# What a host call writes into the state word when it raised: past every check's id.
HOST_STOPPED = 1 << 62


class ArgumentTooLarge(MemoryError):
    """Argument `index` is not a C-contiguous array of its dtype, and a copy that is one does not
    fit in memory (a view with zero strides over 2**40 elements): the caller names the parameter."""

    def __init__(self, index: int, shape: tuple, dtype: np.dtype):
        super().__init__(index, shape, dtype)
        self.index, self.shape, self.dtype = index, shape, dtype


def _log_compile(entry: str | None, meta: dict, t0: float, why: str) -> None:
    took = meta["seconds"]
    compile_log.log(f"{entry or 'module'}: compiled in {time.perf_counter() - t0:.3g} s: passes "
                    f"{took['passes']:.3g} s, LLVM -O{meta.get('opt_level', 3)} {took['llvm']:.3g} s ({why})")


_NEVER_STALE = ctypes.c_int64(0)  # (the stale word of code that nothing replaces: CpuProgram.stale_word)


class CpuProgram:
    """A compiled dg module: its functions callable on NumPy arrays."""

    def __init__(self, code: tiers.Code):
        _Runtime.install()
        meta = code.meta
        self.from_cache = code.from_cache
        self.signatures = {sym: ([parse_mlir_type(t) for t in ins], [parse_mlir_type(t) for t in outs])
                           for sym, (ins, outs) in meta["signatures"].items()}
        self.checks = [(loc_from_row(place), message, n) for place, message, n in meta["checks"]]
        self.alloc_sites = [loc_from_row(place) for place in meta["alloc_sites"]]
        self.host_calls = meta["host_calls"]
        self.call_sites = [loc_from_row(place) for place in meta["call_sites"]]
        self.opt_level = code.opt_level
        self._retired: list = []  # the JITs of code that optimized code replaced (a call may still hold one)
        self._load(code.pieces)
        self.optimized = code.optimizing  # optimizer.Optimizing while a worker optimizes this quick code
        self._lock = threading.RLock()
        # The id of the thread whose call of this program runs, else 0 (the general path takes
        # it under the lock, the quick call only when free: runtime.fastcall)
        self.busy = ctypes.c_int64(0)
        self.waiting = ctypes.c_int64(0)  # 1 while the general path waits for `busy` (under the lock)
        self.on_tap = _untapped  # (tap id, value): where shadow mode's taps go
        self._interrupted = interrupt.flag()

    def _load(self, pieces: list) -> None:
        """Link the object code (its pieces) into a JIT of its own, whose memory manager
        (llvmlite's) places each object's sections in one reservation, as the small code model
        of codegen.objects.object_code needs; a DgError, before anything is linked, for an object
        the manager could not place (codegen.object_room), where it would abort the process."""
        import llvmlite.binding as llvm

        for k, piece in enumerate(pieces):
            refuse_unplaceable(piece, first=k == 0)
        target = llvm.Target.from_default_triple().create_target_machine(opt=3, reloc="pic")
        self._jit = llvm.create_mcjit_compiler(llvm.parse_assembly(""), target, use_lmm=True)
        for piece in pieces:
            self._jit.add_object_file(llvm.ObjectFileRef.from_data(piece))
        self._jit.finalize_object()
        at = self._jit.get_global_value_address(STATE)  # shared with the compiled code
        self._state = (ctypes.c_int64 * STATE_WORDS).from_address(at) if at else None
        self._entry: dict = {}

    def _take_optimized(self) -> None:
        """Between calls: the optimized code the worker made runs the calls from now on."""
        with self._lock:
            done, self.optimized = self.optimized, None
            if done is not None and done.blob is not None:
                quick = self._jit
                try:
                    self._load([done.blob])
                except DgError as e:  # (the quick code goes on running the calls)
                    compile_log.logger.warning("dg: the optimized code is not used: %s", e.raw_message)
                    return
                self._retired.append(quick)
                self.opt_level = done.level

    @classmethod
    def build(cls, text: str, module=None, entry: str | None = None) -> "CpuProgram":
        """The program for this IR at the `grad` stage (every function callable, or only `entry`):
        from the disk cache, else compiled (from `module`, the text parsed, if given) and stored
        there; a large one starts on quick code while a worker optimizes it (codegen.tiers)."""
        t0 = time.perf_counter()
        code = tiers.build(cls.cache_key(text, entry), Unit(text, module, entry), cls.lowering(),
                           quick_start=cls.QUICK_START)
        program = cls(code)
        if code.from_cache:
            why = f": quick code, which a worker optimizes at -O{code.optimizing.level}" if code.optimizing else ""
            compile_log.log(f"{entry or 'module'}: loaded from the disk cache in {time.perf_counter() - t0:.3g} s{why}")
        elif code.optimizing is not None:
            _log_compile(entry, code.meta, t0, f"a worker process optimizes it at -O{code.optimizing.level}, and its "
                         "code runs the calls once it is done")
        else:
            _log_compile(entry, code.meta, t0, "disk cache miss" if cache.folder() is not None else "disk cache off")
        return program

    # Whether a large program starts on unoptimized code while a worker optimizes it (optimizer).
    QUICK_START = True

    @staticmethod
    def lowering():
        return lower.cpu

    @staticmethod
    def cache_key(text: str, entry: str | None) -> str:
        return cache.key(text, pipeline.identity() + f"|entry={entry}")

    @classmethod
    def cached(cls, text: str, entry: str | None = None) -> "CpuProgram | None":
        """The program for this IR from the disk cache, or None."""
        t0 = time.perf_counter()
        code = tiers.cached(cls.cache_key(text, entry), quick_start=cls.QUICK_START)
        if code is None:
            return None
        program = cls(code)
        why = f": quick code, which a worker optimizes at -O{code.optimizing.level}" if code.optimizing else ""
        compile_log.log(f"{entry or 'module'}: loaded from the disk cache in {time.perf_counter() - t0:.3g} s{why}")
        return program

    @classmethod
    def stored(cls, text: str, entry: str | None, meta: dict, blob: bytes, t0: float) -> "CpuProgram":
        """The program for compiled code (codegen.tiers.make's), kept in the disk cache."""
        program = cls(tiers.keep(cls.cache_key(text, entry), meta, blob))
        _log_compile(entry, meta, t0, "disk cache miss" if cache.folder() is not None else "disk cache off")
        return program

    # ------------------------------------------------------------ callbacks from compiled code
    def host(self, hid: int, *value) -> None:
        """print or breakpoint from compiled code, as the interpreter does them. Once a check has
        failed the call only winds down: its prints and breakpoints no longer happen (the
        interpreter stops at the failure). An exception here (pdb quit, Ctrl-C) cannot pass
        through the compiled frames: it is kept, the call winds down, and `call` raises it."""
        state = self._state
        if (state is not None and state[0]) or _Runtime.local.host_error is not None:
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
            _Runtime.local.host_error = e
            if state is not None:  # (a program with loops or checks has one: it stops them early)
                state[0] = HOST_STOPPED

    # ------------------------------------------------------------ calls
    free = None  # what frees the buffers compiled code allocates (None: the C library's free)

    def _function(self, symbol: str) -> "_Entry":
        e = self._entry.get(symbol)
        if e is None:
            ins, outs = self.signatures[symbol]
            addr = self._jit.get_function_address(GUARDED + LINKED + symbol)
            fn = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p)(addr)
            e = self._entry[symbol] = _Entry(fn, [np.dtype(np_dtype(t.dtype)) for t in ins],
                                             [t.rank for t in ins], outs, self.free)
            e.state = self._state
        return e

    def call(self, symbol: str, arrays: list):
        if self.optimized is not None and self.optimized.done and not _Runtime.local.stack:
            self._take_optimized()
        e = self._entry.get(symbol) or self._function(symbol)
        try:  # (another thread may take the last spare between a test and a pop)
            bufs = e.pool.pop()
        except IndexError:
            bufs = e.buffers()
        descs, res, argv = bufs
        keep = arrays
        inputs = e.pack(arrays, descs)  # arrays that need nothing done: their addresses
        if inputs is None:
            keep, words, inputs = [], [], set()
            for i, (a, dt) in enumerate(zip(arrays, e.dtypes)):
                try:  # the buffer protocol accepts only a C-contiguous, writable, non-empty array
                    p = ctypes.addressof(ctypes.c_char.from_buffer(a))
                    if a.dtype != dt:
                        raise TypeError
                except (TypeError, ValueError, AttributeError):
                    try:
                        a = np.asarray(a, dtype=dt, order="C")  # not ascontiguousarray: it makes 0-d arrays 1-d
                    except MemoryError:
                        e.pool.append(bufs)
                        raise ArgumentTooLarge(i, np.shape(a), dt) from None
                    p = _address(a)
                keep.append(a)
                inputs.add(p)
                words += (p, p, 0)
                words += _sizes_and_strides(a.shape)
            e.in_struct.pack_into(descs, 0, *words)
        local = _Runtime.local
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
        try:
            return self.outcome(e, no_memory, res, inputs, failed, not stack)
        finally:
            e.pool.append(bufs)

    def stale_word(self) -> ctypes.c_int64:
        """The word that turns nonzero once this program has newer code than it runs now (the
        worker's optimized code, for quick-start code): a quick call made now stops there."""
        optimizing = self.optimized
        return _NEVER_STALE if optimizing is None else optimizing.finished_word

    def quick(self, symbol: str, args: tuple, proto) -> "fastcall.Quick | None":
        """The quick call (runtime.fastcall) of entry `symbol` for arguments shaped as `args` (a
        call's, just run) whose results `signature.to_python` arranges as `proto`; None where
        only the general path can make the call: for a program with prints or breakpoints,
        results in records or nested tuples, arguments that are not all arrays of the entry's
        dtypes, or on a thread already inside a dg call. On quick-start code, it runs the calls
        until the optimized code has arrived (`stale_word`)."""
        if (self.host_calls or self.free is not None or _Runtime.local.stack
                or type(self).call is not CpuProgram.call):
            return None
        e = self._entry.get(symbol) or self._function(symbol)
        leaves = fastcall._leaves(args)
        if leaves is None or len(leaves) != len(e.dtypes) or any(
                (dt not in _FLOATS or rank) if type(a) is float else
                (a.dtype != dt or np.dtype(a.dtype.str) != a.dtype or a.ndim != rank)
                for (_, _, a), dt, rank in zip(leaves, e.dtypes, e.ranks)):
            return None
        if proto is None:
            protos, single = [], False
        elif type(proto) is tuple and not any(isinstance(p, tuple) for p in proto):
            protos, single = list(proto), False
        elif isinstance(proto, tuple):
            return None
        else:
            protos, single = [proto], True
        if len(protos) != len(e.results):
            return None
        outs = []
        for (_, _, dtype), p in zip(e.results, protos):
            if getattr(p, "dtype", None) == "u64" and dtype == np.int64:  # (compiled code holds keys as i64)
                dtype = np.dtype(np.uint64)
            if np.dtype(dtype.str) != dtype:
                return None
            outs.append(dtype)
        return fastcall.Quick(self, e, leaves, len(args), outs, single, _Runtime.local.budget)

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

    def outcome(self, e: "_Entry", no_memory: int, res, inputs, failed, outermost: bool):
        """What a call of entry `e` that ran gives (or raises): its results from the results struct
        `res` (`inputs` the arguments' addresses), `failed` the failed check's (id, values, frames)
        from the state words, or None; `outermost` when no other dg call is in progress on the
        thread (only then does a Ctrl-C raise)."""
        # (after a failed allocation the results were never written; what the call had allocated is lost)
        out = None if no_memory else e.adopt(e.out_struct.unpack_from(res), inputs)
        if self._interrupted.value and outermost:  # (the loops ended early: the results are not all there)
            raise KeyboardInterrupt
        local = _Runtime.local
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
        if not e.results:
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


def _address(a: np.ndarray) -> int:
    """The address of a C-contiguous array's data (the buffer protocol is the quick way; read-only
    and empty arrays take NumPy's)."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))
    except (TypeError, ValueError):
        return a.ctypes.data


class _Entry:
    """How to call one compiled function: its C entry point, argument dtypes, result layout, and
    a pool of word buffers for the argument descriptors and the results struct (one per call in
    flight; a call takes one and gives it back)."""

    def __init__(self, fn, dtypes: list, ranks: list, outs: list, free=None, small: int = _SMALL_RESULT):
        self.fn = fn
        self.state = None  # the program's state words in the code `fn` belongs to (CpuProgram._function)
        self.dtypes, self.ranks = dtypes, ranks
        self.offsets, at = [], 0
        for r in ranks:
            self.offsets.append(8 * at)
            at += 3 + 2 * r
        self.in_words = at
        self.results, words = [], 0
        for t in outs:  # the results struct is their descriptors back to back, all 8-byte words
            self.results.append((words, t.rank, np.dtype(np_dtype(t.dtype))))
            words += 3 + 2 * t.rank
        self.out_words = words
        self.in_struct = struct.Struct(f"<{self.in_words}q")
        self.out_struct = struct.Struct(f"<{self.out_words}q")
        self.pool: list = []
        self.pack = _packer(dtypes, ranks, self.in_struct)
        self.adopt = _adopter(self.results, free or _libc.free, small)
        self.small = small

    def buffers(self) -> tuple:
        """(argument descriptors, results struct, the entry's argument pointers: the results
        struct's, if any, then each argument descriptor's)."""
        descs = (ctypes.c_int64 * self.in_words)()
        res = (ctypes.c_int64 * self.out_words)()
        base = ctypes.addressof(descs)
        pointers = ([ctypes.addressof(res)] if self.results else []) + [base + o for o in self.offsets]
        return descs, res, (ctypes.c_void_p * max(1, len(pointers)))(*pointers)


def _dense_strides(sizes: list) -> list:
    """The row-major strides (in elements) of a shape given as expressions, as expressions: what
    `_sizes_and_strides` computes, for the code `_packer` and `_adopter` write."""
    return ["*".join(sizes[k + 1:]) or "1" for k in range(len(sizes))]


def _packer(dtypes: list, ranks: list, in_struct: struct.Struct):
    """`pack(arrays, descs)`: the arguments' memref descriptors written into `descs`, and their
    data addresses returned, when every array is of its dtype, C-contiguous, writable and not
    empty (what the buffer protocol gives without a copy); else None, with nothing written, for
    the general path. Written out for this signature (one line per argument, sizes and strides
    as expressions of the shape): the cheapest Python a call can make."""
    if any(r > 8 for r in ranks):
        return lambda arrays, descs: None
    names = [f"a{i}" for i in range(len(ranks))]
    if not names:
        return lambda arrays, descs: ()
    lines = ["def pack(arrays, descs):", "    try:", f"        {''.join(n + ', ' for n in names)}= arrays"]
    lines += [f"        p{i} = addressof(from_buffer({n}))" for i, n in enumerate(names)]
    lines += [f"        if {n}.dtype is not d{i} and {n}.dtype != d{i}:\n            return None" for i, n in enumerate(names)]
    lines += ["    except (TypeError, ValueError, AttributeError):", "        return None"]
    words = []
    for i, (n, r) in enumerate(zip(names, ranks)):
        if r:
            lines.append(f"    s{i} = {n}.shape")
        sizes = [f"s{i}[{k}]" for k in range(r)]
        words += [f"p{i}", f"p{i}", "0"] + sizes + _dense_strides(sizes)
    lines.append(f"    pack_into(descs, 0, {', '.join(words)})")
    lines.append(f"    return ({''.join(f'p{i}, ' for i in range(len(ranks)))})")
    scope = {"addressof": ctypes.addressof, "from_buffer": ctypes.c_char.from_buffer,
             "pack_into": in_struct.pack_into, **{f"d{i}": d for i, d in enumerate(dtypes)}}
    exec(compile("\n".join(lines), f"<dg argument packing {len(ranks)}>", "exec"), scope)
    return scope["pack"]


def _adopter(outs: list, free, small: int = _SMALL_RESULT):
    """`adopt(words, inputs)`: `_adopt` for this result layout, written out for the usual case (every
    result a dense buffer of its own, of rank 1 or more, that the call allocated), the general
    `_adopt` otherwise. A large buffer becomes its array's memory; a small one (at most `small`
    bytes, `_SMALL_RESULT` by default) is copied into a NumPy array and freed (by `free`) at once,
    which costs half as much as an array on foreign memory (made, and later freed, through
    Python). Buffers that `free` frees, not the C library's, are always copied."""
    if free is not _libc.free:
        small = 1 << 62
    if not outs or any(not rank or rank > 8 for _, rank, _ in outs):
        return lambda words, inputs: _adopt(words, outs, inputs, free)
    lines, made, tests, allocs = ["def adopt(words, inputs):"], [], [], []
    for i, (off, rank, dtype) in enumerate(outs):
        sizes = [f"n{i}_{k}" for k in range(rank)]
        strides = [f"t{i}_{k}" for k in range(rank)]
        lines.append(f"    q{i}, b{i}, o{i}, {', '.join(sizes + strides)} = words[{off}:{off + 3 + 2 * rank}]")
        tests += [f"q{i}", f"q{i} not in inputs"] + [f"q{i} != {q}" for q in allocs] + sizes
        tests += [f"{t} == {d}" for t, d in zip(strides, _dense_strides(sizes))]
        allocs.append(f"q{i}")
    lines.append(f"    if not ({' and '.join(tests)}):")
    lines.append("        return general(words, outs, inputs)")
    for i, (off, rank, dtype) in enumerate(outs):
        shape = f"({''.join(f'n{i}_{k}, ' for k in range(rank))})"
        item = dtype.itemsize
        raw = np.dtype(dtype.str) != dtype  # bf16: NumPy knows it as raw bytes ('<V2'), which is what buffers take
        lines += [f"    nb{i} = {'*'.join([f'n{i}_{k}' for k in range(rank)] + [str(item)])}",
                  f"    if nb{i} <= SMALL:",
                  f"        r{i} = empty({shape}, '{dtype.str}')",
                  f"        memmove(addressof(from_buffer(r{i})), b{i} + o{i} * {item}, nb{i})",
                  *([f"        r{i} = r{i}.view(d{i})"] if raw else []),
                  f"        free(q{i})",
                  "    else:",
                  f"        r{i} = array(b{i} + o{i} * {item}, {shape}, d{i}, owned=q{i})"]
        made.append(f"r{i}")
    lines.append(f"    return [{', '.join(made)}]")
    scope = {"array": _array, "general": lambda words, outs, inputs: _adopt(words, outs, inputs, free),
             "outs": outs, "empty": np.empty,
             "memmove": ctypes.memmove, "addressof": ctypes.addressof, "from_buffer": ctypes.c_char.from_buffer,
             "free": free, "SMALL": small, **{f"d{i}": d for i, (_, _, d) in enumerate(outs)}}
    exec(compile("\n".join(lines), f"<dg result adoption {len(outs)}>", "exec"), scope)
    return scope["adopt"]
