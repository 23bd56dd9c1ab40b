"""samples/digits_dist.py runs to the end under `mpiexec -n 2` in compiled mode: it learns, only
rank 0 prints, and rank 0 writes the parameters; under plain python it runs as a world of one."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from .test_collectives import assert_every_rank_clean, on_ranks
from .test_data_parallel import mpiexec

EPOCHS = 3


def run_sample(launcher: list, tmp_path) -> subprocess.CompletedProcess:
    pytest.importorskip("sklearn", reason="the digits sample needs scikit-learn (in the dev extras)")
    return subprocess.run([*launcher, sys.executable, "-m", "dg.samples.digits_dist", "--epochs", str(EPOCHS),
                           "--mode", "compiled", "--save", "p.npz"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=240)


def accuracy_and_params(r: subprocess.CompletedProcess, tmp_path):
    finals = [line for line in r.stdout.splitlines() if line.startswith("test accuracy ")]
    assert len(finals) == 1, r.stdout  # the final line, once: rank 0's
    with np.load(tmp_path / "p.npz") as f:
        params = {k: f[k] for k in f.files}
    return float(finals[0].split()[2]), params


def test_the_sample_trains_on_two_processes(tmp_path):
    r = run_sample([mpiexec(), "-n", "2"], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    acc, params = accuracy_and_params(r, tmp_path)
    assert acc > 0.8, r.stdout
    assert r.stdout.startswith("2 processes, 16 rows each: global batch 32")
    assert r.stdout.count(f"epoch {EPOCHS:3d}  loss ") == 1 and "parameters saved to p.npz" in r.stdout
    assert sorted(params) == ["b1", "b2", "w1", "w2"] and params["w1"].shape == (64, 64)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.npz"]


def test_the_sample_runs_as_a_world_of_one_under_plain_python(tmp_path):
    r = run_sample([], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    acc, _ = accuracy_and_params(r, tmp_path)
    assert acc > 0.8 and r.stdout.startswith("1 process, 16 rows each: global batch 16"), r.stdout


@pytest.mark.slow  # (the GPT compiled twice on 2 processes)
@pytest.mark.parametrize("parallel", ["tensor", "pipeline"])
def test_the_gpt_trains_with_tensor_or_pipeline_parallelism_as_one_process_does(parallel):
    """samples/gpt_parallel.py under mpiexec -n 2: the tiny GPT split over 2 processes (its heads
    and hidden units, or its blocks in 2 stages over 4 micro-batches) gives one process's losses,
    step for step (--check: the sample fails past 1e-3)."""
    sample = Path(__file__).resolve().parents[2] / "samples" / "gpt_parallel.py"
    r = subprocess.run([mpiexec(), "-n", "2", sys.executable, str(sample), "--parallel", parallel, "--steps", "10",
                        "--check"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert r.stdout.count("step   10  loss ") == 1 and "(one process: " in r.stdout, r.stdout
    assert f"{parallel} parallelism over 2 processes: 10 steps" in r.stdout


OVERLAPPED = r"""
import json, sys
import numpy as np
import dg
sys.path.insert(0, sys.argv[1])
from gpt import init_params
from text import batch, load_text
r, n = dg.dist.rank(), dg.dist.world_size()
dg.dist.groups(dp=n)
m = dg.load(sys.argv[1] + "/gpt_parallel.dg", mode=sys.argv[2])
ids, _, chars = load_text()
p = init_params(len(chars), 32, 64, 2, 0)
x, y = batch(ids, np.random.default_rng(0), 16, 32)
rows = slice(r * 16 // n, (r + 1) * 16 // n)
st = m.init_state(p)
la, pa, _ = m.dp_step(p, st, x[rows], y[rows], np.float32(1e-3))
lb, pb, _ = m.dp_overlapped_step(p, st, x[rows], y[rows], np.float32(1e-3))
# (each step's code may be at another LLVM level for its first calls: equal to rounding)
bad = [] if np.shape(la) == () and np.isclose(la, lb, rtol=1e-6) else [f"loss {la} {lb}"]
for a, b in [(pa, pb)] + list(zip(pa["blocks"], pb["blocks"])):
    for k in a:
        if k != "blocks" and not np.allclose(a[k], b[k], rtol=1e-5, atol=1e-6):
            bad.append(k)
print(json.dumps({"rank": r, "bad": bad}), flush=True)
"""


@pytest.mark.slow  # (two GPT steps on 2 processes, the interpreter's among them)
@pytest.mark.parametrize("mode", ["interp", "compiled"])
def test_the_gpt_step_with_overlapped_reduction_is_the_blocking_one(mode):
    """samples/gpt_parallel.dg's dp_overlapped_step (each block's gradients reduced while the
    backward pass goes on) makes the update dp_step makes (one allreduce after it)."""
    samples = str(Path(__file__).resolve().parents[2] / "samples")
    assert_every_rank_clean(on_ranks(2, OVERLAPPED, samples, mode, timeout=600), [0, 1])
