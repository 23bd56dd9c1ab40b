"""The worker threads that compiled CPU code splits its large loops over.

Expects: compiled code calls `dg.parallel_for(fn, ctx, n, work)` for a loop
of `n` independent iterations (`lowering.parallel` outlines the loop into
`fn(ctx, lo, hi)`, which runs iterations [lo, hi)); `work` is an estimate
of the loop's cost (its iterations times the operations in its body).
Guarantees: the iterations [0, n) all run once, and the call returns when
they have; split evenly over the calling thread and the pool's workers when
`work` is large enough to pay for waking them, else on the calling thread
alone. The pool is one per process, written in LLVM IR (runtime/ll/
thread_pool.ll) and compiled with llvmlite when the CPU runtime is installed:
its workers are native threads that never touch Python, waiting on a
condition variable between loops. One loop runs on the pool at a time; a loop that finds the pool busy
(another Python thread's call) runs on its own thread. `DG_NUM_THREADS`
sets the number of threads (the calling one included); the default is the
CPUs this process may run on. A child forked through Python starts a pool of
its own; one forked otherwise runs its loops on one thread.

Why a pool of our own and not MLIR's OpenMP lowering (`scf.parallel` -> `omp`
-> libiomp5's `__kmpc_*`, the `intel-openmp` wheel): benchmarks/openmp_ab.py
runs both on the CPU benchmark's workloads, sharing the same loops, in one
process. On 2 CPUs, OpenMP with its default spin-waiting took 0.4 to 0.7 of
the pool's time on the large element-wise loops and reductions (its workers
spin between loops where ours sleep on a condition variable), but 14 times
the pool's on the MLP training step and 1.2 to 3 times on the RNN's gradient:
its spinning workers took the cores from the BLAS's threads and from the
step's many small loops, which the pool runs on the calling thread when they
are too small to share (OpenMP forks every one). With KMP_BLOCKTIME=0
(workers sleep at once) it took 1.8 times the pool's time on the MLP step and
1.3 on the reductions. It was at least as fast on every workload in neither
setting, so the pool stays.
"""
from __future__ import annotations

import ctypes
import os
import threading

from dg.core.abi import GRAIN, PARALLEL_FOR
from dg.core.config import config

from .natives import compile_native

_pool: dict = {}
_starting = threading.Lock()


def count() -> int:
    """Threads a parallel loop may use: `DG_NUM_THREADS`, else the CPUs this process may run on."""
    if config.num_threads is not None:
        return config.num_threads
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def symbols() -> dict:
    """{"dg.parallel_for": address}: the pool, compiled and started the first time."""
    with _starting:  # two threads compiling their first programs at once start one pool
        if not _pool:
            _start()
    return {PARALLEL_FOR: _pool["addr"]}


def _start() -> None:
    """Compile the pool, start its workers, and have a child forked through Python start its own."""
    jit = compile_native("thread_pool", {"GRAIN": GRAIN, "PARALLEL_FOR": PARALLEL_FOR})
    start = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(jit.get_function_address("dg_pool_start"))
    _pool.update(jit=jit, start=start, addr=jit.get_function_address(PARALLEL_FOR),
                 splits=jit.get_global_value_address("splits"))
    _pool["workers"] = start(count() - 1)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_restart)


def splits() -> int:
    """How many loops the pool has split over threads in this process."""
    symbols()
    return ctypes.c_int64.from_address(_pool["splits"]).value


def workers() -> int:
    """The pool's worker threads (0 before it starts, or with one thread)."""
    return _pool.get("workers", 0)


def _restart() -> None:
    """In a forked child: the parent's workers are not there; start the child's own."""
    _pool["workers"] = _pool["start"](count() - 1)
