"""`@dg.function`: Python-embedded dg bodies (LANGUAGE.md section 4).

The bodies below are dg, not Python: names such as `tanh`, `sum`, `zeros`
are dg built-ins. Annotations are evaluated Python objects, so this file
must not use `from __future__ import annotations`.
"""
import re
from pathlib import Path

import numpy as np
import pytest

import dg

from .util import FRONT_END_MODE, check, dg_mode, made_no_code, randn

F32, F64, I64 = np.float32, np.float64, np.int64


def test_spec_example(mode):
    @dg.function(mode=dg_mode(mode))
    def f(x: dg.f32["N", 3]) -> dg.f32:
        return sum(tanh(x) * 2.0)

    for n in (1, 4, 9):
        x = randn(n, 3, seed=n)
        check(f(x), F32(np.sum(np.tanh(x.astype(F64)) * 2.0)), rtol=1e-5)


def test_bare_decorator_uses_dg_mode(mode, monkeypatch):
    monkeypatch.setenv("DG_MODE", dg_mode(mode))

    @dg.function
    def g(x: dg.f32[None]) -> dg.f32[None]:
        return x * 2.0 + 1.0

    x = randn(5, seed=1)
    check(g(x), x * 2.0 + 1.0)


def test_embedded_shape_checks(mode):
    @dg.function(mode=dg_mode(mode))
    def f(points: dg.f32["N", 3], weights: dg.f32["N"]) -> dg.f32[3]:
        return sum(points * weights[:, None], axis=0)

    p, w = randn(4, 3, seed=2), randn(4, seed=3)
    check(f(p, w), (p * w[:, None]).sum(0), rtol=1e-5)
    with pytest.raises(dg.DgTypeError) as ei:
        f(np.zeros((4, 2), F32), w)
    assert "points" in str(ei.value)
    with pytest.raises(dg.DgTypeError) as ei:
        f(p, np.zeros(5, F32))
    assert "weights" in str(ei.value) or "points" in str(ei.value)
    with pytest.raises(dg.DgTypeError) as ei:
        f(p.astype(F64), w)
    assert "points" in str(ei.value)


def test_embedded_control_flow(mode):
    @dg.function(mode=dg_mode(mode))
    def newton(a: dg.f32, tol: dg.f32 = 1e-4):
        y = a
        it = 0
        while abs(y * y - a) > tol:
            y = 0.5 * (y + a / y)
            it += 1
        return y, it

    @dg.function(mode=dg_mode(mode))
    def scan(x: dg.f32["N"], limit: dg.f32):
        s = 0.0
        k = 0
        for i in range(x.shape[0]):
            if x[i] < 0.0:
                continue
            elif s + x[i] > limit:
                break
            else:
                s += x[i]
                k += 1
        return s, k

    y, it = newton(F32(2.0))
    check(y, F32(np.sqrt(2.0)), rtol=1e-4)
    check(it, I64(3))
    x = np.array([1.0, -5.0, 2.0, 3.0, 4.0], F32)
    s, k = scan(x, F32(6.5))
    check(s, F32(6.0))
    check(k, I64(3))


def test_embedded_update_and_defaults(mode):
    @dg.function(mode=dg_mode(mode))
    def set_row(x: dg.f32["N", "M"], i: dg.i64, v: dg.f32 = -1.0):
        y = x
        y[i] = zeros([x.shape[1]]) + v
        return x, y

    x = randn(3, 2, seed=4)
    x0 = x.copy()
    a, b = set_row(x, 1)
    ref = x0.copy()
    ref[1] = -1.0
    check(a, x0)
    check(b, ref)
    _, b = set_row(x, -1, 5.0)
    ref = x0.copy()
    ref[-1] = 5.0
    check(b, ref)
    np.testing.assert_array_equal(x, x0)


def test_embedded_assert_location(mode):
    @dg.function(mode=dg_mode(mode))
    def positive(x: dg.f32["N"]):
        assert min(x) > 0.0, "needs positive input"  # ASSERT-MARKER
        return log(x)

    x = np.array([1.0, 2.0], F32)
    check(positive(x), np.log(x))
    with pytest.raises(dg.DgRuntimeError) as ei:
        positive(np.array([1.0, -2.0], F32))
    msg = str(ei.value)
    lines = Path(__file__).read_text().splitlines()
    lineno = next(i + 1 for i, l in enumerate(lines) if "# ASSERT-MARKER" in l and "assert" in l)
    col = lines[lineno - 1].index("assert") + 1
    assert re.match(rf"^\S*test_embedded\.py:{lineno}:{col}: error: ", msg), msg
    assert "needs positive input" in msg


def test_embedded_type_error_location():
    @dg.function(mode=FRONT_END_MODE)
    def bad(a: dg.f32[3], b: dg.f32[4]):
        return a + b  # TYPE-MARKER

    with made_no_code(), pytest.raises(dg.DgTypeError) as ei:
        bad(np.zeros(3, F32), np.zeros(4, F32))
    lines = Path(__file__).read_text().splitlines()
    lineno = next(i + 1 for i, l in enumerate(lines) if "# TYPE-MARKER" in l and "return" in l)
    assert re.match(rf"^\S*test_embedded\.py:{lineno}:\d+: error: ", str(ei.value)), str(ei.value)
