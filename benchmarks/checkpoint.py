"""Bounded-memory gradients through a long `while` loop: checkpoint(f, slots=c), side by side.

The loop (`y = y + 0.001 * tanh(y * w)` over 32,768 float32s, run n times, the loss sum(y)) is
differentiated with respect to w:
- dg compiled, with `checkpoint(f, slots=16)`, at n = 200,000 (about 26 GB of carried values
  if every iteration were kept): peak memory (RSS) and time against the forward pass alone;
- at a size every peer fits (n = 2,000 by default): dg with and without checkpointing,
  PyTorch eager (which keeps every iteration) and JAX jit with Equinox's checkpointed
  while loop (`equinox.internal.while_loop(kind="checkpointed", checkpoints=16)`), where
  they are installed.
Each measurement runs in a process of its own, so that its peak RSS is its own; figures are
medians of --repeats runs inside that process (the first call, which compiles, not counted).
`python benchmarks/checkpoint.py [--n 200000] [--small 2000] [--json out.json]`
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import kept, median_time  # noqa: E402  (this folder's)

SIZE = 32768
SLOTS = 16

SOURCE = f"""
def loop(x: f32[?], w: f32[?], n: i64) -> f32:
    y = x
    i = 0
    while i < n:
        y = y + 0.001 * tanh(y * w)
        i = i + 1
    return sum(y)

def grad_checkpointed(x: f32[?], w: f32[?], n: i64) -> f32[?]:
    return grad(checkpoint(loop, slots={SLOTS}), wrt=1)(x, w, n)

def grad_taped(x: f32[?], w: f32[?], n: i64) -> f32[?]:
    return grad(loop, wrt=1)(x, w, n)
"""


def _timed(fn, repeats: int) -> float:
    fn()  # compiles (or warms up)
    if "dg.lowering.codegen.optimizer" in sys.modules:  # (a large program's first calls run quick code)
        sys.modules["dg.lowering.codegen.optimizer"].wait_all()
        fn()
    return median_time(fn, repeats)


def _inputs(np):
    rng = np.random.default_rng(0)
    return rng.standard_normal(SIZE).astype(np.float32), (1.0 + 0.1 * rng.standard_normal(SIZE)).astype(np.float32)


def worker(kind: str, n: int, repeats: int) -> dict:
    """One measurement, in this process: seconds per call (median) and the process's peak RSS."""
    import numpy as np

    x, w = _inputs(np)
    if kind.startswith("dg"):
        import dg

        m = dg.loads(SOURCE, mode="compiled", filename="checkpoint_bench.dg")
        fn = {"dg_forward": lambda: m.loop(x, w, n), "dg_checkpointed": lambda: m.grad_checkpointed(x, w, n),
              "dg_taped": lambda: m.grad_taped(x, w, n)}[kind]
        out = lambda: fn()  # noqa: E731
    elif kind.startswith("torch"):
        import torch

        torch.set_num_threads(os.cpu_count() or 1)
        xt, wt = torch.from_numpy(x), torch.from_numpy(w)

        def run(grad: bool):
            ww = wt.clone().requires_grad_(grad)
            y = xt
            with torch.set_grad_enabled(grad):
                for _ in range(n):
                    y = y + 0.001 * torch.tanh(y * ww)
                loss = y.sum()
            if grad:
                loss.backward()
                return ww.grad
            return loss
        out = (lambda: run(False)) if kind == "torch_forward" else (lambda: run(True))
    else:
        import equinox.internal as eqxi
        import jax
        import jax.numpy as jnp

        def loss(w, x):
            def body(c):
                i, y = c
                return i + 1, y + 0.001 * jnp.tanh(y * w)
            _, y = eqxi.while_loop(lambda c: c[0] < n, body, (0, x), max_steps=n, kind="checkpointed",
                                   checkpoints=SLOTS)
            return jnp.sum(y)

        def plain(w, x):
            _, y = jax.lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] + 0.001 * jnp.tanh(c[1] * w)),
                                      (0, x))
            return jnp.sum(y)
        f = jax.jit(plain) if kind == "jax_forward" else jax.jit(jax.grad(loss))
        xj, wj = jnp.asarray(x), jnp.asarray(w)
        out = lambda: jax.block_until_ready(f(wj, xj))  # noqa: E731
    seconds = _timed(out, repeats)
    return {"seconds": seconds, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def measure(kind: str, n: int, repeats: int) -> dict | None:
    """worker() in a process of its own; None where the peer is not installed or fails."""
    cmd = [sys.executable, __file__, "--worker", kind, "--n", str(n), "--repeats", str(repeats)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(f"  {kind}: not measured ({(r.stderr.strip().splitlines() or ['failed'])[-1]})")
        return None
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000, help="iterations of the long run (dg, checkpointed)")
    ap.add_argument("--small", type=int, default=2_000, help="iterations of the run every peer fits")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.n, args.repeats)))
        return {}
    mb_state = SIZE * 4 / 2**20
    print(f"loop over {SIZE} float32s ({mb_state * 1024:.0f} KB of carried state), slots={SLOTS}")
    out: dict = {"size": SIZE, "slots": SLOTS, "long": {"n": args.n}, "small": {"n": args.small}}

    long_repeats = 1 if args.n > 20_000 else args.repeats
    fwd = measure("dg_forward", args.n, long_repeats)
    ck = measure("dg_checkpointed", args.n, long_repeats)
    out["long"].update(dg_forward=fwd, dg_checkpointed=ck)
    if fwd and ck:
        out["long"]["grad_over_forward"] = ck["seconds"] / fwd["seconds"]
        print(f"n={args.n}: forward {fwd['seconds']:.3f} s, gradient (checkpointed) {ck['seconds']:.3f} s "
              f"= {ck['seconds'] / fwd['seconds']:.2f}x the forward; peak RSS {ck['peak_rss_mb']:.0f} MB "
              f"(every iteration kept: {args.n * mb_state / 1024:.1f} GB)")

    rows = {}
    for kind in ("dg_forward", "dg_checkpointed", "dg_taped", "torch_forward", "torch_grad", "jax_forward",
                 "jax_eqx_checkpointed"):
        rows[kind] = measure(kind, args.small, args.repeats)
    out["small"].update(rows)
    print(f"n={args.small}, side by side (median seconds, peak RSS MB):")
    for kind, r in rows.items():
        if r:
            print(f"  {kind:22s} {r['seconds']:9.4f} s  {r['peak_rss_mb']:8.0f} MB")
    ratios = {}
    ck = rows.get("dg_checkpointed")
    for peer in ("torch_grad", "jax_eqx_checkpointed", "dg_taped"):
        if ck and rows.get(peer):
            ratios[f"time_dg_checkpointed_over_{peer}"] = ck["seconds"] / rows[peer]["seconds"]
            ratios[f"rss_dg_checkpointed_over_{peer}"] = ck["peak_rss_mb"] / rows[peer]["peak_rss_mb"]
    for fwd_kind, grad_kind in (("dg_forward", "dg_checkpointed"), ("torch_forward", "torch_grad"),
                                ("jax_forward", "jax_eqx_checkpointed")):
        if rows.get(fwd_kind) and rows.get(grad_kind):
            ratios[f"{grad_kind}_over_its_forward"] = rows[grad_kind]["seconds"] / rows[fwd_kind]["seconds"]
    out["ratios"] = ratios
    for k, v in ratios.items():
        print(f"  {k}: {v:.2f}")
    return kept(out, args.json, indent=1)


if __name__ == "__main__":
    main()
