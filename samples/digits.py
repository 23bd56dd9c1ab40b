"""Train samples/digits.dg on scikit-learn's handwritten digits (compiled mode).

    pip install scikit-learn 'dg[viz]'
    python samples/digits.py [--epochs 30] [--mode compiled] [--plot digits_loss.png | --no-plot]

Prints the loss every five epochs and the test accuracy; exits non-zero below 90%. With tqdm,
a progress bar runs over the training steps (on stderr, the epoch's mean loss beside it); with
matplotlib, the loss of every step and each epoch's mean are drawn to a PNG (`--plot PATH`,
by default digits_loss.png in the current folder; `--no-plot` draws none). Both are optional
(`pip install 'dg[viz]'`): without them the sample prints the same lines, and a note that the
plot needs matplotlib.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import dg

try:
    from tqdm import tqdm
except ImportError:  # the progress bar is optional
    tqdm = None


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
          seed: int = 0, verbose: bool = True, plot=None):
    """Train; return the test accuracy. `verbose`: print (and show a progress bar with tqdm);
    `plot`: a path to draw the loss to (with matplotlib)."""
    m = dg.load(Path(__file__).with_name("digits.dg"), mode=mode)
    (xtr, ytr), (xte, yte) = load_data(seed)
    rng = np.random.default_rng(seed)
    params = [rng.normal(0, 1 / 8, (64, hidden)).astype(np.float32), np.zeros(hidden, np.float32),
              rng.normal(0, 1 / np.sqrt(hidden), (hidden, 10)).astype(np.float32), np.zeros(10, np.float32)]
    starts = range(0, len(xtr) - batch + 1, batch)
    bar = tqdm(total=epochs * len(starts), unit="step") if tqdm is not None and verbose else None
    say = bar.write if bar is not None else print  # lines above the bar, not through it
    history = []  # the losses of each epoch's steps
    t0 = time.perf_counter()
    for epoch in range(epochs):
        order = rng.permutation(len(xtr))
        losses = []
        for i in starts:
            idx = order[i:i + batch]
            loss, *params = m.step(*params, xtr[idx], ytr[idx], np.float32(lr))
            losses.append(float(loss))
            if bar is not None:
                bar.set_postfix(epoch=epoch + 1, loss=f"{np.mean(losses):.4f}", refresh=False)
                bar.update()
        history.append(losses)
        if verbose and (epoch % 5 == 4 or epoch == epochs - 1):
            say(f"epoch {epoch + 1:3d}  loss {np.mean(losses):.4f}")
    if bar is not None:
        bar.close()
    acc = float(m.accuracy(xte, yte, *params))
    if verbose:
        print(f"test accuracy {acc:.4f} ({len(xte)} images, {time.perf_counter() - t0:.1f} s, mode {mode})")
    if plot and save_plot(history, plot) and verbose:
        print(f"loss plot saved to {plot}")
    return acc


def save_plot(history, path, title: str = "samples/digits.dg") -> bool:
    """Draw the loss of every step and each epoch's mean to `path` (PNG for a .png name) with
    matplotlib's Agg backend, which needs no display; False, with a note, without matplotlib."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        print("the loss plot needs matplotlib: pip install 'dg[viz]'")
        return False
    fig = Figure(figsize=(6, 4))
    FigureCanvasAgg(fig)  # Agg draws it (pyplot and its global backend are left alone)
    ax = fig.add_subplot()
    per_step = [loss for losses in history for loss in losses]
    ax.plot(np.arange(1, len(per_step) + 1), per_step, lw=0.7, alpha=0.4, label="step")
    ends = np.cumsum([len(losses) for losses in history])
    ax.plot(ends, [np.mean(losses) for losses in history], marker="o", ms=3, label="epoch mean")
    ax.set(xlabel="step", ylabel="cross-entropy loss", yscale="log", title=title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--mode", default="compiled")
    ap.add_argument("--plot", default="digits_loss.png", metavar="PATH", help="where to draw the loss (a PNG)")
    ap.add_argument("--no-plot", action="store_true", help="draw no loss plot")
    a = ap.parse_args(argv)
    return 0 if train(a.epochs, a.mode, plot=None if a.no_plot else a.plot) > 0.9 else 1


if __name__ == "__main__":
    sys.exit(main())
