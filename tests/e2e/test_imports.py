"""Imports of .dg modules from the importing file's folder (LANGUAGE.md section 1.4)."""
import numpy as np
import pytest

import dg

from .util import PROGRAMS, check, dg_mode, load_prog, randn

F32 = np.float32


def _params():
    return (randn(5, 4, seed=1), randn(4, 8, seed=2) * F32(0.5), randn(8, seed=3),
            randn(8, 3, seed=4) * F32(0.5), randn(3, seed=5))


def test_import_module(mode):
    m = load_prog("use_import.dg", mode)
    x, w1, b1, w2, b2 = _params()
    check(m.mlp(x, w1, b1, w2, b2), np.maximum(x @ w1 + b1, 0.0) @ w2 + b2, rtol=1e-5, atol=1e-6)
    check(m.mlp(x[:2].copy(), w1, b1, w2, b2), np.maximum(x[:2] @ w1 + b1, 0.0) @ w2 + b2, rtol=1e-5, atol=1e-6)
    v = randn(3, seed=6)
    a, b, c = m.scaled(v)
    check(a, v * 2.0)
    check(b, v * 3.0)
    check(c, -v)


def test_from_import(mode):
    m = load_prog("use_from.dg", mode)
    x, w1, b1, w2, b2 = _params()
    check(m.mlp(x, w1, b1, w2, b2), (np.tanh(x @ w1 + b1) @ w2 + b2) * 0.5, rtol=1e-5, atol=1e-6)


def test_imported_module_directly(mode):
    m = load_prog("layers.dg", mode)
    x, w1, b1, _, _ = _params()
    check(m.dense_relu(x, w1, b1), np.maximum(x @ w1 + b1, 0.0), rtol=1e-5, atol=1e-6)


def test_imports_resolve_from_the_file_folder_not_cwd(mode, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DG_PATH", raising=False)
    m = dg.load(str(PROGRAMS / "use_from.dg"), mode=dg_mode(mode))
    x, w1, b1, w2, b2 = _params()
    check(m.mlp(x, w1, b1, w2, b2), (np.tanh(x @ w1 + b1) @ w2 + b2) * 0.5, rtol=1e-5, atol=1e-6)


def test_import_from_dg_path(mode, tmp_path, monkeypatch):
    monkeypatch.setenv("DG_PATH", str(PROGRAMS))
    src = tmp_path / "main_prog.dg"
    src.write_text("from layers import scale\n\ndef f(x):\n    return scale(x, 4.0)\n")
    m = dg.load(str(src), mode=dg_mode(mode))
    v = randn(3, seed=7)
    check(m.f(v), v * 4.0)


def test_missing_module_is_an_error(mode, tmp_path, monkeypatch):
    monkeypatch.delenv("DG_PATH", raising=False)
    src = tmp_path / "lonely.dg"
    src.write_text("import no_such_module_here\n\ndef f(x):\n    return x\n")
    with pytest.raises(dg.DgError) as ei:
        m = dg.load(str(src), mode=dg_mode(mode))
        m.f(np.zeros(2, F32))
    assert "no_such_module_here" in str(ei.value)
    assert str(ei.value).startswith(str(src) + ":1:") or "lonely.dg:1:" in str(ei.value).splitlines()[0]
