"""Notebooks: the `%%dg` cell magic (`%load_ext dg`) in IPython's shell, and the HTML that
dg functions and modules show there (`_repr_html_`)."""
import builtins
import sys

import numpy as np
import pytest

import dg

SRC = (
    "def f(x: f32[N]) -> f32:\n"
    "    return sum(tanh(x) * 2.0)\n"
    "\n"
    "def twice(x):\n"
    "    return x * 2.0\n"
)


@pytest.fixture(scope="module")
def ip(tmp_path_factory):
    """IPython's shell with the extension loaded; what making it changes in the process is undone after."""
    pytest.importorskip("IPython", reason="the notebook extension needs IPython (pip install dg[notebook])")
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    mp = pytest.MonkeyPatch()
    mp.setenv("IPYTHONDIR", str(tmp_path_factory.mktemp("ipython")))
    main, names = sys.modules["__main__"], set(vars(builtins))
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    config.InteractiveShell.colors = "nocolor"
    shell = InteractiveShell.instance(config=config)
    shell.run_line_magic("load_ext", "dg")
    shell.run_cell("import numpy as np")
    yield shell
    InteractiveShell.clear_instance()
    sys.modules["__main__"] = main
    for n in set(vars(builtins)) - names:
        delattr(builtins, n)
    mp.undo()


def _run(ip, capsys, cell):
    """(the result of running the cell, what it printed)."""
    capsys.readouterr()
    result = ip.run_cell(cell)
    captured = capsys.readouterr()
    return result, captured.out + captured.err


@pytest.mark.parametrize("mode", ["interp", "compiled"])
def test_cell_functions_become_names_of_the_notebook(ip, mode):
    ip.run_cell_magic("dg", f"--mode {mode}", SRC)
    assert ip.user_ns["f"].mode == mode and ip.user_ns["twice"].mode == mode
    result = ip.run_cell("y = f(np.ones(3, np.float32)); z = twice(np.arange(3.0))")
    assert result.success
    np.testing.assert_allclose(ip.user_ns["y"], 3 * 2 * np.tanh(1.0), rtol=1e-6)
    np.testing.assert_array_equal(ip.user_ns["z"], [0.0, 2.0, 4.0])


def test_name_option_binds_the_module(ip):
    ip.run_cell_magic("dg", "--mode interp --name layers", "def g(x):\n    return x + 1.0\n")
    assert ip.user_ns["layers"].functions == ["g"]
    assert ip.user_ns["layers"].g is ip.user_ns["g"]


def test_errors_point_at_the_cell_without_a_traceback(ip, capsys):
    result, out = _run(ip, capsys, "%%dg --mode interp\ndef h(x: f32[3]) -> f32:\n    return sum(x) + zz\n")
    assert not result.success and isinstance(result.error_in_exec, dg.DgTypeError)
    assert ":2:21: error: name 'zz' is not defined\n      return sum(x) + zz\n                      ^" in out
    assert out.lstrip().startswith("<dg cell ")
    assert "Traceback" not in out and "program.py" not in out

    result, out = _run(ip, capsys, "%%dg\ndef h(x: f32[3]) -> f32:\n    return sum(x) +\n")
    assert isinstance(result.error_in_exec, dg.DgSyntaxError)
    assert ":2:20: error: unexpected end of line" in out and "Traceback" not in out


def test_bad_options_are_dg_errors(ip, capsys):
    result, out = _run(ip, capsys, "%%dg --device tpu\ndef h(x):\n    return x\n")
    assert isinstance(result.error_in_exec, dg.DgError)
    assert "unknown device 'tpu'" in out and "Traceback" not in out


def test_a_failing_call_names_the_cells_line(ip):
    ip.run_cell_magic("dg", "--mode interp", "def checked(x: f32[3]) -> f32:\n    assert sum(x) > 100.0\n"
                      "    return sum(x)\n")
    result = ip.run_cell("checked(np.ones(3, np.float32))")
    assert isinstance(result.error_in_exec, dg.DgRuntimeError)
    message = str(result.error_in_exec)
    assert message.startswith("<dg cell ") and ":2:5: error: assertion failed\n      assert sum(x) > 100.0" in message


def test_functions_show_as_html_in_the_notebook(ip):
    ip.run_cell_magic("dg", "--mode interp --name cell", SRC)
    f = ip.user_ns["f"]
    shown, _ = ip.display_formatter.format(f)
    page = shown["text/html"]
    assert "<code>def f(x: f32[N]) -&gt; f32</code>" in page  # the signature, escaped
    assert "&lt;dg cell " in page and "<dg cell" not in page  # where it is defined, escaped
    assert "interp, cpu" in page and "none yet" in page
    assert "<details>" not in page  # no specialization yet, and none made for the page
    assert not f._cache
    f(np.ones(3, np.float32))
    page = f._repr_html_()
    assert "<code>f(f32[N])</code>" in page
    assert "<details>" in page and "func.func @f(" in page and "&quot;dg.tanh&quot;" in page
    listing, _ = ip.display_formatter.format(ip.user_ns["cell"])
    assert "<code>twice</code>" in listing["text/html"] and "def twice(x)" in listing["text/html"]


def test_html_of_gradients_modules_and_embedded_functions():
    m = dg.loads("def loss(w: f32[N], x: f32[N]) -> f32:\n    return sum(w * x)\n", mode="interp",
                 filename="<a & b>")
    g = dg.grad(m.loss)
    assert "grad(loss, wrt=0)" in g._repr_html_() and "<details>" not in g._repr_html_()
    g(np.ones(2, np.float32), np.ones(2, np.float32))
    page = g._repr_html_()
    assert "&lt;a &amp; b&gt;:1" in page and "<details>" in page
    assert "<code>grad(loss, wrt=0)(f32[N], f32[N])</code>" in page
    assert "__dg_" not in m._repr_html_() and "<code>loss</code>" in m._repr_html_()
    page = embedded._repr_html_()
    assert "def embedded(x: f32[N, 3]) -&gt; f32" in page and "test_notebook.py:" in page


@dg.function(mode="interp")
def embedded(x: dg.f32["N", 3]) -> dg.f32:
    return sum(tanh(x) * 2.0)
