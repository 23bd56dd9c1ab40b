"""Automatic batching of dynamic models: dg batched against dg per example, DyNet with and without
its autobatching, PyTorch per example and padded, side by side in one process, one thread.

The models of the DyNet benchmark suite at its sizes (benchmarks/dynamic.py makes the data and the
peers' models; the same synthetic SST-like trees and zipfian sentences), written in dg the way a
user writes them (samples/dynamic.dg): one example per call of a per-example function, and a minibatch loss that is a
plain `for` over a list of examples adding up their losses. dg batches that loop by itself
(automatic batching, docs/batching.md); `autobatch=False` runs the same program one example after
another.
  tagger    the BiLSTM tagger (embedding 128, LSTM 50 per direction, MLP 32, 50 tags)
  treelstm  the Tree-LSTM (embedding 128, hidden 128, 5 labels, a loss at every node), the tree
            walked as one loop over its nodes, children first (dg's recursion batches too, as
            deep as each tree goes, but a batch then walks every shape of subtree its trees
            have: see docs/batching.md)
  adaptive  an adaptive-computation model: each example iterates h = tanh(W h + x) until its
            norm settles or 50 steps, a data-dependent count per example (dim 64)
Each training step is a forward, a backward and an SGD update (lr 0.01) of a minibatch of 16 or
64 examples, its losses summed. Systems:
  dg_batched       dg compiled, the minibatch loss's loop batched automatically
  dg_per_example   the same program with autobatch=False
  dynet            DyNet, one graph per minibatch, no autobatching (the `bench` extra: dynet38)
  dynet_autobatch  DyNet with its on-the-fly autobatching
  torch            PyTorch eager, per example, the minibatch's losses summed
  torch_padded     (tagger) PyTorch with the minibatch padded and packed (pack_padded_sequence)
The embedding table is a dense argument of dg's step (its gradient dense); the peers update
their tables sparsely. Figures are medians of rounds that time every system in turn, after
warm-up calls and after dg's optimized code has taken over; first calls are reported apart.

    python benchmarks/autobatch.py [--quick] [--repeats 5] [--json benchmarks/autobatch_results.json]
"""

import os

if __name__ == "__main__":  # one thread for every peer's BLAS, set before NumPy and PyTorch load it
    for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_v, "1")

import argparse
import json
import sys
from pathlib import Path

import numpy as np

import dg
from dg.lowering import blas

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dynamic import (LR, QUICK, DynetTagger, DynetTree, Sizes, TorchTagger, TorchTree, _cpu_module, _dynet,  # noqa: E402
                     copy, first_call, make_sentence, make_tree, one_thread, tagger_weights, tree_weights, uniform)
from report import kept  # noqa: E402

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


# ------------------------------------------------------------------------------------ systems
class DgModel:
    """One model's step, batched or per example (the same program, autobatch on or off)."""

    def __init__(self, m, name: str, w, emb=None):
        self.step_fn, self.p, self.emb, self.lr = getattr(m, f"{name}_step"), copy(w), emb, np.float32(LR)

    def step(self, batch):
        if self.emb is None:
            loss, self.p = self.step_fn(self.p, *batch, self.lr)
        else:
            loss, self.p, self.emb = self.step_fn(self.p, self.emb, batch, self.lr)
        return loss


def tagger_batch(sents):
    return [{"words": w, "tags": t} for w, t in sents]


def tree_batch(trees):
    return [{"word": t.word, "left": t.left, "right": t.right, "label": t.label} for t in trees]


class DynetMinibatch:
    """A DyNet model's minibatch step: one graph of the minibatch's summed losses, one update, with
    or without DyNet's autobatching."""

    def __init__(self, model, autobatch: bool):
        self.model, self.autobatch = model, autobatch

    def step(self, batch):
        dy = self.model.dy
        dy.renew_cg(autobatching=self.autobatch)
        loss = dy.esum([self.model.loss(x) for x in batch])
        v = loss.value()
        loss.backward()
        self.model.trainer.update()
        return v


class TorchMinibatch:
    """A PyTorch model's minibatch step: the examples' losses, one after another, summed."""

    def __init__(self, model):
        self.model = model

    def step(self, batch):
        loss = sum(self.model.loss(x) for x in batch)
        self.model.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.model.opt.step()
        return loss.item()


class TorchPaddedTagger(TorchTagger):
    """The tagger over a padded, packed minibatch (pack_padded_sequence): what a PyTorch user writes
    to batch sentences of different lengths by hand."""

    def step(self, batch):
        torch = self.torch
        nn = torch.nn.utils.rnn
        lengths = torch.tensor([len(w) for w, _ in batch])
        words = nn.pad_sequence([torch.from_numpy(w) for w, _ in batch])
        tags = torch.cat([torch.from_numpy(t) for _, t in batch])
        packed = nn.pack_padded_sequence(self.emb(words), lengths, enforce_sorted=False)
        ys, _ = self.lstm(packed)
        ys, _ = nn.pad_packed_sequence(ys)
        ys = torch.cat([ys[:n, b] for b, n in enumerate(lengths.tolist())])
        logits = self.out(torch.tanh(self.mlp(ys)))
        loss = torch.nn.functional.cross_entropy(logits, tags, reduction="sum")
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss.item()


# ------------------------------------------------------------------------------------ runs
def _passes(step, batches):
    def run():
        for b in batches:
            step(b)
    return run


def bench(systems: dict, batches: list, medians, repeats, min_time, per: int) -> tuple:
    """{system: examples/s} and {system: first call s} of each system's steps over `batches`."""
    fns, first = {}, {}
    for name, (step, data) in systems.items():
        first[name] = first_call(lambda: step(data[0]))
        fns[name] = _passes(step, data)
    secs = medians(fns, repeats, min_time)
    return {k: per * len(batches) / v for k, v in secs.items()}, first


def check(a, b, what: str, rtol=1e-4) -> float:
    rel = abs(float(a) - float(b)) / max(abs(float(b)), 1e-6)
    if rel > rtol:
        raise SystemExit(f"autobatch.py: {what}: {a} against {b}; no timing")
    return rel


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes, one repeat (a smoke run)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-dynet", action="store_true", help="leave DyNet out")
    ap.add_argument("--json", default="benchmarks/autobatch_results.json")
    a = ap.parse_args(argv)
    s = QUICK if a.quick else Sizes()
    repeats = 1 if a.quick else a.repeats
    min_time = 0.005 if a.quick else 0.05
    sizes = (2, 4) if a.quick else (16, 64)
    try:
        import torch
    except ImportError:
        torch = None
    dy, dy_missing = (None, "left out (--no-dynet)") if a.no_dynet else _dynet()
    res: dict = {"quick": a.quick, "minibatches": sizes, "threads": 1, "dg_blas": blas.identity(),
                 "peers": {"torch": torch.__version__ if torch is not None else "not installed: skipped",
                           "dynet": "dynet38" if dy is not None else f"not available, skipped ({dy_missing})"}}
    medians = _cpu_module().medians
    rng = np.random.default_rng(2017)
    n = 2 * max(sizes)
    sents = [make_sentence(rng, s) for _ in range(n)]
    trees = [make_tree(rng, s) for _ in range(n)]
    gw, gemb = tagger_weights(rng, s), uniform(rng, s.vocab, s.tag_embed)
    tw, temb = tree_weights(rng, s), uniform(rng, s.vocab, s.tree_embed)
    dim = 8 if a.quick else 64
    pw = {"w": (rng.standard_normal((dim, dim)) * (1.2 / np.sqrt(dim))).astype(np.float32)}
    pxs = [rng.standard_normal(dim).astype(np.float32) * rng.uniform(0.1, 3.0) for _ in range(n)]
    with one_thread(torch):
        m = dg.load(SAMPLES / "dynamic.dg", mode="compiled")
        m0 = dg.load(SAMPLES / "dynamic.dg", mode="compiled", autobatch=False)
        # The same values batched and per example, and against PyTorch's.
        agree = {"tagger": check(m.tag_batch_loss(gw, gemb, tagger_batch(sents[:4])),
                                 m0.tag_batch_loss(gw, gemb, tagger_batch(sents[:4])), "tagger batched vs per example"),
                 "tree": check(m.tree_batch_loss(tw, temb, tree_batch(trees[:4])),
                               m0.tree_batch_loss(tw, temb, tree_batch(trees[:4])), "tree batched vs per example"),
                 "adaptive": check(m.ponder_batch_loss(pw, pxs[:4], pxs[:4]), m0.ponder_batch_loss(pw, pxs[:4], pxs[:4]),
                                   "adaptive batched vs per example")}
        if torch is not None:
            tt = TorchTagger(torch, gw, gemb)
            agree["tagger_torch"] = check(m.tag_batch_loss(gw, gemb, tagger_batch(sents[:4])),
                                          sum(tt.loss(x).item() for x in sents[:4]), "tagger vs PyTorch")
            tr = TorchTree(torch, tw, temb)
            agree["tree_torch"] = check(m.tree_batch_loss(tw, temb, tree_batch(trees[:4])),
                                        sum(tr.loss(t).item() for t in trees[:4]), "tree vs PyTorch")
        res["agreement_rel"] = agree
        print("agreement (relative differences):", json.dumps(agree))
        for mb in sizes:
            tb = [sents[i:i + mb] for i in range(0, n, mb)][:2]
            rb = [trees[i:i + mb] for i in range(0, n, mb)][:2]
            pb = [(pxs[i:i + mb], pxs[i:i + mb]) for i in range(0, n, mb)][:2]
            for key, name, w, emb, data, as_dg, Dy, Torch in (
                    ("tagger", "tag", gw, gemb, tb, tagger_batch, DynetTagger, TorchTagger),
                    ("treelstm", "tree", tw, temb, rb, tree_batch, DynetTree, TorchTree)):
                systems = {"dg_batched": (DgModel(m, name, w, emb).step, [as_dg(b) for b in data]),
                           "dg_per_example": (DgModel(m0, name, w, emb).step, [as_dg(b) for b in data])}
                if dy is not None:
                    systems["dynet"] = (DynetMinibatch(Dy(dy, w, emb), False).step, data)
                    systems["dynet_autobatch"] = (DynetMinibatch(Dy(dy, w, emb), True).step, data)
                if torch is not None:
                    systems["torch"] = (TorchMinibatch(Torch(torch, w, emb)).step, data)
                    if name == "tag":
                        systems["torch_padded"] = (TorchPaddedTagger(torch, w, emb).step, data)
                res[f"{key}_{mb}"], res[f"{key}_{mb}_first_s"] = bench(systems, data, medians, repeats, min_time, mb)
            systems = {"dg_batched": (DgModel(m, "ponder", pw).step, pb),
                       "dg_per_example": (DgModel(m0, "ponder", pw).step, pb)}
            res[f"adaptive_{mb}"], res[f"adaptive_{mb}_first_s"] = bench(systems, pb, medians, repeats, min_time, mb)
    for key in [k for k in res if k.split("_")[0] in ("tagger", "treelstm", "adaptive") and not k.endswith("_s")]:
        row = res[key]
        ratios = {f"dg_batched/{k}": row["dg_batched"] / v for k, v in row.items() if k != "dg_batched"}
        res[f"{key}_ratios"] = ratios
        print(f"{key} (examples/s, median): " + ", ".join(f"{k} {v:.4g}" for k, v in row.items()))
        print(f"{key} ratios: " + ", ".join(f"{k} {v:.3g}" for k, v in ratios.items()))
        print(f"{key} first call (s): " + ", ".join(f"{k} {v:.3g}" for k, v in res[f"{key}_first_s"].items()))
    return kept(res, a.json)


if __name__ == "__main__":
    main()
