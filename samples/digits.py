"""Train samples/digits.dg on scikit-learn's handwritten digits (compiled mode).

    pip install scikit-learn
    python samples/digits.py [--epochs 30] [--mode compiled]

Prints the loss per epoch and the test accuracy; exits non-zero below 90%.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import dg


def load_data(seed: int = 0):
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    n_test = len(x) // 5
    return (x[n_test:], y[n_test:]), (x[:n_test], y[:n_test])


def train(epochs: int = 30, mode: str = "compiled", hidden: int = 64, batch: int = 32, lr: float = 0.2,
          seed: int = 0, verbose: bool = True):
    m = dg.load(Path(__file__).with_name("digits.dg"), mode=mode)
    (xtr, ytr), (xte, yte) = load_data(seed)
    rng = np.random.default_rng(seed)
    params = [rng.normal(0, 1 / 8, (64, hidden)).astype(np.float32), np.zeros(hidden, np.float32),
              rng.normal(0, 1 / np.sqrt(hidden), (hidden, 10)).astype(np.float32), np.zeros(10, np.float32)]
    t0 = time.perf_counter()
    for epoch in range(epochs):
        order = rng.permutation(len(xtr))
        losses = []
        for i in range(0, len(xtr) - batch + 1, batch):
            idx = order[i:i + batch]
            loss, *params = m.step(*params, xtr[idx], ytr[idx], np.float32(lr))
            losses.append(float(loss))
        if verbose and (epoch % 5 == 4 or epoch == epochs - 1):
            print(f"epoch {epoch + 1:3d}  loss {np.mean(losses):.4f}")
    acc = float(m.accuracy(xte, yte, *params))
    if verbose:
        print(f"test accuracy {acc:.4f} ({len(xte)} images, {time.perf_counter() - t0:.1f} s, mode {mode})")
    return acc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--mode", default="compiled")
    a = ap.parse_args(argv)
    return 0 if train(a.epochs, a.mode) > 0.9 else 1


if __name__ == "__main__":
    sys.exit(main())
