"""Python tracebacks of dg errors show the user's frames and the one frame of the dg call they
made, not dg's internals (as JAX filters its own); DG_TRACEBACK_FILTERING=off shows everything."""
import traceback

import numpy as np
import pytest

import dg

SRC = """\
def pick(x: f64[N], i: i64) -> f64:
    return x[i]

def outer(x: f64[N], i: i64) -> f64:
    return pick(x, i) * 2.0

def bad(x: f64[N]) -> f64:
    return x @ x @ x
"""


@pytest.fixture(scope="module", params=["interp", "compiled"])
def m(request):
    return dg.loads(SRC, mode=request.param, filename="tb.dg")


def _frames(e: BaseException) -> list:
    return [(f.filename, f.name) for f in traceback.extract_tb(e.__traceback__)]


def _dg_internal(frames) -> list:
    return [f for f in frames if f[0].startswith("<dg") or "/runtime/" in f[0] or "/lowering/" in f[0]
            or "/dsl/" in f[0] or "/dialects/" in f[0] or "/core/" in f[0]]


def users_code(m, *args):
    return m.outer(*args)


def test_a_runtime_error_shows_the_users_frames_and_one_of_dg(m):
    with pytest.raises(dg.DgRuntimeError) as ei:
        users_code(m, np.ones(3), 5)
    frames = _frames(ei.value)
    assert frames[-2][1] == "users_code", frames
    assert len(_dg_internal(frames)) == 1 and frames[-1][1] == "__call__", frames
    assert "tb.dg:2:12" in str(ei.value) and "called from tb.dg:5:12" in str(ei.value)
    # the whole traceback (from the dg call down) is kept on the error
    assert len(_dg_internal(traceback.extract_tb(ei.value.__dg_traceback__))) > 1


def test_errors_before_running_and_from_gradients_are_filtered_too(m):
    with pytest.raises(dg.DgTypeError) as ei:
        m.bad(np.ones(3))
    assert len(_dg_internal(_frames(ei.value))) == 1, _frames(ei.value)
    with pytest.raises(dg.DgRuntimeError) as ei:
        dg.grad(m.outer)(np.ones(3), 7)
    assert len(_dg_internal(_frames(ei.value))) == 1, _frames(ei.value)
    with pytest.raises(dg.DgSyntaxError) as ei:
        dg.loads("def f(x):\n    return x +\n", filename="syn.dg")
    assert len(_dg_internal(_frames(ei.value))) == 1, _frames(ei.value)


def test_the_errors_are_named_as_users_reach_them(m):
    with pytest.raises(dg.DgRuntimeError) as ei:
        m.outer(np.ones(3), 5)
    assert "".join(traceback.format_exception_only(ei.value)).startswith("dg.DgRuntimeError: tb.dg:2:12: error:")


def test_filtering_off_shows_everything(m, monkeypatch):
    monkeypatch.setenv("DG_TRACEBACK_FILTERING", "off")
    with pytest.raises(dg.DgRuntimeError) as ei:
        users_code(m, np.ones(3), 5)
    assert len(_dg_internal(_frames(ei.value))) > 2, _frames(ei.value)


@pytest.mark.slow
def test_filtering_holds_after_an_error_caught_before_any_model_is_loaded(tmp_path):
    """dg loads some of its packages when first used: an error caught before them must not fix
    the set of folders whose frames are hidden (in a process of its own, where they are not yet
    loaded)."""
    import subprocess
    import sys

    script = tmp_path / "early.py"
    script.write_text("import dg, numpy as np\n"
                      "try:\n    dg.load_params('nothing.npz')\nexcept dg.DgError:\n    pass\n"
                      "m = dg.loads('def f(x: f32[N]) -> f32[N]:\\n    return x\\n')\n"
                      "m.f(np.ones((2, 2), np.float32))\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert "must be f32[N]" in out.stderr, out.stderr
    shown = [line for line in out.stderr.splitlines() if line.strip().startswith("File ")]
    assert len(shown) == 2 and str(script) in shown[0], shown


def test_mistakes_made_from_python_are_placed_at_the_users_call(tmp_path):
    """A missing file, an unknown mode, a gradient of a function that returns no scalar: each
    error points at the user's line and the call on it, not at dg's own source."""
    here = __file__
    with pytest.raises(dg.DgError) as e:
        dg.load(tmp_path / "nothing.dg")  # LOAD
    assert str(e.value).startswith(f"{here}:{_line('# LOAD')}:9: error: cannot read"), str(e.value)
    with pytest.raises(dg.DgError) as e:
        dg.loads(SRC, mode="bogus")  # MODE
    assert str(e.value).startswith(f"{here}:{_line('# MODE')}:9: error: unknown mode 'bogus'"), str(e.value)
    m = dg.loads("def loss(x: f32[N]) -> f32[N]:\n    return x\n")
    with pytest.raises(dg.DgError) as e:
        dg.grad(m.loss)(np.ones(2, np.float32))  # GRAD
    assert str(e.value).startswith(f"{here}:{_line('# GRAD')}:9: error: grad() needs a function that returns one "
                                   "float scalar"), str(e.value)


def _line(marker: str) -> int:
    lines = open(__file__).read().splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.rstrip().endswith(marker))
