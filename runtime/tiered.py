"""Tiered start: the interpreter runs a compiled function's first calls while a worker process
compiles it (`DG_TIERED=1`).

Expects: a specialization whose compiled CPU code is in neither this process nor the disk
cache, and its `grad`-stage `Unit` (numerics checks in it when asked for), whose module the
interpreter runs. Guarantees: `Tiered.call` gives what `CpuProgram.call` gives (the two modes agree:
the same values, to rounding, and the same located errors), from the interpreter until the
worker has finished, from compiled code after; the compiled code goes into the disk cache as a
compile in this process would put it there. A worker that fails (or cannot start) leaves the
compile to this process at the next call, which then reports what went wrong as it always does.

Why a process: compiling is Python (the pipeline's own passes) and C++ that holds the GIL (MLIR,
LLVM); a thread beside the interpreter made a 1 s compile take 10 s, and stalled the
interpreter for up to 0.4 s at a time. The worker is `python -m dg.runtime.tiered DIR`: it reads
DIR/grad.mlir and DIR/entry, and writes DIR/meta.json and DIR/code.o. It inherits the
environment, so it compiles for the same BLAS and options.
"""
from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from dg.core.config import config
from dg.lowering.codegen import tiers
from dg.lowering.codegen.units import Unit

from . import compile_log, interp, targets
from .cpu import CPU, CpuProgram

_WORKERS: set = set()  # the Tiered runners whose worker may still run (stopped at exit)


def enabled() -> bool:
    return config.tiered


class Tiered:
    """The runner of a specialization whose compiled code is being made in a worker process."""

    def __init__(self, comp, unit: Unit):
        self.comp, self.unit, self.entry = comp, unit, unit.entry
        self.started = time.perf_counter()
        self.dir = tempfile.mkdtemp(prefix="dg-tiered-")  # (only this user may read it)
        with open(os.path.join(self.dir, "grad.mlir"), "w") as f:
            f.write(unit.text)
        with open(os.path.join(self.dir, "entry"), "w") as f:
            f.write(unit.entry)
        try:  # (a session of its own: a Ctrl-C at the terminal is for the calls, not the worker)
            with open(os.path.join(self.dir, "stderr"), "wb") as err:
                self.worker = subprocess.Popen([sys.executable, "-m", "dg.runtime.tiered", self.dir],
                                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                               start_new_session=True)
        except OSError:
            self.worker = None
        self.interp = interp.Translation(unit.module)
        self.program: CpuProgram | None = None
        self.lock = threading.Lock()
        _WORKERS.add(self)
        compile_log.log(f"{self.entry}: compiling in a worker process; the interpreter runs the calls until it is done")

    def ready(self) -> bool:
        """Whether compiled code runs the calls from now on (taking the worker's result if it has
        finished)."""
        if self.program is None and (self.worker is None or self.worker.poll() is not None):
            with self.lock:
                if self.program is None:
                    self.program = self._finish()
                    self.comp.runner = self.program  # (later calls go straight to it)
        return self.program is not None

    def wait(self) -> CpuProgram:
        """The compiled program, waiting for the worker."""
        if self.worker is not None:
            self.worker.wait()
        self.ready()
        return self.program

    def call(self, symbol: str, arrays: list):
        if self.ready():
            return self.program.call(symbol, arrays)
        return interp.run(self.interp, symbol, arrays)

    def _finish(self) -> CpuProgram:
        _WORKERS.discard(self)
        meta = blob = None
        if self.worker is not None and self.worker.returncode == 0:
            try:
                with open(os.path.join(self.dir, "meta.json")) as f:
                    meta = json.load(f)
                with open(os.path.join(self.dir, "code.o"), "rb") as f:
                    blob = f.read()
            except (OSError, ValueError):
                meta = None
        try:
            with open(os.path.join(self.dir, "stderr"), "rb") as f:
                why = f.read().decode(errors="replace").strip()
        except OSError:
            why = ""
        shutil.rmtree(self.dir, ignore_errors=True)
        if meta is None:  # compiled here, as without a worker: a failure is reported as it always is
            compile_log.log(f"{self.entry}: the worker did not compile it ({why.splitlines()[-1] if why else 'no worker'}); "
                            f"compiling in this process")
            return targets.build(CPU, self.unit)
        compile_log.log(f"{self.entry}: the worker's compiled code runs the calls from now on "
                        f"({time.perf_counter() - self.started:.3g} s after the first call)")
        code = CPU.keep(self.unit, meta, blob)
        program = CPU.load(code)
        targets.log_built(self.entry, code, self.started)
        return program

    def stop(self) -> None:
        """The worker stopped and its folder removed (at exit, when compiled code is not needed)."""
        _WORKERS.discard(self)
        if self.worker is not None and self.worker.poll() is None:
            self.worker.kill()
            self.worker.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@atexit.register
def _stop_workers() -> None:
    for t in list(_WORKERS):
        t.stop()


def _work(folder: str) -> None:
    """The worker: compile DIR/grad.mlir for its entry, and write the metadata and object code."""
    with open(os.path.join(folder, "grad.mlir")) as f:
        text = f.read()
    with open(os.path.join(folder, "entry")) as f:
        entry = f.read()
    meta, blob = tiers.make(Unit(text, entry=entry))
    with open(os.path.join(folder, "code.o.part"), "wb") as f:
        f.write(blob)
    with open(os.path.join(folder, "meta.json.part"), "w") as f:
        json.dump(meta, f)
    os.replace(os.path.join(folder, "code.o.part"), os.path.join(folder, "code.o"))
    os.replace(os.path.join(folder, "meta.json.part"), os.path.join(folder, "meta.json"))


if __name__ == "__main__":
    _work(sys.argv[1])
