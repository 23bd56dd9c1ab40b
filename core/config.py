"""dg's configuration: every `DG_*` environment variable, read and checked in one place.

Expects: nothing; the variables are read when a value is asked for, not at import, so one set
while the process runs (a script's `os.environ[...] = ...`, a test's `monkeypatch.setenv`) is
seen by the next call that asks.
Guarantees: `VARIABLES` names each variable with the values it may take, its default and its
meaning (what `dg --config` prints, and the table of docs/api.md); `config.NAME` (or
`config.value("DG_NAME")`) is the value in effect: the default where the variable is unset or
empty, and a `DgError` naming the variable and what it may be set to where its value is none of
those. Switches take `0` and `1`, and also `off`/`on`, `no`/`yes` and `false`/`true`; choices
and switches are read without case or surrounding spaces. No other module of dg reads a `DG_`
variable (tests/test_package_graph.py checks it).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .errors import DgError

MODES = ("interp", "compiled", "shadow")
DEVICES = ("cpu", "cuda")
BLAS_FAMILIES = ("mkl", "openblas", "cblas")  # most preferred first

_ON = ("1", "on", "yes", "true")
_OFF = ("0", "off", "no", "false")


def _switch(text: str) -> bool:
    t = text.strip().lower()
    if t in _ON:
        return True
    if t in _OFF:
        return False
    raise ValueError("one of 0, 1 (also off, on, no, yes, false, true)")


def _choice(choices: tuple) -> Callable[[str], str]:
    def parse(text: str) -> str:
        t = text.strip().lower()
        if t in choices:
            return t
        raise ValueError(f"one of {', '.join(choices)}")
    return parse


def _blas(text: str) -> tuple:
    """The BLAS families allowed, most preferred first (empty: none)."""
    t = text.strip().lower()
    if t in ("1", "auto"):
        return BLAS_FAMILIES
    if t in ("0", "none"):
        return ()
    if t in BLAS_FAMILIES:
        return (t,)
    raise ValueError(f"one of 0, 1, {', '.join(BLAS_FAMILIES)}")


def _threads(text: str) -> int:
    try:
        n = int(text.strip())
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError("a whole number, at least 1")
    return n


def _folders(text: str) -> tuple:
    return tuple(Path(p) for p in text.split(os.pathsep) if p)


@dataclass(frozen=True)
class Variable:
    name: str
    values: str  # what it may be set to
    default: str  # what dg does where it is unset (or empty)
    meaning: str  # one line
    parse: Callable[[str], Any]  # a set value -> what dg uses; ValueError(what was expected) if bad
    unset: Any = None  # what dg uses where it is unset or empty

    def text(self) -> str | None:
        """What the variable is set to, as written (None: unset)."""
        return os.environ.get(self.name)

    def read(self) -> Any:
        """The value in effect now (a DgError for a bad one)."""
        raw = self.text()
        hit = _SEEN.get(self.name)
        if hit is not None and hit[0] == raw:
            return hit[1]
        if raw is None or not raw.strip():
            value = self.unset
        else:
            try:
                value = self.parse(raw)
            except ValueError as e:
                raise DgError(f"{self.name}={raw!r}: expected {e}") from None
        _SEEN[self.name] = (raw, value)
        return value


_SEEN: dict = {}  # name -> (the raw text last read, its value): a value is parsed once per text

def _on_off(name: str, default: bool, meaning: str) -> Variable:
    """A variable that turns something on (1) or off (0)."""
    return Variable(name, "0, 1", "1" if default else "0", meaning, _switch, default)


VARIABLES: dict[str, Variable] = {v.name: v for v in [
    Variable("DG_MODE", ", ".join(MODES), "compiled",
             "the mode of a load that names none (shadow: both, compared op by op)",
             _choice(MODES), "compiled"),
    Variable("DG_DEVICE", ", ".join(DEVICES), "cpu",
             "the device of compiled code where a load names none (the interpreter runs on the CPU)",
             _choice(DEVICES), "cpu"),
    _on_off("DG_CHECK_NUMERICS", False,
            "1: every load raises at the first op that makes a NaN or an infinity"),
    _on_off("DG_AUTOBATCH", True,
            "0: a `for` over a list whose iterations only add up runs one item after another, not batched"),
    Variable("DG_PATH", "folders separated by " + os.pathsep, "none",
             "more folders to look for imported .dg files in, after the importing file's",
             _folders, ()),
    _on_off("DG_CACHE", True,
            "0: no disk cache of compiled code"),
    Variable("DG_CACHE_DIR", "a folder", "~/.cache/dg/compiled",
             "the folder of the disk cache of compiled code (~/.cache: $XDG_CACHE_HOME where that is set)",
             Path, None),
    _on_off("DG_QUICK_START", True,
            "0: a large program is optimized before its first call, not started on quick code"),
    _on_off("DG_TIERED", False,
            "1: the interpreter runs a compiled function's first calls while a worker compiles it"),
    _on_off("DG_LOG_COMPILES", False,
            "1: each specialization dg makes is printed to standard error, with its reason and timings"),
    _on_off("DG_TRACEBACK_FILTERING", True,
            "0 (or off): Python tracebacks of dg's errors keep dg's own frames"),
    _on_off("DG_VERIFY_PASSES", False,
            "1: MLIR verifies the IR after every pass of dg's pipelines (else once, before LLVM)"),
    Variable("DG_NUM_THREADS", "a whole number, at least 1", "the CPUs the process may use",
             "threads for the parallel loops of compiled code",
             _threads, None),
    Variable("DG_BLAS", "0, 1, " + ", ".join(BLAS_FAMILIES), "1",
             "the BLAS compiled matrix products call: 1 the first found of " + ", ".join(BLAS_FAMILIES)
             + "; a name that one only; 0 none (products stay loops)",
             _blas, BLAS_FAMILIES),
    _on_off("DG_PERF_MAP", False,
            "1: compiled code's functions are written to /tmp/perf-<pid>.map, so that Linux perf names them"),
    _on_off("DG_KEEP_MEMORY", True,
            "0: leave glibc's malloc as it is (by default it keeps what compiled code frees for the next call)"),
    _on_off("DG_CUBLAS", True,
            "0: products on the GPU run as dg's own tiled kernel, not cuBLAS"),
    Variable("DG_LIBDEVICE", "a file", "the nvidia-nvvm wheel's, else a CUDA toolkit's",
             "the path of libdevice.10.bc, for PTX",
             str, None),
    _on_off("DG_DIST", True,
            "0: every process is a world of one, even under mpiexec (mpi4py is not loaded)"),
]}


class Config:
    """The value in effect of each `DG_*` variable, read at each access (see the module's doc):
    an attribute per variable, named as the variable less `DG_` in lower case (`config.mode`,
    `config.cache_dir`, `config.num_threads`; None where an unset variable's default is worked
    out elsewhere: the cache folder, the thread count, libdevice)."""

    @staticmethod
    def value(name: str) -> Any:
        return VARIABLES[name].read()


def _attribute(name: str) -> property:
    return property(lambda self: VARIABLES[name].read(), doc=f"{name}: {VARIABLES[name].meaning}")


for _name in VARIABLES:
    setattr(Config, _name[len("DG_"):].lower(), _attribute(_name))


config = Config()
