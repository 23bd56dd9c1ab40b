"""The quick call: a compiled function called from Python with no Python between the call and
the compiled code.

Expects: a CPU program's entry (`runtime.cpu.Entry`) and the arguments of a call that the
general path has just run (NumPy arrays, in tuples, lists and dicts with string keys as
`signature.fingerprint` takes them). Guarantees: `Quick(...)` (`CpuProgram.quick`) has an `fn`, a
built-in function (machine code made here once per process, from LLVM IR, with llvmlite) that
takes the same positional arguments. For arguments of the same structure, dtypes and shapes
as those it was made for (each array C-contiguous and aligned) it writes their addresses into
descriptors prepared once, arms Ctrl-C, releases the GIL around the compiled call and returns
the results as `CpuProgram.call` and `signature.to_python` would: a NumPy array (on the result's
own buffer, or copied out when small), a NumPy scalar, a tuple of them, or None. It returns
`NOT_RUN` for anything else (other shapes, another thread, the program in a call already: the
general path then runs the call), and `RAN` words when the call ran but its outcome needs the
general path (a failed check, no memory, Ctrl-C, a result that is not a dense buffer of its own):
`Quick.finish(words)` then gives what `CpuProgram.call` would have given, or raises its error.
The words are the call's own copy of what it left (its return code, the state words, the
arguments' addresses, the results struct), so that a call made before `finish` runs (from a
signal handler, or a finalizer) cannot change them. The arrays of the arguments are held while
the GIL is let go (another thread could take them out of a list or a dict).

The general path and this one share the program's `busy` word (one call of a program at a
time: its state words belong to that call), which holds the id of the thread whose call has
it: both take it atomically (`claim`), this one only when it is free and gives it back before
it makes the results; the general path waits for it, and while it waits (its `waiting` word
set) this one leaves every call to the general path, which queues on the program's lock. It
leaves them to it too once the program has newer code (quick-start code whose optimized code
has arrived, `stale`): the general path loads that code, and a new quick call takes over.

What the machine code reads is a table of 64-bit words (the `H_*` header, then the leaves'
records, each with the steps from the argument tuple to its array, and the results' records).
It reads NumPy's array objects by their C layout (`PyArrayObject_fields`: `ARRAY_LAYOUT`),
unchanged since NumPy 1.7, and calls NumPy through its C API table (`_ARRAY_API`), whose slots
never move. The machine code is runtime/ll/quick_call.ll, with these constants put in
(`_constants`).
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

from dg.core.abi import STATE_WORDS

from . import interrupt
from .natives import compile_native

# The header's words, in order (H_FN = 0, ...): what the machine code (runtime/ll/quick_call.ll)
# reads at ${H_FN} and so on.
HEADER = ("FN", "ARGV", "RES", "BUSY", "STATE", "FLAG", "OWNER", "BUDGET", "ARM", "NARGS", "NLEAVES", "LEAVES",
          "NRES", "RESULTS", "TUPLE", "NOTRUN", "MAIN", "RES_WORDS", "SMALL", "NDARRAY", "NEW", "SCALAR", "SETBASE",
          "NONE", "TUPLE_TYPE", "LIST_TYPE", "DICT_TYPE", "WAITING", "STALE")
(H_FN, H_ARGV, H_RES, H_BUSY, H_STATE, H_FLAG, H_OWNER, H_BUDGET, H_ARM, H_NARGS, H_NLEAVES, H_LEAVES,
 H_NRES, H_RESULTS, H_TUPLE, H_NOTRUN, H_MAIN, H_RES_WORDS, H_SMALL, H_NDARRAY, H_NEW, H_SCALAR, H_SETBASE,
 H_NONE, H_TUPLE_TYPE, H_LIST_TYPE, H_DICT_TYPE, H_WAITING, H_STALE) = range(len(HEADER))
HEADER_WORDS = len(HEADER)
# A leaf: its argument, its descriptor's address, its dtype, rank and shape, its steps (how many,
# their address), the type of a scalar leaf (else 0: an array). A scalar's shape word is 0, or
# for a Python float that an f32 parameter takes, the address of the 4 bytes its value is
# rounded into. A step: kind, length, index, key.
# A result: word offset in the results struct, rank, dtype, item size.
LEAF_WORDS, STEP_WORDS, RESULT_WORDS = 8, 4, 4
# Where a NumPy scalar of the types `_SCALARS` holds its value (`PyScalarObject`: the object's
# header, then the value), and a Python float its double (`PyFloatObject`).
SCALAR_VALUE = 16
_SCALARS = frozenset(np.dtype(c).type for c in "?bhilqBHILQefd") | {float}
TUPLE, LIST, DICT = 0, 1, 2
_C_CONTIGUOUS, _ALIGNED, _WRITEABLE = 0x1, 0x100, 0x400
# Where a Python object holds its type, and a NumPy array (PyArrayObject_fields) its data, its
# number of dimensions, its dimensions, its descr and its flags: byte offsets.
OB_TYPE = 8
ARRAY_LAYOUT = {"ARRAY_DATA": 16, "ARRAY_NDIM": 24, "ARRAY_DIMS": 32, "ARRAY_DESCR": 56, "ARRAY_FLAGS": 64}
METH_FASTCALL = 0x80


class _Marker:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


NOT_RUN = _Marker("NOT_RUN")
# What the quick call returns when the general path must finish a call that ran: a `bytes` of
# words, its own copy of what `Quick.finish` reads (a call that Python makes before `finish`
# runs, from a signal handler or a finalizer, may take the quick call again): the entry's return
# code, the state words, the arguments' addresses, the results struct.
RAN = bytes

_API = ("PyLong_AsVoidPtr", "PyObject_Size", "PyTuple_GetItem", "PyList_GetItem", "PyDict_GetItem", "PyTuple_New",
        "PyTuple_SetItem", "Py_IncRef", "Py_DecRef", "PyCapsule_New", "PyCapsule_GetPointer", "PyEval_SaveThread",
        "PyEval_RestoreThread", "PyThread_get_thread_ident", "PyBytes_FromStringAndSize")


def _constants() -> dict:
    """What runtime/ll/quick_call.ll's placeholders stand for."""
    return {**{f"H_{name}": k for k, name in enumerate(HEADER)}, **ARRAY_LAYOUT, "OB_TYPE": OB_TYPE,
            "LEAF_WORDS": LEAF_WORDS, "STEP_WORDS": STEP_WORDS, "RESULT_WORDS": RESULT_WORDS, "TUPLE": TUPLE,
            "LIST": LIST, "SCALAR_VALUE": SCALAR_VALUE, "RAN_ADDRESSES_AT": 1 + STATE_WORDS,
            "STATE_BYTES": 8 * STATE_WORDS, "CONTIGUOUS_ALIGNED": _C_CONTIGUOUS | _ALIGNED,
            "OWN_BUFFER_FLAGS": _C_CONTIGUOUS | _ALIGNED | _WRITEABLE}


class _Native:
    """The machine code, made once per process (under the lock), and NumPy's C API."""

    lock = threading.Lock()
    engine = None
    call = 0  # dg_quick_call's address
    claim = None  # dg_quick_claim, callable
    numpy = None  # (ndarray type, PyArray_NewFromDescr, PyArray_Scalar, PyArray_SetBaseObject) addresses


def _numpy_api() -> tuple:
    try:
        from numpy._core import _multiarray_umath as mu
    except ImportError:  # (NumPy 1.x)
        from numpy.core import _multiarray_umath as mu
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    table = (ctypes.c_void_p * 300).from_address(get(mu._ARRAY_API, None))
    return table[2], table[94], table[60], table[282]


def native() -> int:
    """dg_quick_call's address (the machine code made on first use)."""
    if _Native.engine is None:
        with _Native.lock:
            if _Native.engine is None:
                libc = ctypes.CDLL(None)
                symbols = {name: ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value for name in _API}
                symbols["free"] = ctypes.cast(libc.free, ctypes.c_void_p).value
                engine = compile_native("quick_call", _constants(), symbols)
                _Native.numpy = _numpy_api()
                _Native.call = engine.get_function_address("dg_quick_call")
                _Native.claim = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_int64)(
                    engine.get_function_address("dg_quick_claim"))
                _Native.engine = engine
    return _Native.call


class _MethodDef(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("meth", ctypes.c_void_p), ("flags", ctypes.c_int), ("doc", ctypes.c_char_p)]


_new_function = ctypes.pythonapi.PyCFunction_NewEx
_new_function.restype = ctypes.py_object
_new_function.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.py_object]


def _words(values: list) -> ctypes.Array:
    return (ctypes.c_int64 * max(1, len(values)))(*values)


def _leaves(args) -> list | None:
    """[(argument index, [(kind, length, index, key)], array or scalar)] for each leaf, in the
    order `signature.fingerprint` takes them (dict keys sorted), or None for arguments it does not
    take or that hold anything but NumPy arrays and scalars and Python floats."""
    out: list = []
    for i, a in enumerate(args):
        if not _walk(out, i, [], a):
            return None
    return out


def _walk(out: list, i: int, steps: list, v) -> bool:
    """(A plain function: a closure that calls itself would be a reference cycle, keeping the
    arguments alive until the next garbage collection.)"""
    t = type(v)
    if t is np.ndarray or t in _SCALARS:
        out.append((i, steps, v))
        return True
    if t is dict:
        if not all(type(k) is str for k in v):
            return False
        keys = sorted(v)
        return all(_walk(out, i, steps + [(DICT, len(keys), 0, k)], v[k]) for k in keys)
    if t is tuple or t is list:
        if not v or not any(type(e) in (np.ndarray, dict, tuple, list) for e in v):
            return False
        kind = TUPLE if t is tuple else LIST
        return all(_walk(out, i, steps + [(kind, len(v), k, None)], e) for k, e in enumerate(v))
    return False


class Quick:
    """The quick call of one compiled entry for arguments shaped as some given ones: `fn(*args)`
    (see the module's docstring); `finish(words)` after it returned `RAN` words. `comp`: the
    specialization it runs (its caller's)."""

    comp = None

    def __init__(self, program, entry, leaves: list, nargs: int, results: list, single: bool, budget: int):
        self.program, self.entry = program, entry
        address = native()
        nd_type, new, make_scalar, setbase = _Native.numpy
        layout = entry.layout
        self.descs, self.res, self.argv = layout.buffers()
        base = ctypes.addressof(self.descs)
        keep = self.keep = []  # what the table points into
        leaf_words = []
        for (arg, steps, a), offset, dtype in zip(leaves, layout.offsets, layout.dtypes):
            kind = type(a)
            if kind is np.ndarray:
                shape = _words(list(a.shape))
            else:  # a scalar: its value read where it is, a Python float's rounded for an f32 parameter
                shape = ctypes.c_float() if kind is float and dtype == np.float32 else None
                a = np.asarray(a, dtype=dtype)
            step_words = []
            for container, n, index, key in steps:
                if key is not None:
                    keep.append(key)
                step_words += [container, n, index, id(key) if key is not None else 0]
            steps_arr = _words(step_words)
            keep += [shape, steps_arr, dtype]
            leaf_words += [arg, base + offset, id(dtype), a.ndim, ctypes.addressof(shape) if shape is not None else 0,
                           len(steps), ctypes.addressof(steps_arr), id(kind) if kind is not np.ndarray else 0]
            words = [0, 0, 0, *a.shape]  # the descriptor's sizes and strides, fixed for these shapes
            stride = 1
            strides = []
            for d in reversed(a.shape):
                strides.append(stride)
                stride *= d
            words += reversed(strides)
            for k, w in enumerate(words):
                self.descs[offset // 8 + k] = w
        self.leaf_table = _words(leaf_words)
        result_words = []
        for (off, rank, dtype), out_dtype in zip(layout.results, results):
            keep.append(out_dtype)
            result_words += [off, rank, id(out_dtype), out_dtype.itemsize]
        self.result_table = _words(result_words)
        self.busy = program.busy
        state = entry.state
        header = [0] * HEADER_WORDS
        header[H_FN] = ctypes.cast(entry.fn, ctypes.c_void_p).value
        header[H_ARGV] = ctypes.addressof(self.argv)
        header[H_RES] = ctypes.addressof(self.res)
        header[H_BUSY] = ctypes.addressof(self.busy)
        header[H_WAITING] = ctypes.addressof(program.waiting)
        self.stale = program.stale_word()  # (nonzero once the program has newer code: NOT_RUN from then on)
        header[H_STALE] = ctypes.addressof(self.stale)
        header[H_STATE] = ctypes.addressof(state) if state is not None else 0
        header[H_FLAG] = ctypes.addressof(program._interrupted)
        header[H_OWNER] = threading.get_ident()
        header[H_BUDGET] = budget
        header[H_ARM] = interrupt.arm_address()
        header[H_NARGS] = nargs
        header[H_NLEAVES] = len(leaves)
        header[H_LEAVES] = ctypes.addressof(self.leaf_table)
        header[H_NRES] = len(results)
        header[H_RESULTS] = ctypes.addressof(self.result_table)
        header[H_TUPLE] = -1 if single else len(results)
        header[H_NOTRUN], header[H_NONE] = id(NOT_RUN), id(None)
        header[H_MAIN] = threading.current_thread() is threading.main_thread()
        header[H_RES_WORDS] = layout.out_words
        header[H_SMALL] = layout.small
        header[H_NDARRAY], header[H_NEW], header[H_SCALAR], header[H_SETBASE] = nd_type, new, make_scalar, setbase
        header[H_TUPLE_TYPE], header[H_LIST_TYPE], header[H_DICT_TYPE] = id(tuple), id(list), id(dict)
        self.has_state = state is not None
        self.table = _words(header)
        self.method = _MethodDef(b"dg_quick_call", address, METH_FASTCALL, None)
        self.fn = _new_function(ctypes.addressof(self.method), ctypes.addressof(self.table), None)

    def finish(self, words: bytes):
        """What `CpuProgram.call` gives (or raises) for the call that returned these `RAN` words."""
        w = memoryview(words).cast("q")
        n = len(self.entry.layout.offsets)
        s = w[1:1 + STATE_WORDS]
        failed = (s[0] - 1, s[3], s[4], list(s[5:])) if self.has_state and s[0] else None
        inputs = set(w[1 + STATE_WORDS:1 + STATE_WORDS + n])
        return self.program.outcome(self.entry, w[0], words[8 * (1 + STATE_WORDS + n):], inputs, failed,
                                    outermost=True)


def claim(busy: ctypes.c_int64, me: int) -> bool:
    """The program whose busy word this is taken for thread `me` (atomically: 0 to `me`), if free."""
    if _Native.claim is None:
        native()
    return bool(_Native.claim(ctypes.addressof(busy), me))
