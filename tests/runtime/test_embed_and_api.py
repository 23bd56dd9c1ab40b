"""@dg.function, modes, IR stages and interpreter errors from the Python API."""
import bdb
import logging
import re

import numpy as np
import pytest

import dg


@dg.function(mode="interp")
def f(x: dg.f32["N", 3]) -> dg.f32:
    return sum(tanh(x) * 2.0)


@dg.function(mode="interp")
def g(x: dg.f32["N", 3], k: dg.i64):
    y = x
    for i in range(k):
        y = y * 0.5
    return f(y), y


def test_embedded_function_and_symbolic_sizes():
    for n in (1, 4, 7):
        x = np.random.default_rng(n).standard_normal((n, 3)).astype(np.float32)
        np.testing.assert_allclose(f(x), np.sum(np.tanh(x) * 2), rtol=1e-5)
    assert len(f._cache) == 1  # other N reuse the same specialization


def test_embedded_calls_embedded():
    x = np.ones((2, 3), np.float32)
    s, y = g(x, 3)
    np.testing.assert_allclose(y, x / 8)
    np.testing.assert_allclose(s, np.sum(np.tanh(x / 8) * 2), rtol=1e-6)


def test_embedded_error_points_at_the_python_file():
    @dg.function(mode="interp")
    def bad(x: dg.f32[3]):
        return x + undefined_thing  # noqa: F821

    with pytest.raises(dg.DgTypeError) as e:
        bad(np.zeros(3, np.float32))
    assert str(e.value).startswith(f"{__file__}:")
    assert "name 'undefined_thing' is not defined" in str(e.value)


def test_unknown_mode_and_unbuilt_device():
    with pytest.raises(dg.DgError, match="unknown mode"):
        dg.loads("def f(x):\n    return x\n", mode="fast")
    m = dg.loads("def f(x):\n    return x\n", mode="compiled", device="cuda")
    from dg.runtime.cuda import driver_status

    ok, reason = driver_status()
    if ok:  # a GPU runs it
        assert m.f(1.0) == 1.0
        return
    with pytest.raises(dg.DgError, match="device 'cuda' needs"):
        m.f(1.0)


def test_dg_mode_environment(monkeypatch):
    src = "def f(x):\n    return x * 2.0\n"
    monkeypatch.setenv("DG_MODE", "interp")
    m = dg.loads(src)
    assert m.f(2.0) == 4.0 and m.f.mode == "interp"
    monkeypatch.setenv("DG_MODE", "compiled")
    m = dg.loads(src)
    assert m.f(2.0) == 4.0 and m.f.mode == "compiled"
    monkeypatch.delenv("DG_MODE")
    m = dg.loads(src)
    assert m.f(2.0) == 4.0 and m.f.mode == "compiled"  # the default


def test_compiled_subset_matches_interp():
    src = ("def f(x: f32[N, 3], w: f32[3, M], n: i64):\n"
           "    z = tanh(x @ w) * 2.0 + 1.0\n"
           "    s = 0.0\n"
           "    k = 0\n"
           "    while k < n:\n"
           "        s = s + mean(z) * 0.5\n"
           "        k += 1\n"
           "    return z, s, max(x, axis=1, keepdims=True), x // 0.3, -x % 0.25\n")
    a, b = dg.loads(src, mode="interp"), dg.loads(src, mode="compiled")
    rng = np.random.default_rng(0)
    for n in (2, 5):
        x = rng.standard_normal((n, 3)).astype(np.float32)
        w = rng.standard_normal((3, 4)).astype(np.float32)
        for u, v in zip(a.f(x, w, 3), b.f(x, w, 3)):
            np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6)
    assert "linalg.matmul" in b.f.ir("linalg")
    assert "llvm.func @dg.fn.f(" in b.f.ir("llvm")


def test_ir_stages():
    m = dg.loads("def f(x: f32[N]) -> f32[N]:\n    return exp(x) + exp(x)\n", mode="interp")
    text = m.f.ir("dg")  # from the annotations, before any call
    assert text.count('"dg.exp"') == 2
    assert m.f.ir("opt").count('"dg.exp"') == 1  # cse
    with pytest.raises(dg.DgError, match="unknown stage"):
        m.f.ir("nope")
    m2 = dg.loads("def f(x):\n    return x * 2\n", mode="interp")
    with pytest.raises(dg.DgError, match="args="):
        m2.f.ir("dg")
    assert "tensor<2x2xf32>" in m2.f.ir("dg", args=(np.ones((2, 2), np.float32),))


def test_runtime_error_points_at_dg_line():
    m = dg.loads("def f(x, i):\n    y = x * 2\n    return y[i]\n", mode="interp", filename="idx.dg")
    with pytest.raises(dg.DgRuntimeError) as e:
        m.f(np.ones(3, np.float32), 7)
    assert str(e.value).startswith("idx.dg:3:12: error:")
    assert "out of bounds" in str(e.value)


def test_assert_and_print(capsys):
    m = dg.loads('def f(x):\n    print("x is", x, "!")\n    assert x > 0, "x must be positive"\n    return x\n',
                 mode="interp", filename="a.dg")
    assert m.f(2.0) == 2.0
    assert capsys.readouterr().out == "x is 2.0 !\n"
    with pytest.raises(dg.DgRuntimeError) as e:
        m.f(-1.0)
    assert str(e.value).startswith("a.dg:3:5: error: assertion failed: x must be positive")


@pytest.mark.parametrize("mode", ["interp", "compiled"])
def test_breakpoint_has_dg_variables(monkeypatch, capsys, mode):
    seen = {}

    def hook(*a, **k):
        import sys
        frame = sys._getframe(1)
        seen.update(frame.f_locals)

    monkeypatch.setattr("sys.breakpointhook", hook)
    m = dg.loads("def f(x, v: f32[3]):\n    y = x + 1.0\n    for i in range(2):\n        y = y * 2.0\n"
                 "        breakpoint()\n    return y\n", filename="bp.dg", mode=mode)
    assert m.f(1.0, np.arange(3, dtype=np.float32)) == 8.0
    assert seen["x"] == 1.0 and seen["y"] == 8.0 and seen["i"] == 1
    np.testing.assert_array_equal(seen["v"], [0, 1, 2])
    assert "bp.dg:5:9: breakpoint; dg variables: " in capsys.readouterr().err


@pytest.mark.parametrize("mode", ["interp", "compiled"])
def test_breakpoint_shows_scalars_as_numpy_scalars_in_both_modes(monkeypatch, mode):
    seen = {}

    def hook(*a, **k):
        import sys
        seen.update(sys._getframe(1).f_locals)

    monkeypatch.setattr("sys.breakpointhook", hook)
    m = dg.loads("def f(x: f32, v: f32[3]) -> f32:\n    s = sum(v)\n    u = v[1]\n    breakpoint()\n    return s\n",
                 mode=mode)
    m.f(np.float32(1.0), np.arange(3, dtype=np.float32))
    shown = {k: repr(v) for k, v in seen.items()}
    assert shown == {"x": "np.float32(1.0)", "v": "array([0., 1., 2.], dtype=float32)", "s": "np.float32(3.0)",
                     "u": "np.float32(1.0)"}, shown



STOPS = """
def f(x: f32, n: i64) -> f32:
    y = x
    for i in range(n):
        y = y * 2.0
        print("before", i)
        breakpoint()
        print("after", i)
    assert y < 100.0, "too big"
    print("end", y)
    return y
"""


@pytest.mark.parametrize("mode", ["interp", "compiled"])
@pytest.mark.parametrize("quit_with", [bdb.BdbQuit, KeyboardInterrupt])
def test_quitting_the_debugger_stops_the_call(monkeypatch, capsys, mode, quit_with):
    """`q` in pdb (BdbQuit from the breakpoint hook) ends the call at the breakpoint with a located
    DgRuntimeError, Ctrl-C with KeyboardInterrupt; nothing after it runs (no print), and the
    function is callable again. Compiled, the hook runs in a callback from machine code, which
    cannot unwind: the call winds down and the exception is raised after it."""
    def hook(*a, **k):
        raise quit_with()

    monkeypatch.setattr("sys.breakpointhook", hook)
    m = dg.loads(STOPS, filename="stops.dg", mode=mode)
    expected = dg.DgRuntimeError if quit_with is bdb.BdbQuit else KeyboardInterrupt
    with pytest.raises(expected) as e:
        m.f(np.float32(1.0), 3)
    if expected is dg.DgRuntimeError:
        assert str(e.value).startswith("stops.dg:7:9: error: stopped at this breakpoint: the debugger was quit")
    assert capsys.readouterr().out == "before 0\n"
    monkeypatch.setattr("sys.breakpointhook", lambda *a, **k: None)
    assert m.f(np.float32(1.0), 2) == 4.0
    assert capsys.readouterr().out == "before 0\nafter 0\nbefore 1\nafter 1\nend 4.0\n"


@pytest.mark.parametrize("mode", ["interp", "compiled"])
def test_nothing_is_printed_after_a_failed_check(capsys, mode):
    """Compiled code winds down after a failed assert instead of stopping at once; what it would
    still print is not printed, as in the interpreter, which stops there."""
    m = dg.loads(STOPS, filename="stops.dg", mode=mode)
    with pytest.raises(dg.DgRuntimeError, match="too big"):
        m.f(np.float32(200.0), 0)
    assert capsys.readouterr().out == ""

def test_interpreter_translates_once():
    """Running a specialization does not touch the MLIR bindings again."""
    m = dg.loads("def f(x):\n    for i in range(3):\n        x = x + 1.0\n    return x\n", mode="interp")
    m.f(0.0)
    comp = m.f._last
    comp.stages.clear()  # the parsed modules are no longer needed to run
    assert m.f(1.0) == 4.0
    assert "for " in comp.runner.source()


def test_imports(tmp_path):
    (tmp_path / "layers.dg").write_text("def dense(x, w):\n    return x @ w\n\ndef double(x):\n    return x * 2\n")
    (tmp_path / "model.dg").write_text(
        "import layers\nfrom layers import double\n\ndef f(x, w):\n    return double(layers.dense(x, w))\n")
    m = dg.load(tmp_path / "model.dg", mode="interp")
    x, w = np.ones((2, 3), np.float32), np.ones((3, 4), np.float32)
    np.testing.assert_allclose(m.f(x, w), 2 * x @ w)


def test_missing_import_is_located(tmp_path):
    (tmp_path / "model.dg").write_text("import nothere\n\ndef f(x):\n    return x\n")
    with pytest.raises(dg.DgTypeError) as e:
        dg.load(tmp_path / "model.dg", mode="interp")
    assert str(e.value).startswith(f"{tmp_path / 'model.dg'}:1:1: error: cannot find module 'nothere'")


def test_interpreter_index_division_rounds_toward_zero():
    """arith.divsi (the autodiff pass's iteration counter) in the interpreter, as MLIR defines it."""
    from dg.runtime.interp import _divsi

    assert [_divsi(7, 2), _divsi(-7, 2), _divsi(7, -2), _divsi(-7, -2), _divsi(0, 3)] == [3, -3, -3, 3, 0]


def test_results_are_freed_when_dropped_without_waiting_for_gc():
    """Returned buffers belong to their arrays: dropping the results frees them at once (no
    reference cycle holds them until a garbage collection)."""
    import gc
    import weakref

    m = dg.loads("def two(x: f32[N]):\n    return x * 2.0, (x + 1.0, x - 1.0)\n", mode="compiled")
    x = np.ones(1000, np.float32)
    gc.disable()  # before the call: a collection in between would hide a cycle
    try:
        a, (b, c) = m.two(x)
        owners = [weakref.ref(r.base if r.base is not None else r) for r in (a, b, c)]
        assert float(b[0]) == 2.0
        del a, b, c
        alive = [o() is not None for o in owners]
    finally:
        gc.enable()
    assert alive == [False, False, False]


def test_compiled_calls_leave_no_garbage_for_the_collector():
    import gc

    m = dg.loads("def f(x: f32[N], k: i64):\n    return x * 2.0, x[k:], sum(x)\n", mode="compiled")
    for n in (5, 6, 7):  # new sizes too: nothing per size may pile up
        m.f(np.ones(n, np.float32), 1)
    gc.collect()
    gc.disable()
    try:
        for n in (5, 9, 13, 17):
            a, b, s = m.f(np.ones(n, np.float32), 2)
            assert a.shape == (n,) and b.shape == (n - 2,) and float(s) == n
        del a, b, s
        assert gc.collect() == 0
    finally:
        gc.enable()


@pytest.mark.parametrize("mode", ["interp", "compiled"])
def test_compiles_are_logged_with_their_reason_and_times(monkeypatch, capsys, caplog, mode):
    src = "def f(x: f32[N]) -> f32:\n    return sum(x * 2.0)\n"
    monkeypatch.setenv("DG_LOG_COMPILES", "1")
    m = dg.loads(src, mode=mode, filename="logged.dg")
    m.f(np.ones(3, np.float32))
    m.f(np.ones(5, np.float32))  # the same specialization (N is symbolic): nothing to log
    m.f(np.ones(3, np.int64).astype(np.float32)[None, :][0])
    err = capsys.readouterr().err + caplog.text
    assert "f(f32[N]): first call: emitted in " in err
    assert f"f(f32[N]): ready to run ({mode}, cpu) in " in err
    assert err.count("first call") == 1 and "new signature" not in err
    if mode == "compiled":
        assert re.search(r" f: (compiled in [0-9.e-]+ s: passes [0-9.e-]+ s, LLVM -O[23] [0-9.e-]+ s|loaded from the disk cache)", err)
    monkeypatch.delenv("DG_LOG_COMPILES")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="dg"):  # (LANGUAGE.md section 4: logger "dg", level INFO)
        dg.loads(src, mode=mode, filename="quiet.dg").f(np.ones(2, np.float32))
    assert "f(f32[N]): first call" in caplog.text
    assert {(r.name, r.levelno) for r in caplog.records} == {("dg", logging.INFO)}
    assert "first call" not in capsys.readouterr().err
