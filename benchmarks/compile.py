"""Compile time: how long a first call waits, per stage, as programs grow; JAX jit's alongside.

Generated families (each member a gradient, so that autodiff is in the measure):
  depth     a chain of d functions, each calling the next twice in a loop (d = 1 ... 16)
  order     grad applied k times to a 6-line `while` loop (k = 1 ... 4)
  nesting   n nested `for` loops around one update (n = 1 ... 6)
  straight  a straight-line body of m element-wise ops (m = 100 ... 3,200)
  layers    the loss gradient of samples/gpt.dg's transformer with L layers (L = 1 ... 8)
Named programs: the MLP training step of benchmarks/cpu.py, the 2-layer GPT loss gradient, a
Tree-LSTM's gradient (a recursion over a tree given as arrays).

The process starts with a compile of its own (`process_start`, reported), so that no member is
charged with the libraries' start. For each: the first call in a fresh module with an empty disk
cache ("cold"; marked * where a
large program's first call ran quick code while a worker optimized it, `lowering.codegen.optimizer`), split into
emission, autodiff (with the verifier), inlining, the other MLIR passes, the translation to LLVM
IR text and LLVM (`lowering.pipeline.pass_times`); then the first call of another fresh module that finds the
disk cache ("cached"); the size of the program (dg ops emitted, and after autodiff); and the
compile time per op after autodiff: the cold first call up to the code being ready to run
("compile", which leaves out the run itself: depth=16's first call makes 2^16 calls). For the named programs, the tiered start too (DG_TIERED=1): how long
the first call waits while a worker process compiles, and when compiled code takes over. JAX: the first call of `jax.jit` of the same computation, where JAX
can express it (its `while_loop` has no reverse mode: the `order` family has no JAX figure;
loops are `fori_loop`s, the tree is unrolled by tracing).
`python benchmarks/compile.py [--quick] [--families depth,order] [--json out.json]`
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

import dg
from dg.lowering import pipeline
from dg.runtime import modes

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "samples"))
SIZE = 64  # the vectors of the generated families
# The named programs' cold first calls are made this many times (their median is reported).
NAMED_REPEATS = 3


@contextlib.contextmanager
def environment(name: str, value: str):
    """The environment variable `name` set to `value` inside, as it was after."""
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def cache_dir(path: str):
    return environment("DG_CACHE_DIR", path)


def _stages(times: dict, emission: float) -> dict:
    autodiff = times.get("autodiff", 0.0) + times.get("verify", 0.0)
    inlining = times.get("inline-and-simplify", 0.0)
    llvm, translation = times.get("LLVM", 0.0), times.get("LLVM IR", 0.0)
    mlir = sum(v for k, v in times.items() if k not in ("autodiff", "verify", "inline-and-simplify", "LLVM", "LLVM IR"))
    return {"emission": emission, "autodiff": autodiff, "inlining": inlining, "mlir_passes": mlir,
            "llvm_ir": translation, "llvm": llvm}


def measure_tiered(load, name: str, args) -> dict:
    """With DG_TIERED=1 and an empty disk cache: how long the first call of `load().name(*args)`
    waits (the interpreter runs it while a worker process compiles), and when compiled code
    takes over (from the first call's start, calls made meanwhile)."""
    with environment("DG_TIERED", "1"), tempfile.TemporaryDirectory() as d, cache_dir(d):
        fn = getattr(load(), name)
        t0 = time.perf_counter()
        fn(*args)
        first = time.perf_counter() - t0
        calls = 1
        while type(fn._last.runner).__name__ == "Tiered" and not fn._last.runner.ready():
            fn(*args)
            calls += 1
        fn(*args)  # (the first compiled call)
        took_over = time.perf_counter() - t0
    return {"tiered_first_call_s": first, "tiered_compiled_after_s": took_over, "tiered_interpreted_calls": calls}


class _Cold(NamedTuple):
    comp: object  # the compiled specialization
    times: dict  # pipeline.pass_times'
    emission: float  # seconds: to dg IR
    compiled: float  # seconds: compiled and ready to run
    cold: float  # seconds: to the first call's end
    quick_start: bool  # whether the first call ran quick code while a worker optimized
    optimized_after: float  # seconds: to the optimized code (once the worker is done)


def _cold(load, name: str, args) -> _Cold:
    """A cold first call of `load().name(*args)`, on the disk cache in effect (empty), and the
    worker that optimizes it (if any) waited for (and its code in the disk cache)."""
    fn = getattr(load(), name)
    with pipeline.pass_times() as times:
        t0 = time.perf_counter()
        comp, _ = fn.specialize(args, run=False)
        t1 = time.perf_counter()
        fn.specialize(args)  # (compiled and ready to run, not run)
        compiled = time.perf_counter() - t0
        fn(*args)
        cold = time.perf_counter() - t0
    optimizing = getattr(fn._last.runner, "optimized", None)
    if optimizing is not None:
        optimizing.wait()
    return _Cold(comp, times, t1 - t0, compiled, cold, optimizing is not None, time.perf_counter() - t0)


def measure_dg(load, name: str, args, tiered: bool = False, full: bool = False, repeats: int = 1) -> dict:
    """Cold and cached first calls of `load().name(*args)` (load: a fresh module each time). A
    large program's first call runs quick code while a worker optimizes it (lowering.codegen.optimizer):
    `optimized_after_s` is when the optimized code is there, from the first call's start. With
    `full`, the cold first call with quick start off too (`full_cold_s`: LLVM's full
    optimization before the first call); with `tiered`, the tiered start's (measure_tiered).
    With `repeats`, the cold first call is made that many times, each on an empty disk cache:
    `cold_s` and `compile_s` are the medians (this machine's speed varies from one run to the
    next by half), `cold_runs_s` each; the other figures are the last run's."""
    runs = []
    for _ in range(repeats - 1):
        with tempfile.TemporaryDirectory() as d, cache_dir(d):
            runs.append(_cold(load, name, args))
    with tempfile.TemporaryDirectory() as d, cache_dir(d):
        last = _cold(load, name, args)
        runs.append(last)
        fn2 = getattr(load(), name)
        t = time.perf_counter()
        fn2(*args)
        cached = time.perf_counter() - t
    ops = last.comp.ir_text.count('"dg.')
    grad_ops = modes.grad_text(last.comp).count('"dg.')
    compiled, cold = statistics.median(r.compiled for r in runs), statistics.median(r.cold for r in runs)
    out = {"cold_s": cold, "compile_s": compiled, "cold_runs_s": [r.cold for r in runs], "cached_s": cached,
           "stages_s": _stages(last.times, last.emission),
           "passes_s": dict(last.times), "dg_ops": ops, "grad_ops": grad_ops, "compile_ms_per_op": 1000 * compiled / max(grad_ops, 1),
           "quick_start": last.quick_start, "optimized_after_s": last.optimized_after}
    if full:
        with environment("DG_QUICK_START", "0"), tempfile.TemporaryDirectory() as d, cache_dir(d):
            fn = getattr(load(), name)
            t = time.perf_counter()
            fn(*args)
            out["full_cold_s"] = time.perf_counter() - t
    return dict(out, **measure_tiered(load, name, args)) if tiered else out


def measure_jax(make):
    """The first call of jax.jit of the function `make()` returns, on its arguments; None without JAX."""
    try:
        import jax
    except ImportError:
        return None
    fn, args = make(jax)
    f = jax.jit(fn)
    t = time.perf_counter()
    jax.block_until_ready(f(*args))
    return time.perf_counter() - t


# ---------------------------------------------------------------- the families
def _vec(seed=0):
    return np.random.default_rng(seed).standard_normal(SIZE).astype(np.float32) * 0.5


def depth_program(d: int):
    lines = ["def f0(x: f32[?], w: f32[?]) -> f32[?]:\n    return tanh(x * w + 0.1)\n"]
    for k in range(1, d + 1):
        lines.append(f"def f{k}(x: f32[?], w: f32[?]) -> f32[?]:\n    y = x\n    for i in range(2):\n"
                     f"        y = f{k - 1}(y, w) * 0.5 + y\n    return y\n")
    lines.append(f"def loss(x: f32[?], w: f32[?]) -> f32:\n    return sum(f{d}(x, w) * f{d}(x, w))\n")
    lines.append("def g(x: f32[?], w: f32[?]) -> f32[?]:\n    return grad(loss, wrt=1)(x, w)\n")
    src = "\n".join(lines)

    def jax_version(jax):
        jnp = jax.numpy

        def f(k, x, w):
            if k == 0:
                return jnp.tanh(x * w + 0.1)
            return jax.lax.fori_loop(0, 2, lambda i, y: f(k - 1, y, w) * 0.5 + y, x)
        return jax.grad(lambda x, w: jnp.sum(f(d, x, w) ** 2), argnums=1), (_vec(), _vec(1))
    return src, "g", (_vec(), _vec(1)), jax_version


def order_program(k: int):
    src = ("def f(x: f64) -> f64:\n    y = x\n    i = 0\n    while i < 5:\n"
           "        y = y * 0.9 + sin(y) * 0.1\n        i = i + 1\n    return y\n")
    for j in range(1, k + 1):
        src += f"\ndef d{j}(x: f64) -> f64:\n    return grad({'f' if j == 1 else f'd{j - 1}'})(x)\n"
    return src, f"d{k}", (0.3,), None


def nesting_program(n: int):
    body, ind = [], "    "
    for j in range(n):
        body.append(f"{ind}for i{j} in range(2):")
        ind += "    "
    body.append(f"{ind}y = tanh(y * w) + 0.5 * y")
    src = ("def f(x: f32[?], w: f32[?]) -> f32:\n    y = x\n" + "\n".join(body) + "\n    return sum(y)\n\n"
           "def g(x: f32[?], w: f32[?]) -> f32[?]:\n    return grad(f, wrt=1)(x, w)\n")

    def jax_version(jax):
        jnp = jax.numpy

        def nest(j, y, w):
            if j == n:
                return jnp.tanh(y * w) + 0.5 * y
            return jax.lax.fori_loop(0, 2, lambda i, y: nest(j + 1, y, w), y)
        return jax.grad(lambda x, w: jnp.sum(nest(0, x, w)), argnums=1), (_vec(), _vec(1))
    return src, "g", (_vec(), _vec(1)), jax_version


def straight_program(m: int):
    steps = m // 3  # each line: a mul, an add and a tanh
    body = "".join(f"    y = tanh(y * w + {0.001 * (i % 7):.3f})\n" for i in range(steps))
    src = ("def f(x: f32[?], w: f32[?]) -> f32:\n    y = x\n" + body + "    return sum(y)\n\n"
           "def g(x: f32[?], w: f32[?]) -> f32[?]:\n    return grad(f, wrt=1)(x, w)\n")

    def jax_version(jax):
        jnp = jax.numpy

        def f(x, w):
            y = x
            for i in range(steps):
                y = jnp.tanh(y * w + 0.001 * (i % 7))
            return jnp.sum(y)
        return jax.grad(f, argnums=1), (_vec(), _vec(1))
    return src, "g", (_vec(), _vec(1)), jax_version


def gpt_setup(layers: int, vocab=16, context=16, batch=4):
    import gpt

    params = gpt.init_params(vocab, context, 64, layers)
    rng = np.random.default_rng(0)
    idx = rng.integers(0, vocab, (batch, context)).astype(np.int64)
    tgt = rng.integers(0, vocab, (batch, context)).astype(np.int64)
    return params, idx, tgt


def jax_gpt(jax, params, idx, tgt, n_head=4):
    jnp = jax.numpy

    def ln(x, g, b):
        mu = x.mean(-1, keepdims=True)
        return (x - mu) / jnp.sqrt(x.var(-1, keepdims=True) + 1e-5) * g + b

    def attn(x, b):
        bsz, t, c = x.shape
        heads = lambda z: z.reshape(bsz, t, n_head, c // n_head).transpose(0, 2, 1, 3)  # noqa: E731
        q, k, v = heads(x @ b["wq"]), heads(x @ b["wk"]), heads(x @ b["wv"])
        att = q @ k.transpose(0, 1, 3, 2) / jnp.sqrt(c // n_head)
        att = jnp.where(jnp.tril(jnp.ones((t, t), bool)), att, -1e30)
        y = jax.nn.softmax(att, -1) @ v
        return y.transpose(0, 2, 1, 3).reshape(bsz, t, c) @ b["wo"]

    def loss(p, idx, tgt):
        x = p["wte"][idx] + p["wpe"][:idx.shape[1]]
        for b in p["blocks"]:
            x = x + attn(ln(x, b["ln1_g"], b["ln1_b"]), b)
            h = ln(x, b["ln2_g"], b["ln2_b"])
            x = x + jax.nn.gelu(h @ b["w1"] + b["b1"], approximate=False) @ b["w2"] + b["b2"]
        lg = ln(x, p["lnf_g"], p["lnf_b"]) @ p["wte"].T
        lg = lg.reshape(-1, lg.shape[-1])
        return -jnp.mean(jax.nn.log_softmax(lg)[jnp.arange(lg.shape[0]), tgt.reshape(-1)])
    return jax.grad(loss), (params, idx, tgt)


GPT_GRAD = "\ndef loss_grad(p, idx: i64[B, T], targets: i64[B, T]):\n    return grad(loss)(p, idx, targets)\n"


def layers_measure(layers: int, tiered: bool = False, repeats: int = 1) -> dict:
    src = (ROOT / "samples" / "gpt.dg").read_text() + GPT_GRAD
    params, idx, tgt = gpt_setup(layers)
    out = measure_dg(lambda: dg.loads(src, mode="compiled", filename=str(ROOT / "samples" / "gpt_grad.dg")),
                     "loss_grad", (params, idx, tgt), tiered, full=tiered, repeats=repeats)
    out["jax_first_call_s"] = measure_jax(lambda jax: jax_gpt(jax, params, idx, tgt))
    return out


TREE_SRC = """
def leaf(p, x: f32[D]):
    i = sigmoid(x @ p["wi"] + p["bi"])
    o = sigmoid(x @ p["wo"] + p["bo"])
    u = tanh(x @ p["wu"] + p["bu"])
    c = i * u
    return o * tanh(c), c

def node(p, words: f32[N, D], left: i64[N], right: i64[N], k: i64):
    if left[k] < 0:
        return leaf(p, words[k])
    hl, cl = node(p, words, left, right, left[k])
    hr, cr = node(p, words, left, right, right[k])
    h = hl + hr
    i = sigmoid(h @ p["ui"] + p["bi"])
    fl = sigmoid(hl @ p["uf"] + p["bf"])
    fr = sigmoid(hr @ p["uf"] + p["bf"])
    o = sigmoid(h @ p["uo"] + p["bo"])
    u = tanh(h @ p["uu"] + p["bu"])
    c = i * u + fl * cl + fr * cr
    return o * tanh(c), c

def tree_loss(p, words: f32[N, D], left: i64[N], right: i64[N]) -> f32:
    h, c = node(p, words, left, right, 0)
    return sum(h * h)

def tree_grad(p, words: f32[N, D], left: i64[N], right: i64[N]):
    return grad(tree_loss)(p, words, left, right)
"""


def tree_setup(depth=3, d=16, h=16):
    rng = np.random.default_rng(0)
    n = 2 ** (depth + 1) - 1  # a complete binary tree, node k's children 2k+1 and 2k+2
    left = np.array([2 * k + 1 if 2 * k + 1 < n else -1 for k in range(n)], np.int64)
    right = np.array([2 * k + 2 if 2 * k + 2 < n else -1 for k in range(n)], np.int64)
    w = lambda *s: (rng.standard_normal(s) * 0.2).astype(np.float32)  # noqa: E731
    p = {"wi": w(d, h), "wo": w(d, h), "wu": w(d, h), "ui": w(h, h), "uf": w(h, h), "uo": w(h, h), "uu": w(h, h),
         "bi": w(h), "bo": w(h), "bu": w(h), "bf": w(h)}
    return p, w(n, d), left, right


def jax_tree(jax, p, words, left, right):
    jnp = jax.numpy
    sg = jax.nn.sigmoid

    def node(p, words, k):
        if left[k] < 0:
            x = words[k]
            c = sg(x @ p["wi"] + p["bi"]) * jnp.tanh(x @ p["wu"] + p["bu"])
            return sg(x @ p["wo"] + p["bo"]) * jnp.tanh(c), c
        (hl, cl), (hr, cr) = node(p, words, int(left[k])), node(p, words, int(right[k]))
        hh = hl + hr
        c = (sg(hh @ p["ui"] + p["bi"]) * jnp.tanh(hh @ p["uu"] + p["bu"]) + sg(hl @ p["uf"] + p["bf"]) * cl
             + sg(hr @ p["uf"] + p["bf"]) * cr)
        return sg(hh @ p["uo"] + p["bo"]) * jnp.tanh(c), c
    return jax.grad(lambda p, words: jnp.sum(node(p, words, 0)[0] ** 2)), (p, words)


def mlp_measure() -> dict:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import cpu

    rng = np.random.default_rng(0)
    params = cpu.mlp_params(rng)
    x = rng.standard_normal((64, 784)).astype(np.float32)
    y = rng.integers(0, 10, 64).astype(np.int64)
    out = measure_dg(lambda: dg.loads(cpu.SRC, mode="compiled", filename="bench.dg"), "mlp_step",
                     (*params, x, y, np.float32(0.01)), tiered=True, full=True, repeats=NAMED_REPEATS)

    def jax_step(jax):
        jnp = jax.numpy

        def loss(ps, x, y):
            w1, b1, w2, b2, w3, b3 = ps
            h = jnp.tanh(jnp.tanh(x @ w1 + b1) @ w2 + b2)
            lg = h @ w3 + b3
            return -jnp.mean(jax.nn.log_softmax(lg)[jnp.arange(lg.shape[0]), y])

        def step(ps, x, y, lr):
            l, g = jax.value_and_grad(loss)(ps, x, y)
            return l, [p - lr * d for p, d in zip(ps, g)]
        return step, (params, x, y, np.float32(0.01))
    out["jax_first_call_s"] = measure_jax(jax_step)
    return out


FAMILIES = {
    "depth": ([1, 2, 4, 8, 16], depth_program),
    "order": ([1, 2, 3, 4], order_program),
    "nesting": ([1, 2, 3, 4, 5, 6], nesting_program),
    "straight": ([100, 200, 400, 800, 1600, 3200], straight_program),
    "layers": ([1, 2, 4, 8], None),
}
QUICK = {"depth": [1, 2], "order": [1, 2], "nesting": [1, 2], "straight": [100, 200], "layers": [1]}


def run_family(name: str, sizes, repeats: int = NAMED_REPEATS) -> dict:
    """Each member's figures, and two ratios of per-op compile times: the growth, the most of any
    member's over the smallest member's (what the family's size does to each op's cost: 2 means
    a member costs twice as much per op as the smallest one), and the spread, the most over the
    least (which also counts a smallest member that costs more per op than the larger ones: a
    program of 72 ops has LLVM's fixed cost of about 20 ms to itself). The small members
    (QUICK's) are measured `repeats` times, their median reported: they are the divisors, and
    one cold run of a compile under a second varied by a third from run to run on this machine."""
    rows = {}
    for n in sizes:
        times = repeats if n in QUICK[name] else 1
        if name == "layers":
            r = layers_measure(n, repeats=times)
        else:
            src, fname, args, jax_version = FAMILIES[name][1](n)
            r = measure_dg(lambda: dg.loads(src, mode="compiled", filename=f"{name}_{n}.dg"), fname, args,
                           repeats=times)
            r["jax_first_call_s"] = measure_jax(jax_version) if jax_version else None
        rows[str(n)] = r
        j = r["jax_first_call_s"]
        print(f"  {name}={n:<5} cold {r['cold_s']:7.3f} s{'*' if r['quick_start'] else ' '} compile {r['compile_s']:7.3f} s "
              f"cached {r['cached_s']:6.3f} s  ops {r['dg_ops']:6d} "
              f"(grad {r['grad_ops']:6d})  {r['compile_ms_per_op']:6.2f} ms/op  "
              + " ".join(f"{k} {v:.3f}" for k, v in r["stages_s"].items())
              + (f"  jax {j:.3f} s (dg/jax {r['cold_s'] / j:.1f}x)" if j else ""), flush=True)
    per_op = [r["compile_ms_per_op"] for r in rows.values()]  # (members in increasing size)
    return {"members": rows, "per_op_growth": max(per_op) / per_op[0], "per_op_max_over_min": max(per_op) / min(per_op)}


def process_start() -> float:
    """The first compile in the process, of a one-op function, and its first three calls: what
    every later figure leaves out (the MLIR and LLVM libraries' start, the runtime's symbols, the
    quick call's machine code), so that a family's first member is not charged with it."""
    with tempfile.TemporaryDirectory() as d, cache_dir(d):
        m = dg.loads("def f(x: f32[?]) -> f32[?]:\n    return x + 1.0\n", mode="compiled", filename="start.dg")
        x = np.ones(4, np.float32)
        t = time.perf_counter()
        for _ in range(3):
            m.f(x)
        return time.perf_counter() - t


def tree_measure() -> dict:
    p, words, left, right = tree_setup()
    return dict(measure_dg(lambda: dg.loads(TREE_SRC, mode="compiled", filename="tree.dg"), "tree_grad",
                           (p, words, left, right), tiered=True, full=True, repeats=NAMED_REPEATS),
                jax_first_call_s=measure_jax(lambda jax: jax_tree(jax, p, words, left, right)))


PROGRAMS = {
    "mlp_step": mlp_measure,
    "gpt2_loss_grad": lambda: layers_measure(2, tiered=True, repeats=NAMED_REPEATS),
    "tree_lstm_grad": tree_measure,
}


def measure_program(name: str) -> dict:
    """A named program's figures, measured in a process of its own (this file run with
    `--program NAME`), as a user's first compile of a model in a new session is made: after the
    process' first compile (process_start), and not after the families, whose compiles leave
    MLIR's context and JAX's caches larger (there the GPT and Tree-LSTM gradients compiled 10-13%
    slower, medians of 3, in one session)."""
    r = subprocess.run([sys.executable, __file__, "--program", name], capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the two smallest members of each family, no named programs")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--programs", default=",".join(PROGRAMS), help="the named programs to measure (none: '')")
    ap.add_argument("--program", default=None, help=argparse.SUPPRESS)  # (one named program, its JSON to stdout)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.program:
        process_start()
        print(json.dumps(PROGRAMS[args.program]()))
        return {}
    out: dict = {"families": {}, "programs": {}}
    out["process_start_s"] = process_start()
    print(f"process start (the first compile in the process, a one-op function): {out['process_start_s']:.3f} s")
    for name in filter(None, args.families.split(",")):
        print(f"{name}:")
        out["families"][name] = run_family(name, QUICK[name], 1) if args.quick else run_family(name, FAMILIES[name][0])
        fam = out["families"][name]
        print(f"  compile time per op: growth (the most of any member over the smallest member's) "
              f"{fam['per_op_growth']:.2f}, spread (most over least) {fam['per_op_max_over_min']:.2f}")
    if not args.quick and args.programs:
        print("named programs (each in a process of its own):")
        for name in args.programs.split(","):
            r = out["programs"][name] = measure_program(name)
            j = r["jax_first_call_s"]
            print(f"  {name:15s} cold {r['cold_s']:7.3f} s  compile {r['compile_s']:7.3f} s  cached {r['cached_s']:6.3f} s  "
                  + " ".join(f"{k} {v:.3f}" for k, v in r["stages_s"].items())
                  + (f"  jax {j:.3f} s (dg/jax {r['cold_s'] / j:.2f}x)" if j else ""), flush=True)
            print(f"  {'':15s} cold first calls (median above): " + ", ".join(f"{c:.3f}" for c in r["cold_runs_s"]) + " s",
                  flush=True)
            if r["quick_start"]:
                print(f"  {'':15s} quick start: optimized code from {r['optimized_after_s']:.3f} s on; "
                      f"with quick start off (DG_QUICK_START=0) the first call took {r['full_cold_s']:.3f} s", flush=True)
            else:
                print(f"  {'':15s} no quick start (a small program); DG_QUICK_START=0: {r['full_cold_s']:.3f} s", flush=True)
            print(f"  {'':15s} tiered (DG_TIERED=1): first call {r['tiered_first_call_s']:.3f} s"
                  + (f" (dg/jax {r['tiered_first_call_s'] / j:.2f}x)" if j else "")
                  + f", compiled code from {r['tiered_compiled_after_s']:.3f} s on "
                  f"({r['tiered_interpreted_calls']} calls interpreted)", flush=True)
    cached = [r["cached_s"] for f in out["families"].values() for r in f["members"].values()]
    if cached:
        out["median_cached_s"] = statistics.median(cached)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
