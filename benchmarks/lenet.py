"""A LeNet-style training step on the CPU: dg against PyTorch and JAX, side by side in one process.

The model (float32, NCHW): 28x28 images in batches of 64, conv 5x5 (1 -> 6) + relu + 2x2 max
pool -> [6, 12, 12], conv 5x5 (6 -> 16) + relu + 2x2 max pool -> [16, 4, 4], dense
256 -> 120 -> 84 -> 10 with relu between, softmax cross-entropy; one step is the loss, its
gradient with respect to the ten parameters and an SGD update.

Peers: dg compiled and dg interpreter (value_and_grad and the update inside one dg function,
called from Python), PyTorch eager (torch.nn.functional, autograd) and JAX jit (value_and_grad
and the update in one jitted function) when they are installed (optional, not dg
dependencies). Every peer starts from the same weights and batch; before timing, the script
checks that they compute the same loss and the same updated weights (the largest differences
are printed and kept in the JSON). Figures are medians of steps/s over several repeats taken
in turns (benchmarks/cpu.py's `medians`), with ratios against dg compiled. `--profile` adds
the time of parts of dg's compiled step (each conv layer forward, forward with and without
its gradient) to show where the time goes.

    python benchmarks/lenet.py [--quick] [--repeats 7] [--batch 64] [--profile] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

import dg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu import _peers, medians, ratios

LR = 0.01

SRC = """
def features(x: f32[B, 1, 28, 28], k1: f32[6, 1, 5, 5], c1: f32[6], k2: f32[16, 6, 5, 5], c2: f32[16]) -> f32[B, 256]:
    h = max_pool2d(relu(conv2d(x, k1, c1)), 2)
    h = max_pool2d(relu(conv2d(h, k2, c2)), 2)
    return reshape(h, [x.shape[0], 256])

def lenet_loss(k1: f32[6, 1, 5, 5], c1: f32[6], k2: f32[16, 6, 5, 5], c2: f32[16], w3: f32[256, 120], b3: f32[120],
               w4: f32[120, 84], b4: f32[84], w5: f32[84, 10], b5: f32[10], x: f32[B, 1, 28, 28], y: i64[B]) -> f32:
    h = relu(features(x, k1, c1, k2, c2) @ w3 + b3)
    h = relu(h @ w4 + b4)
    return cross_entropy(h @ w5 + b5, y)

def lenet_step(k1: f32[6, 1, 5, 5], c1: f32[6], k2: f32[16, 6, 5, 5], c2: f32[16], w3: f32[256, 120], b3: f32[120],
               w4: f32[120, 84], b4: f32[84], w5: f32[84, 10], b5: f32[10], x: f32[B, 1, 28, 28], y: i64[B], lr: f32):
    l, (g1, g2, g3, g4, g5, g6, g7, g8, g9, g10) = value_and_grad(lenet_loss, wrt=(0, 1, 2, 3, 4, 5, 6, 7, 8, 9))(
        k1, c1, k2, c2, w3, b3, w4, b4, w5, b5, x, y)
    return (l, k1 - lr * g1, c1 - lr * g2, k2 - lr * g3, c2 - lr * g4, w3 - lr * g5, b3 - lr * g6,
            w4 - lr * g7, b4 - lr * g8, w5 - lr * g9, b5 - lr * g10)

# parts of the step, for --profile
def conv1(x: f32[B, 1, 28, 28], k1: f32[6, 1, 5, 5], c1: f32[6]) -> f32[B, 6, 12, 12]:
    return max_pool2d(relu(conv2d(x, k1, c1)), 2)

def conv2(h: f32[B, 6, 12, 12], k2: f32[16, 6, 5, 5], c2: f32[16]) -> f32[B, 16, 4, 4]:
    return max_pool2d(relu(conv2d(h, k2, c2)), 2)

def conv1_sum(x: f32[B, 1, 28, 28], k1: f32[6, 1, 5, 5], c1: f32[6]) -> f32:
    return sum(conv1(x, k1, c1))

def conv1_grad(x: f32[B, 1, 28, 28], k1: f32[6, 1, 5, 5], c1: f32[6]):
    return grad(conv1_sum, wrt=(1, 2))(x, k1, c1)

def conv2_sum(h: f32[B, 6, 12, 12], k2: f32[16, 6, 5, 5], c2: f32[16]) -> f32:
    return sum(conv2(h, k2, c2))

def conv2_grad(h: f32[B, 6, 12, 12], k2: f32[16, 6, 5, 5], c2: f32[16]):
    return grad(conv2_sum, wrt=(0, 1, 2))(h, k2, c2)
"""

SHAPES = [(6, 1, 5, 5), (6,), (16, 6, 5, 5), (16,), (256, 120), (120,), (120, 84), (84,), (84, 10), (10,)]


def init_params(seed: int = 0):
    """He-normal kernels and dense weights, small random biases (so that their gradients are compared too)."""
    rng = np.random.default_rng(seed)
    out = []
    for shape in SHAPES:
        if len(shape) == 1:
            out.append(rng.normal(0, 0.01, shape).astype(np.float32))
        else:
            fan_in = int(np.prod(shape[1:])) if len(shape) == 4 else shape[0]
            out.append(rng.normal(0, np.sqrt(2 / fan_in), shape).astype(np.float32))
    return out


def batch_data(batch: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    return rng.random((batch, 1, 28, 28), np.float32), rng.integers(0, 10, batch).astype(np.int64)


def dg_steps(params, x, y):
    """{peer: a function making one step and returning (loss, new params) as NumPy}."""
    lr = np.float32(LR)
    out = {}
    for mode in ("compiled", "interp"):
        m = dg.loads(SRC, mode=mode, filename="lenet.dg")

        def step(m=m):
            loss, *new = m.lenet_step(*params, x, y, lr)
            return loss, new

        out[f"dg_{mode}"] = step
    return out


def torch_step(torch, params, x, y):
    F = torch.nn.functional
    tp = [torch.tensor(p, requires_grad=True) for p in params]
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)

    def step():
        k1, c1, k2, c2, w3, b3, w4, b4, w5, b5 = tp
        h = F.max_pool2d(F.relu(F.conv2d(tx, k1, c1)), 2)
        h = F.max_pool2d(F.relu(F.conv2d(h, k2, c2)), 2).reshape(tx.shape[0], 256)
        h = F.relu(h @ w3 + b3)
        h = F.relu(h @ w4 + b4)
        loss = F.cross_entropy(h @ w5 + b5, ty)
        grads = torch.autograd.grad(loss, tp)
        with torch.no_grad():
            return loss, [p - LR * g for p, g in zip(tp, grads)]

    return step


def jax_step(jax, params, x, y):
    jnp, lax = jax.numpy, jax.lax

    def pool(h):
        return lax.reduce_window(h, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")

    def conv(h, k, c):
        out = lax.conv_general_dilated(h, k, (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW"))
        return out + c[None, :, None, None]

    def loss(p, x, y):
        k1, c1, k2, c2, w3, b3, w4, b4, w5, b5 = p
        h = pool(jax.nn.relu(conv(x, k1, c1)))
        h = pool(jax.nn.relu(conv(h, k2, c2))).reshape(x.shape[0], 256)
        h = jax.nn.relu(h @ w3 + b3)
        h = jax.nn.relu(h @ w4 + b4)
        return -jnp.mean(jax.nn.log_softmax(h @ w5 + b5)[jnp.arange(x.shape[0]), y])

    @jax.jit
    def jstep(p, x, y):
        l, g = jax.value_and_grad(loss)(p, x, y)
        return l, [a - LR * b for a, b in zip(p, g)]

    jp = [jnp.asarray(p) for p in params]
    jx, jy = jnp.asarray(x), jnp.asarray(y)
    return lambda: jax.block_until_ready(jstep(jp, jx, jy))


def all_steps(params, x, y, peers):
    steps = dg_steps(params, x, y)
    if "torch" in peers:
        steps["torch_eager"] = torch_step(peers["torch"], params, x, y)
    if "jax" in peers:
        steps["jax_jit"] = jax_step(peers["jax"], params, x, y)
    return steps


def agreement(steps) -> dict:
    """The largest difference from dg compiled of each peer's loss and updated weights (one step
    from the same start); raises if any is beyond float32 rounding."""
    def numpy(v):
        return np.asarray(v.detach() if hasattr(v, "detach") else v, np.float64)

    results = {}
    for name, step in steps.items():
        loss, new = step()
        results[name] = (numpy(loss), [numpy(p) for p in new])
    ref_loss, ref_params = results["dg_compiled"]
    out = {}
    for name, (loss, new) in results.items():
        if name == "dg_compiled":
            continue
        out[name] = {"loss": float(abs(loss - ref_loss)),
                     "params": max(float(np.max(np.abs(a - b))) for a, b in zip(new, ref_params))}
        if out[name]["loss"] > 1e-4 or out[name]["params"] > 1e-4:
            raise AssertionError(f"{name} disagrees with dg_compiled: {out[name]}")
    out["loss"] = float(ref_loss)
    return out


def profile(x, params, repeats):
    """Seconds per call of parts of dg's compiled step, the whole step included."""
    m = dg.loads(SRC, mode="compiled", filename="lenet.dg")
    k1, c1, k2, c2 = params[:4]
    h = np.ascontiguousarray(m.conv1(x, k1, c1))
    y = np.zeros(x.shape[0], np.int64)
    fns = {
        "conv1_forward": lambda: m.conv1(x, k1, c1),
        "conv2_forward": lambda: m.conv2(h, k2, c2),
        "conv1_grad": lambda: m.conv1_grad(x, k1, c1),
        "conv2_grad": lambda: m.conv2_grad(h, k2, c2),
        "loss_forward": lambda: m.lenet_loss(*params, x, y),
        "step": lambda: m.lenet_step(*params, x, y, np.float32(LR)),
    }
    return medians(fns, repeats)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a small batch and one repeat (a smoke run)")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--profile", action="store_true", help="also time parts of dg's compiled step")
    ap.add_argument("--json", default=None, metavar="PATH", help="write the results to PATH")
    a = ap.parse_args(argv)
    repeats = 1 if a.quick else a.repeats
    batch = 8 if a.quick else a.batch
    peers = _peers()
    params = init_params()
    x, y = batch_data(batch)
    steps = all_steps(params, x, y, peers)
    res = {"peers": sorted(peers), "cpu_count": os.cpu_count(), "batch": batch, "max_abs_diff": agreement(steps)}
    per_s = {k: 1.0 / t for k, t in medians(steps, repeats, min_time=0.01 if a.quick else 0.05).items()}
    res["steps_per_s"] = per_s
    res["ratios"] = ratios(per_s, "dg_compiled")
    if a.profile:
        res["dg_compiled_ms"] = {k: 1e3 * t for k, t in profile(x, params, repeats).items()}
    report(res)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)
    return res


def report(res: dict) -> None:
    print(f"LeNet training step, batch {res['batch']}; peers present: {', '.join(res['peers']) or 'none'}; "
          f"{res['cpu_count']} CPUs")
    diffs = {k: v for k, v in res["max_abs_diff"].items() if k != "loss"}
    print(f"loss {res['max_abs_diff']['loss']:.6f}; max |difference| from dg_compiled (loss, updated weights): "
          + ", ".join(f"{k} {v['loss']:.2e} {v['params']:.2e}" for k, v in diffs.items()))
    print("steps/s (median): " + ", ".join(f"{k} {v:.4g}" for k, v in res["steps_per_s"].items()))
    print("ratios: " + ", ".join(f"{k} {v:.3g}" for k, v in res["ratios"].items()))
    if "dg_compiled_ms" in res:
        print("dg compiled, ms per call: " + ", ".join(f"{k} {v:.3g}" for k, v in res["dg_compiled_ms"].items()))


if __name__ == "__main__":
    main()
