"""Train samples/gpt.dg, a tiny GPT, on the characters of samples/data/tiny.txt.

    pip install 'dg[viz]'
    python samples/gpt.py [--steps 400] [--mode compiled|interp] [--layers 2] [--plot gpt_loss.png | --no-plot]

Characters are the tokens. The model is nanoGPT's (pre-norm blocks of causal self-attention
and a gelu MLP, tied input and output embeddings), small: 2 layers, 4 heads, 64 channels,
a context of 32 characters. The last tenth of the text is held out. Every step takes a batch
of 16 random windows of the rest, and AdamW (the standard library's optim.adamw) updates the
parameters, one record with a tuple of records for the blocks. Prints the training loss as it
goes (a tqdm progress bar on stderr when tqdm is installed), then the held-out loss beside
the unigram baseline (the entropy of the character frequencies: what a model that ignores
the context can reach), and a sample of generated text. Exits non-zero unless the held-out
loss ends below 0.8 of the baseline.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

import dg

try:
    from dg.samples.digits import save_plot
except ImportError:  # run from a checkout whose samples are not importable
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from digits import save_plot

try:
    from tqdm import tqdm
except ImportError:  # the progress bar is optional
    tqdm = None

HERE = Path(__file__).resolve().parent
TEXT = HERE / "data" / "tiny.txt"


def load(mode: str = "compiled"):
    return dg.load(HERE / "gpt.dg", mode=mode)


def load_text(path=TEXT):
    """(train ids, held-out ids, the characters): the text as integer ids, split 9:1."""
    text = Path(path).read_text()
    chars = sorted(set(text))
    ids = np.array([chars.index(c) for c in text], np.int64)
    cut = int(len(ids) * 0.9)
    return ids[:cut], ids[cut:], chars


def unigram_baseline(train_ids, test_ids, vocab: int) -> float:
    """The cross-entropy on the held-out text of the training text's character frequencies."""
    counts = np.bincount(train_ids, minlength=vocab) + 1.0  # add-one: every character has a chance
    logp = np.log(counts / counts.sum())
    return float(-logp[test_ids].mean())


def init_params(vocab: int, context: int, channels: int = 64, layers: int = 2, seed: int = 0) -> dict:
    """nanoGPT's initialisation: normal(0, 0.02) weights, the residual projections scaled by
    1/sqrt(2 * layers), zero biases, unit layer-norm gains."""
    rng = np.random.default_rng(seed)

    def normal(*shape, std=0.02):
        return rng.normal(0.0, std, shape).astype(np.float32)

    c, f = channels, 4 * channels
    blocks = tuple({
        "ln1_g": np.ones(c, np.float32), "ln1_b": np.zeros(c, np.float32),
        "wq": normal(c, c), "wk": normal(c, c), "wv": normal(c, c),
        "wo": normal(c, c, std=0.02 / math.sqrt(2 * layers)),
        "ln2_g": np.ones(c, np.float32), "ln2_b": np.zeros(c, np.float32),
        "w1": normal(c, f), "b1": np.zeros(f, np.float32),
        "w2": normal(f, c, std=0.02 / math.sqrt(2 * layers)), "b2": np.zeros(c, np.float32),
    } for _ in range(layers))
    return {"wte": normal(vocab, c), "wpe": normal(context, c), "blocks": blocks,
            "lnf_g": np.ones(c, np.float32), "lnf_b": np.zeros(c, np.float32)}


def batch(ids, rng, size: int, context: int):
    """`size` random windows of `context` ids, and the same windows shifted by one (the targets)."""
    starts = rng.integers(0, len(ids) - context - 1, size)
    x = np.stack([ids[s:s + context] for s in starts])
    y = np.stack([ids[s + 1:s + context + 1] for s in starts])
    return x, y


def held_out_loss(m, params, ids, context: int) -> float:
    """The mean loss over the held-out text, cut into windows of `context`."""
    n = (len(ids) - 1) // context
    x = ids[:n * context].reshape(n, context)
    y = ids[1:n * context + 1].reshape(n, context)
    return float(m.loss(params, x, y))


def generate(m, params, chars, prompt: str, length: int, context: int, seed: int = 0,
             temperature: float = 0.8) -> str:
    rng = np.random.default_rng(seed)
    ids = [chars.index(c) for c in prompt if c in chars] or [0]
    for _ in range(length):
        window = np.array([ids[-context:]], np.int64)
        logits = np.asarray(m.next_token_logits(params, window), np.float64) / temperature
        p = np.exp(logits - logits.max())
        ids.append(int(rng.choice(len(chars), p=p / p.sum())))
    return "".join(chars[i] for i in ids)


def train(steps: int = 400, mode: str = "compiled", layers: int = 2, channels: int = 64,
          context: int = 32, batch_size: int = 16, lr: float = 3e-3, seed: int = 0, verbose: bool = True,
          plot=None, sample: int = 200):
    """Train; return (held-out loss, unigram baseline, the training losses)."""
    m = load(mode)
    train_ids, test_ids, chars = load_text()
    baseline = unigram_baseline(train_ids, test_ids, len(chars))
    rng = np.random.default_rng(seed)
    params = init_params(len(chars), context, channels, layers, seed)
    state = m.init_state(params)
    bar = tqdm(total=steps, unit="step") if tqdm is not None and verbose else None
    say = bar.write if bar is not None else print
    losses = []
    t0 = time.perf_counter()
    for step in range(steps):
        x, y = batch(train_ids, rng, batch_size, context)
        rate = np.float32(lr * min(1.0, (step + 1) / 20) * 0.5 * (1 + math.cos(math.pi * step / steps)))
        loss, params, state = m.train_step(params, state, x, y, rate)
        losses.append(float(loss))
        if bar is not None:
            bar.set_postfix(loss=f"{np.mean(losses[-20:]):.3f}", refresh=False)
            bar.update()
        if verbose and (step % 100 == 99 or step == steps - 1):
            say(f"step {step + 1:4d}  loss {np.mean(losses[-20:]):.4f}")
    if bar is not None:
        bar.close()
    seconds = time.perf_counter() - t0
    test = held_out_loss(m, params, test_ids, context)
    if verbose:
        print(f"held-out loss {test:.4f}, unigram baseline {baseline:.4f} ({steps} steps in {seconds:.1f} s, "
              f"mode {mode})")
        if sample:
            print("sample: " + generate(m, params, chars, "The ", sample, context, seed))
    if plot and save_plot([losses], plot, "samples/gpt.dg") and verbose:
        print(f"loss plot saved to {plot}")
    return test, baseline, losses


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--mode", default="compiled", choices=("compiled", "interp"))
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--plot", default="gpt_loss.png", metavar="PATH", help="where to draw the loss (a PNG)")
    ap.add_argument("--no-plot", action="store_true", help="draw no loss plot")
    a = ap.parse_args(argv)
    test, baseline, _ = train(a.steps, a.mode, layers=a.layers, lr=a.lr, plot=None if a.no_plot else a.plot)
    return 0 if test < 0.8 * baseline else 1


if __name__ == "__main__":
    sys.exit(main())
