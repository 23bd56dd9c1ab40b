"""dg on an NVIDIA GPU against PyTorch CUDA, in one process.

  sgemm     C = A @ B, float32, N x N (default 4096): GFLOP/s of dg's product (cuBLAS, which
            compiled code calls where it is installed), of dg's own tiled kernel (DG_CUBLAS=0,
            measured in a second process) and of PyTorch's cuBLAS (TF32 off everywhere: all
            compute in float32).
  chain     a fused elementwise chain over M float32s (default 2**26, 256 MB):
            y = maximum(x * 1.0001 + 0.5, 0.0) * 0.5 - 0.25, one kernel in dg (one read and one
            write of each element), against the device's copy bandwidth (PyTorch `copy_`,
            bytes read plus written) and PyTorch eager's chain (its ops one kernel each).

dg copies arguments to the device and results back at each call, so its kernels are timed
inside a dg loop: a function runs the product (or the chain) `n` times, and the time per
iteration is the difference between n = HI and n = LO, divided by HI - LO (medians of
--repeats calls each; 100 more products, 1,000 more chains, 20 more for the tiled kernel): what
the copies at the call cost cancels out. PyTorch is timed with
CUDA events over the same iterations. Results are checked against PyTorch before timing.

    python benchmarks/gpu.py [--n 4096] [--m 67108864] [--repeats 5] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import dg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import kept  # noqa: E402  (this folder's)

SRC = """
def sgemm(a: f32[N, N], b: f32[N, N], n: i64) -> f32[N, N]:
    c = a @ b
    for i in range(n - 1):
        c = a @ b
    return c

def chain(x: f32[M], n: i64) -> f32[M]:
    y = x
    for i in range(n):
        y = maximum(y * 1.0001 + 0.5, 0.0) * 0.5 - 0.25
    return y
"""


def _median_call(fn, *args, repeats: int) -> float:
    fn(*args)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def per_iteration(fn, args, lo: int, hi: int, repeats: int) -> float:
    """Seconds per loop iteration inside a dg function: (t(hi) - t(lo)) / (hi - lo)."""
    t_lo = _median_call(fn, *args, np.int64(lo), repeats=repeats)
    t_hi = _median_call(fn, *args, np.int64(hi), repeats=repeats)
    return (t_hi - t_lo) / (hi - lo)


def torch_time(torch, step, iters: int, repeats: int) -> float:
    """Seconds per call of `step` on the GPU (CUDA events, median of `repeats` runs of `iters`)."""
    step()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / iters)
    return statistics.median(times)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--m", type=int, default=1 << 26)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json")
    ap.add_argument("--sgemm-only", action="store_true", help="(what the second process measures)")
    args = ap.parse_args(argv)
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    mod = dg.loads(SRC, mode="compiled", device="cuda")
    rng = np.random.default_rng(0)
    out: dict = {"device": torch.cuda.get_device_name(0)}

    n = args.n
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    got = mod.sgemm(a, b, np.int64(1))
    want = (ta.double() @ tb.double()).cpu().numpy()
    out["sgemm_rel_error"] = float(np.linalg.norm(got - want) / np.linalg.norm(want))
    flops = 2.0 * n ** 3
    dg_s = per_iteration(mod.sgemm, (a, b), 2, 22 if args.sgemm_only else 102, args.repeats)
    torch_s = torch_time(torch, lambda: ta @ tb, 10, args.repeats)
    out["sgemm"] = {"n": n, "dg_ms": dg_s * 1e3, "torch_ms": torch_s * 1e3,
                    "dg_gflops": flops / dg_s / 1e9, "torch_gflops": flops / torch_s / 1e9,
                    "dg_over_torch_gflops": torch_s / dg_s}
    if args.sgemm_only:
        with open(args.json, "w") as f:
            json.dump(out, f)
        return out
    with tempfile.NamedTemporaryFile(suffix=".json") as tmp:  # dg's own kernel: cuBLAS off in a process of its own
        r = subprocess.run([sys.executable, __file__, "--n", str(n), "--repeats", str(args.repeats), "--sgemm-only",
                            "--json", tmp.name], env={**os.environ, "DG_CUBLAS": "0"}, capture_output=True, text=True)
        tiled = json.load(open(tmp.name))["sgemm"] if r.returncode == 0 else None
    out["sgemm_tiled_kernel"] = tiled if tiled else {"error": r.stderr[-2000:]}

    m = args.m
    x = rng.standard_normal(m, dtype=np.float32)
    tx = torch.from_numpy(x).cuda()
    got = mod.chain(x, np.int64(1))
    want = ((torch.clamp(tx * 1.0001 + 0.5, min=0.0)) * 0.5 - 0.25).cpu().numpy()
    out["chain_max_abs_error"] = float(np.max(np.abs(got - want)))
    dg_s = per_iteration(mod.chain, (x,), 2, 1002, args.repeats)
    ty = torch.empty_like(tx)
    copy_s = torch_time(torch, lambda: ty.copy_(tx), 20, args.repeats)
    eager_s = torch_time(torch, lambda: torch.clamp(tx * 1.0001 + 0.5, min=0.0) * 0.5 - 0.25, 20, args.repeats)
    nbytes = 2 * 4 * m  # one read and one write of each element
    out["chain"] = {"m": m, "dg_ms": dg_s * 1e3, "copy_ms": copy_s * 1e3, "torch_eager_ms": eager_s * 1e3,
                    "dg_gbps": nbytes / dg_s / 1e9, "copy_gbps": nbytes / copy_s / 1e9,
                    "dg_over_copy_bandwidth": copy_s / dg_s, "dg_over_torch_eager": eager_s / dg_s}

    s, c = out["sgemm"], out["chain"]
    print(f"device: {out['device']}")
    print(f"sgemm {n}: dg {s['dg_ms']:.3f} ms ({s['dg_gflops']:.0f} GFLOP/s), PyTorch cuBLAS {s['torch_ms']:.3f} ms "
          f"({s['torch_gflops']:.0f} GFLOP/s): dg at {100 * s['dg_over_torch_gflops']:.1f}% of PyTorch "
          f"(relative error {out['sgemm_rel_error']:.2e})")
    tk = out["sgemm_tiled_kernel"]
    if "dg_ms" in tk:
        print(f"sgemm {n}, dg's own tiled kernel (DG_CUBLAS=0): {tk['dg_ms']:.3f} ms ({tk['dg_gflops']:.0f} GFLOP/s), "
              f"{100 * tk['dg_gflops'] / s['torch_gflops']:.1f}% of PyTorch")
    else:
        print(f"sgemm, dg's own tiled kernel: failed: {tk['error']}")
    print(f"chain {m}: dg {c['dg_ms']:.3f} ms ({c['dg_gbps']:.0f} GB/s), device copy {c['copy_ms']:.3f} ms "
          f"({c['copy_gbps']:.0f} GB/s): dg at {100 * c['dg_over_copy_bandwidth']:.1f}% of copy bandwidth; "
          f"PyTorch eager chain {c['torch_eager_ms']:.3f} ms ({c['dg_over_torch_eager']:.2f}x dg's speed) "
          f"(max abs error {out['chain_max_abs_error']:.2e})")
    return kept(out, args.json)


if __name__ == "__main__":
    main()
