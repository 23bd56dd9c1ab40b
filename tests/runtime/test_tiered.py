"""Tiered start (DG_TIERED=1): the interpreter runs the first calls while a worker process compiles;
then compiled code runs them, and the disk cache has it for the next process."""
import numpy as np
import pytest

import dg
from dg.runtime import tiered
from dg.runtime.cpu import CpuProgram

SRC = """
def step(w: f32[N, M], x: f32[B, N]) -> (f32, f32[N, M]):
    return value_and_grad(loss)(w, x)

def loss(w: f32[N, M], x: f32[B, N]) -> f32:
    return sum(tanh(x @ w) ** 2)

def pick(x: f32[N], i: i64) -> f32:
    return x[i]
"""


@pytest.fixture
def tiered_env(monkeypatch, tmp_path):
    monkeypatch.setenv("DG_TIERED", "1")
    monkeypatch.setenv("DG_CACHE_DIR", str(tmp_path))
    return tmp_path


def _args():
    rng = np.random.default_rng(0)
    return rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)


def test_the_interpreter_runs_the_first_calls_then_compiled_code(tiered_env):
    w, x = _args()
    want = dg.loads(SRC, mode="interp").step(w, x)
    m = dg.loads(SRC, mode="compiled", filename="tiered.dg")
    first = m.step(w, x)
    runner = m.step._last.runner
    assert isinstance(runner, tiered.Tiered) and runner.program is None  # the worker takes longer than a call
    program = runner.wait()
    assert isinstance(program, CpuProgram) and not program.from_cache
    later = m.step(w, x)
    assert m.step._last.runner is program
    for a, b, c in zip(first, later, want):
        np.testing.assert_allclose(a, c, rtol=1e-6)
        np.testing.assert_allclose(b, c, rtol=1e-5, atol=1e-6)
    # the next process (a fresh module) finds the worker's code in the disk cache: no interpreter
    m2 = dg.loads(SRC, mode="compiled", filename="tiered.dg")
    m2.step(w, x)
    assert isinstance(m2.step._last.runner, CpuProgram) and m2.step._last.runner.from_cache


def test_a_failing_worker_leaves_the_compile_to_this_process(tiered_env, monkeypatch):
    monkeypatch.setattr(tiered.sys, "executable", "/bin/false")  # the worker exits at once, having done nothing
    w, x = _args()
    m = dg.loads(SRC, mode="compiled", filename="tiered_fail.dg")
    m.step(w, x)  # (the worker may have ended before the call did: then this call compiled)
    runner = m.step._last.runner
    program = runner.wait() if isinstance(runner, tiered.Tiered) else runner
    assert isinstance(program, CpuProgram) and not program.from_cache
    np.testing.assert_allclose(m.step(w, x)[0], dg.loads(SRC, mode="interp").step(w, x)[0], rtol=1e-5)


def test_errors_are_the_compiled_modes_while_the_interpreter_runs(tiered_env):
    m = dg.loads(SRC, mode="compiled", filename="tiered_err.dg")
    x = np.arange(4, dtype=np.float32)
    assert m.pick(x, 2) == 2.0
    assert isinstance(m.pick._last.runner, tiered.Tiered)
    with pytest.raises(dg.DgRuntimeError, match=r"tiered_err\.dg:9:12: error: IndexError: index 7 is out of bounds") as e1:
        m.pick(x, 7)
    runner = m.pick._last.runner
    if isinstance(runner, tiered.Tiered):
        runner.wait()
    with pytest.raises(dg.DgRuntimeError) as e2:
        m.pick(x, 7)
    assert str(e1.value) == str(e2.value)
    with pytest.raises(dg.DgError, match=r"tiered_err\.dg:8:10: error: argument 'x' of pick\(\)"):
        m.pick(np.zeros((2, 2), np.float32), 0)
