"""The CUDA side of device='cuda': the driver through cuda-python, the GPU's memory pool.

Expects: nothing (it is asked before anything runs on a GPU). Guarantees:
- `driver_status()` is (ok, reason): whether cuda-python, the driver and a device are there;
  `require_driver()` returns the `cuda.bindings.driver` module with the driver initialized,
  or raises a `DgError` that says which is missing.
- `device()` is the process's `Device` (device 0's primary context), made once: the addresses
  of the driver entry points compiled host code calls (cuLaunchKernel, cuCtxSynchronize) and
  of cuBLAS's gemm with its handle (when cuBLAS is there), the memory pool, and
  `load(ptx, kernels)`, a loaded module's kernels.
- `Pool` is a caching allocator of CUDA managed memory: buffers the kernels and the host part
  of a program both reach. A freed buffer is kept for the next allocation of its size class
  (cuMemFree synchronizes the device, and allocating costs tens of microseconds), and a
  new buffer is only allocated while the device reports the room for it free (cuMemGetInfo:
  approximate for managed memory, whose pages the device takes as they are touched): else
  the pool is emptied first, and if the room is still missing the allocation fails (compiled
  code then raises its located out-of-memory error) rather than ask for more than the device
  has.
- Driver failures are `DgRuntimeError`s that name the CUresult.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import threading

from dg.core.config import config
from dg.core.errors import DgError, DgRuntimeError
from dg.lowering.cuda_host import CUBLAS_STATUS
from dg.lowering.gpu import find_file


@functools.lru_cache(maxsize=None)
def driver_status() -> tuple[bool, str]:
    try:
        from cuda.bindings import driver
    except ImportError:
        return False, "device 'cuda' needs cuda-python: pip install 'dg[cuda]'"
    try:
        (err,) = driver.cuInit(0)
    except Exception as e:  # the driver library itself is not there
        return False, f"device 'cuda' needs the NVIDIA driver: {e}"
    if err != driver.CUresult.CUDA_SUCCESS:
        return False, f"device 'cuda' needs an NVIDIA GPU and its driver: cuInit failed ({_name(err)})"
    err, count = driver.cuDeviceGetCount()
    if err != driver.CUresult.CUDA_SUCCESS or count == 0:
        return False, "device 'cuda' needs an NVIDIA GPU: the driver sees none"
    return True, f"{count} CUDA device(s)"


def _name(err) -> str:
    return getattr(err, "name", str(err))


def require_driver():
    ok, reason = driver_status()
    if not ok:
        raise DgError(reason)
    from cuda.bindings import driver

    return driver


def error_name(code: int) -> str:
    """The CUresult's name for a code compiled code recorded (or a cuBLAS status)."""
    if code >= CUBLAS_STATUS:
        return f"cuBLAS status {code - CUBLAS_STATUS}"
    try:
        from cuda.bindings import driver

        return driver.CUresult(code).name
    except Exception:
        return f"CUresult {code}"


def _check(result, what: str):
    """The values of a cuda-python call, or a DgRuntimeError naming the CUresult."""
    err, *values = result
    if int(err) != 0:
        raise DgRuntimeError(f"CUDA: {what} failed ({_name(err)})")
    return values[0] if len(values) == 1 else tuple(values)


_ATTACH_GLOBAL = 1  # CU_MEM_ATTACH_GLOBAL: any stream may reach the memory
_ALLOC_T = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_int64)
_FREE_T = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class Pool:
    """Managed memory in size classes, freed buffers kept for reuse (see the module's text).
    `allocate` and `release` are also reachable from compiled code (`alloc_address`,
    `free_address`: allocate returns 0 when the memory is not there)."""

    def __init__(self, driver, free_memory):
        self._driver = driver
        self._free_memory = free_memory  # () -> bytes free on the device
        self._spare: dict = {}  # size class -> [address]
        self._size: dict = {}  # address -> size class, of every buffer the pool made
        self._lock = threading.Lock()
        self._alloc_cb = _ALLOC_T(self._allocate_or_zero)
        self._free_cb = _FREE_T(self.release)
        self.alloc_address = ctypes.cast(self._alloc_cb, ctypes.c_void_p).value
        self.free_address = ctypes.cast(self._free_cb, ctypes.c_void_p).value

    @staticmethod
    def size_class(n: int) -> int:
        """512 bytes at least; above, the size rounded up to an eighth of its power of two."""
        if n <= 512:
            return 512
        step = max(512, (1 << (n - 1).bit_length()) // 8)
        return -(-n // step) * step

    def _allocate_or_zero(self, n: int) -> int:
        try:
            return self.allocate(n)
        except Exception:  # (a callback from compiled code must not raise)
            return 0

    def allocate(self, n: int) -> int:
        """A buffer of at least n bytes, or 0 when the device has not the room."""
        size = self.size_class(max(int(n), 1))
        with self._lock:
            spare = self._spare.get(size)
            if spare:
                return spare.pop()
        if size > self._free_memory():
            self.trim()
            if size > self._free_memory():
                return 0
        d = self._driver
        err, p = d.cuMemAllocManaged(size, _ATTACH_GLOBAL)
        if int(err) != 0:
            self.trim()
            err, p = d.cuMemAllocManaged(size, _ATTACH_GLOBAL)
            if int(err) != 0:
                return 0
        p = int(p)
        with self._lock:
            self._size[p] = size
        return p

    def release(self, p) -> None:
        """Keep a buffer of the pool's for reuse (an address it did not make is left alone)."""
        if not p:
            return
        with self._lock:
            size = self._size.get(p)
            if size is not None:
                self._spare.setdefault(size, []).append(p)

    def trim(self) -> None:
        """Give the kept buffers back to the driver (after the device is idle)."""
        self._driver.cuCtxSynchronize()
        with self._lock:
            spare, self._spare = self._spare, {}
            for ps in spare.values():
                for p in ps:
                    del self._size[p]
                    self._driver.cuMemFree(p)


class Module:
    """A loaded PTX module: its kernels (CUfunction addresses, in the order asked for) and the
    flag a failed check inside a kernel sets (lowering.gpu: the first failed check's id plus one,
    and its two values)."""

    def __init__(self, driver, handle, kernels: list):
        self._driver = driver
        self.handle = handle
        self.kernels = [int(_check(driver.cuModuleGetFunction(handle, k.encode()), f"finding kernel {k}"))
                        for k in kernels]
        err, self._flag, _ = driver.cuModuleGetGlobal(handle, b"dg_failed")
        if int(err) != 0:
            self._flag = None

    def failed(self) -> tuple:
        """(the failed check's id plus one, its two values), (0, 0, 0) when none failed; the flag
        is cleared for the next call."""
        if self._flag is None:
            return (0, 0, 0)
        words = (ctypes.c_int64 * 3)()
        d = self._driver
        _check(d.cuMemcpyDtoH(ctypes.addressof(words), self._flag, 24), "reading the kernels' check flag")
        if words[0]:
            zero = (ctypes.c_int64 * 3)()
            _check(d.cuMemcpyHtoD(self._flag, ctypes.addressof(zero), 24), "clearing the kernels' check flag")
        return tuple(words)


class Device:
    """Device 0 through its primary context (see the module's text)."""

    def __init__(self):
        d = self._driver = require_driver()
        self.number = _check(d.cuDeviceGet(0), "cuDeviceGet")
        self.context = _check(d.cuDevicePrimaryCtxRetain(self.number), "cuDevicePrimaryCtxRetain")
        self._lib = ctypes.CDLL("libcuda.so.1")
        self._set_current = self._lib.cuCtxSetCurrent
        self._set_current.argtypes = [ctypes.c_void_p]
        self._set_current.restype = ctypes.c_int
        self._sync = self._lib.cuCtxSynchronize
        self._sync.restype = ctypes.c_int
        self._context_address = int(self.context)
        self.make_current()
        self.launch_address = ctypes.cast(self._lib.cuLaunchKernel, ctypes.c_void_p).value
        self.sync_address = ctypes.cast(self._lib.cuCtxSynchronize, ctypes.c_void_p).value
        self.name = _check(d.cuDeviceGetName(256, self.number), "cuDeviceGetName").split(b"\0")[0].decode()
        major = _check(d.cuDeviceGetAttribute(
            d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.number), "cuDeviceGetAttribute")
        minor = _check(d.cuDeviceGetAttribute(
            d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.number), "cuDeviceGetAttribute")
        self.arch = f"sm_{major}{minor}"
        self.pool = Pool(d, lambda: int(_check(d.cuMemGetInfo(), "cuMemGetInfo")[0]))
        self.cublas = _cublas()  # (handle, sgemm, dgemm) addresses, or zeros without cuBLAS

    def make_current(self) -> None:
        """The context current on the calling thread (compiled code launches on it)."""
        err = self._set_current(self._context_address)
        if err:
            raise DgRuntimeError(f"CUDA: cuCtxSetCurrent failed ({error_name(err)})")

    def synchronize(self) -> int:
        """Wait for the device; the CUresult (0 on success)."""
        return self._sync()

    def load(self, ptx: str, kernels: list) -> Module:
        """The PTX, compiled by the driver for this device, and its kernels."""
        d = self._driver
        self.make_current()  # (programs are made on whichever thread compiles them)
        image = ctypes.create_string_buffer(ptx.encode())
        err, handle = d.cuModuleLoadData(ctypes.addressof(image))
        if int(err) != 0:
            raise DgRuntimeError(f"CUDA: the driver could not load the kernels' PTX ({_name(err)})")
        return Module(d, handle, kernels)


def _cublas() -> tuple:
    """(a cuBLAS handle, cublasSgemm_v2, cublasDgemm_v2) as addresses, for the context current
    now: the library of the nvidia-cublas wheel, a CUDA toolkit or the system; zeros where there
    is none, or with DG_CUBLAS=0 (the products then run as dg's own kernel)."""
    if not config.cublas:
        return (0, 0, 0)
    for path in (find_file("libcublas.so*"), ctypes.util.find_library("cublas")):
        if not path:
            continue
        try:
            lib = ctypes.CDLL(path)
            handle = ctypes.c_void_p()
            if lib.cublasCreate_v2(ctypes.byref(handle)) != 0 or not handle.value:
                continue
            return (handle.value, ctypes.cast(lib.cublasSgemm_v2, ctypes.c_void_p).value,
                    ctypes.cast(lib.cublasDgemm_v2, ctypes.c_void_p).value)
        except (OSError, AttributeError):
            continue
    return (0, 0, 0)


@functools.lru_cache(maxsize=None)
def device() -> Device:
    """The process's device, made on first use."""
    return Device()
