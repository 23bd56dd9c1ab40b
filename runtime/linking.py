"""What compiled code links against, and the JIT that loads it.

Expects: object code from lowering.codegen (its pieces, which one JIT links) whose undefined
symbols are the runtime's: MLIR's `memrefCopy`, the host calls (print, breakpoint, shadow
taps: `core.abi.HOST`), the BLAS, the thread pool (runtime.threads), the Ctrl-C flag
(runtime.interrupt), the collectives (runtime.collectives), setjmp and longjmp.
Guarantees: `install()` registers those symbols with LLVM once per process (the first caller
does it; every other waits for it); `Loaded(pieces)` is a JIT of the object code, or a
DgError, before anything is linked, for an object llvmlite's memory manager could not place
(codegen.object_room), where linking it would abort the process. A host call from compiled code
goes to the innermost program being called on its thread (`THREAD_CALLS.stack`), whose `host`
method runs it; an exception raised there, which cannot pass through the compiled frames, is
kept in `THREAD_CALLS.host_error` for the caller to raise once the call has wound down.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import threading

import numpy as np

from dg.core.abi import HOST, INTERRUPT, LONGJMP, SETJMP, STATE, STATE_WORDS
from dg.core.config import config
from dg.core.types import MLIR_TO_DG, np_dtype
from dg.lowering import blas
from dg.lowering.codegen.object_room import refuse_unplaceable

from . import collectives, interrupt, perf_map, threads
from .descriptors import array

_libc = ctypes.CDLL(ctypes.util.find_library("c"))

# mallopt(3) parameters (glibc's malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3

# What a host call writes into the state word when it raised: past every check's id.
HOST_STOPPED = 1 << 62


def keep_freed_memory() -> bool:
    """Have glibc's malloc keep the memory a call frees for the next call, rather than hand it
    back to the kernel and fault it in again: compiled code allocates its temporaries (megabytes
    for a convolutional network's step) with malloc, and by default blocks of 128 KiB and more
    are mmap'd and unmapped at every call, which took two thirds of a LeNet step's time. Blocks
    up to 32 MiB (glibc's largest threshold) come from the heap, and the heap is trimmed only
    beyond 512 MiB free. Once per process, when the first program is loaded; `DG_KEEP_MEMORY=0`
    leaves malloc as it was. True if it was set."""
    if not config.keep_memory or not hasattr(_libc, "mallopt"):
        return False
    _libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    _libc.mallopt.restype = ctypes.c_int
    return bool(_libc.mallopt(_M_MMAP_THRESHOLD, 32 << 20)) and bool(_libc.mallopt(_M_TRIM_THRESHOLD, 512 << 20))


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
    return array(aligned + offset * item, shape, np.dtype(f"V{item}"), tuple(st * item for st in strides))


def _memref_copy(item, src, dst):
    """MLIR's `memrefCopy` runtime function (strided copies that are not one memcpy). A Ctrl-C that
    Python raises in here must not leave the copy undone (compiled code goes on with the data):
    the copy is made again, and the KeyboardInterrupt raised after the call."""
    while True:
        try:
            np.copyto(_view(dst.contents, item), _view(src.contents, item))
            return
        except KeyboardInterrupt as e:
            if THREAD_CALLS.host_error is None:
                THREAD_CALLS.host_error = e


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


# Each thread's dg calls in progress (`.stack`, innermost last), its stack budget and host error.
THREAD_CALLS = _ThreadState()


class _Symbols:
    """The symbols compiled code calls back into, registered once per process."""

    table: dict = {}  # name -> address, complete once set
    keep: list = []  # the ctypes callbacks behind them
    lock = threading.Lock()


def install() -> dict:
    """The runtime's symbols (name -> address), registered with LLVM once per process: the first
    caller does it under the lock, and every other waits for it rather than compile against a
    partial set."""
    if _Symbols.table:
        return _Symbols.table
    with _Symbols.lock:
        if not _Symbols.table:
            keep_freed_memory()
            _Symbols.table = _register()
    return _Symbols.table


def _host(hid, *value) -> None:
    THREAD_CALLS.stack[-1].host(hid, *value)


def _register() -> dict:
    import llvmlite.binding as llvm

    symbols = {}

    def add(name, cfunc):
        _Symbols.keep.append(cfunc)
        symbols[name] = ctypes.cast(cfunc, ctypes.c_void_p).value

    add("memrefCopy", ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.POINTER(_Unranked),
                                       ctypes.POINTER(_Unranked))(_memref_copy))
    add(f"_mlir_ciface_{HOST}none", ctypes.CFUNCTYPE(None, ctypes.c_int64)(_host))
    for elt, dg_dtype in MLIR_TO_DG.items():
        def cb(hid, u, dt=np_dtype(dg_dtype)):
            value = _view(u.contents, dt.itemsize).view(dt).copy()
            _host(hid, value if value.ndim else value[()])

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


class Loaded:
    """Object code linked into a JIT of its own: `function(symbol)` and `global_address(name)`
    are addresses in it (0 for a name it does not define), `state` the program's state words
    (core.abi.STATE) that it shares with its executor, or None for code that has none."""

    def __init__(self, pieces: list):
        import llvmlite.binding as llvm

        install()
        for k, piece in enumerate(pieces):
            refuse_unplaceable(piece, first=k == 0)
        # (llvmlite's memory manager places each object's sections in one reservation, as the
        # small code model of codegen.objects.object_code needs)
        target = llvm.Target.from_default_triple().create_target_machine(opt=3, reloc="pic")
        self.jit = llvm.create_mcjit_compiler(llvm.parse_assembly(""), target, use_lmm=True)
        for piece in pieces:
            self.jit.add_object_file(llvm.ObjectFileRef.from_data(piece))
        self.jit.finalize_object()
        if config.perf_map:
            perf_map.write(self.jit, pieces)
        at = self.jit.get_global_value_address(STATE)
        self.state = (ctypes.c_int64 * STATE_WORDS).from_address(at) if at else None

    def function(self, symbol: str) -> int:
        return self.jit.get_function_address(symbol)

    def global_address(self, name: str) -> int:
        return self.jit.get_global_value_address(name)
