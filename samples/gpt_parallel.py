"""Train samples/gpt.dg's tiny GPT on several processes: tensor parallelism over 2 (or more)
processes, or 2 pipeline stages, under mpiexec (samples/gpt_parallel.dg).

    pip install -e ".[dist]"
    mpiexec -n 2 python samples/gpt_parallel.py --parallel tensor [--steps 50] [--check]
    mpiexec -n 2 python samples/gpt_parallel.py --parallel pipeline --micro 4 [--steps 50] [--check]

Every process starts from the same parameters (samples/gpt.py's init) and the same batches;
tensor parallelism splits each block's 4 heads and hidden units over the processes (group
"tp"), pipeline parallelism puts the blocks in stages (group "pp", each stage as many blocks)
and splits each batch into micro-batches. Rank 0 prints the loss every ten steps; with
--check, also the loss one process gets with the whole model (samples/gpt.dg's train_step, the
same batches), and exits non-zero where the two differ by more than rounding.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import dg

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from gpt import init_params  # noqa: E402  (this folder's)
from text import batch, cosine, load_text  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parallel", choices=("tensor", "pipeline"), default="tensor")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--micro", type=int, default=4, help="micro-batches per batch (pipeline)")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--mode", default="compiled", choices=("compiled", "interp"))
    ap.add_argument("--check", action="store_true", help="compare with one process's losses")
    a = ap.parse_args(argv)
    n = dg.dist.world_size()
    if a.parallel == "tensor":
        dg.dist.groups(tp=n)
    else:
        dg.dist.groups(pp=n)
    m = dg.load(HERE / "gpt_parallel.dg", mode=a.mode)
    one = dg.load(HERE / "gpt.dg", mode=a.mode) if a.check else None
    train_ids, _, chars = load_text()
    context, batch_size = 32, 16
    whole = init_params(len(chars), context, 64, a.layers, 0)
    if a.parallel == "tensor":
        p = m.tp_shard(whole)
    else:  # this stage's blocks (a tuple's length is fixed when the code is made: chosen here)
        per, s = a.layers // n, dg.dist.rank(group="pp")
        p = {**whole, "blocks": whole["blocks"][s * per:(s + 1) * per]}
    state = m.init_state(p)
    ref, ref_state = whole, (one.init_state(whole) if one else None)
    rng = np.random.default_rng(0)
    worst, t0 = 0.0, time.perf_counter()
    for step in range(a.steps):
        x, y = batch(train_ids, rng, batch_size, context)
        lr = np.float32(cosine(a.lr, step, a.steps, 20))
        if a.parallel == "tensor":
            loss, p, state = m.tp_step(p, state, x, y, lr)
        else:
            shape = (a.micro, batch_size // a.micro, context)
            loss, p, state = m.pp_step(p, state, x.reshape(shape), y.reshape(shape), lr)
        line = f"step {step + 1:4d}  loss {float(loss):.4f}"
        if one is not None:
            want, ref, ref_state = one.train_step(ref, ref_state, x, y, lr)
            worst = max(worst, abs(float(loss) - float(want)))
            line += f"  (one process: {float(want):.4f})"
        if dg.dist.rank() == 0 and (step % 10 == 9 or step == a.steps - 1):
            print(line, flush=True)
    if dg.dist.rank() == 0:
        print(f"{a.parallel} parallelism over {n} processes: {a.steps} steps in {time.perf_counter() - t0:.1f} s"
              + (f"; largest difference from one process {worst:.2e}" if one is not None else ""), flush=True)
    return 0 if worst < 1e-3 else 1


if __name__ == "__main__":
    sys.exit(main())
