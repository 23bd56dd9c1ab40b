"""benchmarks/lenet.py still runs (a small batch, one repeat; no timing is asserted), and its
peers agree with dg on the loss and the updated weights."""
import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def _lenet():
    spec = importlib.util.spec_from_file_location("lenet_benchmark", BENCH / "lenet.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_lenet_benchmark_quick_run(tmp_path):
    out = tmp_path / "lenet.json"
    r = _lenet().main(["--quick", "--json", str(out)])
    assert r["steps_per_s"]["dg_compiled"] > 0 and r["steps_per_s"]["dg_interp"] > 0
    assert set(r["max_abs_diff"]) - {"loss"} == set(r["steps_per_s"]) - {"dg_compiled"}
    for peer, diff in r["max_abs_diff"].items():
        if peer != "loss":
            assert diff["loss"] < 1e-4 and diff["params"] < 1e-4, (peer, diff)
    assert out.read_text().startswith("{")
