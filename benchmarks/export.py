"""`dg export` against torch.export + AOTInductor: package size, load to first result, step time.

Models (float32): the MLP of benchmarks/cpu.py (784-256-256-10, tanh, batch 128): its forward
pass (`logits`) and its SGD training step (`mlp_step`: value_and_grad and the update); and a
greedy decoder whose `while` loop stops when the data say so (the model torch.export is
expected to refuse: its error is printed).

Figures:
  size        the shared library (dg: without the BLAS it links, and built with --blas none,
              which needs none; PyTorch: the .pt2 package, which needs libtorch to run)
  load        a fresh process: dlopen (dg, from C) or aoti_load_package (PyTorch, with torch
              already imported; `import torch` itself apart) to the first forward result, ms
              (dg also with the BLAS on one thread: OpenBLAS's threads' first wake-up varies)
  step        median time of a call made from C through the library (dg: via ctypes, in this
              process, in turns with the JIT's call of the same specialization; PyTorch: the
              loaded AOTInductor model's call), us
Every timed figure is a median of several rounds taken in turns (benchmarks/cpu.py's
`medians`). The first calls are reported apart from the steady state.

    python benchmarks/export.py [--quick] [--json results.json]
"""
from __future__ import annotations

import argparse
import ctypes
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
from dg.lowering.codegen import optimizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu import medians, mlp_params  # noqa: E402  (this folder's)

SRC = """
def logits(x: f32[B, 784], w1: f32[784, 256], b1: f32[256], w2: f32[256, 256], b2: f32[256], w3: f32[256, 10],
           b3: f32[10]) -> f32[B, 10]:
    h = tanh(x @ w1 + b1)
    h = tanh(h @ w2 + b2)
    return h @ w3 + b3

def mlp_loss(w1: f32[784, 256], b1: f32[256], w2: f32[256, 256], b2: f32[256], w3: f32[256, 10], b3: f32[10],
             x: f32[B, 784], y: i64[B]) -> f32:
    return cross_entropy(logits(x, w1, b1, w2, b2, w3, b3), y)

def mlp_step(w1: f32[784, 256], b1: f32[256], w2: f32[256, 256], b2: f32[256], w3: f32[256, 10], b3: f32[10],
             x: f32[B, 784], y: i64[B], lr: f32):
    l, (g1, gb1, g2, gb2, g3, gb3) = value_and_grad(mlp_loss, wrt=(0, 1, 2, 3, 4, 5))(w1, b1, w2, b2, w3, b3, x, y)
    return l, w1 - lr * g1, b1 - lr * gb1, w2 - lr * g2, b2 - lr * gb2, w3 - lr * g3, b3 - lr * gb3

def decode(h: f32[D], w: f32[D, D], emb: f32[V, D], wout: f32[D, V], stop: i64, limit: i64):
    n = 0
    tok = 0
    while n < limit:
        h = tanh(h @ w + emb[tok])
        tok = argmax(h @ wout)
        n = n + 1
        if tok == stop:
            break
    return n, h
"""

LOAD_C = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "mlp.h"

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

int main(int argc, char **argv) {
    static float x[128 * 784], w1[784 * 256], b1[256], w2[256 * 256], b2[256], w3[256 * 10], b3[10];
    for (int i = 0; i < 784 * 256; i++) w1[i] = (float)((i * 7919) % 1000) * 1e-5f;
    double t0 = now();
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    int (*fn)(const dg_array *, const dg_array *, const dg_array *, const dg_array *, const dg_array *,
              const dg_array *, const dg_array *, dg_array *) = (void *)dlsym(lib, "mlp_logits");
    dg_array ax = {x, 2, {128, 784}}, aw1 = {w1, 2, {784, 256}}, ab1 = {b1, 1, {256}}, aw2 = {w2, 2, {256, 256}};
    dg_array ab2 = {b2, 1, {256}}, aw3 = {w3, 2, {256, 10}}, ab3 = {b3, 1, {10}}, out = {0};
    if (fn(&ax, &aw1, &ab1, &aw2, &ab2, &aw3, &ab3, &out)) return 2;
    double t1 = now();
    printf("%.6f\n", t1 - t0);
    return 0;
}
"""

TORCH_LOAD = r"""
import sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
runner = torch._inductor.aoti_load_package(sys.argv[1])
x = torch.zeros(128, 784)
y = runner(x)
t2 = time.perf_counter()
print(f"{t1 - t0:.6f} {t2 - t1:.6f}")
"""


class Array(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("rank", ctypes.c_int64), ("shape", ctypes.c_int64 * 8)]


def _array(a: np.ndarray) -> Array:
    return Array(a.ctypes.data, a.ndim, (ctypes.c_int64 * 8)(*a.shape))


def c_step(lib_path: Path, args: list):
    """A function that calls the exported mlp_step through ctypes on `args` and frees its results."""
    lib = ctypes.CDLL(str(lib_path))
    fn = lib.mlp_mlp_step
    free = lib.dg_free
    ins = [_array(a) for a in args[:-1]]
    outs = [Array() for _ in range(6)]
    loss = ctypes.c_float()
    call = [ctypes.byref(a) for a in ins] + [ctypes.c_float(float(args[-1])), ctypes.byref(loss)] + \
        [ctypes.byref(o) for o in outs]
    fn.argtypes = [ctypes.c_void_p] * 8 + [ctypes.c_float] + [ctypes.c_void_p] * 7
    refs = [ctypes.byref(o) for o in outs]

    def step():
        for o in outs:
            o.data = None
        if fn(*call):
            raise RuntimeError(lib.dg_last_error)
        for r in refs:
            free(r)
        return loss.value

    return step


def _median_process(cmd: list, runs: int, env: dict | None = None) -> list:
    """The medians of what a fresh process prints (floats on one line), over `runs` processes."""
    rows = []
    for _ in range(runs):
        out = subprocess.run(cmd, capture_output=True, text=True, check=True,
                             env={**os.environ, **(env or {})}).stdout.split()
        rows.append([float(v) for v in out])
    return [statistics.median(col) for col in zip(*rows)]


def bench_dg(tmp: Path, params: list, x, y, lr, repeats: int, runs: int) -> dict:
    src = tmp / "mlp.dg"
    src.write_text(SRC)
    m = dg.load(src)
    t0 = time.perf_counter()
    ex = dg.export({"logits": m.logits, "mlp_step": m.mlp_step}, tmp / "lib",
                   {"logits": (x, *params), "mlp_step": (*params, x, y, lr)})
    export_s = time.perf_counter() - t0
    loops = dg.export({"logits": m.logits, "mlp_step": m.mlp_step}, tmp / "loops",
                      {"logits": (x, *params), "mlp_step": (*params, x, y, lr)}, blas="none")
    exe = tmp / "load"
    (tmp / "load.c").write_text(LOAD_C)
    subprocess.run(["cc", "-O2", "-o", str(exe), str(tmp / "load.c"), f"-I{tmp / 'lib'}", "-ldl"], check=True)
    (load_s,) = _median_process([str(exe), str(ex.shared)], runs)
    (load_one_s,) = _median_process([str(exe), str(ex.shared)], runs, {"OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    args = [*params, x, y, lr]
    step_c = c_step(ex.shared, args)
    jit = lambda: m.mlp_step(*args)  # noqa: E731
    jit()
    optimizer.wait_all()
    times = medians({"jit": jit, "exported": step_c}, repeats)
    got, want = step_c(), float(m.mlp_step(*args)[0])
    return {"size_bytes": ex.shared.stat().st_size, "size_no_blas_bytes": loops.shared.stat().st_size,
            "archive_bytes": ex.static.stat().st_size, "export_s": export_s, "load_to_first_s": load_s,
            "load_to_first_blas_one_thread_s": load_one_s,
            "step_jit_s": times["jit"], "step_exported_s": times["exported"], "same_loss": got == want}


def bench_torch(tmp: Path, params: list, x, repeats: int, runs: int) -> dict:
    try:
        import torch
    except ImportError:
        return {"skipped": "torch is not installed"}
    w1, b1, w2, b2, w3, b3 = (torch.from_numpy(p) for p in params)

    class MLP(torch.nn.Module):
        def forward(self, x):
            h = torch.tanh(x @ w1 + b1)
            h = torch.tanh(h @ w2 + b2)
            return h @ w3 + b3

    class Decoder(torch.nn.Module):
        def forward(self, h, w, emb, wout, stop):
            n, tok = 0, 0
            while n < 20:
                h = torch.tanh(h @ w + emb[tok])
                tok = int(torch.argmax(h @ wout))
                n += 1
                if tok == int(stop):
                    break
            return h

    out = {}
    try:
        t0 = time.perf_counter()
        ep = torch.export.export(MLP(), (torch.from_numpy(x),))
        pkg = torch._inductor.aoti_compile_and_package(ep, package_path=str(tmp / "mlp.pt2"))
        out["export_s"] = time.perf_counter() - t0
        out["size_bytes"] = Path(pkg).stat().st_size
        (tmp / "load.py").write_text(TORCH_LOAD)
        out["import_torch_s"], out["load_to_first_s"] = _median_process([sys.executable, str(tmp / "load.py"), pkg],
                                                                        runs)
        runner = torch._inductor.aoti_load_package(pkg)
        tx = torch.from_numpy(x)
        out["forward_s"] = medians({"aoti": lambda: runner(tx)}, repeats)["aoti"]
    except Exception as e:  # (reported: the comparison still prints dg's side)
        out["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    rng = np.random.default_rng(1)
    try:
        torch.export.export(Decoder(), (torch.from_numpy(rng.normal(size=8).astype(np.float32)),
                                        torch.from_numpy(rng.normal(size=(8, 8)).astype(np.float32)),
                                        torch.from_numpy(rng.normal(size=(6, 8)).astype(np.float32)),
                                        torch.from_numpy(rng.normal(size=(8, 6)).astype(np.float32)),
                                        torch.tensor(3)))
        out["while_loop"] = "exported"
    except Exception as e:
        out["while_loop"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}"
    return out


def bench_forward_dg(tmp: Path, params: list, x, repeats: int) -> float:
    """Median seconds of the exported forward pass called through ctypes."""
    lib = ctypes.CDLL(str(tmp / "lib" / "libmlp.so"))
    fn = lib.mlp_logits
    fn.argtypes = [ctypes.c_void_p] * 8
    ins = [_array(a) for a in (x, *params)]
    out = Array()
    refs = [ctypes.byref(a) for a in ins] + [ctypes.byref(out)]

    def call():
        out.data = None
        fn(*refs)
        lib.dg_free(ctypes.byref(out))

    return medians({"dg": call}, repeats)["dg"]


def decoder_dg(tmp: Path) -> str:
    """What `dg export` does with the decoder: the C function it declares."""
    m = dg.load(tmp / "mlp.dg")
    rng = np.random.default_rng(1)
    ex = dg.export(m.decode, tmp / "decoder", (rng.normal(size=8).astype(np.float32),
                                                rng.normal(size=(8, 8)).astype(np.float32),
                                                rng.normal(size=(6, 8)).astype(np.float32),
                                                rng.normal(size=(8, 6)).astype(np.float32), np.int64(3), np.int64(20)),
                   name="decoder")
    return next(line for line in ex.header.read_text().splitlines() if line.startswith("int decoder_decode("))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one round, one process: a smoke run")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    repeats, runs = (1, 1) if a.quick else (15, 11)
    rng = np.random.default_rng(0)
    params = mlp_params(rng)
    x = rng.normal(size=(128, 784)).astype(np.float32)
    y = rng.integers(0, 10, 128)
    lr = np.float32(0.01)
    with tempfile.TemporaryDirectory(prefix="dg-bench-export-") as tmp:
        tmp = Path(tmp)
        d = bench_dg(tmp, params, x, y, lr, repeats, runs)
        d["forward_exported_s"] = bench_forward_dg(tmp, params, x, repeats)
        d["decoder"] = decoder_dg(tmp)
        t = bench_torch(tmp, params, x, repeats, runs)
    print(f"threads: {os.cpu_count()} CPUs")
    print(f"dg export: MLP library {d['size_bytes'] / 1e3:.0f} kB ({d['size_no_blas_bytes'] / 1e3:.0f} kB with "
          f"--blas none; archive {d['archive_bytes'] / 1e3:.0f} kB), built in {d['export_s']:.2f} s")
    print(f"  dlopen to first forward result: {d['load_to_first_s'] * 1e3:.2f} ms (median of {runs} processes); "
          f"{d['load_to_first_blas_one_thread_s'] * 1e3:.2f} ms with the BLAS on one thread")
    print(f"  training step: exported {d['step_exported_s'] * 1e6:.0f} us, JIT {d['step_jit_s'] * 1e6:.0f} us "
          f"(exported / JIT {d['step_exported_s'] / d['step_jit_s']:.3f}); same loss: {d['same_loss']}")
    print(f"  forward: exported {d['forward_exported_s'] * 1e6:.0f} us")
    print(f"  while-loop decoder: {d['decoder']}")
    if "skipped" in t:
        print(f"torch.export + AOTInductor: skipped ({t['skipped']})")
    else:
        if "error" in t:
            print(f"torch.export + AOTInductor: MLP failed: {t['error']}")
        else:
            print(f"torch.export + AOTInductor: MLP package {t['size_bytes'] / 1e3:.0f} kB (needs libtorch), built in "
                  f"{t['export_s']:.1f} s")
            print(f"  load to first result: {t['load_to_first_s'] * 1e3:.1f} ms after `import torch` "
                  f"({t['import_torch_s'] * 1e3:.0f} ms)")
            print(f"  forward: {t['forward_s'] * 1e6:.0f} us (dg exported / AOTInductor "
                  f"{d['forward_exported_s'] / t['forward_s']:.2f})")
        print(f"  while-loop decoder: {t['while_loop']}")
    if a.json:
        Path(a.json).write_text(json.dumps({"dg": d, "torch": t}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
