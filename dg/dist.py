"""Collectives on MPI, from Python (LANGUAGE.md §7).

    import dg.dist as dist
    params = dist.broadcast(params, root=0)        # every process starts alike
    grads = dist.allreduce(grads, op="mean")       # arrays, scalars, tuples, lists, dicts
    rows = dist.allgather(block, axis=0)           # every process's block, in rank order
    mine = dist.reduce_scatter(grads, axis=0)      # the sum over processes, this one's block
    heads = dist.all_to_all(x, split_axis=1, concat_axis=0)   # block k to process k

Run with `mpiexec -n 4 python train.py` (the `dist` extra: mpi4py and MPICH). Under plain
`python`, or without mpi4py, the world has one process and these are identities. Inside dg
code the built-ins `rank()`, `world_size()`, `allreduce(x, op=)`, `broadcast(x, root=)`,
`allgather(x, axis=)`, `reduce_scatter(x, axis=, op=)` and `all_to_all(x, split_axis=,
concat_axis=)` do the same, in both modes; compiled code calls MPI itself.
"""
from __future__ import annotations

import numpy as np

from .core.mpi import GROUPS, NOT_DIVISIBLE, NOT_SPLIT, OPS, world
from .core.tracebacks import error_at_caller
from .core.types import dtype_of_np

# What collectives carry: MPI's f32, f64, i32, i64, and f16 and bf16 (which travel as f32).
_CARRIED = ("f32", "f64", "i32", "i64", "f16", "bf16")

__all__ = ["rank", "world_size", "allreduce", "broadcast", "allgather", "reduce_scatter", "all_to_all", "groups"]


def _in(group: str):
    """The world seen by `group` (one of core.mpi.GROUPS), or a located DgError."""
    if group not in GROUPS:
        raise error_at_caller(f"group must be one of {', '.join(repr(g) for g in GROUPS)}, got {group!r}")
    return world().group(group)


def groups(tp: int = 1, pp: int = 1, dp: int | None = None) -> dict:
    """Split the world into a tensor-parallel x pipeline x data-parallel grid of tp x pp x dp
    processes (dp: what the others leave; the product must be the world's size), tp the
    fastest-varying: rank = tp_index + tp * (pp_index + pp * dp_index). From then on `group="tp"`
    (and "pp", "dp") names this process's row of the grid along that axis, in every collective,
    from Python and in dg code, in both modes. Every process calls it, with the same sizes.
    Returns this process's place, {"tp": index, "pp": index, "dp": index}."""
    w = world()
    if dp is None:
        dp = w.size // (tp * pp) if tp * pp and w.size % (tp * pp) == 0 else 0
    if min(tp, pp, dp) < 1 or tp * pp * dp != w.size:
        raise error_at_caller(f"groups: a grid of tp={tp} x pp={pp} x dp={dp} processes does not fill this world of "
                              f"{w.size}")
    w.set_grid(tp, pp, dp)
    return {g: w.group(g).rank for g in ("tp", "pp", "dp")}


def rank(group: str = "world") -> int:
    """This process's rank in the world, or in `group` (0 in a world of one)."""
    return _in(group).rank


def world_size(group: str = "world") -> int:
    """How many processes the world has, or `group` (1 without MPI)."""
    return _in(group).size


def allreduce(x, op: str = "sum", group: str = "world"):
    """The elementwise sum, mean or max of `x` over every process (of `group`), on every process.
    `x` is an array, a scalar, or a structure of them (tuples, lists, dicts): the leaves of each
    dtype travel as one buffer. What comes back has `x`'s structure, dtypes and shapes."""
    if op not in OPS:
        raise error_at_caller(f"allreduce: op must be one of {', '.join(repr(o) for o in OPS)}, got {op!r}")
    w = _in(group)
    return _over_leaves(x, lambda flat: w.allreduce(flat, op))


def broadcast(x, root: int = 0, group: str = "world"):
    """`x` of the process of rank `root` (in `group`), on every process (arrays, scalars,
    structures)."""
    w = _in(group)
    if not 0 <= root < w.size:
        raise error_at_caller(f"broadcast: root {root} is not a rank of this world of {w.size}")
    return _over_leaves(x, lambda flat: w.broadcast(flat, root))


def allgather(x, axis: int = 0, group: str = "world"):
    """Every process's `x` (of `group`) joined along `axis`, in rank order, on every process
    (arrays, or structures of them: each leaf gathered)."""
    w = _in(group)
    return _leaf_by_leaf(x, axis, "allgather", lambda a: w.allgather(a))


def reduce_scatter(x, axis: int = 0, op: str = "sum", group: str = "world"):
    """The sum, mean or max of `x` over every process (of `group`), cut along `axis` into as many
    blocks as processes: this process's block (arrays, or structures of them, leaf by leaf). The
    axis's size must be a multiple of the group's."""
    if op not in OPS:
        raise error_at_caller(f"reduce_scatter: op must be one of {', '.join(repr(o) for o in OPS)}, got {op!r}")
    w = _in(group)
    for a, _ in _flat(x):
        if a.ndim and a.shape[axis % a.ndim] % w.size:
            raise error_at_caller(NOT_DIVISIBLE.format(a.shape[axis % a.ndim], w.size))
    return _leaf_by_leaf(x, axis, "reduce_scatter", lambda a: w.reduce_scatter(a, op))


def all_to_all(x, split_axis: int = 0, concat_axis: int = 0, group: str = "world"):
    """`x` cut along `split_axis` into one block per process (of `group`), block k sent to process
    k; the blocks this process receives joined along `concat_axis`, in rank order (arrays, or
    structures of them, leaf by leaf). The split axis's size must be a multiple of the group's."""
    w = _in(group)
    out_leaves = []
    leaves: list = []
    shape = _leaves(x, leaves)
    for a, _ in leaves:
        for axis, what in ((split_axis, "split_axis"), (concat_axis, "concat_axis")):
            if not a.ndim or not -a.ndim <= axis < a.ndim:
                raise error_at_caller(f"all_to_all: {what} {axis} is out of range for an array of rank {a.ndim}")
        if a.shape[split_axis] % w.size:
            raise error_at_caller(NOT_SPLIT.format(a.shape[split_axis], w.size))
        got = w.all_to_all(np.ascontiguousarray(np.moveaxis(a, split_axis, 0)))
        parts = [np.moveaxis(p, 0, split_axis) for p in np.split(got, w.size, axis=0)]
        out_leaves.append(np.concatenate(parts, axis=concat_axis))
    return _rebuild(shape, out_leaves)


def _flat(x) -> list:
    leaves: list = []
    _leaves(x, leaves)
    return leaves


def _leaf_by_leaf(x, axis: int, name: str, collective):
    """`collective` (along axis 0) of each leaf of x along `axis`."""
    leaves: list = []
    shape = _leaves(x, leaves)
    done = []
    for a, _ in leaves:
        if not a.ndim or not -a.ndim <= axis < a.ndim:
            raise error_at_caller(f"{name}: axis {axis} is out of range for an array of rank {a.ndim}")
        done.append(np.moveaxis(collective(np.ascontiguousarray(np.moveaxis(a, axis, 0))), 0, axis))
    return _rebuild(shape, done)


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
