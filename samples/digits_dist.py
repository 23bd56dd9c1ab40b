"""Data-parallel training of samples/digits.dg on MPI (LANGUAGE.md §7).

On one machine, with two or four processes (the `dist` extra: pip install 'dg[dist]'):

    mpiexec -n 2 python -m dg.samples.digits_dist [--epochs 30] [--batch 16] [--mode compiled]
    mpiexec -n 4 python -m dg.samples.digits_dist --save params.npz

On several machines, list them in a hostfile (one `host[:processes]` a line; MPICH's Hydra) and
start eight processes over them; every machine needs dg, scikit-learn and the same Python path:

    mpiexec -f hosts -n 8 python -m dg.samples.digits_dist

Under plain `python` it runs as a world of one. Every process loads the data with the same seed,
so all see the same order; each step takes a global batch of `--batch` × processes rows, of which
the process of rank r takes rows r·b to (r+1)·b. Rank 0 makes the initial parameters and
broadcasts them; `step_dp` (samples/digits.dg) averages the loss and the gradients over the
processes inside dg code, with one allreduce, so every process makes the same update. N
processes with batch b each therefore end with the parameters that one process gets with batch
N·b, to rounding. Only rank 0 prints; the test accuracy is reduced over shards of the test set;
rank 0 saves the parameters with np.savez (`--save PATH`, by default digits_dist_params.npz in
the current folder; `--no-save` saves none). Exits non-zero below 90% test accuracy.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import dg
import dg.dist as dist
from dg.samples.digits import load_data

NAMES = ("w1", "b1", "w2", "b2")


def init_params(hidden: int, seed: int) -> list:
    """The initial parameters, made on rank 0 and broadcast: every process starts alike."""
    params = None
    if dist.rank() == 0:
        rng = np.random.default_rng(seed)
        params = [rng.normal(0, 1 / 8, (64, hidden)).astype(np.float32), np.zeros(hidden, np.float32),
                  rng.normal(0, 1 / np.sqrt(hidden), (hidden, 10)).astype(np.float32), np.zeros(10, np.float32)]
    else:  # what rank 0's arrays are like; their values come with the broadcast
        params = [np.empty((64, hidden), np.float32), np.empty(hidden, np.float32),
                  np.empty((hidden, 10), np.float32), np.empty(10, np.float32)]
    return dist.broadcast(params, root=0)


def shard(order: np.ndarray, start: int, batch: int) -> np.ndarray:
    """This process's rows of the global batch that begins at `start`: rank r takes rows
    r*batch to (r+1)*batch of it."""
    r = dist.rank()
    return order[start + r * batch:start + (r + 1) * batch]


def global_accuracy(m, xte: np.ndarray, yte: np.ndarray, params) -> float:
    """The accuracy over the whole test set: each process scores its slice, then the counts
    are summed over the processes."""
    part = np.array_split(np.arange(len(xte)), dist.world_size())[dist.rank()]
    right = round(float(m.accuracy(xte[part], yte[part], *params)) * len(part)) if len(part) else 0
    right, total = dist.allreduce(np.array([right, len(part)], np.int64), op="sum")
    return float(right) / float(total)


def save_params(path, params) -> None:
    """Rank 0 writes the parameters to `path` (np.savez, named w1, b1, w2, b2)."""
    if dist.rank() == 0:
        np.savez(path, **dict(zip(NAMES, params)))


def train_dp(epochs: int = 30, mode: str = "compiled", batch: int = 16, hidden: int = 64, lr: float = 0.2,
             seed: int = 0, verbose: bool = True, save=None, steps: int | None = None):
    """Train on every process of the world, `batch` rows each per step; return (test accuracy,
    parameters), the same on every process. `steps`: stop after that many steps (all epochs
    otherwise); `save`: a path rank 0 writes the parameters to; `verbose`: rank 0 prints."""
    m = dg.load(Path(__file__).with_name("digits.dg"), mode=mode)
    (xtr, ytr), (xte, yte) = load_data(seed)
    params = init_params(hidden, seed)
    n = dist.world_size()
    glob = batch * n
    starts = range(0, len(xtr) - glob + 1, glob)
    say = print if verbose and dist.rank() == 0 else (lambda *a: None)
    say(f"{n} process{'es' if n > 1 else ''}, {batch} rows each: global batch {glob}, {len(starts)} steps an epoch")
    rng = np.random.default_rng(seed + 1)  # the data order: the same on every process
    done, t0 = 0, time.perf_counter()
    for epoch in range(epochs):
        order = rng.permutation(len(xtr))
        losses = []
        for i in starts:
            if steps is not None and done >= steps:
                break
            idx = shard(order, i, batch)
            loss, *params = m.step_dp(*params, xtr[idx], ytr[idx], np.float32(lr))
            losses.append(float(loss))  # the mean over the global batch
            done += 1
        if losses and (epoch % 5 == 4 or epoch == epochs - 1):
            say(f"epoch {epoch + 1:3d}  loss {np.mean(losses):.4f}")
        if steps is not None and done >= steps:
            break
    acc = global_accuracy(m, xte, yte, params)
    say(f"test accuracy {acc:.4f} ({len(xte)} images, {n} process{'es' if n > 1 else ''}, "
        f"{time.perf_counter() - t0:.1f} s, mode {mode})")
    if save:
        save_params(save, params)
        say(f"parameters saved to {save}")
    return acc, params


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--batch", type=int, default=16, help="rows per process per step")
    ap.add_argument("--mode", default="compiled", choices=("interp", "compiled"))
    ap.add_argument("--save", default="digits_dist_params.npz", metavar="PATH", help="where rank 0 saves the parameters")
    ap.add_argument("--no-save", action="store_true", help="save no parameters")
    a = ap.parse_args(argv)
    acc, _ = train_dp(a.epochs, a.mode, a.batch, save=None if a.no_save else a.save)
    return 0 if acc > 0.9 else 1


if __name__ == "__main__":
    sys.exit(main())
