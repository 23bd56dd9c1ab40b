"""`dg export`: C programs built with the system C compiler against exported libraries give the
Python call's results bit for bit (the same code, the same LLVM level), its errors word for
word, from any number of threads; no Python runs in them."""
import os
import subprocess
import sys

import numpy as np
import pytest

import dg

from .driver import build_c, needs_cc, run_c

pytestmark = needs_cc

F32 = np.float32


def _load(tmp_path, name: str, text: str):
    """The dg source written to a file (exported code names its lines in messages)."""
    path = tmp_path / f"{name}.dg"
    path.write_text(text)
    return dg.load(path)


@pytest.fixture(autouse=True)
def _optimized_at_once(monkeypatch):
    """The Python calls run code optimized at the level the library's is from their first call
    (quick code first would be another level; waiting for the worker would wait for every
    program queued before)."""
    monkeypatch.setenv("DG_QUICK_START", "0")


def _settled(fn, *args):
    """fn(*args): the JIT's optimized code (see _optimized_at_once)."""
    return fn(*args)


def _leaves(x) -> list:
    if isinstance(x, dict):
        return [leaf for k in sorted(x) for leaf in _leaves(x[k])]  # (records flatten in key order)
    if isinstance(x, (tuple, list)):
        return [leaf for e in x for leaf in _leaves(e)]
    return [np.asarray(x)]


def _same_bits(got: list, want: list):
    assert len(got) == len(want)
    for k, (a, b) in enumerate(zip(got, want)):
        b = np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape, (k, a.dtype, b.dtype, a.shape, b.shape)
        assert a.tobytes() == b.tobytes(), (k, np.abs(a.astype(np.float64) - b).max())


# ------------------------------------------------------------------ an MLP's training step over a record, with Adam
MLP = """
import optim

def loss(p, x: f32[B, 8], y: i64[B]) -> f32:
    h = tanh(x @ p["w1"] + p["b1"])
    return cross_entropy(h @ p["w2"] + p["b2"], y)

def train_step(p, state, x: f32[B, 8], y: i64[B], lr: f32):
    l, g = value_and_grad(loss)(p, x, y)
    p, state = optim.adam(p, g, state, lr=lr)
    return l, p, state
"""


def _mlp_data(rng):
    p = {"w1": rng.normal(0, 0.3, (8, 16)).astype(F32), "b1": np.zeros(16, F32),
         "w2": rng.normal(0, 0.3, (16, 4)).astype(F32), "b2": np.zeros(4, F32)}
    state = {"m": {k: np.zeros_like(v) for k, v in p.items()}, "v": {k: np.zeros_like(v) for k, v in p.items()},
             "step": F32(0.0)}
    x = rng.normal(size=(32, 8)).astype(F32)
    y = rng.integers(0, 4, 32)
    return p, state, x, y


def test_mlp_training_step_over_a_record_with_adam_equals_python_bit_for_bit(tmp_path):
    m = _load(tmp_path, "mlp", MLP)
    p, state, x, y = _mlp_data(np.random.default_rng(0))
    lr = F32(0.01)
    ex = dg.export({"train_step": m.train_step, "loss_grad": dg.value_and_grad(m.loss)}, tmp_path / "lib",
                   {"train_step": (p, state, x, y, lr), "loss_grad": (p, x, y)})
    entry = next(e for e in ex.entries if e.name == "train_step")
    names = [a.name for a in entry.args]
    assert names[:4] == ["p_b1", "p_b2", "p_w1", "p_w2"] or names[:4] == ["p_w1", "p_b1", "p_w2", "p_b2"]
    assert "state_m_w1" in names and [r.name for r in entry.results][0] == "out_0"
    # C: three steps, each step's parameters and state fed to the next
    feed = {k: names.index(r.name.replace("out_1_", "p_").replace("out_2_", "state_"))
            for k, r in enumerate(entry.results) if k}
    args = _leaves((p, state, x, y, lr))
    rc, msg, got = run_c(ex, "train_step", args, tmp_path / "run", steps=3, feed=feed)
    assert rc == 0, msg
    _settled(m.train_step, p, state, x, y, lr)
    pp, ss = p, state
    for _ in range(3):
        loss, pp, ss = m.train_step(pp, ss, x, y, lr)
    _same_bits(got, _leaves((loss, pp, ss)))
    # the gradient function of a dg function, exported as itself
    rc, msg, got = run_c(ex, "loss_grad", _leaves((p, x, y)), tmp_path / "run_grad")
    assert rc == 0, msg
    _same_bits(got, _leaves(_settled(dg.value_and_grad(m.loss), p, x, y)))
    # the header names every leaf by its path
    text = ex.header.read_text()
    assert "int mlp_train_step(const dg_array *p_" in text and "const dg_array *state_v_w2" in text
    assert "dg 0.1.0" in text and "-O" in text and "Links:" in text


# ------------------------------------------------------------------ a Tree-LSTM's gradient: recursion over index arrays
TREE = """
def cell(h: f32[D], wi: f32[D, D], wo: f32[D, D], wu: f32[D, D]):
    i = sigmoid(h @ wi)
    o = sigmoid(h @ wo)
    u = tanh(h @ wu)
    return i, o, u

def tree(n: i64, left: i64[M], right: i64[M], word: i64[M], emb: f32[V, D], wi: f32[D, D], wo: f32[D, D],
         wu: f32[D, D], wf: f32[D, D]):
    if left[n] < 0:
        i, o, u = cell(emb[word[n]], wi, wo, wu)
        c = i * u
        return o * tanh(c), c
    hl, cl = tree(left[n], left, right, word, emb, wi, wo, wu, wf)
    hr, cr = tree(right[n], left, right, word, emb, wi, wo, wu, wf)
    i, o, u = cell(hl + hr, wi, wo, wu)
    c = i * u + sigmoid(hl @ wf) * cl + sigmoid(hr @ wf) * cr
    return o * tanh(c), c

def loss(emb: f32[V, D], wi: f32[D, D], wo: f32[D, D], wu: f32[D, D], wf: f32[D, D], wout: f32[D, K],
         left: i64[M], right: i64[M], word: i64[M], root: i64) -> f32:
    h, c = tree(root, left, right, word, emb, wi, wo, wu, wf)
    return sum(tanh(h @ wout))
"""


def _tree(rng, words: int):
    """A random binary tree over `words` leaves: (left, right, word, root), -1 for a leaf's children."""
    left, right, word = [], [], []
    nodes = []
    for _ in range(words):
        left.append(-1), right.append(-1), word.append(int(rng.integers(0, 50)))
        nodes.append(len(left) - 1)
    while len(nodes) > 1:
        k = int(rng.integers(0, len(nodes) - 1))
        a, b = nodes[k], nodes[k + 1]
        left.append(a), right.append(b), word.append(0)
        nodes[k:k + 2] = [len(left) - 1]
    return np.array(left), np.array(right), np.array(word), np.int64(nodes[0])


def test_tree_lstm_gradient_through_recursion_equals_python_bit_for_bit(tmp_path):
    m = _load(tmp_path, "treelstm", TREE)
    rng = np.random.default_rng(1)
    ws = [rng.normal(0, 0.3, s).astype(F32) for s in ((50, 16), (16, 16), (16, 16), (16, 16), (16, 16), (16, 5))]
    left, right, word, root = _tree(rng, 9)
    g = dg.grad(m.loss, wrt=(0, 1, 2, 3, 4, 5))
    args = (*ws, left, right, word, root)
    ex = dg.export({"grad": g}, tmp_path / "lib", [args], name="treelstm")
    # another tree, of another size: the sizes are dynamic
    left2, right2, word2, root2 = _tree(rng, 14)
    args2 = (*ws, left2, right2, word2, root2)
    for k, a in enumerate((args, args2)):
        rc, msg, got = run_c(ex, "grad", list(a), tmp_path / f"run{k}")
        assert rc == 0, msg
        _same_bits(got, _leaves(_settled(g, *a)))


# ------------------------------------------------------------------ a decoder whose loop stops on the data
DECODER = """
def decode(h: f32[D], w: f32[D, D], emb: f32[V, D], wout: f32[D, V], stop: i64, limit: i64):
    tokens = zeros([limit], dtype=i64)
    n = 0
    tok = 0
    while n < limit:
        h = tanh(h @ w + emb[tok])
        tok = argmax(h @ wout)
        tokens[n] = tok
        n = n + 1
        if tok == stop:
            break
    return tokens, n, h
"""


def test_while_loop_decoder_with_a_data_dependent_stop_equals_python(tmp_path):
    m = _load(tmp_path, "decoder", DECODER)
    rng = np.random.default_rng(2)
    h, w = rng.normal(size=8).astype(F32), rng.normal(0, 0.8, (8, 8)).astype(F32)
    emb, wout = rng.normal(size=(6, 8)).astype(F32), rng.normal(size=(8, 6)).astype(F32)
    ex = dg.export(m.decode, tmp_path / "lib", (h, w, emb, wout, np.int64(3), np.int64(20)))
    stops = 0
    for stop in range(6):
        args = [h, w, emb, wout, np.int64(stop), np.int64(20)]
        rc, msg, got = run_c(ex, "decode", args, tmp_path / f"run{stop}")
        assert rc == 0, msg
        want = _leaves(_settled(m.decode, *args))
        _same_bits(got, want)
        stops += int(want[1]) < 20
    assert stops  # (some stop token ends the loop early)


# ------------------------------------------------------------------ errors
CHECKED = """
def depth(n: i64, x: f32[N]) -> f32:
    if n == 0:
        assert sum(x) < 100.0, "sum too large"
        return sum(x)
    return depth(n - 1, x) * 0.5

def run(n: i64, x: f32[N], i: i64) -> f32:
    return depth(n, x) + x[i]

def pair(a: f32[N], b: f32[N]) -> f32[N]:
    return a * b
"""


def test_failing_check_reads_as_in_python_through_dg_last_error(tmp_path):
    m = _load(tmp_path, "checked", CHECKED)
    x = np.arange(4, dtype=F32)
    ex = dg.export({"run": m.run, "pair": m.pair}, tmp_path / "lib", [(np.int64(2), x, np.int64(0)), (x, x)])
    for k, args in enumerate(([np.int64(2), x, np.int64(7)], [np.int64(3), x, np.int64(-9)])):
        rc, msg, _ = run_c(ex, "run", args, tmp_path / f"index{k}")
        with pytest.raises(dg.DgRuntimeError) as e:
            m.run(*args)
        assert rc == 2 and msg == str(e.value), (msg, str(e.value))
        assert "index" in msg and str(args[2]) in msg
    # an assertion inside a recursion: the call stack as Python gives it, the recursion counted
    rc, msg, _ = run_c(ex, "run", [np.int64(6), x * 100, np.int64(0)], tmp_path / "deep")
    with pytest.raises(dg.DgRuntimeError) as e:
        m.run(np.int64(6), x * 100, np.int64(0))
    assert rc == 2 and msg == str(e.value)
    assert "sum too large" in msg and "(6 times)" in msg and "checked.dg:4:" in msg
    # then a call that succeeds
    rc, msg, got = run_c(ex, "run", [np.int64(2), x, np.int64(1)], tmp_path / "fine")
    assert rc == 0 and got[0] == m.run(np.int64(2), x, np.int64(1))
    # arguments whose sizes do not fit the declaration: the argument named, at its parameter
    rc, msg, _ = run_c(ex, "pair", [x, np.arange(5, dtype=F32)], tmp_path / "sizes")
    assert rc == 1
    assert "checked.dg:11:" in msg and "size 'N' is 4" in msg and "but 5" in msg and "'b'" in msg


THREADS = r"""
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "mlp.h"

enum { THREADS = 4, CALLS = 50 };
static float x[THREADS][32 * 8];
static int64_t y[32];
static float w1[8 * 16], b1[16], w2[16 * 4], b2[4];
static float want[THREADS];
static int bad;

static void *work(void *arg) {
    long t = (long)arg;
    dg_array aw1 = {w1, 2, {8, 16}}, ab1 = {b1, 1, {16}}, aw2 = {w2, 2, {16, 4}}, ab2 = {b2, 1, {4}};
    dg_array ax = {x[t], 2, {32, 8}}, ay = {y, 1, {32}};
    for (int k = 0; k < CALLS; k++) {
        float l;
        dg_array g[4] = {{0}};
        if (mlp_loss_grad(&aw1, &ab1, &aw2, &ab2, &ax, &ay, &l, &g[0], &g[1], &g[2], &g[3]) != DG_OK) bad++;
        if (memcmp(&l, &want[t], sizeof l)) bad++;
        for (int i = 0; i < 4; i++) dg_free(&g[i]);
        /* a failing call on this thread leaves its message here, and only here */
        int64_t wrong[32];
        memcpy(wrong, y, sizeof wrong);
        wrong[t] = 99;
        dg_array aw = {wrong, 1, {32}};
        if (mlp_loss_grad(&aw1, &ab1, &aw2, &ab2, &ax, &aw, &l, &g[0], &g[1], &g[2], &g[3]) != DG_ERROR_CHECK) bad++;
        if (!strstr(dg_last_error(), "label 99")) bad++;
    }
    return NULL;
}

int main(int argc, char **argv) {
    FILE *f = fopen("in.bin", "rb");
    if (!f || fread(x, sizeof x, 1, f) != 1 || fread(y, sizeof y, 1, f) != 1 || fread(w1, sizeof w1, 1, f) != 1 ||
        fread(b1, sizeof b1, 1, f) != 1 || fread(w2, sizeof w2, 1, f) != 1 || fread(b2, sizeof b2, 1, f) != 1 ||
        fread(want, sizeof want, 1, f) != 1) return 99;
    fclose(f);
    pthread_t th[THREADS];
    for (long t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, work, (void *)t);
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    printf("%d\n", bad);
    return bad != 0;
}
"""

LOSS_ONLY = """
def loss(w1: f32[8, 16], b1: f32[16], w2: f32[16, 4], b2: f32[4], x: f32[B, 8], y: i64[B]) -> f32:
    h = tanh(x @ w1 + b1)
    return cross_entropy(h @ w2 + b2, y)
"""


def test_threads_call_at_once_each_with_its_own_state_and_error(tmp_path):
    m = _load(tmp_path, "mlp", LOSS_ONLY)
    rng = np.random.default_rng(3)
    w1, b1 = rng.normal(0, 0.3, (8, 16)).astype(F32), rng.normal(size=16).astype(F32)
    w2, b2 = rng.normal(0, 0.3, (16, 4)).astype(F32), rng.normal(size=4).astype(F32)
    xs = rng.normal(size=(4, 32, 8)).astype(F32)
    y = rng.integers(0, 4, 32)
    g = dg.value_and_grad(m.loss, wrt=(0, 1, 2, 3))
    ex = dg.export({"loss_grad": g}, tmp_path / "lib", [(w1, b1, w2, b2, xs[0], y)])
    want = np.array([_settled(g, w1, b1, w2, b2, x, y)[0] for x in xs], F32)
    exe = build_c(ex, THREADS, tmp_path / "threads")
    (tmp_path / "threads" / "in.bin").write_bytes(b"".join(a.tobytes() for a in (xs, y, w1, b1, w2, b2, want)))
    done = subprocess.run([str(exe)], cwd=tmp_path / "threads", capture_output=True, text=True, timeout=300,
                          env={**os.environ, "DG_NUM_THREADS": "2"})
    assert done.returncode == 0 and done.stdout.strip() == "0", done.stdout + done.stderr


def test_static_archive_and_products_as_loops(tmp_path):
    """The static archive links as the header says, with the same results; `--blas none` runs
    products as dg's own loops, and its library needs no BLAS."""
    m = _load(tmp_path, "mlp", LOSS_ONLY)
    rng = np.random.default_rng(4)
    args = [rng.normal(0, 0.3, (8, 16)).astype(F32), rng.normal(size=16).astype(F32),
            rng.normal(0, 0.3, (16, 4)).astype(F32), rng.normal(size=4).astype(F32),
            rng.normal(size=(32, 8)).astype(F32), rng.integers(0, 4, 32)]
    g = dg.value_and_grad(m.loss, wrt=(0, 2))
    ex = dg.export({"loss_grad": g}, tmp_path / "lib", [tuple(args)])
    rc, msg, got = run_c(ex, "loss_grad", args, tmp_path / "static", static=True)
    assert rc == 0, msg
    want = _leaves(_settled(g, *args))
    _same_bits(got, want)
    loops = dg.export({"loss_grad": g}, tmp_path / "loops", [tuple(args)], blas="none")
    assert "no BLAS" in loops.header.read_text()
    needed = subprocess.run(["readelf", "-d", str(loops.shared)], capture_output=True, text=True).stdout
    assert "blas" not in needed.lower()
    rc, msg, got = run_c(loops, "loss_grad", args, tmp_path / "loops_run")
    assert rc == 0, msg
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


OUT_BUFFERS = r"""
#include <stdio.h>
#include <string.h>
#include "scaled.h"

int main(void) {
    float x[6] = {1, 2, 3, 4, 5, 6}, into[6] = {0};
    dg_array ax = {x, 2, {2, 3}};
    dg_array out = {into, 2, {2, 3}};
    if (scaled_scale(&ax, 2.0f, &out) != DG_OK || out.data != into) return 1;
    for (int i = 0; i < 6; i++) if (into[i] != 2.0f * x[i]) return 2;
    dg_array wrong = {into, 2, {3, 2}};
    if (scaled_scale(&ax, 2.0f, &wrong) != DG_ERROR_ARGUMENT) return 3;
    if (!strstr(dg_last_error(), "not of the result's shape (2, 3)")) return 4;
    dg_array mine = {0};
    if (scaled_scale(&ax, 3.0f, &mine) != DG_OK || mine.rank != 2 || mine.shape[1] != 3) return 5;
    if (((float *)mine.data)[5] != 18.0f || *dg_last_error()) return 6;
    dg_free(&mine);
    dg_array bad = {x, 1, {6}};
    if (scaled_scale(&bad, 1.0f, &mine) != DG_ERROR_ARGUMENT || !strstr(dg_last_error(), "rank 1")) return 7;
    puts("ok");
    return 0;
}
"""


def test_results_into_buffers_the_caller_gives_and_argument_ranks(tmp_path):
    m = _load(tmp_path, "scaled", "def scale(x: f32[N, M], s: f32) -> f32[N, M]:\n    return x * s\n")
    ex = dg.export(m.scale, tmp_path / "lib", (np.ones((2, 3), F32), F32(1)))
    exe = build_c(ex, OUT_BUFFERS, tmp_path / "run")
    done = subprocess.run([str(exe)], cwd=tmp_path / "run", capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", (done.returncode, done.stdout, done.stderr)


def test_library_links_no_python_and_exports_only_its_functions(tmp_path):
    m = _load(tmp_path, "scaled", "def scale(x: f32[N], s: f32) -> f32[N]:\n    return x * s\n")
    ex = dg.export(m.scale, tmp_path / "lib", (np.ones(3, F32), F32(1)))
    needed = subprocess.run(["readelf", "-d", str(ex.shared)], capture_output=True, text=True).stdout
    libs = [line.split("[")[1].split("]")[0] for line in needed.splitlines() if "(NEEDED)" in line]
    assert not [lib for lib in libs if "python" in lib or "LLVM" in lib or "mlir" in lib.lower()], libs
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(ex.shared)], capture_output=True, text=True).stdout
    names = sorted(line.split()[-1] for line in symbols.splitlines())
    assert names == ["dg_free", "dg_last_error", "scaled_last_error", "scaled_scale"]


def test_prints_are_refused_and_the_command_line_exports(tmp_path):
    m = _load(tmp_path, "talk", "def f(x: f32[N]) -> f32:\n    print(x)\n    return sum(x)\n\n"
                                "def g(x: f32[N], y: f32[N]) -> f32:\n    return sum(x * y)\n")
    with pytest.raises(dg.DgError, match="prints"):
        dg.export(m.f, tmp_path / "lib", (np.ones(3, F32),))
    done = subprocess.run([sys.executable, "-m", "dg", "export", str(tmp_path / "talk.dg"), "--entry", "g",
                           "--args", "f32[3], f32[3]", "-o", str(tmp_path / "cli")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "cli" / "libtalk.so").exists() and "int talk_g(" in (tmp_path / "cli" / "talk.h").read_text()
    done = subprocess.run([sys.executable, "-m", "dg", "export", str(tmp_path / "talk.dg"), "--entry", "h",
                           "-o", str(tmp_path / "cli")], capture_output=True, text=True)
    assert done.returncode != 0 and "has no function 'h'" in done.stderr



HVP = """
def settle(x: f64[N], w: f64[N, N]) -> f64:
    k = 0
    while sum(x * x) > 1.0 and k < 50:
        x = tanh(x @ w) * 0.9
        k = k + 1
    return sum(x * x * x)

def hvp(x: f64[N], w: f64[N, N], v: f64[N]):
    return jvp(grad(settle), (x, w), (v, zeros_like(w)))
"""


def test_forward_over_reverse_through_a_while_loop_from_the_command_line(tmp_path):
    """A Hessian-vector product (jvp of grad) through a data-dependent loop, exported by `dg export`
    with --args; results bit for bit."""
    _load(tmp_path, "hvp", HVP)
    done = subprocess.run([sys.executable, "-m", "dg", "export", str(tmp_path / "hvp.dg"), "--entry", "hvp",
                           "--args", "f64[5], f64[5, 5], f64[5]", "-o", str(tmp_path / "lib")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    m = dg.load(tmp_path / "hvp.dg")
    rng = np.random.default_rng(5)
    args = [rng.normal(size=5) * 2, rng.normal(0, 0.6, (5, 5)), rng.normal(size=5)]
    # (the library from the command line, described as dg.export describes it)
    ex = dg.export(m.hvp, tmp_path / "same", tuple(args))
    for k, lib in enumerate((tmp_path / "lib", tmp_path / "same")):
        ex.shared, ex.static, ex.header = lib / "libhvp.so", lib / "libhvp.a", lib / "hvp.h"
        rc, msg, got = run_c(ex, "hvp", args, tmp_path / f"run{k}")
        assert rc == 0, msg
        _same_bits(got, _leaves(_settled(m.hvp, *args)))
