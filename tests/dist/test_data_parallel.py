"""Data parallelism gives what one process gives (LANGUAGE.md §7): N processes under `mpiexec`,
with batch b each, end with the parameters that one process gets with batch N·b, to rounding,
in both modes. The N-process side is samples/digits_dist.py's `train_dp` (shards, one allreduce
of the loss and gradients inside dg code); the one-process side runs here, in a world of one,
with samples/digits.dg's plain `step` on the whole global batches, the same data order and the
same initial parameters."""
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dg

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
STEPS, BATCH, HIDDEN, LR, SEED = 5, 8, 32, 0.2, 0
NAMES = ("w1", "b1", "w2", "b2")


def mpiexec() -> str:
    """mpiexec next to this Python, or on the PATH; skips when it or mpi4py is not installed."""
    here = Path(sys.executable).with_name("mpiexec")
    found = str(here) if here.exists() else shutil.which("mpiexec")
    if found is None:
        pytest.skip("no mpiexec (pip install -e '.[dist]')")
    pytest.importorskip("mpi4py", reason="no mpi4py (pip install -e '.[dist]')")
    return found


def on_ranks(n: int, code: str, *argv: str, cwd=None, timeout: int = 240) -> subprocess.CompletedProcess:
    """`python -c code *argv` on n processes under mpiexec (oversubscribed past the cores)."""
    return subprocess.run([mpiexec(), "-n", str(n), sys.executable, "-c", code, *argv], capture_output=True,
                          text=True, cwd=cwd, timeout=timeout)


# Every rank trains, then writes its own parameters, so that the test sees that all agree.
TRAIN = r'''
import sys
import numpy as np
import dg.dist as dist
from dg.samples.digits_dist import NAMES, train_dp
mode, batch, hidden, lr, seed, steps, out = sys.argv[1:]
acc, params = train_dp(epochs=1, mode=mode, batch=int(batch), hidden=int(hidden), lr=float(lr), seed=int(seed),
                       verbose=False, steps=int(steps))
np.savez(f"{out}/rank{dist.rank()}.npz", **dict(zip(NAMES, params)))
'''


def one_process(mode: str, batch: int) -> list:
    """The reference: `step` on whole global batches of `batch` rows, in this process."""
    pytest.importorskip("sklearn", reason="the digits sample needs scikit-learn (in the dev extras)")
    from dg.samples.digits import load_data
    from dg.samples.digits_dist import init_params

    m = dg.load(SAMPLES / "digits.dg", mode=mode)
    (xtr, ytr), _ = load_data(SEED)
    params = init_params(HIDDEN, SEED)
    order = np.random.default_rng(SEED + 1).permutation(len(xtr))
    for k in range(STEPS):
        idx = order[k * batch:(k + 1) * batch]
        _, *params = m.step(*params, xtr[idx], ytr[idx], np.float32(LR))
    return params


def n_processes(n: int, mode: str, tmp_path) -> list:
    """The parameters every one of n processes ends with (one list per rank)."""
    pytest.importorskip("sklearn", reason="the digits sample needs scikit-learn (in the dev extras)")
    r = on_ranks(n, TRAIN, mode, str(BATCH), str(HIDDEN), str(LR), str(SEED), str(STEPS), str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    out = []
    for rank in range(n):
        with np.load(tmp_path / f"rank{rank}.npz") as f:
            out.append([f[k] for k in NAMES])
    return out


@pytest.mark.parametrize("mode", ["interp", "compiled"])
@pytest.mark.parametrize("n", [2, 4])
def test_n_processes_with_batch_b_match_one_process_with_batch_nb(n, mode, tmp_path):
    per_rank = n_processes(n, mode, tmp_path)
    want = one_process(mode, n * BATCH)
    for rank, params in enumerate(per_rank):
        for name, got, first, ref in zip(NAMES, params, per_rank[0], want):
            np.testing.assert_array_equal(got, first, err_msg=f"rank {rank} differs from rank 0 in {name}")
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6, err_msg=f"{name}, {n} processes, {mode}")
    from dg.samples.digits_dist import init_params

    moved = [float(np.abs(p - p0).max()) for p, p0 in zip(want, init_params(HIDDEN, SEED))]
    assert min(moved) > 1e-4, moved  # the steps changed every parameter: the comparison means something
