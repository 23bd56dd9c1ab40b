"""The MPI world dg runs in: mpi4py's, or a world of one.

Expects: mpi4py with an MPI library (the `dist` extra: mpi4py and MPICH) where processes are
started by `mpiexec`; nothing otherwise. Guarantees: `world()` is the process's `World`, made
once: under `mpiexec` (the launcher's environment names this process's rank) with mpi4py
importable, MPI's COMM_WORLD; else a world of one, where collectives are identities, and MPI
is not even loaded. `World.allreduce`, `World.broadcast`, `World.allgather`,
`World.reduce_scatter` and `World.all_to_all` work on NumPy arrays (each one collective call;
the last three along axis 0, whose size reduce_scatter and all_to_all need to be a multiple of
the group's: a ValueError says so); `World.native` tells compiled code how to call the same MPI
library (`runtime.collectives`).

Groups: `World.group(name)` is the world seen by one of the GROUPS: "world" itself, or the
processes that share this one's place on every axis of the grid but `name` ("tp", "pp", "dp": a
tensor-parallel x pipeline x data-parallel grid, tp the fastest-varying: rank = tp_index + tp *
(pp_index + pp * dp_index)). `World.set_grid(tp, pp, dp)` splits the world so (the product must
be its size); until then the grid is 1 x 1 x size (data parallelism). `World.listeners` are
called after each split (compiled code's tables of communicators follow it). Under MPI, an uncaught exception on one rank prints its error and
aborts every rank (MPI_Abort), so that a failure never leaves the others waiting.
"""
from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import os
import sys
import threading
import time

import numpy as np

from .config import config

# What launchers set in each process they start (MPICH's Hydra, Open MPI, PMIx, Slurm).
_LAUNCHED = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "MPI_LOCALRANKID")
OPS = ("sum", "mean", "max")
GROUPS = ("world", "tp", "pp", "dp")  # a group's code in compiled code is its index here
DTYPES = ("f32", "f64", "i32", "i64")  # what MPI reduces (f16 and bf16 travel as f32)


class World:
    """A world of one: rank 0 of 1, collectives that give back what they get."""

    rank = 0
    size = 1
    native = None  # (library path, {name: handle}) for compiled code; None: no MPI
    grid = (1, 1, 1)
    listeners: list = []

    def group(self, name: str) -> "World":
        return self

    def handle(self, name: str) -> int:
        return 0

    def set_grid(self, tp: int, pp: int, dp: int) -> None:
        if tp * pp * dp != self.size:
            raise ValueError(f"a grid of {tp} x {pp} x {dp} processes does not fill a world of {self.size}")
        self.grid = (tp, pp, dp)

    def allreduce(self, x: np.ndarray, op: str) -> np.ndarray:
        return np.array(x, copy=True)

    def broadcast(self, x: np.ndarray, root: int) -> np.ndarray:
        return np.array(x, copy=True)

    def allgather(self, x: np.ndarray) -> np.ndarray:
        return np.array(x, copy=True)

    def reduce_scatter(self, x: np.ndarray, op: str) -> np.ndarray:
        return np.array(x, copy=True)

    def all_to_all(self, x: np.ndarray) -> np.ndarray:
        return np.array(x, copy=True)

    def iallreduce(self, x: np.ndarray, op: str):
        """(the array the reduction is made in, its request, or None): here, x itself."""
        return np.array(x, copy=True), None

    def send(self, x: np.ndarray, to: int) -> None:
        raise ValueError(NOT_A_PEER.format(to, self.size))

    def recv(self, like: np.ndarray, frm: int) -> np.ndarray:
        raise ValueError(NOT_A_PEER.format(frm, self.size))


NOT_A_PEER = "send and recv: rank {0} is not another process of this group of {1}"


def scatter_blocks(x: np.ndarray, size: int) -> int:
    """The rows of each rank's block when reduce_scatter splits x's axis 0 over `size` ranks."""
    if x.ndim == 0 or x.shape[0] % size:
        raise ValueError(NOT_DIVISIBLE.format(x.shape[0] if x.ndim else 1, size))
    return x.shape[0] // size


NOT_DIVISIBLE = "reduce_scatter: axis size {0} is not a multiple of the group's {1} processes"
NOT_SPLIT = "all_to_all: split axis size {0} is not a multiple of the group's {1} processes"


class MpiWorld(World):
    """MPI's COMM_WORLD (or, as a group, a communicator split from it), through mpi4py."""

    def __init__(self, comm=None, parent: "MpiWorld | None" = None):
        from mpi4py import MPI

        self.MPI = MPI
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        if parent is not None:  # a group: the world's handles, its own communicator
            self._ops, self.native, self._parent = parent._ops, parent.native, parent
            return
        self.listeners = []
        self.before_finalize = [self._settle]  # (called once, at exit, before mpi4py finalizes MPI)
        self._sending = []  # the interpreter's sends in flight: (request, copy)
        atexit.register(self._finalizing)
        self._ops = {"sum": MPI.SUM, "mean": MPI.SUM, "max": MPI.MAX}
        types = {"f32": MPI.FLOAT, "f64": MPI.DOUBLE, "i32": MPI.INT32_T, "i64": MPI.INT64_T}
        handles = {"comm": MPI._handleof(self.comm), "in_place": int(MPI.IN_PLACE),
                   **{f"op_{k}": MPI._handleof(v) for k, v in self._ops.items()},
                   **{f"type_{k}": MPI._handleof(v) for k, v in types.items()}}
        self.native = (_library(), handles, MPI._sizeof(MPI.Comm))
        self._groups = {}
        self.set_grid(1, 1, self.size)
        _abort_on_uncaught(self.comm)

    def group(self, name: str) -> "MpiWorld":
        return self if name == "world" else self._groups[name]

    def set_grid(self, tp: int, pp: int, dp: int) -> None:
        World.set_grid(self, tp, pp, dp)
        r = self.rank
        place = {"tp": r % tp, "pp": r // tp % pp, "dp": r // (tp * pp)}
        for name in ("tp", "pp", "dp"):
            others = tuple(v for k, v in place.items() if k != name)
            color = others[0] * self.size + others[1]
            self._groups[name] = MpiWorld(self.comm.Split(color, place[name]), parent=self)
        for listener in self.listeners:
            listener(self)

    def handle(self, name: str) -> int:
        """The MPI handle of group `name`'s communicator."""
        return self.MPI._handleof(self.group(name).comm)

    def allreduce(self, x: np.ndarray, op: str) -> np.ndarray:
        if x.dtype.itemsize == 2 and x.dtype.kind in "fV":  # f16, bf16: as f32 (MPI has no type for them)
            return self.allreduce(x.astype(np.float32), op).astype(x.dtype)
        x = np.asarray(x, order="C")  # (not ascontiguousarray: it makes a 0-d array 1-d)
        out = np.empty_like(x)
        self.comm.Allreduce(x, out, op=self._ops[op])
        return mean_of(out, self.size) if op == "mean" else out

    def broadcast(self, x: np.ndarray, root: int) -> np.ndarray:
        if x.dtype.itemsize == 2 and x.dtype.kind in "fV":
            return self.broadcast(x.astype(np.float32), root).astype(x.dtype)
        out = np.array(x, copy=True, order="C")
        self.comm.Bcast(out, root=root)
        return out

    def allgather(self, x: np.ndarray) -> np.ndarray:
        if x.dtype.itemsize == 2 and x.dtype.kind in "fV":
            return self.allgather(x.astype(np.float32)).astype(x.dtype)
        x = np.ascontiguousarray(x)
        out = np.empty((self.size * x.shape[0],) + x.shape[1:], x.dtype)
        self.comm.Allgather(x, out)
        return out

    def reduce_scatter(self, x: np.ndarray, op: str) -> np.ndarray:
        if x.dtype.itemsize == 2 and x.dtype.kind in "fV":
            return self.reduce_scatter(x.astype(np.float32), op).astype(x.dtype)
        x = np.ascontiguousarray(x)
        out = np.empty((scatter_blocks(x, self.size),) + x.shape[1:], x.dtype)
        self.comm.Reduce_scatter_block(x, out, op=self._ops[op])
        return mean_of(out, self.size) if op == "mean" else out

    def all_to_all(self, x: np.ndarray) -> np.ndarray:
        if x.dtype.itemsize == 2 and x.dtype.kind in "fV":
            return self.all_to_all(x.astype(np.float32)).astype(x.dtype)
        if x.ndim == 0 or x.shape[0] % self.size:
            raise ValueError(NOT_SPLIT.format(x.shape[0] if x.ndim else 1, self.size))
        x = np.ascontiguousarray(x)
        out = np.empty_like(x)
        self.comm.Alltoall(x, out)
        return out

    def iallreduce(self, x: np.ndarray, op: str):
        out = np.array(x, copy=True, order="C")
        return out, self.comm.Iallreduce(self.MPI.IN_PLACE, out, op=self._ops[op])

    def send(self, x: np.ndarray, to: int) -> None:
        """Starts sending a copy of x to `to` (which a later send, or the exit, finds sent): a send
        never waits for its receiver, as in compiled code."""
        if not 0 <= to < self.size or to == self.rank:
            raise ValueError(NOT_A_PEER.format(to, self.size))
        if x.dtype.itemsize == 2 and x.dtype.kind in "fV":
            x = x.astype(np.float32)
        root = self._root()
        root._settle(wait=False)
        copy = np.array(x, copy=True, order="C")
        root._sending.append((self.comm.Isend(copy, dest=to, tag=0), copy))

    def _root(self) -> "MpiWorld":
        return self if hasattr(self, "_sending") else self._parent

    def _settle(self, wait: bool = True) -> None:
        """The interpreter's sends in flight that have gone (all, waiting, with `wait`) released."""
        if wait:
            for req, _ in self._sending:
                req.Wait()
            self._sending = []
        else:
            self._sending = [(req, copy) for req, copy in self._sending if not req.Test()]

    def _finalizing(self) -> None:
        for settle in self.before_finalize:
            settle()

    def recv(self, like: np.ndarray, frm: int) -> np.ndarray:
        if not 0 <= frm < self.size or frm == self.rank:
            raise ValueError(NOT_A_PEER.format(frm, self.size))
        half = like.dtype.itemsize == 2 and like.dtype.kind in "fV"
        out = np.empty(like.shape, np.float32 if half else like.dtype)
        self.comm.Recv(out, source=frm, tag=0)
        return out.astype(like.dtype) if half else out


def _library() -> str:
    """The MPI library mpi4py loaded (its file, for compiled code to call the same one)."""
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if "/libmpi" in path and ".so" in path:
                return path
    return ctypes.util.find_library("mpi") or "libmpi.so.12"


def _abort_on_uncaught(comm) -> None:
    """An uncaught exception on one rank: its message, then MPI_Abort, which ends every rank
    (the others would wait in their next collective for ever). Where every rank fails alike (the
    same assert on the same data), the message is printed once: a rank above 0 waits a moment
    (0.25 s per rank, at most 2 s) before printing, and the abort of a rank before it ends it
    first."""
    before = sys.excepthook
    rank = comm.Get_rank()

    def hook(kind, value, tb):
        if rank:
            time.sleep(min(0.25 * rank, 2.0))
        before(kind, value, tb)
        sys.stderr.flush()
        comm.Abort(1)

    sys.excepthook = hook


_WORLD: list = []
_LOCK = threading.Lock()


def launched() -> bool:
    """Whether a launcher (mpiexec) started this process."""
    return any(k in os.environ for k in _LAUNCHED)


def world() -> World:
    if not _WORLD:
        with _LOCK:
            if not _WORLD:
                w = World()
                if launched() and config.dist:
                    try:
                        w = MpiWorld()
                    except ImportError:  # no mpi4py: a world of one (the `dist` extra brings it)
                        pass
                _WORLD.append(w)
    return _WORLD[0]


def mean_of(total: np.ndarray, size: int) -> np.ndarray:
    """What op="mean" gives from a sum (integers divide as floor division)."""
    return (total / size).astype(total.dtype) if np.issubdtype(total.dtype, np.floating) else total // size

