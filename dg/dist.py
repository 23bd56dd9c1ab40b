"""Data-parallel training on MPI, from Python (LANGUAGE.md §7).

    import dg.dist as dist
    params = dist.broadcast(params, root=0)        # every process starts alike
    grads = dist.allreduce(grads, op="mean")       # arrays, scalars, tuples, lists, dicts

Run with `mpiexec -n 4 python train.py` (the `dist` extra: mpi4py and MPICH). Under plain
`python`, or without mpi4py, the world has one process and these are identities. Inside dg
code the built-ins `rank()`, `world_size()`, `allreduce(x, op=)` and `broadcast(x, root=)` do
the same, in both modes; compiled code calls MPI itself.
"""
from __future__ import annotations

import numpy as np

from .core.mpi import OPS, world
from .core.tracebacks import error_at_caller
from .core.types import dtype_of_np

# What collectives carry: MPI's f32, f64, i32, i64, and f16 and bf16 (which travel as f32).
_CARRIED = ("f32", "f64", "i32", "i64", "f16", "bf16")

__all__ = ["rank", "world_size", "allreduce", "broadcast"]


def rank() -> int:
    """This process's rank (0 in a world of one)."""
    return world().rank


def world_size() -> int:
    """How many processes the world has (1 without MPI)."""
    return world().size


def allreduce(x, op: str = "sum"):
    """The elementwise sum, mean or max of `x` over every process, on every process. `x` is an
    array, a scalar, or a structure of them (tuples, lists, dicts): the leaves of each dtype
    travel as one buffer. What comes back has `x`'s structure, dtypes and shapes."""
    if op not in OPS:
        raise error_at_caller(f"allreduce: op must be one of {', '.join(repr(o) for o in OPS)}, got {op!r}")
    return _over_leaves(x, lambda flat: world().allreduce(flat, op))


def broadcast(x, root: int = 0):
    """`x` of the process of rank `root`, on every process (arrays, scalars, structures)."""
    w = world()
    if not 0 <= root < w.size:
        raise error_at_caller(f"broadcast: root {root} is not a rank of this world of {w.size}")
    return _over_leaves(x, lambda flat: w.broadcast(flat, root))


def _leaves(x, out: list):
    if isinstance(x, dict):
        return {k: _leaves(v, out) for k, v in x.items()}
    if isinstance(x, (tuple, list)):
        return type(x)(_leaves(v, out) for v in x)
    a = np.asarray(x)
    if dtype_of_np(a.dtype) not in _CARRIED:
        raise error_at_caller(f"collectives take arrays and numbers of {', '.join(_CARRIED)} and tuples, lists or dicts "
                     f"of them, not {type(x).__name__} of {a.dtype}")
    out.append((a, np.isscalar(x) or isinstance(x, np.generic)))
    return len(out) - 1


def _rebuild(shape, done: list):
    if isinstance(shape, dict):
        return {k: _rebuild(v, done) for k, v in shape.items()}
    if isinstance(shape, (tuple, list)):
        return type(shape)(_rebuild(v, done) for v in shape)
    return done[shape]


def _over_leaves(x, collective):
    leaves: list = []
    shape = _leaves(x, leaves)
    done: list = [None] * len(leaves)
    by_dtype: dict = {}
    for i, (a, _) in enumerate(leaves):
        by_dtype.setdefault(a.dtype, []).append(i)
    for dtype, idx in by_dtype.items():
        flat = collective(np.concatenate([leaves[i][0].reshape(-1) for i in idx]) if len(idx) > 1
                          else leaves[idx[0]][0].reshape(-1))
        at = 0
        for i in idx:
            a, scalar = leaves[i]
            part = flat[at:at + a.size].reshape(a.shape)
            at += a.size
            done[i] = part[()] if scalar else part
    return _rebuild(shape, done)
