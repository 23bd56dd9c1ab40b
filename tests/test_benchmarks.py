"""The benchmark scripts still run (tiny sizes; no timing is asserted): the slow tier."""
import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
pytestmark = pytest.mark.slow  # (about a minute of whole benchmarks)


def _load(name):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_interp_overhead_runs(tmp_path):
    out = tmp_path / "r.json"
    r = _load("interp_overhead").main(["--iters", "50", "--repeats", "1", "--json", str(out)])
    assert r["ops_per_iteration"] >= 6
    assert {"dg_us_per_op", "numpy_us_per_call", "overhead_us_per_op"} <= set(r)
    assert out.read_text().startswith("{")


def test_cpu_benchmark_runs(tmp_path):
    out = tmp_path / "cpu.json"
    r = _load("cpu").main(["--quick", "--json", str(out)])
    assert {"compile", "sgemm_gflops", "mlp_step_per_s", "rnn_fwd_bwd_per_s", "while2_per_s", "chain_gb_per_s",
            "reduce_gb_per_s", "ratios"} <= set(r)
    assert r["while2_per_s"]["dg_compiled"] > 0
    assert r["chain_gb_per_s"]["dg_compiled"] > 0 and r["dg_blas"]
    assert r["reduce_gb_per_s"]["total"]["dg_compiled"] > 0 and r["reduce_gb_per_s"]["colsum"]["dg_compiled"] > 0
    assert r["mlp_step_per_s"]["dg_compiled"] > 0 and r["compile"]["cold_s"] > 0
    assert out.read_text().startswith("{")


def test_dynamic_benchmark_runs(tmp_path):
    """benchmarks/dynamic.py --quick: dg agrees with PyTorch (and DyNet, where the dynet38 wheel is
    installed) on one tree and one sentence, and every figure is there."""
    pytest.importorskip("torch")
    out = tmp_path / "dynamic.json"
    r = _load("dynamic").main(["--quick", "--repeats", "1", "--json", str(out)])
    assert r["agreement"]["ok"] and r["agreement"]["tree"]["dg_vs_torch_grads"] <= 2e-4
    assert r["agreement"]["tagger"]["dg_vs_torch_grads"] <= 2e-4 and r["agreement"]["tree"]["dg_table_vs_rows"] <= 2e-4
    assert {"peers", "sizes", "data", "agreement", "tree_per_s", "tagger_per_s", "first_call_s", "ratios",
            "grad_over_forward"} <= set(r)
    assert {"dg_rows", "dg_table", "dg_minibatch", "dg_loop", "dg_minibatch_loop",
            "torch_eager"} <= set(r["tree_per_s"])
    assert r["agreement"]["tree"]["dg_loop_vs_recursion"] <= 2e-4
    assert {"dg_rows", "dg_minibatch", "torch_eager"} <= set(r["tagger_per_s"])
    assert {"dg_rows/torch_eager", "dg_table/torch_eager", "dg_minibatch/torch_eager"} <= set(r["ratios"]["tree"])
    assert set(r["grad_over_forward"]) == {"tree_node", "lstm_direction", "tree_model", "tagger_model"}
    assert all({"dg", "torch_eager"} <= set(row) for row in r["grad_over_forward"].values())
    if "dynet" in r["tree_per_s"]:  # (the peer is skipped, saying why, where dynet38 is not installed)
        assert {"dg_rows/dynet", "dg_rows/dynet_autobatch"} <= set(r["ratios"]["tree"])
        assert "dg_rows/dynet" in r["ratios"]["tagger"]
    else:
        assert r["peers"]["dynet"].startswith("not available")
    assert out.read_text().startswith("{")


def test_compile_benchmark_runs(tmp_path):
    out = tmp_path / "compile.json"
    r = _load("compile").main(["--quick", "--families", "straight,order", "--json", str(out)])
    fam = r["families"]["straight"]
    assert set(fam["members"]) == {"100", "200"} and fam["per_op_max_over_min"] >= 1 and fam["per_op_growth"] > 0
    row = fam["members"]["200"]
    assert row["grad_ops"] > row["dg_ops"] > 0 and row["cold_s"] >= row["compile_s"] > 0 and row["cached_s"] > 0
    assert set(row["stages_s"]) == {"emission", "autodiff", "inlining", "mlir_passes", "llvm_ir", "llvm"}
    assert row["stages_s"]["llvm"] > 0 and row["stages_s"]["llvm_ir"] > 0 and row["stages_s"]["autodiff"] > 0
    assert r["families"]["order"]["members"]["2"]["jax_first_call_s"] is None  # JAX has no reverse-mode while
    assert out.read_text().startswith("{")


def test_checkpoint_benchmark_runs(tmp_path):
    out = tmp_path / "checkpoint.json"
    r = _load("checkpoint").main(["--n", "60", "--small", "30", "--repeats", "1", "--json", str(out)])
    long = r["long"]
    assert long["dg_checkpointed"]["seconds"] > 0 and long["dg_checkpointed"]["peak_rss_mb"] > 0
    assert long["grad_over_forward"] > 0
    assert r["small"]["dg_taped"]["seconds"] > 0 and "dg_checkpointed_over_its_forward" in r["ratios"]
    assert out.read_text().startswith("{")


def test_calls_benchmark_runs(tmp_path):
    out = tmp_path / "calls.json"
    r = _load("calls").main(["--calls", "50", "--repeats", "1", "--json", str(out)])
    assert {"dg_one_array", "dg_scalar", "dg_nine_arrays", "numpy_one_array"} <= set(r["overhead_us"])
    assert all(v > 0 for v in r["overhead_us"].values()) and len(r["products_ms"]) == 4
    assert "dg_one_array_over_numpy_ufunc" in r["ratios"] and out.read_text().startswith("{")


def test_gpu_benchmark_runs(tmp_path):
    """On a machine with an NVIDIA GPU and PyTorch built for it (the benchmark's peer)."""
    import pytest

    from dg.runtime.cuda import driver_status

    ok, why = driver_status()
    if not ok:
        pytest.skip(f"no GPU to run on: {why}")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA here")
    out = tmp_path / "gpu.json"
    r = _load("gpu").main(["--n", "256", "--m", "65536", "--repeats", "1", "--json", str(out)])
    assert r["sgemm_rel_error"] < 1e-5 and r["chain_max_abs_error"] < 1e-6
    assert {"dg_gflops", "torch_gflops"} <= set(r["sgemm"]) and {"dg_gbps", "copy_gbps"} <= set(r["chain"])
    assert "dg_ms" in r["sgemm_tiled_kernel"]  # (tiny sizes: the figures themselves are noise)
    assert out.read_text().startswith("{")
