"""dg's collectives and data-parallel training step on MPI, against mpi4py.

Workloads (float32, one thread a process: DG_NUM_THREADS, OMP_NUM_THREADS,
OPENBLAS_NUM_THREADS and MKL_NUM_THREADS are set to 1):
  allreduce  a compiled dg function `allreduce(x, op="sum")` called from
             Python, against mpi4py's comm.Allreduce(x, out) on the same
             buffers, `out` made once, and (as dg returns a new array)
             made anew each call; 1 KB to 64 MB              us, GB/s
  step_dp    samples/digits.dg's data-parallel step (value_and_grad, one
             allreduce of the loss and gradients, SGD update), compiled,
             64 and 1024 rows per process (--batch), at 1 process
             and at every process of the world              ms/step, samples/s
  gpt        samples/gpt.dg's training step (2 layers, 64 channels, context
             32, batch 16 in all), on 1 process, and on every process with
             data parallelism (each its rows; its gradients reduced after the
             backward pass, or each block's during it: samples/
             gpt_parallel.dg's dp_overlapped_step), tensor parallelism (heads and
             hidden units split) and pipeline parallelism (the blocks in
             stages, 4 micro-batches): ms/step, and the bytes each process
             sends per step (worked out from the sizes; the pipeline's are the
             forward pass's, which its gradient sends again as it recomputes)
  overlap    a data-parallel step of 6 tanh layers of 512 x 512 (batch 64 a
             process; benchmarks/overlap.dg): its gradients averaged at the
             end of the backward pass (blocking), or each layer's started as
             soon as the backward pass has made it (allreduce_start) and
             waited for before the update (overlapped), and each leaf's
             started at the end (late: the same buffers, no overlap)  ms/step
GB/s is the buffer's bytes over the time of one allreduce. A time is the
slowest process's; every figure is the median of several timed repeats,
taken in turns (a round times one batch of each peer) so that drift in the
machine's speed reaches both alike; all processes run the same number of
calls, agreed beforehand. Ratios are dg over the named peer, measured in
the same run: `dg/mpi4py` of times (1 is parity, above 1 dg is slower);
`efficiency` is the 1-process step time over the N-process one (1 is
perfect weak scaling: N times the samples per second).

    mpiexec -n 2 python benchmarks/dist.py [--quick] [--json out.json]
    python benchmarks/dist.py [--quick] [--json out.json]    # starts mpiexec -n 2 itself

Rank 0 prints. The 1-process step runs in a child Python that rank 0 starts
(a world of one) while the other ranks wait asleep, so that it has the
machine to itself. Needs the `dist` extra (mpi4py and MPICH).
"""
from __future__ import annotations

import os

THREAD_VARS = ("DG_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
if __name__ == "__main__":  # one thread a process, before NumPy's BLAS starts its own
    os.environ.update({k: "1" for k in THREAD_VARS})

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import dg  # noqa: E402
from dg.core.mpi import launched, world  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu import medians as cpu_medians  # noqa: E402  (benchmarks/cpu.py's timing in turns)

SRC = """
def ar(x: f32[N]) -> f32[N]:
    return allreduce(x, op="sum")
"""
DIGITS = Path(__file__).resolve().parent.parent / "samples" / "digits.dg"
KB = 1024


class Sync:
    """What every process agrees on: a barrier, and the largest of a number over the world
    (the slowest process's time). Identities in a world of one."""

    def __init__(self):
        self.comm = getattr(world(), "comm", None)

    def barrier(self) -> None:
        if self.comm is not None:
            self.comm.Barrier()

    def slowest(self, seconds: float) -> float:
        if self.comm is None:
            return seconds
        from mpi4py import MPI

        return self.comm.allreduce(seconds, op=MPI.MAX)

    def sleep_until_all_arrive(self) -> None:
        """A barrier that waits asleep (MPICH's blocking calls spin, and would take a core)."""
        if self.comm is not None:
            req = self.comm.Ibarrier()
            while not req.Test():
                time.sleep(0.01)


def medians(fns: dict, repeats: int, sync: Sync, min_time: float = 0.05) -> dict:
    """Median seconds per call of each function, the slowest process's (benchmarks/cpu.py's
    timing in turns, every process starting each batch together and running the same batch)."""
    return cpu_medians(fns, repeats, min_time, start=sync.barrier, agree=sync.slowest)


def bench_allreduce(sizes: list, repeats: int, sync: Sync) -> dict:
    """{"<size>": {"<peer>_us", "<peer>_gb_per_s", "dg/mpi4py", "dg/mpi4py_new_out"}}: the compiled
    dg allreduce against mpi4py's on the same float32 buffer (their sums agree), mpi4py into an
    output made once (`mpi4py`) and, as dg does, into a new one each call (`mpi4py_new_out`)."""
    from mpi4py import MPI

    comm = sync.comm
    m = dg.loads(SRC, mode="compiled", filename="dist_bench.dg")
    rows = {}
    for nbytes in sizes:
        x = np.random.default_rng(comm.Get_rank()).standard_normal(nbytes // 4).astype(np.float32)
        out = np.empty_like(x)
        comm.Allreduce(x, out, op=MPI.SUM)
        np.testing.assert_allclose(m.ar(x), out, rtol=1e-6, atol=1e-6)
        t = medians({"dg": lambda: m.ar(x), "mpi4py": lambda: comm.Allreduce(x, out, op=MPI.SUM),
                     "mpi4py_new_out": lambda: comm.Allreduce(x, np.empty_like(x), op=MPI.SUM)}, repeats, sync)
        row = {"bytes": nbytes}
        for peer, s in t.items():
            row[f"{peer}_us"] = s * 1e6
            row[f"{peer}_gb_per_s"] = nbytes / s / 1e9
        row["dg/mpi4py"] = t["dg"] / t["mpi4py"]
        row["dg/mpi4py_new_out"] = t["dg"] / t["mpi4py_new_out"]
        rows[size_name(nbytes)] = row
    return rows


def bench_step(batch: int, repeats: int, sync: Sync, hidden: int = 64) -> dict:
    """Seconds per compiled `step_dp` with `batch` rows on each process of the world (random
    digits-shaped data: the time does not depend on the values)."""
    m = dg.load(DIGITS, mode="compiled")
    rng = np.random.default_rng(world().rank)
    params = [rng.normal(0, 1 / 8, (64, hidden)).astype(np.float32), np.zeros(hidden, np.float32),
              rng.normal(0, 1 / np.sqrt(hidden), (hidden, 10)).astype(np.float32), np.zeros(10, np.float32)]
    x = rng.random((batch, 64), dtype=np.float32)
    y = rng.integers(0, 10, batch).astype(np.int64)
    lr = np.float32(0.1)
    s = medians({"step": lambda: m.step_dp(*params, x, y, lr)}, repeats, sync)["step"]
    n = world().size
    return {"processes": n, "batch_per_process": batch, "ms_per_step": s * 1e3, "samples_per_s": n * batch / s}


GPT = Path(__file__).resolve().parent.parent / "samples"


def gpt_setup(layers: int = 2, context: int = 32):
    """(the sample's module, its parallel module, whole parameters, a batch of 16)."""
    sys.path.insert(0, str(GPT))
    from gpt import init_params  # noqa: E402  (samples/)
    from text import batch, load_text

    ids, _, chars = load_text()
    whole = init_params(len(chars), context, 64, layers, 0)
    x, y = batch(ids, np.random.default_rng(0), 16, context)
    return dg.load(GPT / "gpt.dg", mode="compiled"), dg.load(GPT / "gpt_parallel.dg", mode="compiled"), whole, x, y


def _nbytes(tree) -> int:
    if isinstance(tree, dict):
        return sum(_nbytes(v) for v in tree.values())
    if isinstance(tree, (tuple, list)):
        return sum(_nbytes(v) for v in tree)
    return np.asarray(tree).nbytes


def bench_gpt(repeats: int, sync: Sync) -> dict:
    """ms/step of the GPT's step on every process of the world, data-, tensor- and pipeline-parallel,
    with the bytes each process sends per step."""
    one, par, whole, x, y = gpt_setup()
    n, rank, lr = world().size, world().rank, np.float32(1e-3)
    out = {}
    b, t = x.shape
    c = whole["wte"].shape[1]
    act = b * t * c * 4  # one activation of the whole batch
    # data parallelism: each process its rows; one allreduce of every gradient
    dg.dist.groups(dp=n)
    rows = slice(rank * b // n, (rank + 1) * b // n)
    st = par.init_state(whole)
    times = medians({"dp": lambda: par.dp_step(whole, st, x[rows], y[rows], lr),
                     "overlapped": lambda: par.dp_overlapped_step(whole, st, x[rows], y[rows], lr)}, repeats, sync)
    out["data"] = {"ms_per_step": times["dp"] * 1e3, "bytes_sent": _nbytes(whole)}
    out["data, each block's gradients reduced during the backward pass"] = {
        "ms_per_step": times["overlapped"] * 1e3, "bytes_sent": _nbytes(whole)}
    # tensor parallelism: 2 allreduces of an activation per block forward, 2 backward, and the
    # gradients of what every process holds whole
    dg.dist.groups(tp=n)
    mine = par.tp_shard(whole)
    st = par.init_state(mine)
    s = medians({"tp": lambda: par.tp_step(mine, st, x, y, lr)}, repeats, sync)["tp"]
    whole_held = _nbytes({k: whole[k] for k in ("wte", "wpe", "lnf_g", "lnf_b")}) + sum(
        _nbytes({k: blk[k] for k in ("ln1_g", "ln1_b", "ln2_g", "ln2_b", "b2")}) for blk in whole["blocks"])
    out["tensor"] = {"ms_per_step": s * 1e3, "bytes_sent": 4 * act * len(whole["blocks"]) + whole_held}
    # pipeline: 4 micro-batches; a stage boundary carries each activation forward and its
    # cotangent back; the embeddings' gradients are summed over the stages
    dg.dist.groups(pp=n)
    per = len(whole["blocks"]) // n
    stage = {**whole, "blocks": whole["blocks"][rank * per:(rank + 1) * per]}
    st = par.init_state(stage)
    shape = (4, b // 4, t)
    s = medians({"pp": lambda: par.pp_step(stage, st, x.reshape(shape), y.reshape(shape), lr)}, repeats, sync)["pp"]
    out["pipeline"] = {"ms_per_step": s * 1e3, "bytes_sent": 2 * act + _nbytes({k: whole[k] for k in (
        "wte", "wpe", "lnf_g", "lnf_b")})}
    dg.dist.groups(dp=n)
    return out


def bench_overlap(repeats: int, sync: Sync) -> dict:
    """ms/step of benchmarks/overlap.dg's blocking and overlapped data-parallel steps."""
    m = dg.load(Path(__file__).resolve().parent / "overlap.dg", mode="compiled")
    rng = np.random.default_rng(world().rank)
    d = 512
    ls = tuple({"w": rng.normal(0, 1 / np.sqrt(d), (d, d)).astype(np.float32), "b": np.zeros(d, np.float32)}
               for _ in range(6))
    x, y = rng.normal(size=(64, d)).astype(np.float32), rng.normal(size=(64, d)).astype(np.float32)
    lr = np.float32(1e-3)
    t = medians({"blocking": lambda: m.blocking_step(ls, x, y, lr), "late": lambda: m.late_step(ls, x, y, lr),
                 "overlapped": lambda: m.overlapped_step(ls, x, y, lr)}, repeats, sync)
    return {k: v * 1e3 for k, v in t.items()}


def gpt_alone(repeats: int) -> dict:
    one, _, whole, x, y = gpt_setup()
    st = one.init_state(whole)
    s = medians({"one": lambda: one.train_step(whole, st, x, y, np.float32(1e-3))}, repeats, Sync())["one"]
    return {"ms_per_step": s * 1e3, "bytes_sent": 0}


def step_alone(batches: list, repeats: int, sync: Sync) -> dict:
    """The 1-process steps, timed by a child Python in a world of one (DG_DIST=0) that rank 0
    starts while the other ranks wait asleep: {batch: figures}."""
    res = None
    if world().rank == 0:
        env = {**os.environ, "DG_DIST": "0", **{k: "1" for k in THREAD_VARS}}
        r = subprocess.run([sys.executable, __file__, "--step-alone", "--repeats", str(repeats),
                            "--batch", *map(str, batches)], env=env, capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            raise RuntimeError(f"the 1-process step failed:\n{r.stderr[-3000:]}")
        res = json.loads(r.stdout.strip().splitlines()[-1])
    sync.sleep_until_all_arrive()
    return res


def size_name(nbytes: int) -> str:
    return f"{nbytes // (KB * KB)} MB" if nbytes >= KB * KB else f"{nbytes // KB} KB"


def report(res: dict) -> None:
    print(f"{res['processes']} processes, one thread each; {res['cpu_count']} CPUs; MPI: {res['mpi']}")
    heads = ("dg compiled", "mpi4py Allreduce", "mpi4py, new out a call")
    print("allreduce (sum, float32, median)")
    print(f"  {'size':>7}  " + "  ".join(f"{h:<25}" for h in heads) + "  dg/mpi4py  dg/new_out (times)")
    for name, row in res["allreduce"].items():
        figures = "  ".join(f"{row[p + '_us']:10.1f} us {row[p + '_gb_per_s']:6.2f} GB/s"
                            for p in ("dg", "mpi4py", "mpi4py_new_out"))
        print(f"  {name:>7}  {figures}  {row['dg/mpi4py']:9.2f}  {row['dg/mpi4py_new_out']:9.2f}")
    for batch, runs in res["step_dp"].items():
        for row in runs.values():
            print(f"step_dp, batch {batch} a process, {row['processes']} process{'es' if row['processes'] > 1 else ''} "
                  f"(median): {row['ms_per_step']:.3f} ms/step, {row['samples_per_s']:.0f} samples/s")
    for k, v in res["gpt"].items():
        print(f"gpt step, {k}: {v['ms_per_step']:.2f} ms/step, {v['bytes_sent'] / 1e6:.2f} MB sent a process")
    o = res["overlap"]
    print(f"data-parallel step, 6 layers of 512 (median): blocking reduction {o['blocking']:.3f} ms/step, "
          f"each leaf started at the end {o['late']:.3f}, overlapped {o['overlapped']:.3f} ms/step "
          f"(overlapped/blocking {o['overlapped'] / o['blocking']:.3f}, overlapped/late {o['overlapped'] / o['late']:.3f})")
    for k, v in res["ratios"].items():
        print(f"ratios {k}: {json.dumps(rounded(v))}")


def rounded(v):
    return {k: rounded(x) for k, x in v.items()} if isinstance(v, dict) else round(v, 3)


def run_here(a) -> dict:
    """Under mpiexec: every rank measures; rank 0 prints and writes the JSON."""
    sync = Sync()
    if sync.comm is None:
        raise SystemExit("benchmarks/dist.py: mpi4py is needed (pip install -e '.[dist]')")
    w = world()
    kb = [1, 16] if a.quick else [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536]
    repeats = 1 if a.quick else a.repeats
    batches = a.batch or ([16] if a.quick else [64, 1024])
    res = {"processes": w.size, "cpu_count": os.cpu_count(), "threads_per_process": 1}
    alone = step_alone(batches, repeats, sync)
    res["allreduce"] = bench_allreduce([k * KB for k in kb], repeats, sync)
    together = {str(b): bench_step(b, repeats, sync) for b in batches}
    gpt = bench_gpt(repeats, sync)
    overlap = bench_overlap(repeats, sync)
    if w.rank != 0:
        return res
    res["gpt"] = {"1 process": alone.pop("gpt"), **{f"{k}, {w.size} processes": v for k, v in gpt.items()}}
    res["overlap"] = overlap
    from mpi4py import MPI

    res["mpi"] = " ".join(MPI.Get_library_version().split()[:3])
    res["step_dp"] = {str(b): {"1": alone[str(b)], str(w.size): together[str(b)]} for b in batches}
    res["ratios"] = {"allreduce dg/mpi4py (time)": {k: v["dg/mpi4py"] for k, v in res["allreduce"].items()},
                     "allreduce dg/mpi4py_new_out (time)": {k: v["dg/mpi4py_new_out"]
                                                            for k, v in res["allreduce"].items()},
                     f"step_dp weak-scaling efficiency at {w.size} (1-process time / {w.size}-process time)":
                         {f"batch {b}": v["1"]["ms_per_step"] / v[str(w.size)]["ms_per_step"]
                          for b, v in res["step_dp"].items()},
                     "gpt step time over 1 process's": {k: v["ms_per_step"] / res["gpt"]["1 process"]["ms_per_step"]
                                                         for k, v in res["gpt"].items()},
                     "overlapped / blocking gradient reduction (time)": overlap["overlapped"] / overlap["blocking"],
                     "overlapped / started at the end (time)": overlap["overlapped"] / overlap["late"]}
    report(res)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)
    return res


def launch(argv: list, processes: int = 2) -> dict:
    """Plain python: the same benchmark under `mpiexec -n processes`; what rank 0 wrote back."""
    mpiexec = Path(sys.executable).with_name("mpiexec")
    mpiexec = str(mpiexec) if mpiexec.exists() else shutil.which("mpiexec")
    if mpiexec is None:
        raise SystemExit("benchmarks/dist.py: no mpiexec (pip install -e '.[dist]')")
    ap = _parser()
    a = ap.parse_args(argv)
    out = a.json or str(Path(os.environ.get("TMPDIR", "/tmp")) / f"dg_dist_bench_{os.getpid()}.json")
    rest = without_json(argv)
    env = {**os.environ, **{k: "1" for k in THREAD_VARS}}
    r = subprocess.run([mpiexec, "-n", str(processes), sys.executable, str(Path(__file__).resolve()), *rest,
                        "--json", out], env=env, timeout=3600)
    if r.returncode != 0:
        raise SystemExit(r.returncode)
    with open(out) as f:
        res = json.load(f)
    if not a.json:
        os.unlink(out)
    return res


def without_json(argv: list) -> list:
    """argv less its `--json PATH` (or `--json=PATH`)."""
    out, skip = [], False
    for v in argv:
        if skip:
            skip = False
        elif v == "--json":
            skip = True
        elif not v.startswith("--json="):
            out.append(v)
    return out


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="the smallest sizes, one repeat (a smoke run)")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--batch", type=int, nargs="+", default=None,
                    help="rows per process per step (default 64 and 1024; 16 with --quick)")
    ap.add_argument("--json", default=None, metavar="PATH", help="where rank 0 writes the figures")
    ap.add_argument("--step-alone", action="store_true", help=argparse.SUPPRESS)  # the 1-process child
    return ap


def main(argv=None) -> dict:
    argv = sys.argv[1:] if argv is None else list(argv)
    a = _parser().parse_args(argv)
    if a.step_alone:
        res = {str(b): bench_step(b, a.repeats, Sync()) for b in a.batch}
        res["gpt"] = gpt_alone(a.repeats)
        print(json.dumps(res))
        return res
    if not launched():
        return launch(argv)
    return run_here(a)


if __name__ == "__main__":
    main()
