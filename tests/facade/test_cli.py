"""The command line: run, check, ir (parsed back by opt), opt, graph, --config."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dg.cli import main

SAMPLES = Path(__file__).resolve().parent.parent.parent / "samples"


def test_run_prints_the_result(capsys):
    assert main(["run", str(SAMPLES / "tree.dg"), "--mode", "interp"]) == 0
    out = capsys.readouterr().out.strip()
    float(out)  # a scalar


def test_run_missing_entry_is_an_error(capsys, tmp_path):
    f = tmp_path / "m.dg"
    f.write_text("def f(x):\n    return x\n")
    assert main(["run", str(f)]) == 1
    assert "no function 'main'" in capsys.readouterr().err


def test_check_reports_every_error(tmp_path, capsys):
    f = tmp_path / "bad.dg"
    f.write_text(
        "def f(x: f32[3], y: f32[4]):\n"
        "    z = x + y\n"
        "    return nope\n"
        "\n"
        "def g(a: f32[2, 3]):\n"
        "    return a @ a\n"
    )
    assert main(["check", str(f)]) == 1
    err = capsys.readouterr().err
    assert f"{f}:2:9: error: add: shapes [3] and [4] do not broadcast" in err
    assert f"{f}:3:12: error: name 'nope' is not defined" in err
    assert f"{f}:6:12: error: matmul: inner sizes differ" in err
    assert "3 errors" in err
    assert "\n          ^" in err  # the caret under column 9 of line 2


def test_check_ok(capsys):
    assert main(["check", str(SAMPLES / "mlp.dg")]) == 0
    assert "ok" in capsys.readouterr().out


@pytest.mark.slow
def test_ir_output_parses_back_with_opt(tmp_path):
    ir = subprocess.run([sys.executable, "-m", "dg", "ir", str(SAMPLES / "tree.dg"), "--fn", "tree"],
                        capture_output=True, text=True, check=True).stdout
    assert "func.func @tree" in ir and "func.call @tree" in ir
    f = tmp_path / "tree.mlir"
    f.write_text(ir)
    out = subprocess.run([sys.executable, "-m", "dg", "opt", str(f), "--passes", "canonicalize,cse"],
                         capture_output=True, text=True, check=True).stdout
    assert "func.func @tree" in out


def test_ir_with_args_signature(capsys):
    assert main(["ir", str(SAMPLES / "mlp.dg"), "--fn", "dense", "--args", "f32[2, 4], f32[4, 5], f32[5]"]) == 0
    out = capsys.readouterr().out
    assert "tensor<2x4xf32>" not in out  # annotated dims stay symbolic
    assert "tensor<?x?xf32>" in out


def test_ir_stage_ptx(capsys):
    assert main(["ir", str(SAMPLES / "mlp.dg"), "--fn", "dense", "--stage", "ptx"]) == 0
    out = capsys.readouterr().out
    assert ".target sm_90" in out and ".entry" in out


def test_ir_unknown_stage_is_a_clear_error(capsys):
    assert main(["ir", str(SAMPLES / "mlp.dg"), "--fn", "dense", "--stage", "sass"]) == 1
    assert "unknown stage 'sass' (expected one of dg, batch, grad, opt, linalg, bufferized, llvm, gpu, ptx)" in \
        capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["ir", "--help"])
    assert "stage to show: dg, batch, grad, opt, linalg, bufferized, llvm, gpu, ptx" in " ".join(capsys.readouterr().out.split())


def test_ir_args_take_numpy_names_and_refuse_unknown_ones(capsys):
    """`float32[4,3]` was a KeyError out of the CLI; NumPy's names are taken, others are a DgError."""
    assert main(["ir", str(SAMPLES / "mlp.dg"), "--fn", "dense", "--args", "float32[2, 4], float32[4, 5], float32[5]"]) == 0
    assert "tensor<?x?xf32>" in capsys.readouterr().out
    assert main(["ir", str(SAMPLES / "mlp.dg"), "--fn", "dense", "--args", "floot[2, 4], f32[4, 5], f32[5]"]) == 1
    assert "--args: unknown element type 'floot'" in capsys.readouterr().err


def test_a_missing_file_is_a_dg_error(capsys, tmp_path):
    for argv in (["opt", str(tmp_path / "none.mlir")], ["run", str(tmp_path / "none.dg")]):
        assert main(argv) == 1
        assert capsys.readouterr().err.startswith(f"dg {argv[0]}: error: cannot read {tmp_path}")


def test_errors_with_no_place_in_a_file_name_the_command_and_option(capsys):
    assert main(["run", str(SAMPLES / "mlp.dg"), "--entry", "nope"]) == 1
    assert capsys.readouterr().err.startswith(f"dg run: error: --entry nope: {SAMPLES / 'mlp.dg'} has no function")


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.startswith("dg 0.")


def test_config_prints_every_variable(capsys, monkeypatch):
    from dg.core.config import VARIABLES

    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DG_MODE", "interp")
    monkeypatch.setenv("DG_NUM_THREADS", "3")
    assert main(["--config"]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].split() == ["VARIABLE", "VALUE", "DEFAULT", "MEANING"] and not err
    rows = {line.split()[0]: line for line in lines[1:]}
    assert list(rows) == list(VARIABLES)
    value_at = lines[0].index("VALUE")
    default_at, meaning_at = lines[0].index("DEFAULT"), lines[0].index("MEANING")
    for name, v in VARIABLES.items():
        line = rows[name]
        value = {"DG_MODE": "interp", "DG_NUM_THREADS": "3"}.get(name, "(unset)")
        assert line[value_at:default_at].strip() == value, line
        assert line[default_at:meaning_at].strip() == v.default, line
        assert line[meaning_at:] == v.meaning, line


def test_config_names_a_bad_value(capsys, monkeypatch):
    monkeypatch.setenv("DG_CACHE", "maybe")
    assert main(["--config"]) == 1
    out, err = capsys.readouterr()
    assert any(line.split()[:2] == ["DG_CACHE", "maybe"] for line in out.splitlines())
    assert err == "dg --config: error: DG_CACHE='maybe': expected one of 0, 1 (also off, on, no, yes, false, true)\n"


def test_config_takes_no_command_and_a_command_is_still_needed(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--config", "check", str(SAMPLES / "mlp.dg")])
    assert e.value.code == 2 and "--config takes no command" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main([])
    assert e.value.code == 2 and "the following arguments are required: cmd" in capsys.readouterr().err


@pytest.mark.slow
def test_config_from_the_shell():
    env = {k: v for k, v in os.environ.items() if not k.startswith("DG_")} | {"DG_DEVICE": "cuda"}
    out = subprocess.run([sys.executable, "-m", "dg", "--config"], capture_output=True, text=True, check=True,
                         env=env).stdout
    rows = {line.split()[0]: line.split()[1:3] for line in out.splitlines()}
    assert rows["DG_DEVICE"] == ["cuda", "cpu"] and rows["DG_MODE"] == ["(unset)", "compiled"]


def test_ir_of_a_cuda_function_needs_no_gpu(tmp_path):
    """PTX and the gpu stage are made on any machine: `.ir` of a function loaded for device='cuda'
    does not ask for a driver (a call still does, and says why)."""
    import dg

    m = dg.load(str(SAMPLES / "mlp.dg"), device="cuda")
    assert ".target sm_90" in m.dense.ir("ptx", args=(np.ones((2, 4), np.float32), np.ones((4, 5), np.float32),
                                                       np.ones(5, np.float32)))
    assert "gpu.launch_func" in m.dense.ir("gpu") or "gpu.module" in m.dense.ir("gpu")


def test_opt_rejects_unknown_pass(tmp_path, capsys):
    f = tmp_path / "x.mlir"
    f.write_text("func.func @f() {\n  return\n}\n")
    assert main(["opt", str(f), "--passes", "no-such-pass"]) == 1
    assert "no-such-pass" in capsys.readouterr().err


@pytest.mark.parametrize("text,errors", [
    # dg.exp of two operands does not parse
    ('  %0 = "dg.exp"(%a, %a) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>\n', ["cannot parse"]),
    # ops that parse, but whose types their rules do not give: each is located, before any pass runs
    ('  %x = "dg.exp"(%a) : (tensor<3xf32>) -> tensor<3xf32>\n'
     '  %y = "dg.add"(%x, %b) : (tensor<3xf32>, tensor<4xf32>) -> tensor<3xf32>\n'
     '  %z = "dg.tanh"(%x) : (tensor<3xf32>) -> tensor<5xf32>\n',
     ["{f}:3:8: error: dg.add: shapes [3] and [4] do not broadcast",
      "{f}:4:8: error: dg.tanh: its operands give (tensor<3xf32>), not (tensor<5xf32>)"]),
], ids=["unparsed", "rules"])
def test_opt_rejects_bad_ir(tmp_path, capsys, text, errors):
    f = tmp_path / "x.mlir"
    f.write_text("func.func @f(%a: tensor<3xf32>, %b: tensor<4xf32>) {\n" + text + "  return\n}\n")
    assert main(["opt", str(f), "--passes", "to-linalg"]) == 1
    err = capsys.readouterr().err
    assert all(e.format(f=f) in err for e in errors), err


def test_graph_writes_dot(tmp_path):
    out = tmp_path / "g.dot"
    assert main(["graph", str(SAMPLES / "mlp.dg"), "--fn", "forward", "-o", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("digraph dg {")
    assert "dense" in text and "tanh" in text and "->" in text


def test_graph_grad_draws_backward_nodes(tmp_path, capsys):
    out = tmp_path / "g.gv"
    assert main(["graph", str(SAMPLES / "mlp.dg"), "--fn", "loss", "--grad", "-o", str(out)]) == 0
    text = out.read_text()
    assert "gradient of loss with respect to x, w1, b1, w2, b2" in text
    assert "<B>∂</B>  (line 12)" in text and "<B>∂ w1</B>" in text
    assert f"wrote {out}" in capsys.readouterr().out


def test_graph_unknown_extension_is_refused(tmp_path, capsys):
    out = tmp_path / "g.jpg"
    assert main(["graph", str(SAMPLES / "mlp.dg"), "--fn", "forward", "-o", str(out)]) == 1
    assert "must be one of .svg, .png, .pdf, .dot, .gv" in capsys.readouterr().err
    assert not out.exists()


def test_graph_renders_svg_and_png(tmp_path):
    import shutil

    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot is not installed")
    for name, start in (("g.svg", b"<?xml"), ("g.png", b"\x89PNG\r\n\x1a\n")):
        out = tmp_path / name
        assert main(["graph", str(SAMPLES / "tree.dg"), "--fn", "tree", "-o", str(out)]) == 0
        assert out.read_bytes().startswith(start)


def test_graph_without_dot_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    out = tmp_path / "g.png"
    assert main(["graph", str(SAMPLES / "mlp.dg"), "--fn", "forward", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "apt install graphviz" in err and "brew install graphviz" in err
    assert not out.exists()
