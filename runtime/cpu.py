"""The CPU executor: dg IR -> linalg -> LLVM via MLIR's passes -> JIT.

Expects: a verified dg module (what the emitter made for one signature).
Guarantees: `CpuProgram(module).call(symbol, arrays)` runs the compiled
function on NumPy arrays and returns NumPy arrays. Arguments travel as
memref descriptors pointing at the arrays' data (no copy); each result is
copied into a NumPy array and its buffer freed (one-shot bufferization
with ownership-based deallocation makes returned buffers the caller's).
"""
from __future__ import annotations

import ctypes
import ctypes.util

import numpy as np

from dg.dialects.dialect import shared_context
from dg.dialects.mlir import ir, passmanager
from dg.dsl.types import np_dtype, parse_mlir_type
from dg.errors import DgError, DgRuntimeError, loc_from_mlir

PIPELINE = (
    "builtin.module("
    "canonicalize, cse,"
    "func.func(linalg-fuse-elementwise-ops),"
    "one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map allow-return-allocs-from-loops},"
    "buffer-deallocation-pipeline, convert-bufferization-to-memref,"
    "func.func(convert-linalg-to-loops),"
    "convert-math-to-funcs, convert-scf-to-cf, expand-strided-metadata, lower-affine,"
    "finalize-memref-to-llvm, convert-math-to-llvm, convert-math-to-libm,"
    "convert-arith-to-llvm, convert-cf-to-llvm, convert-func-to-llvm, convert-index-to-llvm,"
    "reconcile-unrealized-casts)"
)

_libc = ctypes.CDLL(ctypes.util.find_library("c"))
_libc.free.argtypes = [ctypes.c_void_p]
_libc.free.restype = None

_CTYPES = {
    np.dtype(np.float32): ctypes.c_float, np.dtype(np.float64): ctypes.c_double,
    np.dtype(np.int32): ctypes.c_int32, np.dtype(np.int64): ctypes.c_int64,
    np.dtype(np.bool_): ctypes.c_bool, np.dtype(np.float16): ctypes.c_uint16,
    np.dtype(np.uint64): ctypes.c_uint64,
}


def _ctype(dt: np.dtype):
    dt = np.dtype(dt)
    if dt in _CTYPES:
        return _CTYPES[dt]
    if dt.itemsize == 2:  # bf16
        return ctypes.c_uint16
    raise DgError(f"compiled mode cannot pass {dt} arrays")


_DESCRIPTORS: dict = {}


def descriptor_type(rank: int, ct):
    """The C struct of a ranked memref: allocated, aligned, offset, sizes[rank], strides[rank]."""
    key = (rank, ct)
    t = _DESCRIPTORS.get(key)
    if t is None:
        fields = [("allocated", ctypes.POINTER(ct)), ("aligned", ctypes.POINTER(ct)), ("offset", ctypes.c_longlong)]
        if rank:
            fields += [("shape", ctypes.c_longlong * rank), ("strides", ctypes.c_longlong * rank)]
        t = type(f"MemRef{rank}D_{ct.__name__}", (ctypes.Structure,), {"_fields_": fields})
        _DESCRIPTORS[key] = t
    return t


def to_descriptor(a: np.ndarray):
    ct = _ctype(a.dtype)
    d = descriptor_type(a.ndim, ct)()
    ptr = a.ctypes.data_as(ctypes.POINTER(ct))
    d.allocated = ptr
    d.aligned = ptr
    d.offset = 0
    if a.ndim:
        d.shape[:] = a.shape
        d.strides[:] = [s // a.itemsize for s in a.strides]
    return d


def from_descriptor(d, rank: int, dtype: np.dtype) -> np.ndarray:
    shape = tuple(d.shape[:rank]) if rank else ()
    strides = tuple(d.strides[:rank]) if rank else ()
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    base = ctypes.cast(d.aligned, ctypes.c_void_p).value
    if n == 0 or base is None:
        out = np.zeros(shape, dtype=dtype)
    else:
        item = dtype.itemsize
        span = 1 + sum((s - 1) * abs(st) for s, st in zip(shape, strides))
        buf = (ctypes.c_char * (span * item)).from_address(base + d.offset * item)
        flat = np.frombuffer(buf, dtype=dtype, count=span)
        out = np.lib.stride_tricks.as_strided(flat, shape=shape, strides=[st * item for st in strides]).copy()
    return out


class _Unranked(ctypes.Structure):
    _fields_ = [("rank", ctypes.c_int64), ("descriptor", ctypes.c_void_p)]


def _view(u: _Unranked, item: int) -> np.ndarray:
    """A NumPy view (of raw bytes, `item` wide) on an unranked memref's data."""
    rank = u.rank
    raw = (ctypes.c_int64 * (3 + 2 * rank)).from_address(u.descriptor)
    aligned, offset = raw[1], raw[2]
    shape, strides = tuple(raw[3:3 + rank]), tuple(raw[3 + rank:3 + 2 * rank])
    if any(s == 0 for s in shape):
        return np.zeros(shape, dtype=f"V{item}")
    span = 1 + sum((n - 1) * abs(st) for n, st in zip(shape, strides))
    buf = (ctypes.c_char * (span * item)).from_address(aligned + offset * item)
    flat = np.frombuffer(buf, dtype=f"V{item}", count=span)
    return np.lib.stride_tricks.as_strided(flat, shape=shape, strides=[st * item for st in strides])


@ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.POINTER(_Unranked), ctypes.POINTER(_Unranked))
def _memref_copy(item, src, dst):
    """MLIR's `memrefCopy` runtime function (strided copies that are not one memcpy)."""
    np.copyto(_view(dst.contents, item), _view(src.contents, item))


class CpuProgram:
    def __init__(self, dg_module: "ir.Module"):
        from dg.lowering.to_linalg import to_linalg
        from dg.dialects.mlir import ExecutionEngine

        lowered = to_linalg(dg_module)
        self.linalg_text = lowered.text
        ctx = shared_context()
        with ctx:
            try:
                m = ir.Module.parse(self.linalg_text)
            except Exception as e:
                raise RuntimeError(f"dg lowered to IR that does not parse: {e}\n{self.linalg_text}") from None
            self.signatures = {}
            for op in m.body.operations:
                op = op.operation
                if op.name == "func.func" and len(op.regions[0].blocks):  # not the runtime's declarations
                    sym = ir.StringAttr(op.attributes["sym_name"]).value
                    ft = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
                    self.signatures[sym] = ([parse_mlir_type(str(t)) for t in ft.inputs],
                                            [parse_mlir_type(str(t)) for t in ft.results])
            pm = passmanager.PassManager.parse(PIPELINE)
            try:
                pm.run(m.operation)
            except Exception as e:
                raise RuntimeError(f"lowering to LLVM failed: {e}\n{self.linalg_text}") from None
            self.llvm_text = str(m)
            self.engine = ExecutionEngine(m, opt_level=3, shared_libs=[])
        self.engine.raw_register_runtime("memrefCopy", ctypes.cast(_memref_copy, ctypes.c_void_p))
        self.checks = lowered.checks
        self.host_calls = lowered.host_calls
        self._callbacks = []
        self._register_host_calls()
        self.failed = None  # the first failed check of the current call
        if self.checks:
            def fail(cid):
                if self.failed is None:
                    self.failed = cid

            self._fail_cb = ctypes.CFUNCTYPE(None, ctypes.c_int64)(fail)
            self.engine.register_runtime("dg_rt_fail", self._fail_cb)
        self._result_structs: dict = {}

    def _host(self, hid, *value):
        """A host call from compiled code: print or breakpoint, as the interpreter does them."""
        from .interp import _Breakpoints, _Console

        kind, payload = self.host_calls[hid]
        if kind == "print":
            _Console.print(*payload, *value)
        else:
            _Breakpoints.add(*payload, *value)

    def _register_host_calls(self):
        from dg.dsl.types import MLIR_TO_DG

        if not self.host_calls:
            return
        for elt, dg_dtype in MLIR_TO_DG.items():
            def cb(hid, u, dt=np_dtype(dg_dtype)):
                value = _view(u.contents, dt.itemsize).view(dt).copy()
                self._host(hid, value if value.ndim else value[()])

            f = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.POINTER(_Unranked))(cb)
            self._callbacks.append(f)
            self.engine.register_runtime(f"dg_rt_host_{elt}", f)
        f = ctypes.CFUNCTYPE(None, ctypes.c_int64)(self._host)
        self._callbacks.append(f)
        self.engine.register_runtime("dg_rt_host_none", f)

    def _results_type(self, symbol, descs):
        """The C struct that several results come back in (one type per function)."""
        t = self._result_structs.get(symbol)
        if t is None:
            t = type("Results", (ctypes.Structure,), {"_fields_": [(f"r{i}", type(d)) for i, d in enumerate(descs)]})
            self._result_structs[symbol] = t
        return t

    def call(self, symbol: str, arrays: list):
        ins, outs = self.signatures[symbol]
        args = []
        keep = []
        for a, t in zip(arrays, ins):
            a = np.ascontiguousarray(a, dtype=np_dtype(t.dtype))
            keep.append(a)
            d = to_descriptor(a)
            keep.append(d)
            args.append(ctypes.pointer(ctypes.pointer(d)))
        descs = [descriptor_type(t.rank, _ctype(np_dtype(t.dtype)))() for t in outs]
        if len(outs) == 1:
            res_arg = [ctypes.pointer(ctypes.pointer(descs[0]))]
        elif outs:
            res = self._results_type(symbol, descs)()
            res_arg = [ctypes.pointer(ctypes.pointer(res))]
        else:
            res_arg = []
        self.failed = None
        self.engine.invoke(symbol, *res_arg, *args)
        if len(outs) > 1:
            descs = [getattr(res, f"r{i}") for i in range(len(outs))]
        inputs = {a.ctypes.data for a in keep if isinstance(a, np.ndarray)}
        # Copy every result out first: two results may share one buffer.
        results = [from_descriptor(d, t.rank, np_dtype(t.dtype)) for d, t in zip(descs, outs)]
        for alloc in {ctypes.cast(d.allocated, ctypes.c_void_p).value for d in descs}:
            if alloc and alloc not in inputs:
                _libc.free(alloc)
        if self.failed is not None:
            loc, message = self.checks[self.failed]
            raise DgRuntimeError(message, loc_from_mlir(loc))
        if not outs:
            return None
        return results[0] if len(results) == 1 else tuple(results)
