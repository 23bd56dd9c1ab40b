"""The CUDA side of device='cuda': finding the driver through cuda-python.

Expects: nothing (it is asked before anything runs on a GPU). Guarantees:
`require_driver()` returns the `cuda.bindings.driver` module with the
driver initialized and at least one device, or raises a `DgError` that
says which of cuda-python, the driver or a device is missing.
`driver_status()` is the same answer as (ok, reason) without raising.
"""
from __future__ import annotations

import functools

from dg.core.errors import DgError


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
