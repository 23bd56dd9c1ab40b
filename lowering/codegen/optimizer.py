"""Quick start: a large program's first calls run code LLVM compiled without optimizing, while
a worker process optimizes it.

Expects: a program's LLVM IR (an `LlvmUnit`, lowering.codegen.lower's), with the optimization
level it is due (2: LLVM's time grows fastest on large programs), and its disk cache key.
Guarantees: `Optimizing(...)` starts `python -m dg.lowering.codegen.optimizer FILE` on it; when
the worker is done, `done` is true and `blob` is the optimized object code (None if the worker
failed: the quick code then stays), which the CPU executor loads between two calls. The worker
puts the optimized code into the disk cache itself, in place of the quick code kept there (and
drops the LLVM IR kept beside it: `drop`), so a later process loads it even when this one has
ended first (the worker runs on in a session of its own; it does not make a cache
folder whose parent is gone). Compiling without optimization takes LLVM about a tenth of the time
(the 2-layer GPT loss gradient of benchmarks/compile.py: 0.9 s instead of about 9 s), and the
quick code runs about three times slower until the optimized code takes over.
`DG_QUICK_START=0` turns it off: every program is optimized before its first call.

Why a process, not a thread: LLVM does run without the GIL under llvmlite, but a thread still
inside LLVM when the interpreter exits meets LLVM's global state being torn down.
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import threading
import weakref
from pathlib import Path
from typing import TYPE_CHECKING

try:
    import resource
except ImportError:  # (Windows)
    resource = None

from dg.core.config import config

from . import cache
from .objects import object_code

if TYPE_CHECKING:  # (a worker does not load MLIR, which units.py's Unit needs)
    from .units import LlvmUnit

# What a worker may take: CPU seconds, and bytes of address space (None: half of this machine's
# memory). LLVM's -O2 on a program of 70,000 lines of LLVM IR (benchmarks/compile.py's order=4)
# was seen at 12 GB and more than 20 minutes; a worker past either limit is stopped by the
# kernel, and the quick code goes on running the calls.
WORKER_CPU_S = 900
WORKER_MEMORY = None


def enabled() -> bool:
    return config.quick_start


class Optimizing:
    """One program's LLVM IR to optimize in a worker process; `done` once the worker has finished
    (or the job was given up). Jobs run one at a time on one thread of this process (a worker
    holds a program's LLVM module: hundreds of MB for a large one), the newest first: the program
    compiled last is the one being called now, and one compiled long ago and still waiting is
    likely called no more. A job whose program is gone before its turn is skipped (the queue
    holds it weakly)."""

    def __init__(self, unit: "LlvmUnit", key: str, meanwhile=contextlib.nullcontext, drop: str | None = None):
        self.level, self.blob = unit.level, None
        self._meanwhile = meanwhile  # entered while the worker runs
        self._finished = threading.Event()
        self.finished_word = ctypes.c_int64(0)  # 1 once finished (read by quick calls: runtime.fastcall)
        # The disk cache the code was made for, decided now: the worker may start much later (the
        # queue serves the newest first), when this process's settings have changed (a test that
        # turned the cache off to compile a patched lowering, say), and must not store the code
        # anywhere else.
        folder = cache.folder()
        header = json.dumps({"level": unit.level, "key": key, "meta": {**unit.meta, "opt_level": unit.level},
                             "drop": drop, "folder": None if folder is None else str(folder),
                             "limits": {"cpu_s": WORKER_CPU_S, "memory": WORKER_MEMORY}})
        # The job's input, in a file the worker reads and removes: a worker started just before
        # this process ends still has all of it (it then puts the optimized code into the disk
        # cache for the next process). A job that never starts takes its file with it.
        fd, self._input = tempfile.mkstemp(prefix="dg-optimize-", suffix=".ll")
        with os.fdopen(fd, "w") as f:
            f.write(header + "\n" + unit.text)
        self._cleanup = weakref.finalize(self, _remove, self._input)
        _PENDING.add(self)
        _submit(self)

    def _run(self) -> None:
        try:  # (a session of its own: a Ctrl-C at the terminal is for the calls, not the worker)
            with self._meanwhile():
                worker = subprocess.Popen([sys.executable, "-m", "dg.lowering.codegen.optimizer", self._input],
                                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                          stderr=subprocess.DEVNULL, start_new_session=True)
                self._cleanup.detach()  # (the file is the worker's now)
                out, _ = worker.communicate()
            if worker.returncode == 0 and out:
                self.blob = out
        except (OSError, ValueError):
            pass
        finally:
            self.finished_word.value = 1
            self._finished.set()
            _PENDING.discard(self)

    @property
    def done(self) -> bool:
        return self._finished.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Until the worker has finished (for tests and benchmarks that measure the optimized
        code); whether it has."""
        return self._finished.wait(timeout)


def wait_all() -> None:
    """Until every program of this process that runs quick code has its optimized code (which
    takes over at its next call), for benchmarks that time the code that runs from then on."""
    for job in list(_PENDING):
        job.wait()


_PENDING: weakref.WeakSet = weakref.WeakSet()  # the jobs not done yet
_JOBS: list = []  # weak references to Optimizing jobs, oldest first (served from the end)
_READY = threading.Condition()
_SERVER: list = []  # the thread that runs them, once started
_RUNNING: list = []  # the job running now, if any
_START = threading.Lock()


def _submit(job: Optimizing) -> None:
    with _READY:
        _JOBS.append(weakref.ref(job))
        _READY.notify()
    with _START:
        if not _SERVER:
            _SERVER.append(threading.Thread(target=_serve, daemon=True, name="dg-optimizer"))
            _SERVER[0].start()


def _serve() -> None:
    while True:
        with _READY:
            while not _JOBS:
                _READY.wait()
            job = _JOBS.pop()()  # (the newest)
        if job is not None:
            _RUNNING[:] = [job]
            job._run()
            _RUNNING.clear()
            del job


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _yield_the_cpu() -> None:
    """Run only when the CPU is otherwise idle (Linux's SCHED_IDLE; elsewhere the lowest
    priority): the calls that the quick code runs meanwhile keep every core. At an equal share a
    worker took a core from the BLAS's threads, which wait for each other: calls of the 2-layer
    GPT gradient took 340 ms instead of 11 on 2 cores; with SCHED_IDLE, 35 ms."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        try:
            os.nice(19)
        except OSError:
            pass


def _limit(cpu_s: int, memory: int | None) -> None:
    """This process's CPU time and address space capped (see WORKER_CPU_S), where the system
    has such limits (not on Windows)."""
    if resource is None:
        return
    if memory is None:
        try:
            memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
        except (ValueError, OSError):
            memory = resource.RLIM_INFINITY
    for kind, value in ((resource.RLIMIT_CPU, cpu_s), (resource.RLIMIT_AS, memory)):
        _, hard = resource.getrlimit(kind)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        try:
            resource.setrlimit(kind, (value, hard))
        except (ValueError, OSError):
            pass


def _work(path: str) -> None:
    """The worker: from the file at `path` (removed once read), a JSON header line (level, cache
    key, metadata) and the LLVM IR text; the object code into the disk cache (if its folder is
    there) and onto stdout."""
    _yield_the_cpu()
    with open(path) as f:
        header, text = f.read().split("\n", 1)
    _remove(path)
    job = json.loads(header)
    _limit(**job["limits"])
    blob = object_code(text, job["level"])
    folder = job["folder"]  # (the cache of the process that asked, when it asked; None: none)
    if folder is not None and Path(folder).parent.is_dir():  # (not in a temporary folder removed meanwhile)
        with cache.stored_in(Path(folder)):
            cache.store(job["key"], job["meta"], blob)  # (in place of the quick code)
            if job.get("drop"):
                cache.remove(job["drop"])  # (the LLVM IR kept for it)
    try:
        sys.stdout.buffer.write(blob)
        sys.stdout.flush()
    except (BrokenPipeError, OSError):  # (the process that asked for it has ended)
        pass


if __name__ == "__main__":
    _work(sys.argv[1])
