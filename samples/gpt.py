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
from pathlib import Path

import numpy as np

import dg

try:
    from dg.samples.text import fit, generate, load_text, unigram_baseline  # noqa: F401 (the tests use them)
except ImportError:  # run from a checkout whose samples are not importable
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from text import fit, generate, load_text, unigram_baseline  # noqa: F401

HERE = Path(__file__).resolve().parent


def load(mode: str = "compiled"):
    return dg.load(HERE / "gpt.dg", mode=mode)


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


def train(steps: int = 400, mode: str = "compiled", layers: int = 2, channels: int = 64, context: int = 32,
          batch_size: int = 16, lr: float = 3e-3, seed: int = 0, verbose: bool = True, plot=None, sample: int = 200):
    """Train; return (held-out loss, unigram baseline, the training losses)."""
    m = load(mode)
    _, _, chars = load_text()
    params = init_params(len(chars), context, channels, layers, seed)

    def text(p, chars):
        return generate(lambda ids: m.next_token_logits(p, ids[None]), chars, "The ", sample, context, seed)

    return fit(m, params, m.init_state(params), steps, lr, warmup=20, context=context, batch_size=batch_size,
               seed=seed, verbose=verbose, plot=plot, name="samples/gpt.dg", sample=text if sample else None)


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
