"""Interpreter overhead per executed op, beyond NumPy's own work.

A dg loop of elementwise ops on a small tensor runs in the interpreter; the
same NumPy calls run from plain Python as the baseline. The difference,
divided by the number of dg ops executed, is what the interpreter adds per
op. PyTorch eager and JAX without jit are timed on the same chain when they
are installed. Prints medians of several repeats, and writes JSON.

    python benchmarks/interp_overhead.py [--json out.json]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import dg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import kept, median_time  # noqa: E402  (this folder's)

SRC = """
def chain(x: f32[S], n: i64) -> f32[S]:
    for i in range(n):
        y = x * 0.5 + 0.25
        z = tanh(y) - x
        x = maximum(z, y) * 0.9
    return x
"""


def numpy_chain(x, n):
    c05, c025, c09 = np.float32(0.5), np.float32(0.25), np.float32(0.9)
    for _ in range(n):
        y = np.add(np.multiply(x, c05), c025)
        z = np.subtract(np.tanh(y), x)
        x = np.multiply(np.maximum(z, y), c09)
    return x


def ops_per_iteration(ir_text: str) -> int:
    """dg ops (constants included) inside the scf.for body."""
    inside = False
    count = 0
    for line in ir_text.splitlines():
        if "scf.for" in line:
            inside = True
            continue
        if inside:
            if line.strip().startswith("scf.yield"):
                break
            if '"dg.' in line:
                count += 1
    return count


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=4)
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)

    m = dg.loads(SRC, mode="interp")
    x = np.linspace(-1, 1, a.size).astype(np.float32)
    n = a.iters
    np.testing.assert_allclose(m.chain(x, 10), numpy_chain(x, 10), rtol=1e-6)
    k = ops_per_iteration(m.chain.ir("dg"))
    executed = k * n

    t_dg = median_time(lambda: m.chain(x, n), a.repeats)
    t_np = median_time(lambda: numpy_chain(x, n), a.repeats)
    results = {
        "ops_per_iteration": k,
        "numpy_calls_per_iteration": 6,
        "dg_interp_s": t_dg,
        "numpy_s": t_np,
        "dg_us_per_op": t_dg / executed * 1e6,
        "numpy_us_per_call": t_np / (6 * n) * 1e6,
        "overhead_us_per_compute_op": (t_dg - t_np) / (6 * n) * 1e6,
        "overhead_us_per_op": (t_dg - t_np) / executed * 1e6,
    }
    try:
        import torch

        tx = torch.from_numpy(x)

        def torch_chain(x=tx):
            for _ in range(n):
                y = x * 0.5 + 0.25
                z = torch.tanh(y) - x
                x = torch.maximum(z, y) * 0.9
            return x

        results["torch_eager_us_per_op"] = median_time(torch_chain, a.repeats) / (6 * n) * 1e6
    except ImportError:
        pass
    try:
        import jax.numpy as jnp

        jx = jnp.asarray(x)
        nj = max(n // 10, 1)

        def jax_chain(x=jx):
            for _ in range(nj):
                y = x * 0.5 + 0.25
                z = jnp.tanh(y) - x
                x = jnp.maximum(z, y) * 0.9
            return x.block_until_ready()

        jax_chain()
        results["jax_nojit_us_per_op"] = median_time(jax_chain, a.repeats) / (6 * nj) * 1e6
    except ImportError:
        pass

    print(f"dg interpreter: {k} dg ops per iteration (constants included), {n} iterations, tensor size {a.size}")
    print(f"  dg interp      {results['dg_us_per_op']:.3f} us per executed op")
    print(f"  NumPy          {results['numpy_us_per_call']:.3f} us per ufunc call (same work from plain Python)")
    print(f"  overhead       {results['overhead_us_per_op']:.3f} us per executed op beyond NumPy's own work (target <= 2)")
    print(f"                 {results['overhead_us_per_compute_op']:.3f} us per compute op (the 6 NumPy calls' worth)")
    if "torch_eager_us_per_op" in results:
        print(f"  PyTorch eager  {results['torch_eager_us_per_op']:.3f} us per op")
    if "jax_nojit_us_per_op" in results:
        print(f"  JAX (no jit)   {results['jax_nojit_us_per_op']:.3f} us per op")
    return kept(results, a.json)


if __name__ == "__main__":
    main()
