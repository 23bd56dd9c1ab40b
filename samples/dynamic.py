"""Train the dynamic models of samples/dynamic.dg per example and batched, and print the speed of both.

    python samples/dynamic.py [--steps 20] [--batch 32] [--mode compiled|interp]

Two models whose examples have each their own shape, on synthetic data made from a fixed seed:
  tagger    a BiLSTM tagger (embedding 32, LSTM 32 per direction) on sentences of 4 to 20 words
            whose tag is a function of the word and its neighbour;
  treelstm  a Tree-LSTM (embedding 32, hidden 32) on SST-like binary trees of 3 to 12 words, a
            label at every node (its span's word sum, bucketed).
Each model's minibatch loss is a plain `for` over a list of examples adding up their losses
(tag_batch_loss, tree_batch_loss). Loaded normally, dg batches that loop (automatic batching);
loaded with autobatch=False, it runs one example after another. The sample trains both ways
from the same start with SGD, checks that they take the same steps (the same losses, to
rounding) and that the loss goes down, and prints examples per second for both.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import dg
from dg.lowering.codegen import optimizer

HERE = Path(__file__).resolve().parent


def sentences(rng, n: int, vocab: int, tags: int) -> list:
    out = []
    for _ in range(n):
        words = rng.integers(0, vocab, int(rng.integers(4, 21)))
        nxt = np.concatenate([words[1:], [0]])
        out.append({"words": words.astype(np.int64), "tags": ((words + nxt) % tags).astype(np.int64)})
    return out


def trees(rng, n: int, vocab: int, labels: int) -> list:
    """Binary trees over 3 to 12 words, nodes listed children first: per node its word (-1 inside),
    children (-1 at a leaf) and label (the span's word sum, modulo `labels`)."""
    out = []
    for _ in range(n):
        words = rng.integers(0, vocab, int(rng.integers(3, 13)))
        word, left, right, label = [], [], [], []

        def build(lo, hi):
            if hi - lo == 1:
                word.append(int(words[lo])), left.append(-1), right.append(-1)
            else:
                mid = int(rng.integers(lo + 1, hi))
                a, b = build(lo, mid), build(mid, hi)
                word.append(-1), left.append(a), right.append(b)
            label.append(int(words[lo:hi].sum()) % labels)
            return len(word) - 1

        build(0, len(words))
        out.append({k: np.array(v, np.int64) for k, v in
                    (("word", word), ("left", left), ("right", right), ("label", label))})
    return out


def weights(rng, kind: str, e: int, h: int, out: int) -> dict:
    u = lambda *shape: rng.uniform(-0.3, 0.3, shape).astype(np.float32)  # noqa: E731
    if kind == "tagger":
        w = {}
        for d in "fb":
            w.update({f"{d}_w_ih": u(4 * h, e), f"{d}_w_hh": u(4 * h, h), f"{d}_b_ih": u(4 * h), f"{d}_b_hh": u(4 * h)})
        w.update({"w_mlp": u(h, 2 * h), "w_out": u(out, h)})
        return w
    return {"w_iou": u(3 * h, e), "b_iou": u(3 * h), "u_iou": u(3 * h, 2 * h), "u_f1": u(h, h), "u_f2": u(h, h),
            "b_f": u(h), "w_out": u(out, h)}


def train(m, name: str, p, emb, data, steps: int, batch: int, lr: float = 0.5):
    """SGD steps over minibatches of `data`: (losses per step, examples per second, the held-out
    loss per example before and after: on the last 64 examples, which no step takes)."""
    step = getattr(m, f"{name}_step")
    held, data = data[-64:], data[:-64]
    held_loss = lambda: float(getattr(m, f"{name}_batch_loss")(p, emb, held)) / len(held)  # noqa: E731
    before = held_loss()
    losses, t0 = [], None
    for i in range(steps + 2):
        if i == 2:  # (the first step compiles, and the optimized code takes over after it)
            optimizer.wait_all()
            t0 = time.perf_counter()
        b = [data[(i * batch + k) % len(data)] for k in range(batch)]
        loss, p, emb = step(p, emb, b, np.float32(lr / batch))  # (the mean of the examples' gradients)
        losses.append(float(loss) / batch)
    speed = steps * batch / (time.perf_counter() - t0)
    return losses[:1] + losses[2:], speed, (before, held_loss())


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--mode", default="compiled", choices=["compiled", "interp"])
    a = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    vocab, e, h = 200, 32, 32
    data = {"tag": sentences(rng, 256, vocab, 5), "tree": trees(rng, 256, vocab, 5)}
    start = {"tag": weights(rng, "tagger", e, h, 5), "tree": weights(rng, "tree", e, h, 5)}
    emb = {k: rng.uniform(-0.3, 0.3, (vocab, e)).astype(np.float32) for k in data}
    batched = dg.load(HERE / "dynamic.dg", mode=a.mode)
    one_by_one = dg.load(HERE / "dynamic.dg", mode=a.mode, autobatch=False)
    out = {}
    for name, what, lr in (("tag", "sentences", 0.1), ("tree", "trees", 0.05)):
        lb, speed_b, (h0, h1) = train(batched, name, start[name], emb[name], data[name], a.steps, a.batch, lr)
        l1, speed_1, _ = train(one_by_one, name, start[name], emb[name], data[name], a.steps, a.batch, lr)
        same = bool(np.allclose(lb, l1, rtol=1e-3, atol=1e-4))
        print(f"{name}: held-out loss {h0:.3f} -> {h1:.3f} per example; batched {speed_b:.0f} {what}/s, "
              f"per example {speed_1:.0f} {what}/s ({speed_b / speed_1:.2f}x); the same steps: {same}")
        out[name] = {"losses": lb, "per_example_losses": l1, "held_out": (h0, h1), "batched_per_s": speed_b,
                     "per_example_per_s": speed_1, "same": same}
        if not same or not h1 < h0:
            raise SystemExit(f"{name}: batched and per-example training disagree, or the loss did not go down")
    return out


if __name__ == "__main__":
    main()
