"""NumPy arrays to MLIR memref descriptors and back: the words a compiled entry takes and gives.

Expects: the dtypes and ranks of a compiled entry's arguments and the types of its results (its
signature), and at a call, NumPy arrays of those dtypes and ranks. Guarantees: a `Layout` says
where each argument's descriptor is in one buffer of int64 words (allocated, aligned, offset,
sizes, strides; `buffers()` makes the buffers a call writes and the argument pointers the
entry takes) and where each result's is in the results struct. `pack(arrays, descs)` writes the
arguments' descriptors, pointing at the arrays' own data (no copy), when every array is of its
dtype, C-contiguous, writable and not empty, and returns their addresses; else None, with
nothing written (`pack_any` then packs any arrays, copying those that are not so).
`adopt(words, inputs)` makes the results' NumPy arrays from the results struct's words: a dense
buffer of its own that the call allocated becomes its array's memory (`Memory`, freed when the
array goes) or, when small, is copied into a NumPy array and freed at once; a view of an
argument, a buffer an earlier result took, a strided or 0-d result is copied out.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import math
import struct

import numpy as np

from dg.core.types import np_dtype

_libc = ctypes.CDLL(ctypes.util.find_library("c"))
_libc.free.argtypes = [ctypes.c_void_p]
_libc.free.restype = None
FREE = _libc.free  # what frees the buffers compiled code allocates, unless a program says otherwise

SMALL_RESULT = 16 << 10  # bytes: results up to this size are copied out (see Layout)
_SIZES_AND_STRIDES: dict = {}

_addressof, _from_buffer = ctypes.addressof, ctypes.c_char.from_buffer


class ArgumentTooLarge(MemoryError):
    """Argument `index` is not a C-contiguous array of its dtype, and a copy that is one does not
    fit in memory (a view with zero strides over 2**40 elements): the caller names the parameter."""

    def __init__(self, index: int, shape: tuple, dtype: np.dtype):
        super().__init__(index, shape, dtype)
        self.index, self.shape, self.dtype = index, shape, dtype


def sizes_and_strides(shape: tuple) -> tuple:
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


class Memory:
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


def array(address: int, shape: tuple, dtype: np.dtype, strides=None, owned: int = 0) -> np.ndarray:
    """An array on memory at `address` (C order unless byte `strides` are given)."""
    a = np.asarray(Memory(address, shape, dtype.str, strides, owned))
    return a if a.dtype == dtype else a.view(dtype)  # bf16's typestr is raw bytes ('<V2')


def address(a: np.ndarray) -> int:
    """The address of a C-contiguous array's data (the buffer protocol is the quick way; read-only
    and empty arrays take NumPy's)."""
    try:
        return _addressof(_from_buffer(a))
    except (TypeError, ValueError):
        return a.ctypes.data


def adopt(words: tuple, outs: list, inputs: set, free=None) -> list:
    """NumPy arrays for a call's results (`outs`: word offset, rank, dtype each), copying only when needed.

    A dense result buffer the call allocated becomes the array's memory and is freed when
    the array goes (with `free` other than the C library's, it is copied and freed by `free`).
    Results that are views of an argument, a buffer an earlier result already took, strided or
    0-d results are copied out (and their buffers freed here).
    (Written for few steps: this runs after the compiled code has pushed Python's data out of
    the caches.)
    """
    free = free or FREE
    own = free is FREE  # (else every result is copied out)
    taken: set = set()
    out = []
    for off, rank, dtype in outs:
        alloc, aligned, offset = words[off:off + 3]
        shape = words[off + 3:off + 3 + rank]
        at = aligned + offset * dtype.itemsize
        if (own and rank and alloc and alloc not in inputs and alloc not in taken and 0 not in shape
                and words[off + 3:off + 3 + 2 * rank] == sizes_and_strides(shape)):
            taken.add(alloc)
            out.append(array(at, shape, dtype, owned=alloc))
        elif not aligned or 0 in shape:
            out.append(np.zeros(shape, dtype=dtype))
        elif not rank:  # a scalar: its bytes, read at once (a view and a copy cost ten times as much)
            out.append(np.frombuffer(ctypes.string_at(at, dtype.itemsize), dtype).reshape(()))
        else:
            item = dtype.itemsize
            strides = tuple(st * item for st in words[off + 3 + rank:off + 3 + 2 * rank])
            out.append(array(at, shape, dtype, strides).copy())
    for off, _, _ in outs:
        alloc = words[off]
        if alloc and alloc not in inputs and alloc not in taken:
            taken.add(alloc)
            free(alloc)
    return out


class Layout:
    """Where a compiled entry's argument descriptors and results are, in int64 words, and the
    packing and adoption for them (see the module's docstring). `free` frees the buffers the
    entry's results come in (the C library's by default; with any other, results are always
    copied out); results up to `small` bytes are copied out."""

    def __init__(self, dtypes: list, ranks: list, outs: list, free=None, small: int = SMALL_RESULT):
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
        self.free = free or FREE
        self.small = small
        self.pack = _packer(dtypes, self.in_struct)
        self.adopt = _adopter(self.results, self.free, small)

    def buffers(self) -> tuple:
        """(argument descriptors, results struct, the entry's argument pointers: the results
        struct's, if any, then each argument descriptor's)."""
        descs = (ctypes.c_int64 * self.in_words)()
        res = (ctypes.c_int64 * self.out_words)()
        base = ctypes.addressof(descs)
        pointers = ([ctypes.addressof(res)] if self.results else []) + [base + o for o in self.offsets]
        return descs, res, (ctypes.c_void_p * max(1, len(pointers)))(*pointers)

    def pack_any(self, arrays: list, descs) -> tuple[list, set]:
        """The arguments' descriptors written into `descs` for any arrays (and values NumPy takes
        as arrays): an array that is not C-contiguous and writable, or not of its dtype, is
        copied. (the arrays the descriptors point into, which the call must hold; their data's
        addresses); ArgumentTooLarge where such a copy does not fit in memory."""
        keep, words, inputs = [], [], set()
        for i, (a, dt) in enumerate(zip(arrays, self.dtypes)):
            try:  # the buffer protocol accepts only a C-contiguous, writable, non-empty array
                p = _addressof(_from_buffer(a))
                if a.dtype != dt:
                    raise TypeError
            except (TypeError, ValueError, AttributeError):
                try:
                    a = np.asarray(a, dtype=dt, order="C")  # not ascontiguousarray: it makes 0-d arrays 1-d
                except MemoryError:
                    raise ArgumentTooLarge(i, np.shape(a), dt) from None
                p = address(a)
            keep.append(a)
            inputs.add(p)
            words += (p, p, 0)
            words += sizes_and_strides(a.shape)
        self.in_struct.pack_into(descs, 0, *words)
        return keep, inputs


def _packer(dtypes: list, in_struct: struct.Struct):
    """`pack(arrays, descs)` for arguments of these dtypes (see the module's docstring): a closure
    over the layout (one for a single argument, the commonest, and one for any number). With
    Python written out per signature and exec'd for this and for `_adopter`, as it was, a
    general-path call (benchmarks/calls.py's general_*) of one f32[4] argument took 4.2-4.6 us
    of CPU time against 4.7-5.2 now, of nine 8.2-8.6 against 9.9-10.1 (2-core VM); repeated
    calls take the quick call (runtime.fastcall), which is unchanged (0.6 and 0.8 us)."""
    n = len(dtypes)
    pack_into = in_struct.pack_into
    if not n:
        return lambda arrays, descs: ()
    if n == 1:
        (d0,) = dtypes

        def pack_one(arrays, descs):
            try:
                (a0,) = arrays
                p0 = _addressof(_from_buffer(a0))
                if a0.dtype is not d0 and a0.dtype != d0:
                    return None
            except (TypeError, ValueError, AttributeError):
                return None
            pack_into(descs, 0, p0, p0, 0, *sizes_and_strides(a0.shape))
            return (p0,)

        return pack_one
    pairs = tuple(dtypes)

    def pack(arrays, descs):
        if len(arrays) != n:
            return None
        words, ps = [], []
        try:
            for a, d in zip(arrays, pairs):
                p = _addressof(_from_buffer(a))
                if a.dtype is not d and a.dtype != d:
                    return None
                ps.append(p)
                words += (p, p, 0)
                words += sizes_and_strides(a.shape)
        except (TypeError, ValueError, AttributeError):
            return None
        pack_into(descs, 0, *words)
        return ps

    return pack


def _adopter(outs: list, free, small: int = SMALL_RESULT):
    """`adopt(words, inputs)`: `adopt` for this result layout, made quick for the usual case
    (every result a dense buffer of its own, of rank 1 or more, that the call allocated), the
    general `adopt` otherwise. A large buffer becomes its array's memory; a small one (at most
    `small` bytes) is copied into a NumPy array and freed (by `free`) at once, which costs half
    as much as an array on foreign memory (made, and later freed, through Python). Buffers that
    `free` frees, not the C library's, are always copied."""
    if free is not FREE:
        small = 1 << 62

    def general(words, inputs):
        return adopt(words, outs, inputs, free)

    if not outs or any(not rank for _, rank, _ in outs):
        return general
    # Per result: its words' offset, where its sizes start and end and its strides end, its dtype,
    # the dtype's typestr, item size and whether NumPy knows it as raw bytes (bf16: '<V2', which is
    # what buffers take).
    plan = tuple((off, off + 3, off + 3 + rank, off + 3 + 2 * rank, dtype, dtype.str, dtype.itemsize,
                  np.dtype(dtype.str) != dtype) for off, rank, dtype in outs)
    empty, memmove, prod = np.empty, ctypes.memmove, math.prod
    if len(plan) == 1:  # (the commonest: one result)
        ((off, lo, mid, hi, dtype, typestr, item, raw),) = plan

        def one(words, inputs):
            q = words[off]
            shape = words[lo:mid]
            if not q or q in inputs or 0 in shape or words[lo:hi] != sizes_and_strides(shape):
                return general(words, inputs)
            data = words[off + 1] + words[off + 2] * item
            nbytes = prod(shape) * item
            if nbytes > small:
                return [array(data, shape, dtype, owned=q)]
            r = empty(shape, typestr)
            memmove(_addressof(_from_buffer(r)), data, nbytes)
            free(q)
            return [r.view(dtype) if raw else r]

        return one

    def quick(words, inputs):
        found = []
        for off, lo, mid, hi, dtype, typestr, item, raw in plan:
            q = words[off]
            shape = words[lo:mid]
            if not q or q in inputs or 0 in shape or words[lo:hi] != sizes_and_strides(shape):
                return general(words, inputs)
            for other in found:
                if other[0] == q:
                    return general(words, inputs)
            found.append((q, shape, words[off + 1] + words[off + 2] * item, dtype, typestr, item, raw))
        out = []
        for q, shape, data, dtype, typestr, item, raw in found:
            nbytes = prod(shape) * item
            if nbytes <= small:
                r = empty(shape, typestr)
                memmove(_addressof(_from_buffer(r)), data, nbytes)
                if raw:
                    r = r.view(dtype)
                free(q)
            else:
                r = array(data, shape, dtype, owned=q)
            out.append(r)
        return out

    return quick
