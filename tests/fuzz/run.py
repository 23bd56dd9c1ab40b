"""Differential fuzzing of dg for a while: `python tests/fuzz/run.py --minutes N`.

Generates programs from consecutive seeds, checks each in a worker process
(interpreter against compiled code, gradients against each other and
against finite differences; tests/fuzz/check.py), prints the counts per
outcome, shrinks one program per distinct failure (tests/fuzz/minimize.py)
and writes it, with the original, to the findings folder. Exits 1 if any
program failed.

Workers run with DG_CACHE=0 unless it is set: fuzzed programs are new each
time, so the on-disk cache of compiled code would only grow.
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.fuzz import check, gen, minimize  # noqa: E402

COUNTS = ["programs", "calls", "gradient checks", "jvp checks", "fd checks", "ok", "rejected", "non-DgError",
          "mismatch", "grad-mismatch", "jvp-mismatch", "fd-mismatch", "crash", "hang"]
LABEL = {"error": "non-DgError"}
GRACE = 15.0  # seconds a program started before the end may run past it


def _worker():
    return check.Worker(env={"DG_CACHE": os.environ.get("DG_CACHE", "0")})


def _in_threads(jobs, work):
    threads = [threading.Thread(target=work, daemon=True) for _ in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def fuzz(seeds, jobs, deadline, timeout, features, say):
    """Check programs from `seeds` on `jobs` workers until `deadline`: [(seed, outcome)]."""
    results, lock = [], threading.Lock()
    seeds = iter(seeds)

    def work():
        w = _worker()
        try:
            while time.time() < deadline:
                with lock:
                    seed = next(seeds)
                o = w.run(seed, features=features, timeout=timeout, cutoff=deadline + GRACE)
                if o is None:
                    return  # still running when the run ended: not counted
                with lock:
                    results.append((seed, o))
                if o.failed:
                    say(f"seed {seed}: {o.kind} [{o.where}] {o.detail.splitlines()[0][:300] if o.detail else ''}")
        finally:
            w.close()

    _in_threads(jobs, work)
    return results


def shrink(seed, outcome, features, timeout, deadline):
    """The program of `seed` shrunk while it fails as `outcome` did."""
    prog = gen.generate(seed, features)
    fd = outcome.kind == "fd-mismatch"
    only = outcome.where if outcome.where not in ("", "load") else None
    # a hang shows by half the limit; anything else answers well within it
    limit = timeout / 2 if outcome.kind == "hang" else max(20.0, 4 * outcome.seconds)
    current = [outcome]
    w = _worker()

    def fails(src):
        o = w.run(seed, src=src, features=features, fd=fd, only=only, timeout=limit)
        if o.same_as(current[0]):
            current[0] = o
            return True
        return False

    try:
        return minimize.minimize(prog.src, fails, deadline=deadline)
    finally:
        w.close()


def write_finding(folder: Path, n, seed, outcome, small, features):
    """NN-KIND-seedS.dg (the shrunk program, the failure in comments) and NN-KIND-seedS.orig.dg."""
    prog = gen.generate(seed, features)
    name = f"{n:02d}-{outcome.kind}-seed{seed}"
    head = [f"# {outcome.key()}",
            f"# seed {seed}; found by {outcome.where or 'loading'}; entry {prog.entry}{tuple(prog.args)!r}; "
            f"gradients of {prog.grads}"]
    head += ["# " + line for line in outcome.detail.splitlines()[:12]]
    (folder / f"{name}.dg").write_text("\n".join(head) + "\n\n" + small)
    (folder / f"{name}.orig.dg").write_text(prog.src)
    return folder / f"{name}.dg"


def counts(results):
    c = Counter({k: 0 for k in COUNTS})
    c["programs"] = len(results)
    for _, o in results:
        c[LABEL.get(o.kind, o.kind)] += 1
        c["calls"] += o.calls
        c["gradient checks"] += o.grads
        c["jvp checks"] += o.jvps
        c["fd checks"] += o.fd
    return c


def slowest(results, n=3) -> str:
    """The median time a program took, and the slowest ones (compile time is most of it)."""
    done = sorted(((o.seconds, seed) for seed, o in results if o.kind != "hang"), reverse=True)
    if not done:
        return "  (no program finished)"
    median = done[len(done) // 2][0]
    top = ", ".join(f"{t:.1f} s (seed {seed})" for t, seed in done[:n])
    return f"  seconds          median {median:.1f}, slowest {top}"


def report_failures(results, args, features, say):
    """Shrink one program per distinct failure (on `args.jobs` workers) and write them out."""
    failures = {}
    for seed, o in results:
        if o.failed:
            failures.setdefault(o.key(), []).append((seed, o))
    folder = Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)
    say(f"\n{len(failures)} distinct failure(s); minimizing one program of each into {folder}")
    end = time.time() + 60 * (args.shrink_minutes if args.shrink_minutes is not None else max(2.0, args.minutes))
    todo = sorted(failures.items(), key=lambda kv: kv[0] == "hang")  # hangs last: each test takes long
    lock, done = threading.Lock(), {}

    def work():
        while True:
            with lock:
                if not todo:
                    return
                key, cases = todo.pop(0)
                rounds = -(-(len(todo) + 1) // args.jobs)
            seed, o = min(cases, key=lambda c: (len(gen.generate(c[0], features).src), c[0]))
            small = shrink(seed, o, features, args.timeout, time.time() + max(30.0, (end - time.time()) / rounds))
            with lock:
                done[key] = (cases, write_finding(folder, len(done) + 1, seed, o, small, features), small)

    _in_threads(args.jobs, work)
    for key, (cases, path, small) in done.items():
        seeds = [s for s, _ in cases]
        more = f" (+{len(seeds) - 10} more)" if len(seeds) > 10 else ""
        say(f"\n== {key}\n   seeds {', '.join(map(str, seeds[:10]))}{more}\n   {path}")
        say("\n".join("   | " + line for line in small.rstrip().splitlines()))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=5.0, help="how long to generate and check programs")
    ap.add_argument("--seed", type=int, default=None, help="first seed (default: from the clock)")
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2), help="worker processes")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds a program may take before it is a hang")
    ap.add_argument("--out", default=os.environ.get("DG_FUZZ_FINDINGS", "/tmp/dg_fuzz_findings"),
                    help="where minimized failing programs go")
    ap.add_argument("--shrink-minutes", type=float, default=None,
                    help="time for minimizing, after the run (default: max(2, minutes))")
    ap.add_argument("--with", dest="extra", default="", help="comma-separated features of gen.OFF to turn on")
    ap.add_argument("--without", default="", help="comma-separated features of gen.FEATURES to turn off")
    args = ap.parse_args(argv)
    features = (set(gen.FEATURES) | set(filter(None, args.extra.split(",")))) - set(args.without.split(","))
    unknown = features - gen.FEATURES - gen.OFF
    if unknown:
        ap.error(f"unknown features: {', '.join(sorted(unknown))}")

    seed0 = args.seed if args.seed is not None else int(time.time()) % 1_000_000
    say = lambda s: print(s, flush=True)  # noqa: E731
    say(f"fuzzing for {args.minutes} min from seed {seed0} on {args.jobs} worker(s)")
    t0 = time.time()
    results = fuzz(range(seed0, 1 << 62), args.jobs, t0 + 60 * args.minutes, args.timeout, features, say)
    say(f"\n{len(results)} programs in {time.time() - t0:.0f} s (seeds from {seed0})")
    c = counts(results)
    for k in COUNTS:
        say(f"  {k:16s} {c[k]}")
    say(slowest(results))
    if not any(o.failed for _, o in results):
        return 0
    report_failures(results, args, features, say)
    return 1


if __name__ == "__main__":
    sys.exit(main())
