"""The collectives compiled code calls: MPI itself, without coming back to Python.

Expects: compiled code that calls `core.abi.MPI_RANK`, `MPI_SIZE`, `MPI_ALLREDUCE`,
`MPI_BCAST`, `MPI_ALLGATHER`, `MPI_REDUCE_SCATTER` and `MPI_ALL_TO_ALL` (the `mpi-collectives`
pass writes the calls). Guarantees: `symbols()` gives their addresses, made once per process with llvmlite.
The helper keeps a table of the groups' communicators (core.mpi.GROUPS), which follows the
world's grid when it is split. `helper(w)` names the helper for world `w` and its constants (an exported library compiles a
world of one's: runtime.export). Under MPI (`core.mpi.world()` is mpi4py's), they call
MPI_Allreduce (in place), MPI_Bcast, MPI_Allgather, MPI_Reduce_scatter_block and MPI_Alltoall
(in place) of
the very library mpi4py loaded, on its
COMM_WORLD, with the handles mpi4py reports (ints in MPICH, pointers in Open MPI: the code is
written for the size of a handle), in chunks that fit MPI's int counts. In a world of one,
rank 0 of 1, and the buffer is left as it is. The code depends on the process (its rank, the
handles), so it is made here at run time and never cached (runtime/ll/collectives_one.ll and
collectives_mpi.ll, with this process's constants put in).
"""
from __future__ import annotations

import ctypes
import threading

from dg.core.abi import (MPI_ALL_TO_ALL, MPI_ALLGATHER, MPI_ALLREDUCE, MPI_BCAST, MPI_FLUSH, MPI_IALLREDUCE, MPI_RANK,
                         MPI_RECV, MPI_REDUCE_SCATTER, MPI_SEND, MPI_SIZE, MPI_WAIT)
from dg.core.mpi import DTYPES, GROUPS, OPS, world

from .natives import compile_native

CHUNK = 1 << 30  # elements per MPI call (its counts are ints)
ITEM = {"f32": 4, "f64": 8, "i32": 4, "i64": 8}


NAMES = (MPI_RANK, MPI_SIZE, MPI_ALLREDUCE, MPI_BCAST, MPI_ALLGATHER, MPI_REDUCE_SCATTER, MPI_ALL_TO_ALL,
         MPI_IALLREDUCE, MPI_WAIT,
         *(f"{p2p}_{t}" for p2p in (MPI_SEND, MPI_RECV) for t in DTYPES))


def _aliases() -> str:
    """The point-to-point calls' names per element type (`dg.mpi_send_f32`: what compiled code
    declares, its buffer's type in the name), each an alias of the one function."""
    sig = "void (i64, i32, i32, i64, ptr)"
    return "\n".join(f'@"{p2p}_{t}" = alias {sig}, ptr @"{p2p}"' for p2p in (MPI_SEND, MPI_RECV) for t in DTYPES)


def helper(w) -> tuple[str, dict]:
    """The helper (runtime/ll/collectives_one.ll or collectives_mpi.ll) for world `w`, and what
    its placeholders stand for."""
    names = {"MPI_RANK": MPI_RANK, "MPI_SIZE": MPI_SIZE, "MPI_ALLREDUCE": MPI_ALLREDUCE, "MPI_BCAST": MPI_BCAST,
             "MPI_ALLGATHER": MPI_ALLGATHER, "MPI_REDUCE_SCATTER": MPI_REDUCE_SCATTER, "MPI_ALL_TO_ALL": MPI_ALL_TO_ALL,
             "MPI_SEND": MPI_SEND, "MPI_RECV": MPI_RECV, "MPI_FLUSH": MPI_FLUSH, "MPI_IALLREDUCE": MPI_IALLREDUCE,
             "MPI_WAIT": MPI_WAIT, "ALIASES": _aliases()}
    common = {**names, "NDTYPES": len(DTYPES), "ITEMS": ", ".join(f"i64 {ITEM[t]}" for t in DTYPES)}
    if w.native is None:  # a world of one: a reduction that reads its source copies it
        return "collectives_one", common
    _, handles, handle_bytes = w.native
    h = "i32" if handle_bytes == 4 else "i64"
    return "collectives_mpi", {
        **common, "H": h, "IN_PLACE": handles["in_place"], "CHUNK": CHUNK, "NGROUPS": len(GROUPS),
        "COMMS": ", ".join(f"{h} {w.handle(g)}" for g in GROUPS),
        "RANKS": ", ".join(f"i64 {w.group(g).rank}" for g in GROUPS),
        "SIZES": ", ".join(f"i64 {w.group(g).size}" for g in GROUPS),
        "TYPES": ", ".join(f"{h} {handles['type_' + t]}" for t in DTYPES), "NOPS": len(OPS),
        "OPS": ", ".join(f"{h} {handles['op_' + o]}" for o in OPS)}


class _Made:
    lock = threading.Lock()
    engine = None
    symbols: dict = {}


def symbols() -> dict:
    """name -> address of the collectives, for compiled code to link with."""
    if _Made.engine is None:
        with _Made.lock:
            if _Made.engine is None:
                _make()
    return _Made.symbols


def _make() -> None:
    w = world()
    mpi = {}
    if w.native is not None:
        lib = ctypes.CDLL(w.native[0])
        mpi = {name: ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
               for name in ("MPI_Allreduce", "MPI_Bcast", "MPI_Allgather", "MPI_Reduce_scatter_block", "MPI_Alltoall",
                             "MPI_Isend", "MPI_Recv", "MPI_Test", "MPI_Wait", "MPI_Iallreduce")}
    engine = compile_native(*helper(w), mpi)
    _Made.symbols = {n: engine.get_function_address(n) for n in NAMES}
    _Made.engine = engine
    if w.native is not None:
        w.listeners.append(lambda w: _follow(engine, w))
        flush = ctypes.CFUNCTYPE(None)(engine.get_function_address(MPI_FLUSH))
        w.before_finalize.append(flush)


def _follow(engine, w) -> None:
    """The helper's tables of communicators, ranks and sizes made the world's groups' again (after
    the grid was split)."""
    wide = ctypes.c_int32 if w.native[2] == 4 else ctypes.c_int64
    comms = (wide * len(GROUPS)).from_address(engine.get_global_value_address("comms"))
    ranks = (ctypes.c_int64 * len(GROUPS)).from_address(engine.get_global_value_address("ranks"))
    sizes = (ctypes.c_int64 * len(GROUPS)).from_address(engine.get_global_value_address("sizes"))
    for k, g in enumerate(GROUPS):
        comms[k], ranks[k], sizes[k] = w.handle(g), w.group(g).rank, w.group(g).size
