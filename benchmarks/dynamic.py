"""Training speed of dynamic models: dg against PyTorch eager and DyNet, side by side in one process.

Two models of the DyNet benchmark suite (neulab/dynet-benchmark), on synthetic data made from
a fixed seed (nothing is downloaded):
  treenn         the Tree-LSTM of `treenn.py`: embedding 128, hidden 128, 5 labels, a
                 softmax loss at every node, summed; SST-like binary trees of 8 to 30 words
                 (mean 19), each inner node a random split of its span; words zipfian over a
                 16,000-word vocabulary                                          trees/s
  bilstm-tagger  the tagger of `bilstm-tagger.py` with the suite's sizes: embedding 128,
                 an LSTM of 50 per direction, an MLP of 32 without biases, 50 tags, the
                 tokens' softmax losses summed; zipfian sentences of 10 to 38 words
                 (mean 24) over 16,000 words                                  sentences/s
Each training step is a forward, a backward and an SGD update (lr 0.01, no clipping); the
embedding table is updated in its used rows only (PyTorch's sparse embedding, DyNet's
default sparse updates) except where said. Systems:
  dg_rows        dg compiled, one call per example of a dg function that runs
                 value_and_grad and the SGD update; the example's embedding rows are passed
                 in, and their gradient is added back into the table by NumPy
  dg_table       (Tree-LSTM) the whole embedding table passed in, its dense gradient and its
                 update made inside the same call, the new table returned
  dg_minibatch   a minibatch of 16 examples in one call: a loop over the examples inside one
                 dg function, their losses summed, one SGD update
  dg_loop, dg_minibatch_loop  (Tree-LSTM) the tree as one loop over its nodes, children first,
                 instead of a recursion (see tree_loop_loss in SRC for why), per example and
                 over a minibatch's forest of 16 trees in one call
  torch_eager    PyTorch eager, per example (the tree's recursion in Python; the tagger
                 through torch.nn.LSTM, bidirectional)
  dynet          DyNet per example, a graph per example, no autobatching (the `dynet38`
                 wheel: pip install -e ".[bench]")
  dynet_autobatch  reference figure: DyNet with on-the-fly autobatching over a graph of a
                 whole minibatch of 16 examples (losses summed, one update)
One thread everywhere: DG_NUM_THREADS=1, the BLAS at one thread, torch.set_num_threads(1),
DyNet's CPU build (one thread by default).

Before timing, one example of each model is checked: dg's loss and gradients (every weight
and the embedding rows; the dense table gradient against the rows') against PyTorch's with
the same weights, and DyNet's loss and weight gradients against PyTorch's, so that the
systems compute the same thing. The script stops if they disagree.

Figures are steady-state: each is the median of several timed repeats, taken in turns (each
round times one pass over the same examples with every system), after warm-up calls; the
first call of each system (for dg, a cold compile into an empty disk cache) is reported
apart. Ratios are dg's figure over a peer's, measured in the same run. The gradient/forward
cost ratio (time of value_and_grad over time of the forward alone, no update) is reported for
one Tree-LSTM node at size 128, one LSTM direction of the tagger over a batch of 16 sentences
of 24 words, and the whole per-example models.

Where dg's natural formulation was slow or failed, the model is written in the nearest form
that works, with a comment saying why (see the comments in SRC).

    python benchmarks/dynamic.py [--quick] [--repeats 5] [--json benchmarks/dynamic_results.json]

Measured (benchmarks/dynamic_results.json: `python benchmarks/dynamic.py --repeats 5`, 2-core
machine, one run; ratios from the same rounds). Trees/s: dg_rows 464, dg_table 267,
dg_minibatch 332, dg_loop 640, dg_minibatch_loop 71, PyTorch eager 110, DyNet 508, DyNet
autobatched 1,500: dg per example is 4.2x PyTorch and 0.91x DyNet (1.26x DyNet as a loop; 0.52x
with the whole table passed in). Sentences/s: dg_rows 1,720, dg_minibatch 1,482, PyTorch eager
708, DyNet 976, DyNet autobatched 1,863: dg per example is 2.4x PyTorch and 1.8x DyNet.
value_and_grad over forward: a tree node 5.1 (PyTorch 7.3), an LSTM direction 4.6 (PyTorch
3.4), the Tree-LSTM 10.6 (as a loop 7.4; PyTorch 5.9, DyNet 2.9; its gradient takes 1.65 ms,
as long as DyNet's, the forward running at 3.7 times DyNet's speed), the tagger 5.5 (PyTorch
3.7, DyNet 2.9). A recursion's gradient adds into one shadow per weight, handed down the calls
and written in place; what it still pays is its subtrees' forward again at every level (a
recursive call's VJP recomputes its children's results). A loop writes the rows of what it
carries in place. The tagger's LSTM makes the inputs' share of the gates in one product before
its steps. Before these (the same script, a loaded machine): trees 54/s, sentences 63/s.
First calls (cold compiles) take 1 to 5 s per dg function, against milliseconds for the peers.
"""

import os

if __name__ == "__main__":  # one thread for every peer's BLAS, set before NumPy and PyTorch load it
    for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_v, "1")

import argparse
import contextlib
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import dg
from dg.lowering import blas
from dg.lowering.codegen import optimizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import kept  # noqa: E402  (this folder's)

LR = 0.01
NODE_WEIGHTS = ("u_iou", "b_iou", "u_f1", "u_f2", "b_f")

# The weights use PyTorch's layouts ([out, in]) and products `w @ v` on vectors, as the peers'
# code does.
SRC = """
import nn

def sgd_leaf(w, g, lr):
    return w - lr * g

# ---------------------------------------------------------------- Tree-LSTM (treenn.py)

def node_loss(h, y: i64, w_out) -> f32:
    z = w_out @ h
    return logsumexp(z) - z[y]

def leaf(x, p):
    n = p["b_f"].shape[0]
    g = p["w_iou"] @ x + p["b_iou"]
    i = sigmoid(g[0:n])
    o = sigmoid(g[n:2 * n])
    u = tanh(g[2 * n:3 * n])
    c = i * u
    return o * tanh(c), c

def node(h1, c1, h2, c2, p):
    n = p["b_f"].shape[0]
    g = p["u_iou"] @ concat([h1, h2]) + p["b_iou"]
    i = sigmoid(g[0:n])
    o = sigmoid(g[n:2 * n])
    u = tanh(g[2 * n:3 * n])
    f1 = sigmoid(p["u_f1"] @ h1 + p["b_f"])
    f2 = sigmoid(p["u_f2"] @ h2 + p["b_f"])
    c = i * u + f1 * c1 + f2 * c2
    return o * tanh(c), c

def tree(i: i64, x, left, right, row, label, p):
    # node i of a tree whose nodes are listed children first: (h, c, the losses of its subtree)
    if left[i] < 0:
        h, c = leaf(x[row[i]], p)
        return h, c, node_loss(h, label[i], p["w_out"])
    h1, c1, l1 = tree(left[i], x, left, right, row, label, p)
    h2, c2, l2 = tree(right[i], x, left, right, row, label, p)
    h, c = node(h1, c1, h2, c2, p)
    return h, c, l1 + l2 + node_loss(h, label[i], p["w_out"])

def tree_loss(p, x: f32[L, D], left: i64[M], right: i64[M], row: i64[M], label: i64[M]) -> f32:
    h, c, l = tree(left.shape[0] - 1, x, left, right, row, label, p)
    return l

def tree_step_rows(p, x: f32[L, D], left: i64[M], right: i64[M], row: i64[M], label: i64[M], lr: f32):
    l, (gp, gx) = value_and_grad(tree_loss, wrt=(0, 1))(p, x, left, right, row, label)
    return l, tree_map(sgd_leaf, p, gp, lr=lr), gx

def tree_step_table(p, emb: f32[V, D], left: i64[M], right: i64[M], word: i64[M], label: i64[M], lr: f32):
    l, (gp, ge) = value_and_grad(tree_loss, wrt=(0, 1))(p, emb, left, right, word, label)
    return l, tree_map(sgd_leaf, p, gp, lr=lr), emb - lr * ge

def tree_loss_grad(p, x: f32[L, D], left: i64[M], right: i64[M], row: i64[M], label: i64[M]):
    return value_and_grad(tree_loss, wrt=(0, 1))(p, x, left, right, row, label)

def tree_loss_grad_flat(p, x: f32[L, D], left: i64[M], right: i64[M], row: i64[M], label: i64[M]):
    l, (g, gx) = value_and_grad(tree_loss, wrt=(0, 1))(p, x, left, right, row, label)
    return l, g["b_f"], g["b_iou"], g["u_f1"], g["u_f2"], g["u_iou"], g["w_iou"], g["w_out"], gx

# The same model as one loop over the nodes, children first, h and c kept in [M, H] arrays (the
# form a user without recursion writes). A forest of trees listed one after another is still
# children first, so the loop also takes a minibatch.
def tree_loop_loss(p, x: f32[L, D], left: i64[M], right: i64[M], row: i64[M], label: i64[M]) -> f32:
    n = p["b_f"].shape[0]
    hs = zeros([left.shape[0], n])
    cs = zeros([left.shape[0], n])
    total = 0.0
    for i in range(left.shape[0]):
        if left[i] < 0:
            h, c = leaf(x[row[i]], p)
        else:
            h, c = node(hs[left[i]], cs[left[i]], hs[right[i]], cs[right[i]], p)
        hs[i] = h
        cs[i] = c
        total = total + node_loss(h, label[i], p["w_out"])
    return total

def tree_loop_step(p, x: f32[L, D], left: i64[M], right: i64[M], row: i64[M], label: i64[M], lr: f32):
    l, (gp, gx) = value_and_grad(tree_loop_loss, wrt=(0, 1))(p, x, left, right, row, label)
    return l, tree_map(sgd_leaf, p, gp, lr=lr), gx

def tree_loop_loss_grad(p, x: f32[L, D], left: i64[M], right: i64[M], row: i64[M], label: i64[M]):
    return value_and_grad(tree_loop_loss, wrt=(0, 1))(p, x, left, right, row, label)

def tree_loop_loss_grad_flat(p, x: f32[L, D], left: i64[M], right: i64[M], row: i64[M], label: i64[M]):
    l, (g, gx) = value_and_grad(tree_loop_loss, wrt=(0, 1))(p, x, left, right, row, label)
    return l, g["b_f"], g["b_iou"], g["u_f1"], g["u_f2"], g["u_iou"], g["w_iou"], g["w_out"], gx

def trees_loss(p, x: f32[L, D], left: i64[M], right: i64[M], row: i64[M], label: i64[M], roots: i64[B]) -> f32:
    total = 0.0
    for r in roots:
        h, c, l = tree(r, x, left, right, row, label, p)
        total = total + l
    return total

def trees_step(p, x: f32[L, D], left: i64[M], right: i64[M], row: i64[M], label: i64[M], roots: i64[B], lr: f32):
    l, (gp, gx) = value_and_grad(trees_loss, wrt=(0, 1))(p, x, left, right, row, label, roots)
    return l, tree_map(sgd_leaf, p, gp, lr=lr), gx

def node_piece(p, h1: f32[H], c1: f32[H], h2: f32[H], c2: f32[H]) -> f32:
    h, c = node(h1, c1, h2, c2, p)
    return sum(h) + sum(c)

def node_piece_grad(p, h1: f32[H], c1: f32[H], h2: f32[H], c2: f32[H]):
    return value_and_grad(node_piece, wrt=(0, 1, 2, 3, 4))(p, h1, c1, h2, c2)

# The *_flat functions return the same gradients as a flat tuple of arrays: a result that nests
# (value_and_grad's (value, (g0, g1)), a record) leaves the quick call path (api.md) and costs
# some 30 to 90 us a call on its way to Python, which a small piece's gradient would measure.
def node_piece_grad_flat(p, h1: f32[H], c1: f32[H], h2: f32[H], c2: f32[H]):
    l, (g, a, b, c, d) = value_and_grad(node_piece, wrt=(0, 1, 2, 3, 4))(p, h1, c1, h2, c2)
    return l, g["b_f"], g["b_iou"], g["u_f1"], g["u_f2"], g["u_iou"], a, b, c, d

# ---------------------------------------------------------------- BiLSTM tagger (bilstm-tagger.py)

def tagger_loss(p, x: f32[T, D], tags: i64[T]) -> f32:
    n = p["f_w_hh"].shape[1]
    xs = expand_dims(x, 1)
    z = zeros([1, n])
    fs, hf, cf = nn.lstm(xs, z, z, p["f_w_ih"], p["f_w_hh"], p["f_b_ih"], p["f_b_hh"])
    bs, hb, cb = nn.lstm(xs[::-1], z, z, p["b_w_ih"], p["b_w_hh"], p["b_b_ih"], p["b_b_hh"])
    hs = concat([fs[:, 0], bs[::-1, 0]], 1)
    logits = tanh(hs @ p["w_mlp"].T) @ p["w_out"].T
    return sum(logsumexp(logits, axis=1) - logits[arange(tags.shape[0]), tags])

def tagger_step(p, x: f32[T, D], tags: i64[T], lr: f32):
    l, (gp, gx) = value_and_grad(tagger_loss, wrt=(0, 1))(p, x, tags)
    return l, tree_map(sgd_leaf, p, gp, lr=lr), gx

def tagger_loss_grad(p, x: f32[T, D], tags: i64[T]):
    return value_and_grad(tagger_loss, wrt=(0, 1))(p, x, tags)

def tagger_loss_grad_flat(p, x: f32[T, D], tags: i64[T]):
    l, (g, gx) = value_and_grad(tagger_loss, wrt=(0, 1))(p, x, tags)
    return (l, g["b_b_hh"], g["b_b_ih"], g["b_w_hh"], g["b_w_ih"], g["f_b_hh"], g["f_b_ih"], g["f_w_hh"], g["f_w_ih"],
            g["w_mlp"], g["w_out"], gx)

def taggers_loss(p, x: f32[N, D], tags: i64[N], starts: i64[K]) -> f32:
    total = 0.0
    for b in range(starts.shape[0] - 1):
        total = total + tagger_loss(p, x[starts[b]:starts[b + 1]], tags[starts[b]:starts[b + 1]])
    return total

def taggers_step(p, x: f32[N, D], tags: i64[N], starts: i64[K], lr: f32):
    l, (gp, gx) = value_and_grad(taggers_loss, wrt=(0, 1))(p, x, tags, starts)
    return l, tree_map(sgd_leaf, p, gp, lr=lr), gx

def lstm_piece(w_ih, w_hh, b_ih, b_hh, xs: f32[T, B, D]) -> f32:
    z = zeros([xs.shape[1], w_hh.shape[1]])
    ys, h, c = nn.lstm(xs, z, z, w_ih, w_hh, b_ih, b_hh)
    return sum(ys)

def lstm_piece_grad(w_ih, w_hh, b_ih, b_hh, xs: f32[T, B, D]):
    return value_and_grad(lstm_piece, wrt=(0, 1, 2, 3, 4))(w_ih, w_hh, b_ih, b_hh, xs)

def lstm_piece_grad_flat(w_ih, w_hh, b_ih, b_hh, xs: f32[T, B, D]):
    l, (a, b, c, d, e) = value_and_grad(lstm_piece, wrt=(0, 1, 2, 3, 4))(w_ih, w_hh, b_ih, b_hh, xs)
    return l, a, b, c, d, e
"""


# ------------------------------------------------------------------------------------ sizes

@dataclass(frozen=True)
class Sizes:
    vocab: int = 16000
    examples: int = 32          # examples per timed pass
    minibatch: int = 16
    tree_embed: int = 128
    tree_hidden: int = 128
    tree_labels: int = 5
    tree_words: tuple = (8, 30)
    tag_embed: int = 128
    tag_hidden: int = 50
    tag_mlp: int = 32
    tags: int = 50
    tag_words: tuple = (10, 38)
    piece_batch: int = 16       # the LSTM piece: a batch of sentences of piece_len words
    piece_len: int = 24


QUICK = Sizes(vocab=300, examples=4, minibatch=2, tree_embed=16, tree_hidden=16, tree_words=(3, 7),
              tag_embed=16, tag_hidden=8, tag_mlp=8, tags=5, tag_words=(3, 7), piece_batch=2, piece_len=4)


# ------------------------------------------------------------------------------------ data

def zipf_words(rng, vocab: int, n: int) -> np.ndarray:
    ranks = np.arange(1, vocab + 1, dtype=np.float64)
    p = 1.0 / ranks
    return rng.choice(vocab, size=n, p=p / p.sum()).astype(np.int64)


@dataclass
class Tree:
    words: np.ndarray   # [L] word ids, in sentence order
    left: np.ndarray    # [M] child node indices (-1 at a leaf); nodes children first, root last
    right: np.ndarray
    row: np.ndarray     # [M] a leaf's position in the sentence (-1 at an inner node)
    word: np.ndarray    # [M] a leaf's word id (-1 at an inner node)
    label: np.ndarray   # [M]


def make_tree(rng, s: Sizes) -> Tree:
    n = int(rng.integers(s.tree_words[0], s.tree_words[1] + 1))
    words = zipf_words(rng, s.vocab, n)
    left, right, row = [], [], []

    def build(lo, hi):
        if hi - lo == 1:
            left.append(-1), right.append(-1), row.append(lo)
        else:
            mid = int(rng.integers(lo + 1, hi))
            a, b = build(lo, mid), build(mid, hi)
            left.append(a), right.append(b), row.append(-1)
        return len(left) - 1

    build(0, n)
    row = np.array(row, np.int64)
    return Tree(words, np.array(left, np.int64), np.array(right, np.int64), row,
                np.where(row >= 0, words[np.maximum(row, 0)], -1), rng.integers(0, s.tree_labels, len(row)))


def pack_trees(trees):
    """Trees as one forest: node and row indices offset, the roots listed."""
    left, right, row, label, roots, words = [], [], [], [], [], []
    nodes = rows = 0
    for t in trees:
        left.append(np.where(t.left >= 0, t.left + nodes, -1))
        right.append(np.where(t.right >= 0, t.right + nodes, -1))
        row.append(np.where(t.row >= 0, t.row + rows, -1))
        label.append(t.label)
        words.append(t.words)
        nodes += len(t.left)
        rows += len(t.words)
        roots.append(nodes - 1)
    cat = np.concatenate
    return cat(words), cat(left), cat(right), cat(row), cat(label), np.array(roots, np.int64)


def make_sentence(rng, s: Sizes):
    n = int(rng.integers(s.tag_words[0], s.tag_words[1] + 1))
    return zipf_words(rng, s.vocab, n), rng.integers(0, s.tags, n).astype(np.int64)


def uniform(rng, *shape, scale=0.1):
    return rng.uniform(-scale, scale, shape).astype(np.float32)


def tree_weights(rng, s: Sizes) -> dict:
    e, h = s.tree_embed, s.tree_hidden
    return {"w_iou": uniform(rng, 3 * h, e), "b_iou": uniform(rng, 3 * h), "u_iou": uniform(rng, 3 * h, 2 * h),
            "u_f1": uniform(rng, h, h), "u_f2": uniform(rng, h, h), "b_f": uniform(rng, h),
            "w_out": uniform(rng, s.tree_labels, h)}


def tagger_weights(rng, s: Sizes) -> dict:
    e, h = s.tag_embed, s.tag_hidden
    w = {}
    for d in "fb":
        w.update({f"{d}_w_ih": uniform(rng, 4 * h, e), f"{d}_w_hh": uniform(rng, 4 * h, h),
                  f"{d}_b_ih": uniform(rng, 4 * h), f"{d}_b_hh": uniform(rng, 4 * h)})
    w["w_mlp"] = uniform(rng, s.tag_mlp, 2 * h)
    w["w_out"] = uniform(rng, s.tags, s.tag_mlp)
    return w


def copy(d: dict) -> dict:
    return {k: v.copy() for k, v in d.items()}


# ------------------------------------------------------------------------------------ dg

class DgTree:
    """dg's Tree-LSTM: `mode` rows (the example's embedding rows in, their gradient added back
    into the table by NumPy), table (the whole table in and out) or minibatch (rows)."""

    def __init__(self, m, w, emb):
        self.m, self.p, self.emb, self.lr = m, copy(w), emb.copy(), np.float32(LR)

    def step_rows(self, t: Tree):
        loss, self.p, gx = self.m.tree_step_rows(self.p, self.emb[t.words], t.left, t.right, t.row, t.label, self.lr)
        np.add.at(self.emb, t.words, -self.lr * gx)
        return loss

    def step_table(self, t: Tree):
        loss, self.p, self.emb = self.m.tree_step_table(self.p, self.emb, t.left, t.right, t.word, t.label, self.lr)
        return loss

    def step_minibatch(self, packed):
        words, left, right, row, label, roots = packed
        loss, self.p, gx = self.m.trees_step(self.p, self.emb[words], left, right, row, label, roots, self.lr)
        np.add.at(self.emb, words, -self.lr * gx)
        return loss

    def step_loop(self, t: Tree):
        loss, self.p, gx = self.m.tree_loop_step(self.p, self.emb[t.words], t.left, t.right, t.row, t.label, self.lr)
        np.add.at(self.emb, t.words, -self.lr * gx)
        return loss

    def step_minibatch_loop(self, packed):
        words, left, right, row, label, _ = packed
        loss, self.p, gx = self.m.tree_loop_step(self.p, self.emb[words], left, right, row, label, self.lr)
        np.add.at(self.emb, words, -self.lr * gx)
        return loss


class DgTagger:
    def __init__(self, m, w, emb):
        self.m, self.p, self.emb, self.lr = m, copy(w), emb.copy(), np.float32(LR)

    def step(self, sent):
        words, tags = sent
        loss, self.p, gx = self.m.tagger_step(self.p, self.emb[words], tags, self.lr)
        np.add.at(self.emb, words, -self.lr * gx)
        return loss

    def step_minibatch(self, packed):
        words, tags, starts = packed
        loss, self.p, gx = self.m.taggers_step(self.p, self.emb[words], tags, starts, self.lr)
        np.add.at(self.emb, words, -self.lr * gx)
        return loss


def pack_sentences(sents):
    starts = np.cumsum([0] + [len(w) for w, _ in sents]).astype(np.int64)
    return np.concatenate([w for w, _ in sents]), np.concatenate([t for _, t in sents]), starts


# ------------------------------------------------------------------------------------ PyTorch

class TorchTree:
    def __init__(self, torch, w, emb):
        self.torch = torch
        self.p = {k: torch.tensor(v, requires_grad=True) for k, v in w.items()}
        self.emb = torch.nn.Embedding.from_pretrained(torch.tensor(emb), freeze=False, sparse=True)
        self.opt = torch.optim.SGD(list(self.p.values()) + list(self.emb.parameters()), lr=LR)
        self.n = w["b_f"].shape[0]

    def leaf(self, x):
        F, p, n = self.torch.nn.functional, self.p, self.n
        g = F.linear(x, p["w_iou"], p["b_iou"])
        i, o, u = self.torch.sigmoid(g[:n]), self.torch.sigmoid(g[n:2 * n]), self.torch.tanh(g[2 * n:])
        c = i * u
        return o * self.torch.tanh(c), c

    def node(self, h1, c1, h2, c2):
        torch, F, p, n = self.torch, self.torch.nn.functional, self.p, self.n
        g = F.linear(torch.cat([h1, h2]), p["u_iou"], p["b_iou"])
        i, o, u = torch.sigmoid(g[:n]), torch.sigmoid(g[n:2 * n]), torch.tanh(g[2 * n:])
        f1 = torch.sigmoid(F.linear(h1, p["u_f1"], p["b_f"]))
        f2 = torch.sigmoid(F.linear(h2, p["u_f2"], p["b_f"]))
        c = i * u + f1 * c1 + f2 * c2
        return o * torch.tanh(c), c

    def node_loss(self, h, y):
        z = self.p["w_out"] @ h
        return self.torch.logsumexp(z, 0) - z[y]

    def loss(self, t: Tree, x=None):
        if x is None:
            x = self.emb(self.torch.from_numpy(t.words))
        left, right, row, label = t.left.tolist(), t.right.tolist(), t.row.tolist(), t.label.tolist()

        def rec(i):
            if left[i] < 0:
                h, c = self.leaf(x[row[i]])
                return h, c, self.node_loss(h, label[i])
            h1, c1, l1 = rec(left[i])
            h2, c2, l2 = rec(right[i])
            h, c = self.node(h1, c1, h2, c2)
            return h, c, l1 + l2 + self.node_loss(h, label[i])

        return rec(len(left) - 1)[2]

    def step(self, t: Tree):
        loss = self.loss(t)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss.item()


class TorchTagger:
    def __init__(self, torch, w, emb):
        self.torch = torch
        e, h = w["f_w_ih"].shape[1], w["f_w_hh"].shape[1]
        self.emb = torch.nn.Embedding.from_pretrained(torch.tensor(emb), freeze=False, sparse=True)
        self.lstm = torch.nn.LSTM(e, h, bidirectional=True)
        with torch.no_grad():
            for d, suffix in (("f", ""), ("b", "_reverse")):
                for name in ("w_ih", "w_hh", "b_ih", "b_hh"):
                    torch_name = name.replace("w_", "weight_").replace("b_", "bias_") + "_l0" + suffix
                    getattr(self.lstm, torch_name).copy_(torch.tensor(w[f"{d}_{name}"]))
        self.mlp = torch.nn.Linear(2 * h, w["w_mlp"].shape[0], bias=False)
        self.out = torch.nn.Linear(w["w_mlp"].shape[0], w["w_out"].shape[0], bias=False)
        with torch.no_grad():
            self.mlp.weight.copy_(torch.tensor(w["w_mlp"]))
            self.out.weight.copy_(torch.tensor(w["w_out"]))
        params = [*self.emb.parameters(), *self.lstm.parameters(), *self.mlp.parameters(), *self.out.parameters()]
        self.opt = torch.optim.SGD(params, lr=LR)

    def loss(self, sent, x=None):
        words, tags = sent
        if x is None:
            x = self.emb(self.torch.from_numpy(words))
        ys, _ = self.lstm(x[:, None])
        logits = self.out(self.torch.tanh(self.mlp(ys[:, 0])))
        return self.torch.nn.functional.cross_entropy(logits, self.torch.from_numpy(tags), reduction="sum")

    def step(self, sent):
        loss = self.loss(sent)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss.item()

    def grads(self) -> dict:
        """The gradients after a backward, under the names of tagger_weights."""
        g = {}
        for d, suffix in (("f", ""), ("b", "_reverse")):
            for name in ("w_ih", "w_hh", "b_ih", "b_hh"):
                torch_name = name.replace("w_", "weight_").replace("b_", "bias_") + "_l0" + suffix
                g[f"{d}_{name}"] = getattr(self.lstm, torch_name).grad.numpy()
        g["w_mlp"], g["w_out"] = self.mlp.weight.grad.numpy(), self.out.weight.grad.numpy()
        return g


# ------------------------------------------------------------------------------------ DyNet

def _dynet():
    """The dynet module (from the dynet38 wheel), or the reason there is none."""
    try:
        import dynet_config

        dynet_config.set(mem="512", random_seed=1, autobatch=0)
        import dynet

        return dynet, None
    except Exception as e:  # ImportError, or a wheel whose library does not load here
        return None, f"{type(e).__name__}: {e}"


class DynetTree:
    def __init__(self, dy, w, emb):
        self.dy = dy
        self.pc = dy.ParameterCollection()
        self.p = {k: self.pc.add_parameters(v.shape, init=v) for k, v in w.items()}
        self.E = self.pc.add_lookup_parameters(emb.shape)
        self.E.init_from_array(emb)
        self.trainer = dy.SimpleSGDTrainer(self.pc, learning_rate=LR)
        self.trainer.set_clip_threshold(-1.0)  # no gradient clipping (as the suite)
        self.n = w["b_f"].shape[0]

    def loss(self, t: Tree):
        dy, n = self.dy, self.n
        w = self.p  # (parameters join the graph where they are used)
        left, right, word, label = t.left.tolist(), t.right.tolist(), t.word.tolist(), t.label.tolist()

        def gates(g):
            return (dy.logistic(dy.pick_range(g, 0, n)), dy.logistic(dy.pick_range(g, n, 2 * n)),
                    dy.tanh(dy.pick_range(g, 2 * n, 3 * n)))

        def node_loss(h, y):
            return dy.pickneglogsoftmax(w["w_out"] * h, y)

        def rec(i):
            if left[i] < 0:
                ig, og, u = gates(dy.affine_transform([w["b_iou"], w["w_iou"], dy.lookup(self.E, word[i])]))
                c = dy.cmult(ig, u)
                h = dy.cmult(og, dy.tanh(c))
                return h, c, node_loss(h, label[i])
            h1, c1, l1 = rec(left[i])
            h2, c2, l2 = rec(right[i])
            ig, og, u = gates(dy.affine_transform([w["b_iou"], w["u_iou"], dy.concatenate([h1, h2])]))
            f1 = dy.logistic(dy.affine_transform([w["b_f"], w["u_f1"], h1]))
            f2 = dy.logistic(dy.affine_transform([w["b_f"], w["u_f2"], h2]))
            c = dy.cmult(ig, u) + dy.cmult(f1, c1) + dy.cmult(f2, c2)
            h = dy.cmult(og, dy.tanh(c))
            return h, c, l1 + l2 + node_loss(h, label[i])

        return rec(len(left) - 1)[2]

    def step(self, t: Tree):
        self.dy.renew_cg(autobatching=False)
        loss = self.loss(t)
        v = loss.value()
        loss.backward()
        self.trainer.update()
        return v

    def step_autobatch(self, trees):
        self.dy.renew_cg(autobatching=True)
        loss = self.dy.esum([self.loss(t) for t in trees])
        v = loss.value()
        loss.backward()
        self.trainer.update()
        return v

    def forward(self, t: Tree):
        self.dy.renew_cg(autobatching=False)
        return self.loss(t).value()

    def forward_backward(self, t: Tree):
        self.dy.renew_cg(autobatching=False)
        loss = self.loss(t)
        v = loss.value()
        loss.backward()
        return v


class DynetTagger:
    """bilstm-tagger.py's model: VanillaLSTMBuilder both ways, O * tanh(H * [f; b]) per word."""

    def __init__(self, dy, w, emb):
        self.dy = dy
        self.pc = dy.ParameterCollection()
        e, h = w["f_w_ih"].shape[1], w["f_w_hh"].shape[1]
        self.E = self.pc.add_lookup_parameters(emb.shape)
        self.E.init_from_array(emb)
        self.H = self.pc.add_parameters(w["w_mlp"].shape, init=w["w_mlp"])
        self.O = self.pc.add_parameters(w["w_out"].shape, init=w["w_out"])
        self.rnns = []
        for d in "fb":
            rnn = dy.VanillaLSTMBuilder(1, e, h, self.pc)
            wx, wh, b = rnn.get_parameters()[0]
            # PyTorch's gates are i, f, g, o; DyNet's vanilla LSTM's are i, f, o, g, with one bias,
            # and it adds its forget_bias (1 by default, kept as in the suite) to f's at run time
            order = np.concatenate([np.arange(0, 2 * h), np.arange(3 * h, 4 * h), np.arange(2 * h, 3 * h)])
            wx.set_value(w[f"{d}_w_ih"][order])
            wh.set_value(w[f"{d}_w_hh"][order])
            bias = (w[f"{d}_b_ih"] + w[f"{d}_b_hh"])[order]
            bias[h:2 * h] -= 1.0
            b.set_value(bias)
            self.rnns.append(rnn)
        self.trainer = dy.SimpleSGDTrainer(self.pc, learning_rate=LR)
        self.trainer.set_clip_threshold(-1.0)

    def loss(self, sent):
        dy = self.dy
        words, tags = sent
        H, O = self.H, self.O
        wembs = [self.E[i] for i in words.tolist()]
        fw = self.rnns[0].initial_state().transduce(wembs)
        bw = self.rnns[1].initial_state().transduce(reversed(wembs))
        errs = [dy.pickneglogsoftmax(O * dy.tanh(H * dy.concatenate([f, b])), t)
                for f, b, t in zip(fw, reversed(bw), tags.tolist())]
        return dy.esum(errs)

    def step(self, sent):
        self.dy.renew_cg(autobatching=False)
        loss = self.loss(sent)
        v = loss.value()
        loss.backward()
        self.trainer.update()
        return v

    def step_autobatch(self, sents):
        self.dy.renew_cg(autobatching=True)
        loss = self.dy.esum([self.loss(s) for s in sents])
        v = loss.value()
        loss.backward()
        self.trainer.update()
        return v

    def forward(self, sent):
        self.dy.renew_cg(autobatching=False)
        return self.loss(sent).value()

    def forward_backward(self, sent):
        self.dy.renew_cg(autobatching=False)
        loss = self.loss(sent)
        v = loss.value()
        loss.backward()
        return v


# ------------------------------------------------------------------------------------ checks

def _max_rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(1e-6, float(np.max(np.abs(b)))))


TOL = 2e-4  # largest difference over the largest magnitude of PyTorch's value (float32 sums)


def check_tree(m, torch, dy, w, emb, t: Tree) -> dict:
    """dg's loss and gradients on one tree against PyTorch's; DyNet's loss and weight gradients."""
    out: dict = {}
    x = emb[t.words]
    loss, (gp, gx) = m.tree_loss_grad(w, x, t.left, t.right, t.row, t.label)
    _, (gp_t, ge) = dg.value_and_grad(m.tree_loss, wrt=(0, 1))(w, emb, t.left, t.right, t.word, t.label)
    scattered = np.zeros_like(emb)
    np.add.at(scattered, t.words, gx)
    out["dg_table_vs_rows"] = max(_max_rel(ge, scattered), max(_max_rel(gp_t[k], gp[k]) for k in w))
    loss_l, (gp_l, gx_l) = m.tree_loop_loss_grad(w, x, t.left, t.right, t.row, t.label)
    out["dg_loop_vs_recursion"] = max(_max_rel(loss_l, loss), _max_rel(gx_l, gx),
                                      max(_max_rel(gp_l[k], gp[k]) for k in w))
    out["dg_loss"] = float(loss)
    dg_ok = out["dg_table_vs_rows"] <= TOL and out["dg_loop_vs_recursion"] <= TOL
    if torch is None:
        out["ok"] = dg_ok
        out["torch"] = "not installed: dg not checked against PyTorch"
        return out
    tt = TorchTree(torch, w, emb)
    tx = torch.tensor(x, requires_grad=True)
    tl = tt.loss(t, tx)
    grads = torch.autograd.grad(tl, [tt.p[k] for k in w] + [tx])
    out["torch_loss"] = tl.item()
    errs = {k: _max_rel(gp[k], g.numpy()) for k, g in zip(w, grads)}
    errs["embedding_rows"] = _max_rel(gx, grads[-1].numpy())
    out["dg_vs_torch_loss"] = _max_rel(loss, tl.item())
    out["dg_vs_torch_grads"] = max(errs.values())
    ok = dg_ok and out["dg_vs_torch_loss"] <= TOL and out["dg_vs_torch_grads"] <= TOL
    if dy is not None:
        dt = DynetTree(dy, w, emb)
        v = dt.forward_backward(t)
        out["dynet_loss"] = float(v)
        out["dynet_vs_torch_loss"] = _max_rel(v, tl.item())
        out["dynet_vs_torch_grads"] = max(_max_rel(dt.p[k].grad_as_array(), g.numpy()) for k, g in zip(w, grads))
        ok = ok and out["dynet_vs_torch_loss"] <= TOL and out["dynet_vs_torch_grads"] <= TOL
    out["ok"] = bool(ok)
    return out


def check_tagger(m, torch, dy, w, emb, sent) -> dict:
    out: dict = {}
    words, tags = sent
    x = emb[words]
    loss, (gp, gx) = m.tagger_loss_grad(w, x, tags)
    out["dg_loss"] = float(loss)
    if torch is None:
        out["ok"] = True
        out["torch"] = "not installed: dg not checked against PyTorch"
        return out
    tt = TorchTagger(torch, w, emb)
    tx = torch.tensor(x, requires_grad=True)
    tl = tt.loss(sent, tx)
    tl.backward()
    tg = tt.grads()
    errs = {k: _max_rel(gp[k], tg[k]) for k in w}
    errs["embedding_rows"] = _max_rel(gx, tx.grad.numpy())
    out["torch_loss"] = tl.item()
    out["dg_vs_torch_loss"] = _max_rel(loss, tl.item())
    out["dg_vs_torch_grads"] = max(errs.values())
    ok = out["dg_vs_torch_loss"] <= TOL and out["dg_vs_torch_grads"] <= TOL
    if dy is not None:
        dt = DynetTagger(dy, w, emb)
        v = dt.forward_backward(sent)
        out["dynet_loss"] = float(v)
        out["dynet_vs_torch_loss"] = _max_rel(v, tl.item())
        out["dynet_vs_torch_grads"] = max(_max_rel(dt.H.grad_as_array(), tg["w_mlp"]),
                                          _max_rel(dt.O.grad_as_array(), tg["w_out"]))
        ok = ok and out["dynet_vs_torch_loss"] <= TOL and out["dynet_vs_torch_grads"] <= TOL
    out["ok"] = bool(ok)
    return out


# ------------------------------------------------------------------------------------ timing

def _cpu_module():
    spec = importlib.util.spec_from_file_location("_bench_cpu", Path(__file__).resolve().parent / "cpu.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def first_call(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


@contextlib.contextmanager
def one_thread(torch):
    """DG_NUM_THREADS=1, the BLAS at one thread, torch at one thread; a fresh disk cache (so that
    dg's first calls are cold compiles); all put back afterwards."""
    saved = {k: os.environ.get(k) for k in ("DG_NUM_THREADS", "DG_CACHE_DIR")}
    counts = blas.thread_count()
    old_blas = counts[0]() if counts else None
    old_torch = torch.get_num_threads() if torch is not None else None
    with tempfile.TemporaryDirectory() as cache:
        os.environ["DG_NUM_THREADS"] = "1"
        os.environ["DG_CACHE_DIR"] = cache
        if counts:
            counts[1](1)
        if torch is not None:
            torch.set_num_threads(1)
        try:
            yield
        finally:
            optimizer.wait_all()
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            if counts:
                counts[1](old_blas)
            if torch is not None:
                torch.set_num_threads(old_torch)


def passes(step, examples):
    """One pass: a step per example."""
    def run():
        for ex in examples:
            step(ex)
    return run


def _timed(fns: dict, first: dict, name: str, step, data: list) -> None:
    """A system's first call (on data[0]) timed apart, and its steady-state pass over `data`."""
    first[name] = first_call(lambda: step(data[0]))
    fns[name] = passes(step, data)


def bench_tree(m, torch, dy, s: Sizes, w, emb, trees, medians, repeats, min_time) -> tuple:
    batches = [pack_trees(trees[i:i + s.minibatch]) for i in range(0, len(trees), s.minibatch)]
    mb_lists = [trees[i:i + s.minibatch] for i in range(0, len(trees), s.minibatch)]
    fns, first = {}, {}
    _timed(fns, first, "dg_rows", DgTree(m, w, emb).step_rows, trees)
    _timed(fns, first, "dg_table", DgTree(m, w, emb).step_table, trees)
    _timed(fns, first, "dg_minibatch", DgTree(m, w, emb).step_minibatch, batches)
    _timed(fns, first, "dg_loop", DgTree(m, w, emb).step_loop, trees)
    _timed(fns, first, "dg_minibatch_loop", DgTree(m, w, emb).step_minibatch_loop, batches)
    if torch is not None:
        _timed(fns, first, "torch_eager", TorchTree(torch, w, emb).step, trees)
    if dy is not None:
        _timed(fns, first, "dynet", DynetTree(dy, w, emb).step, trees)
        _timed(fns, first, "dynet_autobatch", DynetTree(dy, w, emb).step_autobatch, mb_lists)
    secs = medians(fns, repeats, min_time)
    return {k: len(trees) / v for k, v in secs.items()}, first


def bench_tagger(m, torch, dy, s: Sizes, w, emb, sents, medians, repeats, min_time) -> tuple:
    batches = [pack_sentences(sents[i:i + s.minibatch]) for i in range(0, len(sents), s.minibatch)]
    mb_lists = [sents[i:i + s.minibatch] for i in range(0, len(sents), s.minibatch)]
    fns, first = {}, {}
    _timed(fns, first, "dg_rows", DgTagger(m, w, emb).step, sents)
    _timed(fns, first, "dg_minibatch", DgTagger(m, w, emb).step_minibatch, batches)
    if torch is not None:
        _timed(fns, first, "torch_eager", TorchTagger(torch, w, emb).step, sents)
    if dy is not None:
        _timed(fns, first, "dynet", DynetTagger(dy, w, emb).step, sents)
        _timed(fns, first, "dynet_autobatch", DynetTagger(dy, w, emb).step_autobatch, mb_lists)
    secs = medians(fns, repeats, min_time)
    return {k: len(sents) / v for k, v in secs.items()}, first


def bench_grad_over_forward(m, torch, dy, s: Sizes, tw, temb, tree, gw, gemb, sent, medians, repeats,
                            min_time) -> dict:
    """Time of value_and_grad over the forward's, per piece and system (no update)."""
    rng = np.random.default_rng(7)
    h = s.tree_hidden
    hc = [uniform(rng, h, scale=1.0) for _ in range(4)]
    xs = uniform(rng, s.piece_len, s.piece_batch, s.tag_embed, scale=1.0)
    lw = [gw[k] for k in ("f_w_ih", "f_w_hh", "f_b_ih", "f_b_hh")]
    nw = {k: tw[k] for k in NODE_WEIGHTS}  # (an inner node's weights only)
    x_tree, words = temb[tree.words], sent[0]
    x_sent = gemb[words]
    tree_args = (x_tree, tree.left, tree.right, tree.row, tree.label)
    pieces = {
        "tree_node": {"dg": (lambda: m.node_piece(nw, *hc), lambda: m.node_piece_grad_flat(nw, *hc)),
                      "dg_nested_results": (None, lambda: m.node_piece_grad(nw, *hc))},
        "lstm_direction": {"dg": (lambda: m.lstm_piece(*lw, xs), lambda: m.lstm_piece_grad_flat(*lw, xs)),
                           "dg_nested_results": (None, lambda: m.lstm_piece_grad(*lw, xs))},
        "tree_model": {"dg": (lambda: m.tree_loss(tw, *tree_args), lambda: m.tree_loss_grad_flat(tw, *tree_args)),
                       "dg_nested_results": (None, lambda: m.tree_loss_grad(tw, *tree_args)),
                       "dg_loop": (lambda: m.tree_loop_loss(tw, *tree_args),
                                   lambda: m.tree_loop_loss_grad_flat(tw, *tree_args))},
        "tagger_model": {"dg": (lambda: m.tagger_loss(gw, x_sent, sent[1]),
                                lambda: m.tagger_loss_grad_flat(gw, x_sent, sent[1])),
                         "dg_nested_results": (None, lambda: m.tagger_loss_grad(gw, x_sent, sent[1]))},
    }
    if torch is not None:
        tt = TorchTree(torch, tw, temb)
        th = [torch.tensor(v, requires_grad=True) for v in hc]
        tp = list(tt.p.values())
        np_ = [tt.p[k] for k in NODE_WEIGHTS]

        def node_f():
            with torch.no_grad():
                hh, cc = tt.node(*th)
                return (hh.sum() + cc.sum()).item()

        def node_g():
            hh, cc = tt.node(*th)
            return torch.autograd.grad(hh.sum() + cc.sum(), np_ + th)

        lstm = torch.nn.LSTM(s.tag_embed, s.tag_hidden)
        with torch.no_grad():
            for name, v in zip(("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"), lw):
                getattr(lstm, name).copy_(torch.tensor(v))
        txs = torch.tensor(xs, requires_grad=True)
        lp = list(lstm.parameters())

        def lstm_f():
            with torch.no_grad():
                return lstm(txs)[0].sum().item()

        def lstm_g():
            return torch.autograd.grad(lstm(txs)[0].sum(), lp + [txs])

        tx = torch.tensor(x_tree, requires_grad=True)

        def tree_f():
            with torch.no_grad():
                return tt.loss(tree, tx).item()

        def tree_g():
            return torch.autograd.grad(tt.loss(tree, tx), tp + [tx])

        tg = TorchTagger(torch, gw, gemb)
        gx = torch.tensor(x_sent, requires_grad=True)
        gp = [*tg.lstm.parameters(), *tg.mlp.parameters(), *tg.out.parameters()]

        def tagger_f():
            with torch.no_grad():
                return tg.loss(sent, gx).item()

        def tagger_g():
            return torch.autograd.grad(tg.loss(sent, gx), gp + [gx])

        pieces["tree_node"]["torch_eager"] = (node_f, node_g)
        pieces["lstm_direction"]["torch_eager"] = (lstm_f, lstm_g)
        pieces["tree_model"]["torch_eager"] = (tree_f, tree_g)
        pieces["tagger_model"]["torch_eager"] = (tagger_f, tagger_g)
    if dy is not None:
        yt, yg = DynetTree(dy, tw, temb), DynetTagger(dy, gw, gemb)
        pieces["tree_model"]["dynet"] = (lambda: yt.forward(tree), lambda: yt.forward_backward(tree))
        pieces["tagger_model"]["dynet"] = (lambda: yg.forward(sent), lambda: yg.forward_backward(sent))
    out = {}
    for piece, systems in pieces.items():
        fns = {}
        for name, (f, g) in systems.items():
            if f is not None:  # (None: dg's forward)
                fns[f"{name}:forward"] = f
            fns[f"{name}:value_and_grad"] = g
        secs = medians(fns, repeats, min_time)
        row = {}
        for name, (f, g) in systems.items():
            fwd, vg = secs[f"{name if f is not None else 'dg'}:forward"], secs[f"{name}:value_and_grad"]
            row[name] = {"forward_us": fwd * 1e6, "value_and_grad_us": vg * 1e6, "ratio": vg / fwd}
        out[piece] = row
    return out


def ratios(row: dict) -> dict:
    out = {}
    for a in [k for k in row if k.startswith("dg")]:
        for b in [k for k in row if not k.startswith("dg")]:
            out[f"{a}/{b}"] = row[a] / row[b]
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny sizes and one repeat (a smoke run)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-dynet", action="store_true", help="leave DyNet out")
    ap.add_argument("--json", default="benchmarks/dynamic_results.json")
    a = ap.parse_args(argv)
    s = QUICK if a.quick else Sizes()
    repeats = 1 if a.quick else a.repeats
    min_time = 0.005 if a.quick else 0.05
    try:
        import torch
    except ImportError:
        torch = None
    dy, dy_missing = (None, "left out (--no-dynet)") if a.no_dynet else _dynet()
    res: dict = {"quick": a.quick, "sizes": {k: getattr(s, k) for k in Sizes.__dataclass_fields__},
                 "peers": {"torch": torch.__version__ if torch is not None else "not installed: skipped",
                           "dynet": dy.__version__ if dy is not None else f"not available, skipped ({dy_missing})"},
                 "dg_blas": blas.identity(), "threads": 1}
    medians = _cpu_module().medians
    rng = np.random.default_rng(2017)
    trees = [make_tree(rng, s) for _ in range(s.examples)]
    sents = [make_sentence(rng, s) for _ in range(s.examples)]
    tw, temb = tree_weights(rng, s), uniform(rng, s.vocab, s.tree_embed)
    gw, gemb = tagger_weights(rng, s), uniform(rng, s.vocab, s.tag_embed)
    res["data"] = {"tree_words_mean": float(np.mean([len(t.words) for t in trees])),
                   "tree_nodes_mean": float(np.mean([len(t.left) for t in trees])),
                   "sentence_words_mean": float(np.mean([len(w) for w, _ in sents]))}
    with one_thread(torch):
        m = dg.loads(SRC, mode="compiled", filename="dynamic.dg")
        res["agreement"] = {"tree": check_tree(m, torch, dy, tw, temb, trees[0]),
                            "tagger": check_tagger(m, torch, dy, gw, gemb, sents[0])}
        res["agreement"]["ok"] = res["agreement"]["tree"]["ok"] and res["agreement"]["tagger"]["ok"]
        print(f"agreement: {json.dumps(res['agreement'], default=lambda v: round(v, 7))}")
        if not res["agreement"]["ok"]:
            raise SystemExit("dynamic.py: the systems disagree on one example (above); no timing")
        res["tree_per_s"], first_tree = bench_tree(m, torch, dy, s, tw, temb, trees, medians, repeats, min_time)
        res["tagger_per_s"], first_tagger = bench_tagger(m, torch, dy, s, gw, gemb, sents, medians, repeats, min_time)
        res["first_call_s"] = {"tree": first_tree, "tagger": first_tagger}
        res["grad_over_forward"] = bench_grad_over_forward(m, torch, dy, s, tw, temb, trees[0], gw, gemb, sents[0],
                                                           medians, repeats, min_time)
    res["ratios"] = {"tree": ratios(res["tree_per_s"]), "tagger": ratios(res["tagger_per_s"])}

    print(f"peers: torch {res['peers']['torch']}; dynet {res['peers']['dynet']}; dg's BLAS {res['dg_blas']}; "
          f"one thread")
    print(f"data: trees of {res['data']['tree_words_mean']:.1f} words ({res['data']['tree_nodes_mean']:.1f} nodes), "
          f"sentences of {res['data']['sentence_words_mean']:.1f} words, on average")
    for name, unit in (("tree", "trees/s"), ("tagger", "sentences/s")):
        row = res[f"{name}_per_s"]
        print(f"{name} ({unit}, median): " + ", ".join(f"{k} {v:.4g}" for k, v in row.items()))
        print(f"{name} first call (s): " + ", ".join(f"{k} {v:.3g}" for k, v in res["first_call_s"][name].items()))
        print(f"{name} ratios: " + ", ".join(f"{k} {v:.3g}" for k, v in res["ratios"][name].items()))
    for piece, row in res["grad_over_forward"].items():
        print(f"value_and_grad / forward, {piece}: " + ", ".join(
            f"{k} {v['ratio']:.3g} ({v['value_and_grad_us']:.4g} us / {v['forward_us']:.4g} us)"
            for k, v in row.items()))
    return kept(res, a.json)


if __name__ == "__main__":
    main()
