"""benchmarks/dist.py still runs (--quick: the smallest sizes, one repeat; no timing is
asserted): started by plain python, it launches `mpiexec -n 2` itself and rank 0 writes the JSON."""
import json
import subprocess
import sys
from pathlib import Path

from .test_data_parallel import mpiexec

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "dist.py"


def test_the_dist_benchmark_runs(tmp_path):
    mpiexec()  # skips without mpiexec or mpi4py
    out = tmp_path / "dist.json"
    r = subprocess.run([sys.executable, str(BENCH), "--quick", "--json", str(out)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["processes"] == 2 and set(res["allreduce"]) == {"1 KB", "16 KB"}
    assert all(row["dg_us"] > 0 and row["mpi4py_us"] > 0 for row in res["allreduce"].values())
    assert set(res["step_dp"]["16"]) == {"1", "2"} and res["step_dp"]["16"]["2"]["ms_per_step"] > 0
    assert r.stdout.count("allreduce (sum, float32, median)") == 1  # rank 0 alone prints
