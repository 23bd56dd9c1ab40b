"""Train samples/char_rnn.dg, a character-level LSTM, on the characters of samples/data/tiny.txt.

    pip install 'dg[viz]'
    python samples/char_rnn.py [--steps 300] [--mode compiled|interp] [--plot char_rnn_loss.png | --no-plot]

The model reads a window of characters one at a time (an embedding of 16, an LSTM of 128,
PyTorch's LSTMCell layout from the standard library's nn.lstm_cell) and predicts the next
one at every position; the gradient flows back through the loop over time. Every step
takes a batch of 32 random windows of 32 characters from the first nine tenths of the text,
and Adam (optim.adam) updates the parameters, a record. Prints the training loss as it goes
(a tqdm progress bar on stderr when tqdm is installed), then the held-out loss beside the
unigram baseline and a sample of generated text. Exits non-zero unless the held-out loss
ends below 0.8 of the baseline.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

import dg

try:
    from dg.samples.text import fit, generate, load_text
except ImportError:  # run from a checkout whose samples are not importable
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from text import fit, generate, load_text

HERE = Path(__file__).resolve().parent


def load(mode: str = "compiled"):
    return dg.load(HERE / "char_rnn.dg", mode=mode)


def init_params(vocab: int, embed: int = 16, hidden: int = 128, seed: int = 0) -> dict:
    """PyTorch's defaults: uniform(-1/sqrt(H), 1/sqrt(H)) for the LSTM and the output layer,
    standard normal embeddings."""
    rng = np.random.default_rng(seed)
    k = 1 / math.sqrt(hidden)

    def uniform(*shape):
        return rng.uniform(-k, k, shape).astype(np.float32)

    return {"emb": rng.standard_normal((vocab, embed)).astype(np.float32),
            "w_ih": uniform(4 * hidden, embed), "w_hh": uniform(4 * hidden, hidden),
            "b_ih": uniform(4 * hidden), "b_hh": uniform(4 * hidden),
            "w_out": uniform(hidden, vocab), "b_out": uniform(vocab)}


def train(steps: int = 300, mode: str = "compiled", context: int = 32, batch_size: int = 32, lr: float = 1e-2,
          seed: int = 0, verbose: bool = True, plot=None, sample: int = 200):
    """Train; return (held-out loss, unigram baseline, the training losses)."""
    m = load(mode)
    _, _, chars = load_text()
    params = init_params(len(chars), seed=seed)

    def text(p, chars):
        return generate(lambda ids: m.next_logits(p, ids), chars, "The ", sample, context, seed)

    return fit(m, params, m.init_state(params), steps, lr, context=context, batch_size=batch_size, seed=seed,
               verbose=verbose, plot=plot, name="samples/char_rnn.dg", sample=text if sample else None)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--mode", default="compiled", choices=("compiled", "interp"))
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--plot", default="char_rnn_loss.png", metavar="PATH", help="where to draw the loss (a PNG)")
    ap.add_argument("--no-plot", action="store_true", help="draw no loss plot")
    a = ap.parse_args(argv)
    test, baseline, _ = train(a.steps, a.mode, lr=a.lr, plot=None if a.no_plot else a.plot)
    return 0 if test < 0.8 * baseline else 1


if __name__ == "__main__":
    sys.exit(main())
