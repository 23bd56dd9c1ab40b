"""What a call into compiled code costs beyond its work, and batched products against NumPy.

Call overhead: dg compiled functions that do next to nothing, called from a Python loop:
  one_array   f32[4] -> f32[4] (x + 1)                    the issue's "one-array call"
  scalar      f32[4] -> f32    (x[0])
  array_and_python_float   f32[4], a Python float -> f32[4] (x * a)
  nine_arrays nine f32[4] -> f32[4] (their sum)
Each is set against the same work from Python with no compiler between: a NumPy ufunc
(np.add(x, 1)), PyTorch eager and a JAX jit function when they are installed. Repeated calls
take the quick call (runtime/fastcall.py); `general_*` are one_array's and nine_arrays' calls on
the general path (the program's `call`, which packs the descriptors and adopts the results in
Python: runtime/descriptors.py), as a first call, a call from inside a dg call or a program
with prints makes them. Figures are medians of --repeats timed batches of --calls calls, in
microseconds per call.

Batched products: (64, 4, 4, 32) @ (32, 64) and (64, 8, 32) @ (64, 32, 16) compiled against
NumPy's matmul on the same arrays (median milliseconds, and the ratio).

    python benchmarks/calls.py [--calls 20000] [--repeats 7] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import dg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import kept  # noqa: E402
from cpu import _peers  # noqa: E402  (the peers as the CPU benchmark imports them)

SRC = """
def one_array(x: f32[?]) -> f32[?]:
    return x + 1.0

def scalar(x: f32[?]) -> f32:
    return x[0]

def scaled(x: f32[?], a: f32) -> f32[?]:
    return x * a

def nine_arrays(a: f32[?], b: f32[?], c: f32[?], d: f32[?], e: f32[?], f: f32[?], g: f32[?], h: f32[?],
                i: f32[?]) -> f32[?]:
    return a + b + c + d + e + f + g + h + i

def broadcast_product(a: f32[B, H, T, K], b: f32[K, N]) -> f32[B, H, T, N]:
    return a @ b

def batched_product(a: f32[B, T, K], b: f32[B, K, N]) -> f32[B, T, N]:
    return a @ b
"""


def per_call_us(fn, calls: int, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(times)


def median_ms(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(20):
            fn()
        times.append((time.perf_counter() - t0) / 20 * 1e3)
    return statistics.median(times)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    m = dg.loads(SRC, mode="compiled", filename="calls.dg")
    x = np.arange(4, dtype=np.float32)
    nine = [x + k for k in range(9)]
    results: dict = {"overhead_us": {}, "products_ms": {}}
    r = results["overhead_us"]
    r["dg_one_array"] = per_call_us(lambda: m.one_array(x), args.calls, args.repeats)
    r["dg_scalar"] = per_call_us(lambda: m.scalar(x), args.calls, args.repeats)
    r["dg_array_and_python_float"] = per_call_us(lambda: m.scaled(x, 0.5), args.calls, args.repeats)
    r["dg_nine_arrays"] = per_call_us(lambda: m.nine_arrays(*nine), args.calls, args.repeats)
    for name, arrays in (("one_array", [x]), ("nine_arrays", nine)):
        comp = getattr(m, name)._last  # (the specialization the calls above made)
        call, symbol = comp.runner.call, comp.symbol
        r[f"general_{name}"] = per_call_us(lambda: call(symbol, arrays), args.calls, args.repeats)
    r["numpy_one_array"] = per_call_us(lambda: np.add(x, 1.0), args.calls, args.repeats)
    p = _peers()
    if "torch" in p:
        tx = p["torch"].from_numpy(x)
        r["torch_eager_one_array"] = per_call_us(lambda: tx + 1.0, args.calls, args.repeats)
    if "jax" in p:
        jax = p["jax"]
        jf = jax.jit(lambda v: v + 1.0)
        jx = jax.numpy.asarray(x)
        r["jax_jit_one_array"] = per_call_us(lambda: jf(jx).block_until_ready(), args.calls, args.repeats)

    rng = np.random.default_rng(0)
    q = results["products_ms"]
    a4, b2 = rng.standard_normal((64, 4, 4, 32), np.float32), rng.standard_normal((32, 64), np.float32)
    a3, b3 = rng.standard_normal((64, 8, 32), np.float32), rng.standard_normal((64, 32, 16), np.float32)
    assert np.allclose(m.broadcast_product(a4, b2), a4 @ b2, rtol=1e-4, atol=1e-4)
    assert np.allclose(m.batched_product(a3, b3), a3 @ b3, rtol=1e-4, atol=1e-4)
    q["dg_broadcast_64x4x4x32_at_32x64"] = median_ms(lambda: m.broadcast_product(a4, b2), args.repeats)
    q["numpy_broadcast_64x4x4x32_at_32x64"] = median_ms(lambda: a4 @ b2, args.repeats)
    q["dg_batched_64x8x32_at_64x32x16"] = median_ms(lambda: m.batched_product(a3, b3), args.repeats)
    q["numpy_batched_64x8x32_at_64x32x16"] = median_ms(lambda: a3 @ b3, args.repeats)

    print(f"call overhead (median of {args.repeats} batches of {args.calls} calls, us per call):")
    for k, v in r.items():
        print(f"  {k:28s} {v:8.2f} us")
    print("batched products (median ms per call):")
    for k, v in q.items():
        print(f"  {k:40s} {v:8.4f} ms")
    ratios = {
        "dg_one_array_over_numpy_ufunc": r["dg_one_array"] / r["numpy_one_array"],
        "dg_broadcast_product_over_numpy": q["dg_broadcast_64x4x4x32_at_32x64"] / q["numpy_broadcast_64x4x4x32_at_32x64"],
        "dg_batched_product_over_numpy": q["dg_batched_64x8x32_at_64x32x16"] / q["numpy_batched_64x8x32_at_64x32x16"],
    }
    for name in ("torch_eager_one_array", "jax_jit_one_array"):
        if name in r:
            ratios[f"dg_one_array_over_{name}"] = r["dg_one_array"] / r[name]
    results["ratios"] = ratios
    for k, v in ratios.items():
        print(f"  {k}: {v:.2f}")
    return kept(results, args.json)


if __name__ == "__main__":
    main()
