"""dg on the CPU against NumPy, PyTorch and JAX, side by side in one process.

Workloads (float32):
  sgemm      n = 256, 512, 1024                            GFLOP/s
  mlp_step   784-256-256-10 tanh, softmax cross-entropy,
             SGD, batch 128 (value_and_grad + update)      steps/s
  rnn        tanh RNN, hidden 128, input 32, T = 50,
             batch 32: loss and gradients                   calls/s
  chain      tanh(exp(a) * b + 1) / (1 + a * a), 4M floats  GB/s
             (the bytes of a, b and the result over the time)
  reduce     sum(x * x) of 4M floats, and sum(y, axis=0) of
             4096 x 1024 floats (a sum over the batch)         GB/s
             (the bytes read over the time)
  while2     the second derivative of a `while` loop of n
             steps whose count is an argument (n = 2,000;
             float64): grad(grad(f))                         calls/s
             (JAX has no figure: its while_loop has no reverse mode)
  compile    first call of mlp_step with an empty cache     s
Peers: dg compiled, dg interpreter, NumPy (forward-only where it has no
autodiff, so it is shown for sgemm only), PyTorch eager, torch.compile and
JAX jit when they are installed (they are optional, not dg dependencies).
dg's matmuls call MKL when it is installed (pip install -e ".[mkl]"), else
NumPy's OpenBLAS; the output names which (DG_BLAS=openblas forces it).
Every figure is the median of several timed repeats, taken in turns (each
round times one batch of every peer), so that drift in the machine's speed
during the run reaches every peer alike; ratios are against the named peer
measured in the same run. Compile latency is the median of three cold
compiles, each with an empty cache.

    python benchmarks/cpu.py [--quick] [--json results.json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import dg
from dg.lowering import blas
from dg.lowering.codegen import optimizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import kept  # noqa: E402  (this folder's)

SRC = """
def sgemm(a: f32[N, K], b: f32[K, M]) -> f32[N, M]:
    return a @ b

def mlp_loss(w1: f32[784, 256], b1: f32[256], w2: f32[256, 256], b2: f32[256], w3: f32[256, 10], b3: f32[10],
             x: f32[B, 784], y: i64[B]) -> f32:
    h = tanh(x @ w1 + b1)
    h = tanh(h @ w2 + b2)
    return cross_entropy(h @ w3 + b3, y)

def mlp_step(w1: f32[784, 256], b1: f32[256], w2: f32[256, 256], b2: f32[256], w3: f32[256, 10], b3: f32[10],
             x: f32[B, 784], y: i64[B], lr: f32):
    l, (g1, gb1, g2, gb2, g3, gb3) = value_and_grad(mlp_loss, wrt=(0, 1, 2, 3, 4, 5))(w1, b1, w2, b2, w3, b3, x, y)
    return l, w1 - lr * g1, b1 - lr * gb1, w2 - lr * g2, b2 - lr * gb2, w3 - lr * g3, b3 - lr * gb3

def total(x: f32[N]) -> f32:
    return sum(x * x)

def colsum(y: f32[N, M]) -> f32[M]:
    return sum(y, axis=0)

def chain(a: f32[N], b: f32[N]) -> f32[N]:
    return tanh(exp(a) * b + 1.0) / (1.0 + a * a)

def rnn_loss(xs: f32[T, B, I], h0: f32[B, H], wx: f32[I, H], wh: f32[H, H]) -> f32:
    h = h0
    for t in range(xs.shape[0]):
        h = tanh(xs[t] @ wx + h @ wh)
    return mean(h * h)

def rnn_grad(xs: f32[T, B, I], h0: f32[B, H], wx: f32[I, H], wh: f32[H, H]):
    return value_and_grad(rnn_loss, wrt=(2, 3))(xs, h0, wx, wh)

def settle(x: f64, n: i64) -> f64:
    y = x
    i = 0
    while i < n:
        y = y * 0.9 + sin(y) * 0.1
        i = i + 1
    return y

def settle_d1(x: f64, n: i64) -> f64:
    return grad(settle)(x, n)

def settle_d2(x: f64, n: i64) -> f64:
    return grad(settle_d1)(x, n)
"""


SETTLE_S = 0.25  # see medians()


def medians(fns: dict, repeats: int, min_time: float = 0.05, start=None, agree=None) -> dict:
    """Median seconds per call of each function. Each gets a batch size that takes at least
    min_time; then the batches are timed in turns, one of each function per round, `repeats`
    rounds, so that a machine whose speed drifts during the run slows every peer alike.

    Before each batch (in a run of more than one round: not in a smoke run) the process sleeps
    SETTLE_S seconds and makes one untimed call: the thread pools of the peer that ran before
    (OpenBLAS, OpenMP, Eigen) spin for a while after their last work, and on a small machine
    they would take the cores from the next one. Several processes timing together
    (benchmarks/dist.py) pass `start` (called before each batch instead: a barrier) and
    `agree` (the time every process is judged by, from its own: the slowest)."""
    agree = agree or (lambda seconds: seconds)
    batch = {}
    for name, fn in fns.items():
        fn()
        optimizer.wait_all()  # (a large program's first calls run quick code: lowering.codegen.optimizer)
        fn()
        n = 1
        while True:
            if start is not None:
                start()
            t = time.perf_counter()
            for _ in range(n):
                fn()
            if agree(time.perf_counter() - t) >= min_time or n >= 1 << 16:
                break
            n *= 2
        batch[name] = n
    samples: dict = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            n = batch[name]
            if start is not None:
                start()
            elif repeats > 1:
                time.sleep(SETTLE_S)
                fn()
            t = time.perf_counter()
            for _ in range(n):
                fn()
            samples[name].append(agree(time.perf_counter() - t) / n)
    return {name: statistics.median(v) for name, v in samples.items()}


def _peers():
    out = {}
    try:
        import torch

        torch.set_num_threads(os.cpu_count() or 1)
        out["torch"] = torch
    except ImportError:
        pass
    try:
        import jax

        out["jax"] = jax
    except ImportError:
        pass
    return out


def mlp_params(rng):
    def layer(i, o):
        return rng.normal(0, 1 / np.sqrt(i), (i, o)).astype(np.float32), np.zeros(o, np.float32)

    w1, b1 = layer(784, 256)
    w2, b2 = layer(256, 256)
    w3, b3 = layer(256, 10)
    return [w1, b1, w2, b2, w3, b3]


def bench_sgemm(mods, peers, sizes, repeats):
    rows = {}
    for n in sizes:
        rng = np.random.default_rng(n)
        a, b = rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32)
        flop = 2.0 * n ** 3
        fns = {"numpy": lambda: a @ b}
        for mode, m in mods.items():
            if mode == "interp" and n > 512:
                continue
            np.testing.assert_allclose(m.sgemm(a, b), a @ b, rtol=1e-3, atol=1e-2)
            fns[f"dg_{mode}"] = lambda m=m: m.sgemm(a, b)
        if "torch" in peers:
            torch = peers["torch"]
            ta, tb = torch.from_numpy(a), torch.from_numpy(b)
            fns["torch_eager"] = lambda: ta @ tb
        if "jax" in peers:
            jax = peers["jax"]
            f = jax.jit(lambda x, y: x @ y)
            ja, jb = jax.numpy.asarray(a), jax.numpy.asarray(b)
            fns["jax_jit"] = lambda: f(ja, jb).block_until_ready()
        rows[f"n={n}"] = {k: flop / t / 1e9 for k, t in medians(fns, repeats).items()}
    return rows


def bench_mlp(mods, peers, batch, repeats):
    rng = np.random.default_rng(0)
    params = mlp_params(rng)
    x = rng.standard_normal((batch, 784)).astype(np.float32)
    y = rng.integers(0, 10, batch).astype(np.int64)
    lr = np.float32(0.01)
    r, fns = {}, {}
    for mode, m in mods.items():
        fns[f"dg_{mode}"] = lambda m=m: m.mlp_step(*params, x, y, lr)
    if "torch" in peers:
        torch = peers["torch"]
        tp = [torch.tensor(p, requires_grad=True) for p in params]
        tx, ty = torch.from_numpy(x), torch.from_numpy(y)

        def step():
            h = torch.tanh(tx @ tp[0] + tp[1])
            h = torch.tanh(h @ tp[2] + tp[3])
            loss = torch.nn.functional.cross_entropy(h @ tp[4] + tp[5], ty)
            grads = torch.autograd.grad(loss, tp)
            with torch.no_grad():
                return [p - 0.01 * g for p, g in zip(tp, grads)]

        fns["torch_eager"] = step
        try:
            cstep = torch.compile(step)
            cstep()
            fns["torch_compile"] = cstep
        except Exception as e:  # torch.compile needs a C compiler; report, do not fail
            r["torch_compile_error"] = str(e).splitlines()[0][:200]
    if "jax" in peers:
        jax = peers["jax"]
        jnp = jax.numpy

        def loss(p, x, y):
            h = jnp.tanh(x @ p[0] + p[1])
            h = jnp.tanh(h @ p[2] + p[3])
            logits = h @ p[4] + p[5]
            return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(x.shape[0]), y])

        @jax.jit
        def jstep(p, x, y):
            l, g = jax.value_and_grad(loss)(p, x, y)
            return l, [a - 0.01 * b for a, b in zip(p, g)]

        jp = [jnp.asarray(p) for p in params]
        jx, jy = jnp.asarray(x), jnp.asarray(y)
        fns["jax_jit"] = lambda: jax.block_until_ready(jstep(jp, jx, jy))
    r.update({k: 1.0 / t for k, t in medians(fns, repeats).items()})
    return r


def bench_rnn(mods, peers, repeats, T=50, B=32, I=32, H=128):
    rng = np.random.default_rng(1)
    xs = rng.standard_normal((T, B, I)).astype(np.float32)
    h0 = np.zeros((B, H), np.float32)
    wx = (rng.standard_normal((I, H)) / np.sqrt(I)).astype(np.float32)
    wh = (rng.standard_normal((H, H)) / np.sqrt(H)).astype(np.float32)
    fns = {}
    for mode, m in mods.items():
        fns[f"dg_{mode}"] = lambda m=m: m.rnn_grad(xs, h0, wx, wh)
    if "torch" in peers:
        torch = peers["torch"]
        twx, twh = torch.tensor(wx, requires_grad=True), torch.tensor(wh, requires_grad=True)
        txs, th0 = torch.from_numpy(xs), torch.from_numpy(h0)

        def step():
            h = th0
            for t in range(T):
                h = torch.tanh(txs[t] @ twx + h @ twh)
            loss = (h * h).mean()
            return torch.autograd.grad(loss, [twx, twh])

        fns["torch_eager"] = step
    if "jax" in peers:
        jax = peers["jax"]
        jnp = jax.numpy

        def loss(wx, wh, xs, h0):
            def cell(h, x):
                h = jnp.tanh(x @ wx + h @ wh)
                return h, None

            h, _ = jax.lax.scan(cell, h0, xs)
            return jnp.mean(h * h)

        f = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
        args = [jnp.asarray(a) for a in (wx, wh, xs, h0)]
        fns["jax_jit"] = lambda: jax.block_until_ready(f(*args))
    return {k: 1.0 / t for k, t in medians(fns, repeats).items()}


def bench_while2(mods, peers, n, repeats):
    """Calls per second of the second derivative of a data-dependent `while` loop of n steps."""
    fns = {f"dg_{mode}": (lambda m=m: m.settle_d2(0.3, n)) for mode, m in mods.items()}
    if "torch" in peers:
        torch = peers["torch"]

        def second():
            x = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
            y, i = x, 0
            while i < n:
                y = y * 0.9 + torch.sin(y) * 0.1
                i += 1
            (g,) = torch.autograd.grad(y, x, create_graph=True)
            return torch.autograd.grad(g, x)[0]

        fns["torch_eager"] = second
    want = float(fns["dg_compiled"]())
    for name, fn in fns.items():
        assert abs(float(fn()) - want) <= 1e-9 * max(1.0, abs(want)), name
    return {k: 1.0 / t for k, t in medians(fns, repeats).items()}


def bench_chain(mods, peers, n, repeats):
    rng = np.random.default_rng(3)
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    gb = 3 * 4 * n / 1e9
    want = np.tanh(np.exp(a) * b + 1.0) / (1.0 + a * a)
    fns = {"numpy": lambda: np.tanh(np.exp(a) * b + 1.0) / (1.0 + a * a)}
    for mode, m in mods.items():
        np.testing.assert_allclose(m.chain(a, b), want, rtol=1e-5, atol=1e-6)
        fns[f"dg_{mode}"] = lambda m=m: m.chain(a, b)
    if "torch" in peers:
        torch = peers["torch"]
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        fns["torch_eager"] = lambda: torch.tanh(torch.exp(ta) * tb + 1.0) / (1.0 + ta * ta)
    if "jax" in peers:
        jax = peers["jax"]
        jnp = jax.numpy
        f = jax.jit(lambda x, y: jnp.tanh(jnp.exp(x) * y + 1.0) / (1.0 + x * x))
        ja, jb = jnp.asarray(a), jnp.asarray(b)
        fns["jax_jit"] = lambda: f(ja, jb).block_until_ready()
    return {k: gb / t for k, t in medians(fns, repeats).items()}


def bench_reduce(mods, peers, n, rows, cols, repeats):
    """GB/s of a sum to a scalar and of a sum along the first axis, side by side: {name: {peer: GB/s}}."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal((rows, cols)).astype(np.float32)
    out = {}
    for name, arg, ref, gb in (("total", x, lambda a: np.sum(a * a), 4 * n / 1e9),
                               ("colsum", y, lambda a: a.sum(axis=0), 4 * rows * cols / 1e9)):
        fns = {"numpy": lambda a=arg, ref=ref: ref(a)}
        for mode, m in mods.items():
            np.testing.assert_allclose(getattr(m, name)(arg), ref(arg), rtol=1e-3, atol=1e-3)
            fns[f"dg_{mode}"] = lambda m=m, a=arg: getattr(m, name)(a)
        if "torch" in peers:
            torch = peers["torch"]
            t = torch.from_numpy(arg)
            fns["torch_eager"] = (lambda t=t: torch.sum(t * t)) if name == "total" else (lambda t=t: torch.sum(t, 0))
        if "jax" in peers:
            jax = peers["jax"]
            jnp = jax.numpy
            f = jax.jit((lambda a: jnp.sum(a * a)) if name == "total" else (lambda a: jnp.sum(a, axis=0)))
            ja = jnp.asarray(arg)
            fns["jax_jit"] = lambda f=f, ja=ja: f(ja).block_until_ready()
        out[name] = {k: gb / t for k, t in medians(fns, repeats).items()}
    return out


def bench_compile(batch, repeats: int = 3):
    """First call of mlp_step: a cold compile (empty cache; the quick code of lowering.codegen.optimizer),
    then a new module that finds the cache (the optimized code); the median of `repeats` of each."""
    rng = np.random.default_rng(0)
    params = mlp_params(rng)
    x = rng.standard_normal((batch, 784)).astype(np.float32)
    y = rng.integers(0, 10, batch).astype(np.int64)
    old = os.environ.get("DG_CACHE_DIR")
    samples: dict = {"cold_s": [], "from_disk_cache_s": []}
    try:
        for _ in range(repeats):
            with tempfile.TemporaryDirectory() as d:
                os.environ["DG_CACHE_DIR"] = d
                for label in samples:
                    m = dg.loads(SRC, mode="compiled", filename="bench.dg")
                    t = time.perf_counter()
                    m.mlp_step(*params, x, y, np.float32(0.01))
                    samples[label].append(time.perf_counter() - t)
                    optimizer.wait_all()  # (the optimized code is what the disk cache keeps)
    finally:
        if old is None:
            os.environ.pop("DG_CACHE_DIR", None)
        else:
            os.environ["DG_CACHE_DIR"] = old
    out = {label: statistics.median(v) for label, v in samples.items()}
    out["first_cold_s"] = samples["cold_s"][0]  # with the process's one-time imports of the pipeline
    return out


def ratios(row: dict, num: str) -> dict:
    out = {}
    for k, v in row.items():
        if k != num and isinstance(v, float) and num in row:
            out[f"{num}/{k}"] = row[num] / v
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes and few repeats (a smoke run)")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json", default="benchmarks/cpu_results.json")
    a = ap.parse_args(argv)
    repeats = 1 if a.quick else a.repeats
    peers = _peers()
    mods = {mode: dg.loads(SRC, mode=mode, filename="bench.dg") for mode in ("compiled", "interp")}
    sizes = (64,) if a.quick else (256, 512, 1024)
    batch = 8 if a.quick else 128
    res = {"peers": sorted(peers), "cpu_count": os.cpu_count(), "dg_blas": blas.identity()}
    res["compile"] = bench_compile(batch, 1 if a.quick else 3)
    res["sgemm_gflops"] = bench_sgemm(mods, peers, sizes, repeats)
    res["mlp_step_per_s"] = bench_mlp(mods, peers, batch, repeats)
    res["rnn_fwd_bwd_per_s"] = bench_rnn(mods, peers, repeats, T=5 if a.quick else 50)
    res["while2_per_s"] = bench_while2(mods, peers, 20 if a.quick else 2000, repeats)
    res["chain_gb_per_s"] = bench_chain(mods, peers, 1 << 12 if a.quick else 1 << 22, repeats)
    res["reduce_gb_per_s"] = bench_reduce(mods, peers, *((1 << 12, 64, 32) if a.quick else (1 << 22, 4096, 1024)),
                                          repeats)
    res["ratios"] = {
        "sgemm": {k: ratios(v, "dg_compiled") for k, v in res["sgemm_gflops"].items()},
        "mlp_step": ratios(res["mlp_step_per_s"], "dg_compiled"),
        "rnn": ratios(res["rnn_fwd_bwd_per_s"], "dg_compiled"),
        "while2": ratios(res["while2_per_s"], "dg_compiled"),
        "chain": ratios(res["chain_gb_per_s"], "dg_compiled"),
        "reduce": {k: ratios(v, "dg_compiled") for k, v in res["reduce_gb_per_s"].items()},
    }
    print(f"peers present: {', '.join(res['peers']) or 'none (NumPy only)'}; {res['cpu_count']} CPUs; "
          f"dg's BLAS: {res['dg_blas']}")
    print(f"compile latency of mlp_step: cold {res['compile']['cold_s']:.2f} s (the process's first: "
          f"{res['compile']['first_cold_s']:.2f} s), from the disk cache {res['compile']['from_disk_cache_s']:.2f} s")
    for section, unit in (("sgemm_gflops", "GFLOP/s"), ("mlp_step_per_s", "steps/s"), ("rnn_fwd_bwd_per_s", "calls/s"),
                          ("while2_per_s", "calls/s"),
                          ("chain_gb_per_s", "GB/s"), ("reduce_gb_per_s", "GB/s")):
        rows = res[section] if section in ("sgemm_gflops", "reduce_gb_per_s") else {"": res[section]}
        for name, row in rows.items():
            figures = ", ".join(f"{k} {v:.3g}" for k, v in row.items() if isinstance(v, float))
            print(f"{section} {name} ({unit}, median): {figures}")
    for k, v in res["ratios"].items():
        print(f"ratios {k}: {json.dumps(v, default=lambda x: round(x, 3))}")
    return kept(res, a.json)


if __name__ == "__main__":
    main()
