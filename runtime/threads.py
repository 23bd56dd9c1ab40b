"""The worker threads that compiled CPU code splits its large loops over.

Expects: compiled code calls `dg.parallel_for(fn, ctx, n, work)` for a loop
of `n` independent iterations (`lowering.parallel` outlines the loop into
`fn(ctx, lo, hi)`, which runs iterations [lo, hi)); `work` is an estimate
of the loop's cost (its iterations times the operations in its body).
Guarantees: the iterations [0, n) all run once, and the call returns when
they have; split evenly over the calling thread and the pool's workers when
`work` is large enough to pay for waking them, else on the calling thread
alone. The pool is one per process, written in LLVM IR here and compiled
with llvmlite when the CPU runtime is installed: its workers are native
threads that never touch Python, waiting on a condition variable between
loops. One loop runs on the pool at a time; a loop that finds the pool busy
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

_IR = r"""
@mutex = internal global [64 x i8] zeroinitializer, align 16
@wake = internal global [64 x i8] zeroinitializer, align 16
@done = internal global [64 x i8] zeroinitializer, align 16
@gen = internal global i64 0
@job_fn = internal global ptr null
@job_ctx = internal global ptr null
@job_n = internal global i64 0
@job_parts = internal global i64 0
@pending = internal global i64 0
@busy = internal global i32 0
@workers = internal global i64 0
@owner = internal global i32 0 ; the process the workers belong to (a fork's child has none)
@splits = global i64 0

declare i32 @pthread_mutex_init(ptr, ptr)
declare i32 @pthread_cond_init(ptr, ptr)
declare i32 @pthread_mutex_lock(ptr)
declare i32 @pthread_mutex_unlock(ptr)
declare i32 @pthread_cond_wait(ptr, ptr)
declare i32 @pthread_cond_broadcast(ptr)
declare i32 @pthread_cond_signal(ptr)
declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_detach(i64)
declare i32 @getpid()

; iterations [n * k / parts, n * (k + 1) / parts) of a loop of n
define internal void @run_part(ptr %fn, ptr %ctx, i64 %n, i64 %k, i64 %parts) {
  %a = mul nuw i64 %n, %k
  %lo = udiv i64 %a, %parts
  %k1 = add nuw i64 %k, 1
  %b = mul nuw i64 %n, %k1
  %hi = udiv i64 %b, %parts
  call void %fn(ptr %ctx, i64 %lo, i64 %hi)
  ret void
}

; worker k (1 .. workers) runs part k of each loop that has more than k parts
define internal ptr @worker(ptr %arg) {
entry:
  %k = ptrtoint ptr %arg to i64
  %seen = alloca i64
  call i32 @pthread_mutex_lock(ptr @mutex)
  store i64 0, ptr %seen ; not the current loop's number: it may be one that waits for this worker
  br label %wait
wait:
  %g = load i64, ptr @gen
  %s = load i64, ptr %seen
  %same = icmp eq i64 %g, %s
  br i1 %same, label %sleep, label %job
sleep:
  call i32 @pthread_cond_wait(ptr @wake, ptr @mutex)
  br label %wait
job:
  store i64 %g, ptr %seen
  %parts = load i64, ptr @job_parts
  %mine = icmp ult i64 %k, %parts
  br i1 %mine, label %run, label %wait
run:
  %fn = load ptr, ptr @job_fn
  %ctx = load ptr, ptr @job_ctx
  %n = load i64, ptr @job_n
  call i32 @pthread_mutex_unlock(ptr @mutex)
  call void @run_part(ptr %fn, ptr %ctx, i64 %n, i64 %k, i64 %parts)
  call i32 @pthread_mutex_lock(ptr @mutex)
  %p = load i64, ptr @pending
  %p1 = sub i64 %p, 1
  store i64 %p1, ptr @pending
  %last = icmp eq i64 %p1, 0
  br i1 %last, label %signal, label %wait
signal:
  call i32 @pthread_cond_signal(ptr @done)
  br label %wait
}

; a fresh pool of `count` workers (the state of an earlier one, a forked parent's, is dropped)
define i64 @dg_pool_start(i64 %count) {
entry:
  %tid = alloca i64
  call i32 @pthread_mutex_init(ptr @mutex, ptr null)
  call i32 @pthread_cond_init(ptr @wake, ptr null)
  call i32 @pthread_cond_init(ptr @done, ptr null)
  store i64 0, ptr @gen
  store i64 0, ptr @pending
  store i32 0, ptr @busy
  store i64 0, ptr @workers
  %pid = call i32 @getpid()
  store i32 %pid, ptr @owner
  br label %head
head:
  %made = phi i64 [ 0, %entry ], [ %next, %made_one ]
  %more = icmp ult i64 %made, %count
  br i1 %more, label %make, label %out
make:
  %next = add i64 %made, 1
  %arg = inttoptr i64 %next to ptr
  %rc = call i32 @pthread_create(ptr %tid, ptr null, ptr @worker, ptr %arg)
  %ok = icmp eq i32 %rc, 0
  br i1 %ok, label %made_one, label %out
made_one:
  %t = load i64, ptr %tid
  call i32 @pthread_detach(i64 %t)
  store i64 %next, ptr @workers
  br label %head
out:
  %w = load i64, ptr @workers
  ret i64 %w
}

define void @"dg.parallel_for"(ptr %fn, ptr %ctx, i64 %n, i64 %work) {
entry:
  %w = load i64, ptr @workers
  %threads = add i64 %w, 1
  %by_work = udiv i64 %work, GRAIN
  %p0 = call i64 @llvm.umin.i64(i64 %threads, i64 %by_work)
  %parts = call i64 @llvm.umin.i64(i64 %p0, i64 %n)
  %split = icmp ugt i64 %parts, 1
  br i1 %split, label %mine, label %alone
mine:
  %pid = call i32 @getpid()
  %owner = load i32, ptr @owner
  %here = icmp eq i32 %pid, %owner
  br i1 %here, label %claim, label %alone
claim:
  %old = cmpxchg ptr @busy, i32 0, i32 1 acquire monotonic
  %won = extractvalue { i32, i1 } %old, 1
  br i1 %won, label %share, label %alone
alone:
  call void %fn(ptr %ctx, i64 0, i64 %n)
  ret void
share:
  call i32 @pthread_mutex_lock(ptr @mutex)
  %count = load i64, ptr @splits
  %count1 = add i64 %count, 1
  store i64 %count1, ptr @splits
  store ptr %fn, ptr @job_fn
  store ptr %ctx, ptr @job_ctx
  store i64 %n, ptr @job_n
  store i64 %parts, ptr @job_parts
  %others = sub i64 %parts, 1
  store i64 %others, ptr @pending
  %g = load i64, ptr @gen
  %g1 = add i64 %g, 1
  store i64 %g1, ptr @gen
  call i32 @pthread_cond_broadcast(ptr @wake)
  call i32 @pthread_mutex_unlock(ptr @mutex)
  call void @run_part(ptr %fn, ptr %ctx, i64 %n, i64 0, i64 %parts)
  call i32 @pthread_mutex_lock(ptr @mutex)
  br label %check
check:
  %left = load i64, ptr @pending
  %finished = icmp eq i64 %left, 0
  br i1 %finished, label %out, label %sleep
sleep:
  call i32 @pthread_cond_wait(ptr @done, ptr @mutex)
  br label %check
out:
  call i32 @pthread_mutex_unlock(ptr @mutex)
  store atomic i32 0, ptr @busy release, align 4
  ret void
}

declare i64 @llvm.umin.i64(i64, i64)
"""

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
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module = llvm.parse_assembly(_IR.replace("GRAIN", str(GRAIN)))
    module.verify()
    target = llvm.Target.from_default_triple().create_target_machine(opt=2)
    jit = llvm.create_mcjit_compiler(module, target)
    jit.finalize_object()
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
