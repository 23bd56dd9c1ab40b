"""The CUDA executor: compiled dg code whose parallel loops run on an NVIDIA GPU.

Expects: the dg IR of one specialization at the `grad` stage, and a GPU (`runtime.cuda`).
Guarantees: `CUDA.load(CUDA.compile(unit)).call(symbol, arrays)` (runtime.targets.build) runs
the function with its parallel loops as kernels on the device and returns NumPy arrays, as the
CPU target's programs do on the CPU:
- the kernels are the PTX of the `gpu` stage, loaded by the driver for the device (made for
  sm_90 on Hopper and later, sm_80 before); the host code is the `cuda` stage (launches
  through the driver, the CPU's lowering for the rest: sequential loops, calls, checks),
  compiled and kept in the disk cache like CPU code, with the PTX beside it (optimized at
  once: the host code holds the device's tables), and loaded as a `CpuProgram` whose results'
  buffers the device pool frees;
- every buffer is the device pool's managed memory; the arguments are copied into it at the
  call and the results out of it at the return, and in between the data stays where the
  kernels use it. The host code waits for the kernels only where it reads their data;
- a failed check is the located `DgRuntimeError` of the CPU, inside a kernel too (the device
  keeps the first one's id and values); a launch or the device failing is a `DgRuntimeError`
  that names the CUresult. When a kernel and then the host failed in one call, the kernel's
  failure is the one raised (the host's may follow from it);
- one GPU call runs at a time in the process (a call from a breakpoint inside one nests).
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

from dg.core.errors import DgRuntimeError
from dg.lowering import cuda_host, pipeline
from dg.lowering.codegen import cache, lower, tiers
from dg.lowering.codegen.units import Unit

from . import cuda
from .cpu import CpuProgram
from .descriptors import ArgumentTooLarge, array

_ONE_AT_A_TIME = threading.RLock()


def arch() -> str:
    """The PTX target for the process's device."""
    return "sm_90" if int(cuda.device().arch[3:]) >= 90 else "sm_80"


class CudaTarget:
    """Kernels for the process's GPU and host code for this CPU (runtime.targets.Target)."""

    name = "cuda"

    def key(self, unit: Unit) -> str:
        """The unit's disk cache key (the device's architecture in it)."""
        return cache.key(unit.text, pipeline.identity("cuda") + f"|entry={unit.entry}|arch={arch()}")

    def compile(self, unit: Unit) -> tiers.Code:
        """The unit's kernels and host code: from the disk cache, else made and stored there."""
        return tiers.build(self.key(unit), unit, lower.cuda(arch()))

    def cached(self, unit: Unit) -> tiers.Code | None:
        return tiers.cached(self.key(unit))

    def load(self, code: tiers.Code) -> "CudaProgram":
        return CudaProgram(code)


CUDA = CudaTarget()


class CudaProgram:
    """A compiled dg module whose functions run on the GPU, called on NumPy arrays: its host code
    (`host`, a CpuProgram) with the device's tables filled in, its kernels and constants loaded."""

    def __init__(self, code: tiers.Code):
        meta = code.meta
        self.device = cuda.device()
        self.device.make_current()  # (programs are made on whichever thread compiles them)
        pool = self.device.pool
        self.host = CpuProgram(code, free=pool.release)
        self.from_cache = code.from_cache
        self.checks = self.host.checks
        loaded = self.host.loaded
        self.module = self.device.load(meta["ptx"], meta["kernels"]) if meta["kernels"] else None
        at = loaded.global_address(cuda_host.TABLE)
        self._table = (ctypes.c_int64 * cuda_host.TABLE_WORDS).from_address(at) if at else None
        if self._table is not None:
            t = self._table
            t[cuda_host.LAUNCH], t[cuda_host.SYNC] = self.device.launch_address, self.device.sync_address
            t[cuda_host.ALLOC], t[cuda_host.FREE] = pool.alloc_address, pool.free_address
            t[cuda_host.CUBLAS], t[cuda_host.SGEMM], t[cuda_host.DGEMM] = self.device.cublas
        handles = list(self.module.kernels if self.module is not None else [])
        self._constants = []  # the device copies of the program's constants, kept while it lives
        for name, nbytes in meta["globals"]:
            source = loaded.global_address(name)
            p = pool.allocate(nbytes)
            if not p or not source:
                for q in self._constants:
                    pool.release(q)
                raise DgRuntimeError("out of memory: the device has no room for the program's constants" if not p
                                     else f"the compiled program lost its constant {name}")
            ctypes.memmove(p, source, nbytes)
            self._constants.append(p)
            handles.append(p)
        if handles:
            at = loaded.global_address(cuda_host.HANDLES)
            if not at:
                raise DgRuntimeError("the compiled program has no table of kernels")
            (ctypes.c_int64 * len(handles)).from_address(at)[:] = handles

    def __del__(self):
        pool = getattr(getattr(self, "device", None), "pool", None)
        for p in getattr(self, "_constants", ()):
            if pool is not None:
                pool.release(p)

    def call(self, symbol: str, arrays: list):
        # One GPU call at a time in the process (a call made from a breakpoint inside one nests):
        # the device's work goes in order on one stream anyway, and the pool's buffers, the
        # table's flags and the kernels' check flag then belong to that call.
        with _ONE_AT_A_TIME:
            return self._call(symbol, arrays)

    def _call(self, symbol: str, arrays: list):
        device = self.device
        device.make_current()
        pool = device.pool
        dtypes = self.host.entry(symbol).layout.dtypes
        held, staged = [], []
        try:
            for i, (a, dt) in enumerate(zip(arrays, dtypes)):
                try:
                    a = np.asarray(a, dtype=dt)
                except MemoryError:
                    raise ArgumentTooLarge(i, np.shape(a), dt) from None
                p = pool.allocate(a.nbytes)
                if not p:
                    raise ArgumentTooLarge(i, a.shape, dt)
                held.append(p)
                v = array(p, a.shape, dt)
                if a.size:
                    np.copyto(v, a)
                staged.append(v)
            t = self._table
            if t is not None:
                t[cuda_host.PENDING] = t[cuda_host.STATUS] = 0
            host_error = None
            try:
                out = self.host.call(symbol, staged)
            except DgRuntimeError as e:  # (a failed check or allocation on the host)
                host_error = e
            finally:  # (the kernels' check flag is read, and so cleared, whatever the host did)
                status = device.synchronize()
                failed, a, b = self.module.failed() if self.module is not None and not status else (0, 0, 0)
            if t is not None and t[cuda_host.STATUS]:
                status = t[cuda_host.STATUS]
            # A kernel's failure comes first: the host's own failure may be what its results led to.
            if status:
                raise DgRuntimeError(f"CUDA: running the program's kernels failed ({cuda.error_name(status)})")
            if failed:
                loc, message, n = self.checks[failed - 1]
                raise DgRuntimeError(message.format(a, b) if n else message, loc)
            if host_error is not None:
                raise host_error
            return out
        finally:
            for p in held:
                pool.release(p)
