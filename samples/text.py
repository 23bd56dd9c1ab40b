"""What the character-level samples (gpt.py, char_rnn.py) share: the text and its split, the
unigram baseline, random batches, the held-out loss, sampling, and the training loop with its
progress bar, printed losses and plot."""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np

try:
    from dg.samples.digits import save_plot, tqdm
except ImportError:  # run from a checkout whose samples are not importable
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from digits import save_plot, tqdm  # (tqdm: None where the progress bar is not installed)

TEXT = Path(__file__).resolve().parent / "data" / "tiny.txt"


def load_text(path=TEXT):
    """(train ids, held-out ids, the characters): the text as integer ids, split 9:1."""
    text = Path(path).read_text()
    chars = sorted(set(text))
    ids = np.array([chars.index(c) for c in text], np.int64)
    cut = int(len(ids) * 0.9)
    return ids[:cut], ids[cut:], chars


def unigram_baseline(train_ids, test_ids, vocab: int) -> float:
    """The cross-entropy on the held-out text of the training text's character frequencies: what a
    model that ignores the context can reach."""
    counts = np.bincount(train_ids, minlength=vocab) + 1.0  # add-one: every character has a chance
    logp = np.log(counts / counts.sum())
    return float(-logp[test_ids].mean())


def batch(ids, rng, size: int, context: int):
    """`size` random windows of `context` ids, and the same windows shifted by one (the targets)."""
    starts = rng.integers(0, len(ids) - context - 1, size)
    x = np.stack([ids[s:s + context] for s in starts])
    y = np.stack([ids[s + 1:s + context + 1] for s in starts])
    return x, y


def held_out_loss(m, params, ids, context: int) -> float:
    """The model's mean loss (`m.loss(params, x, y)`) over the held-out text, cut into windows."""
    n = (len(ids) - 1) // context
    x = ids[:n * context].reshape(n, context)
    y = ids[1:n * context + 1].reshape(n, context)
    return float(m.loss(params, x, y))


def generate(next_logits, chars, prompt: str, length: int, context: int, seed: int = 0,
             temperature: float = 0.8) -> str:
    """`prompt` and `length` characters drawn one at a time from `next_logits(ids)` (the logits of
    the character after the last `context` ids)."""
    rng = np.random.default_rng(seed)
    ids = [chars.index(c) for c in prompt if c in chars] or [0]
    for _ in range(length):
        logits = np.asarray(next_logits(np.array(ids[-context:], np.int64)), np.float64) / temperature
        p = np.exp(logits - logits.max())
        ids.append(int(rng.choice(len(chars), p=p / p.sum())))
    return "".join(chars[i] for i in ids)


def cosine(lr: float, step: int, steps: int, warmup: int = 0) -> np.float32:
    """The learning rate at `step`: a linear warm-up over `warmup` steps, then cosine decay to 0."""
    ramp = min(1.0, (step + 1) / warmup) if warmup else 1.0
    return np.float32(lr * ramp * 0.5 * (1 + math.cos(math.pi * step / steps)))


def fit(m, params, state, steps: int, lr: float, *, warmup: int = 0, context: int = 32, batch_size: int = 16,
        seed: int = 0, verbose: bool = True, plot=None, name: str = "", sample=None):
    """Train with `m.train_step(params, state, x, y, rate) -> (loss, params, state)` on random
    windows of the text's first nine tenths; then print the held-out loss beside the unigram
    baseline and, with `sample` (a function of the trained parameters giving a text), a sample.
    Returns (held-out loss, unigram baseline, the training losses)."""
    train_ids, test_ids, chars = load_text()
    baseline = unigram_baseline(train_ids, test_ids, len(chars))
    rng = np.random.default_rng(seed)
    bar = tqdm(total=steps, unit="step") if tqdm is not None and verbose else None
    say = bar.write if bar is not None else print  # lines above the bar, not through it
    losses = []
    t0 = time.perf_counter()
    for step in range(steps):
        x, y = batch(train_ids, rng, batch_size, context)
        loss, params, state = m.train_step(params, state, x, y, cosine(lr, step, steps, warmup))
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
              f"mode {m.train_step.mode})")
        if sample is not None:
            print("sample: " + sample(params, chars))
    if plot and save_plot([losses], plot, name) and verbose:
        print(f"loss plot saved to {plot}")
    return test, baseline, losses
