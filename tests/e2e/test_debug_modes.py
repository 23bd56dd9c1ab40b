"""Debugging modes (LANGUAGE.md section 4): numerics checks and shadow mode, in both modes, and
normal compiled code that pays nothing for either."""
import importlib

import numpy as np
import pytest

import dg
from dg.dialects.registry import OPS
from dg.runtime.shadow import ShadowDivergence, differ

SRC = """\
def f(x: f64[N]) -> f64:
    y = log(x)
    return sum(y * 2.0)

def g(x: f64[N]) -> f64:
    return sum(sqrt(x))

def soft(x: f64[N]) -> f64[N]:
    e = exp(x)
    return e / sum(e)

def h(x: f64[N], n: i64) -> f64:
    s = 0.0
    for k in range(n):
        s = s + sum(tanh(x * f64(k)))
    return s + helper(x)

def helper(x: f64[N]) -> f64:
    t = 0.0
    i = 0
    while i < 3:
        t = t + mean(x * x)
        i = i + 1
    return t

def loss(w: f32[4, 3], x: f32[B, 4], y: i64[B]) -> f32:
    return cross_entropy(tanh(x @ w), y)
"""
FILE = "debug.dg"


@pytest.fixture(scope="module", params=["interp", "compiled"])
def numerics(request):
    return dg.loads(SRC, mode=request.param, filename=FILE, check_numerics=True)


def _error(fn, *args) -> str:
    with pytest.raises(dg.DgRuntimeError) as ei:
        fn(*args)
    return str(ei.value)


def test_the_first_op_that_makes_a_nan_or_an_infinity_raises_at_its_line(numerics):
    assert numerics.f(np.ones(3)) == 0.0
    msg = _error(numerics.f, np.array([1.0, -1.0]))
    assert msg.startswith(f"{FILE}:2:9: error: log made a NaN (check_numerics)"), msg
    msg = _error(numerics.f, np.array([1.0, 0.0]))
    assert msg.startswith(f"{FILE}:2:9: error: log made an infinity (check_numerics)"), msg
    msg = _error(numerics.soft, np.array([1.0, 800.0]))
    assert msg.startswith(f"{FILE}:9:9: error: exp made an infinity"), msg  # not the division after it


def test_an_op_of_a_gradient_names_the_forward_line(numerics):
    msg = _error(dg.grad(numerics.g), np.array([1.0, 0.0]))
    assert msg.startswith(f"{FILE}:6:16: error: in the gradient of this line, "), msg
    assert "made an infinity (check_numerics)" in msg and "<dg." not in msg, msg
    np.testing.assert_allclose(dg.grad(numerics.g)(np.array([1.0, 4.0])), [0.5, 0.25])


def test_without_the_option_nothing_is_checked_and_nothing_is_paid():
    m = dg.loads(SRC, mode="compiled", filename=FILE)
    assert np.isnan(m.f(np.array([1.0, -1.0])))
    program = m.f._last.runner
    assert not any("check_numerics" in message for _, message, _ in program.checks)
    checked = dg.loads(SRC, mode="compiled", filename=FILE, check_numerics=True)
    checked.f(np.ones(2))
    assert any("check_numerics" in message for _, message, _ in checked.f._last.runner.checks)


def test_the_environment_variable_turns_the_checks_on(monkeypatch):
    monkeypatch.setenv("DG_CHECK_NUMERICS", "1")
    m = dg.loads(SRC, mode="interp", filename=FILE)
    assert "log made a NaN" in _error(m.f, np.array([-1.0]))

    @dg.function(mode="compiled", check_numerics=True)
    def r(x: dg.f64["N"]) -> dg.f64:
        return sum(log(x))

    assert "log made a NaN" in _error(r, np.array([-1.0]))


# ------------------------------------------------------------------ shadow mode
@pytest.fixture(scope="module")
def shadow():
    return dg.loads(SRC, mode="shadow", filename=FILE)


@pytest.mark.slow
def test_shadow_mode_agrees_where_the_modes_agree(shadow):
    compiled = dg.loads(SRC, mode="compiled", filename=FILE)
    x = np.linspace(0.1, 1.0, 5)
    np.testing.assert_allclose(shadow.h(x, 6), compiled.h(x, 6), rtol=1e-12)
    np.testing.assert_allclose(dg.grad(shadow.h)(x, 6), dg.grad(compiled.h)(x, 6), rtol=1e-12)
    w, xb, y = np.full((4, 3), 0.1, np.float32), np.ones((5, 4), np.float32), np.array([0, 1, 2, 0, 1])
    np.testing.assert_allclose(dg.value_and_grad(shadow.loss)(w, xb, y)[1], dg.value_and_grad(compiled.loss)(w, xb, y)[1],
                               rtol=1e-5)


def test_shadow_mode_reports_a_failure_as_both_modes_do(shadow):
    with pytest.raises(dg.DgRuntimeError) as ei:
        shadow.loss(np.ones((4, 3), np.float32), np.ones((2, 4), np.float32), np.array([0, 7]))
    assert not isinstance(ei.value, ShadowDivergence) and "label 7 is outside [0, 3)" in str(ei.value)


def test_a_broken_lowering_is_caught_at_its_line(monkeypatch):
    """tanh lowered as sin: shadow mode stops at the tanh, naming its line and both values."""
    monkeypatch.setenv("DG_CACHE", "0")  # (a cached object would hide the patched lowering)
    monkeypatch.setattr(OPS["tanh"], "lower", OPS["sin"].lower)
    m = dg.loads(SRC, mode="shadow", filename=FILE)
    with pytest.raises(ShadowDivergence) as ei:
        m.h(np.array([0.5, 1.0]), 3)
    msg = str(ei.value)
    assert msg.startswith(f"{FILE}:15:21: error: shadow: tanh differs between the modes"), msg
    assert "interpreter: [" in msg and "compiled:    [" in msg, msg
    with pytest.raises(ShadowDivergence) as ei:
        dg.grad(m.loss)(np.ones((4, 3), np.float32), np.ones((2, 4), np.float32), np.array([0, 1]))
    assert str(ei.value).startswith(f"{FILE}:27:26: error: shadow: tanh differs"), str(ei.value)


def test_rounding_is_no_divergence_and_more_is():
    assert differ(np.float32([1.0, 2.0]), np.float32([1.0, 2.0 + 2e-7])) is None
    assert differ(np.float32([1.0, 0.0]), np.float32([1.0, 1e-9])) is None  # near zero, against the array's scale
    assert "differ beyond rounding" in differ(np.float32([1.0, 2.0]), np.float32([1.0, 2.001]))
    assert differ(np.array([np.nan, np.inf]), np.array([np.nan, np.inf])) is None
    assert differ(np.array([1, 2]), np.array([1, 3])) is not None
    assert differ(np.zeros(2), np.zeros(3)) == "shapes (2,) and (3,)"


def test_shadow_mode_compares_keys_bit_for_bit_and_prints_once(capsys):
    """A key is u64 in the interpreter and the same 64 bits as i64 in compiled code; each print's
    line shows once (compiled code's run prints it)."""
    m = dg.loads("def main() -> f32:\n    k1, k2 = split(key(0))\n    x = normal(k2, [3])\n"
                 "    print(\"x\", sum(x))\n    return sum(x)\n", mode="shadow", filename=FILE)
    compiled = dg.loads("def main() -> f32:\n    k1, k2 = split(key(0))\n    return sum(normal(k2, [3]))\n")
    capsys.readouterr()
    assert m.main() == compiled.main()
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("x "), lines


@pytest.mark.slow  # (a training run in shadow mode: the slow tier)
def test_shadow_mode_runs_the_digits_sample_to_the_end():
    digits = importlib.import_module("dg.samples.digits")
    assert digits.train(mode="shadow", verbose=False) == digits.train(mode="compiled", verbose=False)


def test_the_mode_comes_from_the_environment_and_the_command_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("DG_MODE", "shadow")
    m = dg.loads(SRC, filename=FILE)
    assert m.h.mode == "shadow" and m.h(np.ones(2), 2) > 0
    monkeypatch.delenv("DG_MODE")
    from dg.cli import main

    f = tmp_path / "m.dg"
    f.write_text("def main() -> f32:\n    x = zeros(3) - 1.0\n    return sum(sqrt(x))\n")
    assert main(["run", str(f), "--mode", "shadow"]) == 0
    assert capsys.readouterr().out.strip() == "nan"
    assert main(["run", str(f), "--check-numerics"]) == 1
    assert ":3:16: error: sqrt made a NaN" in capsys.readouterr().err
