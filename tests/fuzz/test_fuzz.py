"""The differential fuzzer, bounded: fixed seeds checked in both modes (in a worker
process, so that a crash or a hang fails one test), and checks of the fuzzer's own
parts: the generator is deterministic and writes dg, the checker sees failures,
the minimizer shrinks a planted one. `python tests/fuzz/run.py --minutes N` is the
long run."""
from __future__ import annotations

import ast
import re
import sys
import time

import numpy as np
import pytest

import dg
from dg.dsl.parser import parse as dg_parse

from . import check, gen, minimize, run

LINES = 20  # a little smaller than run.py's programs, to keep compiles short
# The first seeds, but for four whose compiles take longest (the newer parts make programs
# costlier to compile: fewer seeds keep this file within a minute on two cores) ...
SEEDS = [s for s in range(20) if s not in (5, 12, 13, 15)]
# ... and seeds whose programs (of LINES lines) take up the newer parts, together each of them
# (test_feature_seeds_exercise_the_newer_parts says which is missing if the generator changes).
FEATURE_SEEDS = [95, 96, 104, 108, 109, 79]
# What shows that a program took up a newer part of the language.
MARKS = {
    "records": r'\["\w+"\]',
    "tuples": r'for it\d+ in \(|\br\d+\[\d\]|: \((?:f32|f64)',
    "nn": r'\b(?:nn|N)\.\w+\(|^from nn import \w',
    "optim": r'\b(?:optim|O)\.\w+\(|^from optim import \w',
    "conv": r'\b(?:conv2d|max_pool2d|avg_pool2d|conv_block|conv2d_padded)\(',
    "index": r'\w\[\[|\btake\(|\[argm|\[ix\]|\[arange\(',
    "jvp": r'\bjvp\(',
    "checkpoint": r'\bcheckpoint\(',
}


def marked(src):
    return {f for f, mark in MARKS.items() if re.search(mark, src, re.M)}


@pytest.fixture(scope="module")
def worker():
    w = check.Worker()
    yield w
    w.close()


QUICK_SEEDS = [2, 3, 6, 7, 96, 104, 109]  # the README's test command's share (the rest: the slow tier)


@pytest.mark.parametrize("seed", [s if s in QUICK_SEEDS else pytest.param(s, marks=pytest.mark.slow)
                                  for s in SEEDS + FEATURE_SEEDS])
def test_generated_program_agrees_across_modes(worker, seed):
    o = worker.run(seed, lines=LINES, api_grads=False, timeout=60)
    assert not o.failed, f"seed {seed}: {o.kind} [{o.where}]\n{o.detail}\n\n{gen.generate(seed, lines=LINES).src}"
    assert o.calls == 2 and o.grads >= 1, o
    assert o.batched == 1, o  # the entry mapped over a batch, checked against its examples


@pytest.mark.slow
def test_generator_is_deterministic_and_writes_dg():
    features_seen = set()
    for seed in range(200):
        a, b = gen.generate(seed), gen.generate(seed)
        assert a.src == b.src
        assert all(np.array_equal(x, y) and np.asarray(x).dtype == np.asarray(y).dtype
                   for x, y in zip(check.leaves(a.args), check.leaves(b.args)))
        assert all(np.array_equal(x, y) for x, y in zip(check.leaves(a.tangents), check.leaves(b.tangents)))
        dg_parse(a.src, a.filename)  # raises DgSyntaxError
        minimize.parse(a.src)
        assert len(a.src.splitlines()) <= 2 * gen.LINES + 10, a.src  # imports, optimizer steps: a few lines more
        for word, feature in (("while ", "while"), ("break", "break"), ("return", "return"), ("rec", "recursion"),
                              ("grad(loss2", "grad2"), ("for row", "rows"), ("] = ", "update"), ("value_and_grad(", "grad")):
            if word in a.src:
                features_seen.add(feature)
    assert features_seen == {"while", "break", "return", "recursion", "grad2", "rows", "update", "grad"}
    assert gen.generate(1).src != gen.generate(2).src
    # features left out do not appear; on (by default), they do
    assert not any("enumerate(" in gen.generate(s, gen.FEATURES - {"for_unpack"}).src for s in range(100))
    assert any("enumerate(" in gen.generate(s).src for s in range(100))


def test_each_newer_part_appears_and_can_be_turned_off():
    """Each newer part of the language is in FEATURES and shows in some generated program (with
    the inputs it needs: records and tuples as arguments, tangents for dg.jvp); without it, it
    shows in none."""
    assert set(MARKS) <= gen.FEATURES and set(MARKS) == set(gen.DRAWN)
    seen, args = set(), set()
    for seed in range(150):
        p = gen.generate(seed)
        seen |= marked(p.src)
        args |= {type(a).__name__ for a in p.args}
        if p.jvps:
            assert len(p.tangents) == len(p.args)
            args.add("jvp")
    assert seen == set(MARKS), set(MARKS) - seen
    assert {"dict", "tuple", "jvp"} <= args, args
    for feature in MARKS:
        without = gen.FEATURES - {feature}
        assert not any(feature in marked(gen.generate(s, without).src) for s in range(40)), feature


def test_feature_seeds_exercise_the_newer_parts():
    seen = {f: [s for s in FEATURE_SEEDS if f in marked(gen.generate(s, lines=LINES).src)] for f in MARKS}
    assert all(seen.values()), f"no seed of FEATURE_SEEDS exercises {[f for f, s in seen.items() if not s]}"


@pytest.mark.slow
def test_round_trip_through_python_ast_keeps_the_program():
    for seed in range(8):
        p = gen.generate(seed, lines=LINES)
        src = minimize.unparse(minimize.parse(p.src))
        assert check.check(p, modes=("interp",)).kind == check.check(p, src, modes=("interp",)).kind


@pytest.mark.slow
def test_minimizer_shrinks_a_planted_failure():
    """A fake checker 'fails' every program that still calls logsumexp and that the
    interpreter runs without error: the minimizer must keep both."""
    seed = next(s for s in range(500) if gen.generate(s, lines=LINES).src.count("logsumexp(") >= 1
                and len(gen.generate(s, lines=LINES).src.splitlines()) >= 15
                and check.check(gen.generate(s, lines=LINES), modes=("interp",), fd=False).kind == "ok")
    p = gen.generate(seed, lines=LINES)
    seen = []

    def fails(src):
        seen.append(src)
        return "logsumexp(" in src and check.check(p, src, modes=("interp",), fd=False).kind == "ok"

    small = minimize.minimize(p.src, fails, max_tests=400)
    assert "logsumexp(" in small and fails(small)
    assert len(small.splitlines()) <= len(p.src.splitlines()) // 2, small
    assert len(small) < len(p.src) // 2, small
    # text-only failure: shrinks to almost nothing
    tiny = minimize.minimize(p.src, lambda s: "logsumexp(" in s)
    assert len(tiny.splitlines()) <= 3, tiny


def test_checker_reports_what_is_wrong():
    p = gen.generate(1, lines=LINES)
    assert check.check(p, "def main(p0:\n    return 1\n", modes=("interp",)).kind == "rejected"
    bad = check.check(p, "def main(*xs):\n    return 1\n", modes=("interp",))
    assert bad.kind == "rejected" and "DgSyntaxError" in bad.detail
    f = lambda x: x ** 3  # noqa: E731
    x = np.float64(0.7)
    assert check.fd_check(f, (x,), (0,), f(x), 3 * x ** 2, seed=0) is None
    assert "finite differences" in check.fd_check(f, (x,), (0,), f(x), 2 * x ** 2, seed=0)
    assert check.differ((np.float32(1), np.ones(2)), (np.float32(1), np.ones(2)), 1e-6, 0) is None
    assert "dtype" in check.differ(np.float32(1), np.float64(1), 1e-6, 0)
    assert "shape" in check.differ(np.ones(2), np.ones(3), 1e-6, 0)
    assert "values" in check.differ(np.ones(2), np.array([1.0, 1.001]), 1e-6, 0)
    assert "tuple" in check.differ((1, 2), (1,), 1e-6, 0)
    assert check.Outcome("rejected", "compiled: DgTypeError: fuzz_3.dg:2:5: error: 't12' is f64").key() == \
        check.Outcome("rejected", "interp: DgTypeError: fuzz_9.dg:7:1: error: 't4' is f64").key()


class _Dies(check.Worker):
    command = [sys.executable, "-c", "import os, sys; sys.stdin.readline(); sys.stderr.write('boom'); os.abort()"]


class _Hangs(check.Worker):
    """Takes the request, then waits for a line that never comes: it never answers."""
    command = [sys.executable, "-c", "import sys; sys.stdin.readline(); sys.stdin.readline()"]


def test_worker_contains_crashes_and_hangs():
    w = _Dies()
    o = w.run(0, timeout=30)
    w.close()
    assert o.kind == "crash" and "boom" in o.detail, o
    w = _Hangs()
    o = w.run(0, timeout=1)
    w.close()
    assert o.kind == "hang", o


@pytest.mark.slow
def test_run_checks_until_the_deadline_and_counts(monkeypatch):
    """run.fuzz starts programs while its clock is before the deadline. Its clock here moves only
    when a check ends, to the deadline: exactly one program is checked, however long it takes
    (the worker's own cutoff, GRACE past the deadline, is an hour away in real time)."""
    now = [time.time()]
    deadline = now[0] + 3600
    started = []
    checks = check.Worker.run

    def check_then_pass_the_deadline(self, seed, **kwargs):
        started.append((seed, kwargs["cutoff"]))
        outcome = checks(self, seed, **kwargs)
        now[0] = deadline
        return outcome

    monkeypatch.setattr(run, "time", type("Clock", (), {"time": staticmethod(lambda: now[0])}))
    monkeypatch.setattr(check.Worker, "run", check_then_pass_the_deadline)
    said = []
    results = run.fuzz(iter([2, 3]), 1, deadline, 60, gen.FEATURES, said.append)  # 2: a quick one
    assert started == [(2, deadline + run.GRACE)]
    assert [s for s, _ in results] == [2]
    c = run.counts(results + [(9, check.Outcome("error", "x")), (10, check.Outcome("hang"))])
    assert c["programs"] == 3 and c["non-DgError"] == 1 and c["hang"] == 1
    assert c["calls"] == results[0][1].calls >= 1
    assert bool(said) == results[0][1].failed
    timed = [(1, check.Outcome("ok", seconds=2.0)), (2, check.Outcome("ok", seconds=9.5)),
             (3, check.Outcome("hang", seconds=60.0)), (4, check.Outcome("ok", seconds=1.0))]
    assert run.slowest(timed, n=2) == "  seconds          median 2.0, slowest 9.5 s (seed 2), 2.0 s (seed 1)"


@pytest.mark.slow
def test_gradients_of_generated_loss_match_finite_differences():
    """The fd check on its own, for the first f64 program: it passes, and a perturbed gradient fails it."""
    p = next(q for q in (gen.generate(s, lines=LINES) for s in range(1, 200)) if q.dtype == "f64"
             and check.check(q, modes=("interp",)).kind == "ok")
    m = dg.loads(p.src, mode="interp", filename=p.filename)
    wrt = p.grads[0][1]
    value, g = dg.value_and_grad(m.loss, wrt=wrt)(*p.args)
    assert check.fd_check(m.loss, p.args, wrt, value, g, p.seed) is None
    g = check.tree_map(lambda x: np.asarray(x) + 0.01, g)
    assert check.fd_check(m.loss, p.args, wrt, value, g, p.seed) is not None


STRUCTS = """
def loss(p: {"w": f64[N], "t": (f64, f64[N])}, k: f64) -> f64:
    for i in range(3):
        p["w"] = tanh(p["w"] * p["t"][0] + p["t"][1])
    return sum(p["w"] * p["w"]) * k

def main(p, k):
    return loss(p, k), grad(loss, wrt=(0, 1))(p, k), jvp(loss, (p, k), (p, k))
"""


def test_checker_takes_structures_and_compares_jvp_with_gradients(monkeypatch):
    """Records and tuples as arguments: the fd check moves their leaves, the tangents of dg.jvp
    are compared with the gradients; a wrong tangent is a jvp-mismatch."""
    x = np.array([0.3, -0.2, 0.5])
    args = ({"w": x, "t": (np.float64(0.7), x * 0.5)}, np.float64(1.5))
    tangents = ({"w": -x, "t": (np.float64(0.2), x)}, np.float64(0.5))
    p = gen.Program(0, STRUCTS, "f64", "main", args, [("loss", (0, 1))], ["loss"], tangents)
    o = check.check(p, modes=("interp",))
    assert o.kind == "ok" and (o.calls, o.grads, o.jvps, o.fd) == (1, 1, 1, 1), o
    assert [np.asarray(a).tolist() for a in check.leaves(args)] == [0.7, (x * 0.5).tolist(), x.tolist(), 1.5]
    real = dg.jvp
    monkeypatch.setattr(dg, "jvp", lambda f, a, t: (real(f, a, t)[0], 0.0))
    bad = check.check(p, modes=("interp",))
    assert bad.kind == "jvp-mismatch" and "gradients" in bad.detail and bad.where == "jvp loss", bad


@pytest.mark.slow
def test_minimizer_edits_stay_python():
    p = gen.generate(5)
    tree = minimize.parse(p.src)
    edits = minimize.edits(tree)[:200]
    assert len(edits) > 50, edits  # statements, bodies, operands, constants of a 30-line program
    whole = minimize.unparse(tree)
    for e in edits:
        edited = minimize.unparse(minimize.apply(tree, e))
        assert edited != whole, e
        ast.parse(edited.replace("?", minimize.ANY))
