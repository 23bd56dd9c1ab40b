"""A stand-in for `runtime.cuda.Device` on machines without a GPU: memory from the C library,
launches recorded (kernel, grid, block and the parameter words), not run. The host half of the
CUDA executor (its lowering, the parameter packing, the waits, the pool's bookkeeping) can be
checked with it; what the kernels compute needs the GPU (the end-to-end suite's `cuda` mode)."""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import re

import numpy as np

_libc = ctypes.CDLL(ctypes.util.find_library("c"))
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]
_libc.free.argtypes = [ctypes.c_void_p]

_LAUNCH_T = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p,
                             ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)
_SYNC_T = ctypes.CFUNCTYPE(ctypes.c_int)
_GEMM_T = {np.float32: ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_int] * 5, ctypes.c_void_p, ctypes.c_void_p,
                                        ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                        ctypes.c_int)}
_GEMM_T[np.float64] = _GEMM_T[np.float32]
_ALLOC_T = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_int64)
_FREE_T = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class FakePool:
    def __init__(self):
        self.live: dict = {}  # address -> bytes
        self.made: list = []  # every allocation, in order: (address, bytes)
        self._alloc_cb = _ALLOC_T(self.allocate)
        self._free_cb = _FREE_T(self.release)
        self.alloc_address = ctypes.cast(self._alloc_cb, ctypes.c_void_p).value
        self.free_address = ctypes.cast(self._free_cb, ctypes.c_void_p).value

    def allocate(self, n):
        p = _libc.malloc(max(int(n), 1))
        self.live[p] = n
        self.made.append((p, n))
        return p

    def release(self, p):
        if p in self.live:
            del self.live[p]
            _libc.free(p)


class FakeModule:
    def __init__(self, ptx: str, kernels: list, first: int):
        self.kernels = [first + i for i in range(len(kernels))]
        self.params = {}
        for i, k in enumerate(kernels):
            m = re.search(r"\.entry\s+" + re.escape(k) + r"\s*\((.*?)\)", ptx, re.S)
            self.params[first + i] = len(re.findall(r"\.param", m.group(1))) if m else 0

    flag = (0, 0, 0)  # what a kernel's failed check would leave on the device (a test sets it)

    def failed(self) -> tuple:
        flag, self.flag = self.flag, (0, 0, 0)
        return flag


class FakeDevice:
    arch = "sm_90"
    name = "fake"
    def __init__(self, cublas: bool = False):
        self.pool = FakePool()
        self.launches: list = []  # (kernel, grid, block, [parameter words])
        self.syncs = 0
        self.modules: list = []
        self._launch_cb = _LAUNCH_T(self._launch)
        self._sync_cb = _SYNC_T(self._sync)
        self.launch_address = ctypes.cast(self._launch_cb, ctypes.c_void_p).value
        self.sync_address = ctypes.cast(self._sync_cb, ctypes.c_void_p).value
        self.gemms: list = []  # (op X, op Y, m, n, k) of each cuBLAS call, as cuBLAS got them
        self.gemm_operands: list = []  # (X, Y, C) addresses of each
        self._gemm_cbs = [_GEMM_T[t](functools.partial(self._gemm, t)) for t in (np.float32, np.float64)]
        # (handle, sgemm, dgemm): without cublas, zeros, and products run as the tiled kernel
        self.cublas = (1, *(ctypes.cast(cb, ctypes.c_void_p).value for cb in self._gemm_cbs)) if cublas else (0, 0, 0)

    def _gemm(self, dtype, handle, opx, opy, m, n, k, alpha, x, ldx, y, ldy, beta, c, ldc):
        """cuBLAS's gemm, column-major, computed with NumPy on the (host) memory."""
        self.gemms.append((opx, opy, m, n, k))
        self.gemm_operands.append((x, y, c))
        size = np.dtype(dtype).itemsize

        def view(p, rows, cols, ld, op):  # a column-major matrix, transposed when op is 1
            shape = (rows, cols) if op == 0 else (cols, rows)
            a = np.ndarray(shape, dtype, buffer=(ctypes.c_char * (ld * max(shape[1], 1) * size)).from_address(p),
                           strides=(size, ld * size))
            return a if op == 0 else a.T

        cm = view(c, m, n, ldc, 0)
        a, b = np.ndarray((), dtype, buffer=(ctypes.c_char * size).from_address(alpha)), \
            np.ndarray((), dtype, buffer=(ctypes.c_char * size).from_address(beta))
        prod = view(x, m, k, ldx, opx) @ view(y, k, n, ldy, opy)
        cm[...] = a * prod + (b * cm if b != 0 else 0)
        return 0

    def _launch(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        n = next(m.params[f] for m in self.modules if f in m.params)
        words = [ctypes.c_int64.from_address(params[i]).value for i in range(n)]
        self.launches.append((f, (gx, gy, gz), (bx, by, bz), words))
        return 0

    def _sync(self):
        self.syncs += 1
        return 0

    def make_current(self):
        pass

    def synchronize(self) -> int:
        return 0

    def load(self, ptx: str, kernels: list) -> FakeModule:
        m = FakeModule(ptx, kernels, 1000 * (1 + len(self.modules)))
        self.modules.append(m)
        return m
