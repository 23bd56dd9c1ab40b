"""Train samples/cnn.dg, a small convolutional network, on scikit-learn's handwritten digits.

    pip install scikit-learn 'dg[viz]'
    python samples/cnn.py [--epochs 20] [--mode compiled|interp] [--plot cnn_loss.png | --no-plot]

The 8x8 images go in as [N, 1, 8, 8]; the train/test split is samples/digits.py's (the same
seed gives the same 360 test images). The parameters are a dict (a record in cnn.dg).
Training is the standard library's optim.momentum (SGD with momentum 0.9, as
torch.optim.SGD) in batches of 32, with the learning rate decayed by cosine over the run.
Prints the loss every five epochs and the test accuracy, with the training time; exits
non-zero below 98%. As in digits.py, a tqdm progress bar runs over the steps (on stderr) and
a matplotlib plot of the loss is drawn to a PNG (`--plot PATH`, by default cnn_loss.png in
the current folder; `--no-plot` draws none); both are optional.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import dg

try:
    from dg.samples.digits import load_data, save_plot, tqdm  # the same split as samples/digits.py
except ImportError:  # run from a checkout whose samples are not importable
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from digits import load_data, save_plot, tqdm  # (tqdm: None where the progress bar is not installed)

SHAPES = {"k1": (16, 1, 3, 3), "c1": (16,), "k2": (32, 16, 3, 3), "c2": (32,), "w": (128, 10), "b": (10,)}


def load(mode: str = "compiled"):
    return dg.load(Path(__file__).with_name("cnn.dg"), mode=mode)


def images(x):
    """The digits loader's [N, 64] rows as [N, 1, 8, 8] images."""
    return np.ascontiguousarray(x.reshape(-1, 1, 8, 8))


def init_params(seed: int = 0) -> dict:
    """The parameters, a dict as cnn.dg's record: He-normal kernels and dense weights (fan-in:
    the inputs of one output), zero biases."""
    rng = np.random.default_rng(seed)
    params = {}
    for name, shape in SHAPES.items():
        if len(shape) == 1:
            params[name] = np.zeros(shape, np.float32)
        else:
            fan_in = int(np.prod(shape[1:])) if len(shape) == 4 else shape[0]
            params[name] = rng.normal(0, np.sqrt(2 / fan_in), shape).astype(np.float32)
    return params


def learning_rate(lr: float, done: int, total: int) -> np.float32:
    """Cosine decay from `lr` to 0 over `total` steps."""
    return np.float32(lr * 0.5 * (1 + np.cos(np.pi * done / total)))


def train(epochs: int = 20, mode: str = "compiled", batch: int = 32, lr: float = 0.1, momentum: float = 0.9,
          seed: int = 0, verbose: bool = True, plot=None, max_steps: int | None = None):
    """Train; return (test accuracy, the losses of each epoch's steps). `verbose`: print (and show
    a progress bar with tqdm); `plot`: a path to draw the loss to (with matplotlib); `max_steps`:
    stop after that many steps (a short run; the schedule still spans the whole `epochs`)."""
    m = load(mode)
    (xtr, ytr), (xte, yte) = load_data(seed)
    xtr, xte = images(xtr), images(xte)
    rng = np.random.default_rng(seed)
    params = init_params(seed)
    state = m.init_state(params)  # optim.momentum's: a zero buffer per parameter, the step count
    starts = range(0, len(xtr) - batch + 1, batch)
    total = epochs * len(starts) if max_steps is None else min(max_steps, epochs * len(starts))
    bar = tqdm(total=total, unit="step") if tqdm is not None and verbose else None
    say = bar.write if bar is not None else print  # lines above the bar, not through it
    history = []  # the losses of each epoch's steps
    done = 0
    t0 = time.perf_counter()
    for epoch in range(epochs):
        order = rng.permutation(len(xtr))
        losses = []
        for i in starts:
            if done == total:
                break
            idx = order[i:i + batch]
            rate = learning_rate(lr, done, epochs * len(starts))
            loss, params, state = m.step(params, state, xtr[idx], ytr[idx], rate, np.float32(momentum))
            losses.append(float(loss))
            done += 1
            if bar is not None:
                bar.set_postfix(epoch=epoch + 1, loss=f"{np.mean(losses):.4f}", refresh=False)
                bar.update()
        if losses:
            history.append(losses)
        if verbose and losses and (epoch % 5 == 4 or epoch == epochs - 1 or done == total):
            say(f"epoch {epoch + 1:3d}  loss {np.mean(losses):.4f}")
        if done == total:
            break
    if bar is not None:
        bar.close()
    seconds = time.perf_counter() - t0
    acc = float(m.accuracy(params, xte, yte))
    if verbose:
        print(f"test accuracy {acc:.4f} ({len(xte)} images, {done} steps in {seconds:.1f} s, mode {mode})")
    if plot and save_plot(history, plot, "samples/cnn.dg") and verbose:
        print(f"loss plot saved to {plot}")
    return acc, history


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--mode", default="compiled", choices=("compiled", "interp"))
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--plot", default="cnn_loss.png", metavar="PATH", help="where to draw the loss (a PNG)")
    ap.add_argument("--no-plot", action="store_true", help="draw no loss plot")
    a = ap.parse_args(argv)
    acc, _ = train(a.epochs, a.mode, batch=a.batch, lr=a.lr, plot=None if a.no_plot else a.plot)
    return 0 if acc >= 0.98 else 1


if __name__ == "__main__":
    sys.exit(main())
