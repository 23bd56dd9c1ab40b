"""Checking one generated program in both modes, and running checks in a worker process.

`check(prog)` loads the program once per mode, calls its entry, takes the
gradients of its scalar functions through `dg.value_and_grad` (and, where the
program asks, their tangents through `dg.jvp`), and compares: the entry's
results between modes, the gradients between modes, the tangents between
modes and against the gradients (forward mode against reverse mode), and
(for f64 programs) the interpreter's gradients against central finite
differences; and the entry mapped over a batch (`dg.vmap`, in the
interpreter) against the entry called once per example, on a batch of two:
the arguments as they are, and their floats moved a little (so that
conditions may go each their own way). Arguments may be records and tuples
(dicts and tuples of arrays). The first problem found is the outcome:

    ok             nothing wrong
    rejected       a dg.DgError from a well-typed program (at load, compile or call)
    error          an exception that is not a dg.DgError
    mismatch       the entry's results differ between modes (or an input was changed)
    grad-mismatch  the gradients differ between modes
    jvp-mismatch   the tangents differ between modes, or from the gradients'
    fd-mismatch    a gradient disagrees with finite differences
    batch-mismatch the entry mapped over a batch differs from it called per example
                   (an op or a form that vmap says it cannot batch is not a failure)
    crash, hang    the worker process died, or ran past its time limit (see Worker)

`Worker` runs checks in a child process (`python -m tests.fuzz.check --worker`),
one request per line, so that a crash or a hang costs only that process.
Without the disk cache (DG_CACHE=0, as run.py's workers), the LLVM optimizer
processes that dg's quick start leaves running after a check are stopped:
what they would make has no use once the check is done.
"""
from __future__ import annotations

import copy
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

import dg
from tests.fuzz import gen

MODES = ("interp", "compiled")
TOL = {"f32": (1e-4, 1e-5), "f64": (1e-9, 1e-12)}  # rtol, atol between modes
JVP_TOL = {"f32": 1e-4, "f64": 1e-9}  # a tangent against its gradients, relative to the sum of |g * t|
FD_STEPS = (1e-6, 1e-5, 1e-7)  # a gradient passes if any step agrees
ROOT = Path(__file__).resolve().parents[2]
MARK = "@@fuzz "


@dataclass
class Outcome:
    kind: str
    detail: str = ""
    where: str = ""  # "main", "grad loss", ... : the check that found it
    calls: int = 0
    grads: int = 0
    jvps: int = 0
    fd: int = 0
    seconds: float = 0.0

    batched: int = 0  # batched calls checked

    @property
    def failed(self) -> bool:
        return self.kind != "ok"

    def key(self) -> str:
        """What two failures must share to count as the same: the kind, and what differs
        or the exception's class and message, with names, numbers and places blotted out."""
        if self.kind in ("ok", "crash", "hang"):
            return self.kind
        head = self.detail.split("\n")[0]
        if self.kind in ("mismatch", "grad-mismatch", "fd-mismatch", "jvp-mismatch", "batch-mismatch"):
            what = next((w for w in ("inputs", "dtype", "shape", "keys", "tuple", "gradients") if w in head), "values")
            return f"{self.kind}: {what}"
        head = re.sub(r"^(interp|compiled): ", "", head)
        head = re.sub(r"\S+\.dg:\d+:\d+: ", "", head)
        head = re.sub(r"\b(?!(?:bf|f|i)\d+\b)(?:[a-z]+\d+|loss2?|main)\b", "#", head)
        head = re.sub(r"(?<![\w.])\d+(?:\.\d*)?(?:e[-+]?\d+)?", "0", head)
        return f"{self.kind}: {head[:120]}"


    def same_as(self, other: "Outcome") -> bool:
        """The same failure as `other`, with no more errors reported (for the minimizer, with
        `other` the last program kept: dg reports several type errors at once, and edits
        must not bring in new ones)."""
        errors = lambda o: o.detail.count(": error:")  # noqa: E731
        return self.key() == other.key() and errors(self) <= max(1, errors(other))


class _Found(Exception):
    def __init__(self, outcome):
        self.outcome = outcome


def defined(src: str) -> set[str]:
    """The names of the top-level functions of `src`."""
    return set(re.findall(r"^def\s+(\w+)", src, re.M))


def _guard(mode, where, fn):
    """fn(), with its exception turned into an outcome."""
    try:
        return fn()
    except dg.DgError as e:
        raise _Found(Outcome("rejected", f"{mode}: {type(e).__name__}: {e}", where)) from None
    except Exception as e:  # noqa: BLE001 - every other exception is a bug of dg
        raise _Found(Outcome("error", f"{mode}: {type(e).__name__}: {e}", where)) from None


def differ(a, b, rtol, atol, path="out"):
    """Where and how `a` and `b` differ (None if they agree): structure, dtype, shape, values."""
    if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
        if type(a) is not type(b) or len(a) != len(b):
            return f"{path}: {type(a).__name__} of {len(a) if isinstance(a, (tuple, list)) else '-'} vs {type(b).__name__}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = differ(x, y, rtol, atol, f"{path}[{i}]")
            if d:
                return d
        return None
    if isinstance(a, dict) or isinstance(b, dict):
        if not (isinstance(a, dict) and isinstance(b, dict)) or a.keys() != b.keys():
            return f"{path}: keys differ"
        return next((d for k in a if (d := differ(a[k], b[k], rtol, atol, f"{path}[{k!r}]"))), None)
    x, y = np.asarray(a), np.asarray(b)
    if x.dtype != y.dtype:
        return f"{path}: dtype {x.dtype} vs {y.dtype}"
    if x.shape != y.shape:
        return f"{path}: shape {x.shape} vs {y.shape}"
    if x.dtype.kind in "biu":
        bad = x != y
    else:
        x64, y64 = x.astype(np.float64), y.astype(np.float64)
        bad = ~np.isclose(x64, y64, rtol=rtol, atol=atol, equal_nan=True)
    if np.any(bad):
        return f"{path}: values differ: {np.array2string(x, precision=10)} vs {np.array2string(y, precision=10)}"
    return None


def leaves(x):
    """The arrays of a value: itself, or those of a tuple's items and a dict's fields (by sorted key)."""
    if isinstance(x, dict):
        return [a for k in sorted(x) for a in leaves(x[k])]
    if isinstance(x, (tuple, list)):
        return [a for y in x for a in leaves(y)]
    return [x]


def tree_map(f, x, *ys):
    """`f` of the arrays of `x` (and of `ys`, of the same structure), in that structure."""
    if isinstance(x, dict):
        return {k: tree_map(f, x[k], *(y[k] for y in ys)) for k in x}
    if isinstance(x, (tuple, list)):
        return type(x)(tree_map(f, *items) for items in zip(x, *ys))
    return f(x, *ys)


def _same_inputs(before, after):
    return all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(leaves(before), leaves(after)))


def dot(a, b):
    """The sum of the products of the arrays of `a` and `b` (one structure), and of their sizes."""
    pairs = [(np.asarray(x, np.float64), np.asarray(y, np.float64)) for x, y in zip(leaves(a), leaves(b))]
    return sum(float(np.sum(x * y)) for x, y in pairs), sum(float(np.sum(np.abs(x * y))) for x, y in pairs)


def fd_check(fn, args, wrt, value, grads, seed, trials=2):
    """A gradient against central differences along random directions (f64, NaN-free).
    Returns what disagrees, or None."""
    rng = np.random.default_rng(seed)
    grads = grads if isinstance(grads, tuple) else (grads,)
    for _ in range(trials):
        dirs = {j: tree_map(lambda a: rng.standard_normal(np.shape(a)), args[j]) for j in wrt}
        dd = sum(dot(g, dirs[j])[0] for g, j in zip(grads, wrt))
        tried = []
        for h in FD_STEPS:
            def at(s):
                moved = list(args)
                for j in wrt:
                    moved[j] = tree_map(lambda a, d: np.float64(a + s * h * d) if np.ndim(a) == 0 else a + s * h * d,
                                        args[j], dirs[j])
                return float(fn(*moved))
            fd = (at(1) - at(-1)) / (2 * h)
            tried.append(fd)
            if abs(fd - dd) <= 1e-6 + 1e-5 * max(abs(fd), abs(dd)) + 1e-9 * abs(float(value)):
                break
        else:
            return f"directional derivative {dd!r} vs finite differences {tried!r}"
    return None


def check(prog: gen.Program, src: str | None = None, modes=MODES, fd: bool = True, only: str | None = None,
          api_grads: bool = True) -> Outcome:
    """Check `prog` (with `src` in place of its source, if given). `only` restricts the
    checks to one ("main", "grad loss", ...), for the minimizer. Without `api_grads`,
    `dg.value_and_grad` runs in the interpreter only (for the fd check): the entry's own
    gradients are still compared between modes, and there is one compile less."""
    t0 = time.time()
    out = Outcome("ok")
    try:
        _check(prog, prog.src if src is None else src, modes, fd, only, api_grads, out)
    except _Found as f:
        f.outcome.calls, f.outcome.grads, f.outcome.jvps, f.outcome.fd = out.calls, out.grads, out.jvps, out.fd
        f.outcome.batched = out.batched
        out = f.outcome
    out.seconds = round(time.time() - t0, 3)
    return out


def _check(prog, src, modes, fd, only, api_grads, out):
    names = defined(src)
    rtol, atol = TOL[prog.dtype]
    results, modules = {}, {}
    wanted = [prog.entry] + [f"grad {n}" for n, _ in prog.grads] + [f"jvp {n}" for n in prog.jvps]
    wanted = [w for w in wanted if w.split()[-1] in names and (only is None or w == only)]
    if not wanted and only is None:
        raise _Found(Outcome("error", "nothing to check: the program defines none of its entries"))
    for mode in modes:
        m = _guard(mode, "load", lambda: dg.loads(src, mode=mode, filename=prog.filename))
        modules[mode] = m
        for w in wanted:
            if w != prog.entry and not api_grads and mode != "interp":
                continue
            args = copy.deepcopy(prog.args)
            if w == prog.entry:
                results[mode, w] = _guard(mode, w, lambda: getattr(m, w)(*args))
                out.calls += 1
            elif w.startswith("jvp "):
                tangents = copy.deepcopy(prog.tangents)
                results[mode, w] = _guard(mode, w, lambda: dg.jvp(getattr(m, w.split()[-1]), args, tangents))
                out.jvps += 1
            else:
                name = w.split()[-1]
                wrt = dict(prog.grads)[name]
                results[mode, w] = _guard(mode, w, lambda: dg.value_and_grad(getattr(m, name), wrt=wrt)(*args))
                out.grads += 1
            if not _same_inputs(prog.args, args):
                raise _Found(Outcome("mismatch", f"{mode}: the call changed its inputs", w))
    first = modes[0]
    for w in wanted:
        for mode in modes[1:]:
            if (mode, w) not in results:
                continue
            d = differ(results[first, w], results[mode, w], rtol, atol)
            if d:
                kind = "mismatch" if w == prog.entry else "jvp-mismatch" if w.startswith("jvp ") else "grad-mismatch"
                raise _Found(Outcome(kind, f"{first} vs {mode} at {d}", w))
    for w in wanted:  # forward mode against reverse mode: the tangent is the gradient's dot the tangents
        name = w.split()[-1]
        if not w.startswith("jvp ") or (first, f"grad {name}") not in results:
            continue
        wrt = dict(prog.grads)[name]
        _, g = results[first, f"grad {name}"]
        g = g if isinstance(wrt, tuple) else (g,)
        wrt = wrt if isinstance(wrt, tuple) else (wrt,)
        dd, scale = map(sum, zip(*(dot(gj, prog.tangents[j]) for gj, j in zip(g, wrt)))) if wrt else (0.0, 0.0)
        t = float(np.asarray(results[first, w][1], np.float64))
        if not abs(t - dd) <= JVP_TOL[prog.dtype] * (scale + abs(t)) + atol:
            raise _Found(Outcome("jvp-mismatch", f"{first}: tangent {t!r} vs the gradients' {dd!r}", w))
    if prog.entry in wanted and "interp" in modules and (only is None or only == "batch"):
        batch_check(modules["interp"], prog, rtol, atol, out)
    if fd and prog.dtype == "f64" and "interp" in modules:
        m = modules["interp"]
        for w in wanted:
            if not w.startswith("grad "):
                continue
            name = w.split()[-1]
            wrt = dict(prog.grads)[name]
            value, g = results["interp", w]
            bad = _guard("interp", w, lambda: fd_check(getattr(m, name), prog.args, wrt, value, g, prog.seed))
            out.fd += 1
            if bad:
                raise _Found(Outcome("fd-mismatch", f"{name}: {bad}", w))


def _moved(x, k: int):
    """x with its float leaves moved a little (k-th example of a batch: k = 0 is x)."""
    if isinstance(x, dict):
        return {key: _moved(v, k) for key, v in x.items()}
    if isinstance(x, tuple):
        return tuple(_moved(v, k) for v in x)
    a = np.asarray(x)
    if a.dtype.kind == "f" and k:
        return (a + a.dtype.type(0.125 * k) * np.cos(np.arange(a.size, dtype=np.float64).reshape(a.shape) + k)
                .astype(a.dtype)).astype(a.dtype)
    return a


def _stacked(xs):
    if isinstance(xs[0], dict):
        return {key: _stacked([x[key] for x in xs]) for key in xs[0]}
    if isinstance(xs[0], tuple):
        return tuple(_stacked([x[j] for x in xs]) for j in range(len(xs[0])))
    return np.stack([np.asarray(x) for x in xs])


# What vmap says it does not batch (docs/batching.md), and a gradient's need that a batch can break:
# an early return of a value whose sizes no parameter gives, from a loop whose trip count differs by
# example, is a placeholder that the examples fill at different iterations.
LIMITS = ("vmap cannot batch", "cannot be stacked", "a loop-carried value changed shape")
BATCH_TOL = (1e-6, 1e-8)  # the least rtol, atol of a batch against its examples


def batch_check(m, prog, rtol, atol, out) -> None:
    """The entry mapped over a batch of two examples against the entry per example (interpreter)."""
    f = getattr(m, prog.entry)
    examples = [[_moved(copy.deepcopy(a), k) for a in prog.args] for k in range(2)]
    try:
        want = [f(*ex) for ex in examples]
    except dg.DgError:
        return  # (a moved example the program refuses: nothing to compare)
    args = [_stacked([ex[j] for ex in examples]) for j in range(len(prog.args))]
    try:
        got = dg.vmap(f)(*args)
    except dg.DgError as e:
        if any(limit in str(e) for limit in LIMITS):
            return  # a documented limit of batching, not a wrong answer
        raise _Found(Outcome("rejected", f"interp: vmap: {type(e).__name__}: {e}", "batch"))
    except Exception as e:  # noqa: BLE001 (anything else is a bug of dg's)
        raise _Found(Outcome("error", f"interp: vmap: {type(e).__name__}: {e}", "batch"))
    out.batched += 1
    for k, w in enumerate(want):
        one = tree_map(lambda g: np.asarray(g)[k], got)
        # (a batch's products and sums add in another order, and NumPy's functions of whole arrays
        # round otherwise than of one value: by an f32 ulp where f32 constants (an optimizer's
        # lr, betas) enter an f64 program)
        d = differ(w, one, max(10 * rtol, BATCH_TOL[0]), max(10 * atol, BATCH_TOL[1]))
        if d:
            raise _Found(Outcome("batch-mismatch", f"example {k} of the batch vs its own call at {d}", "batch"))


# ---------------------------------------------------------------- worker processes

def _children(pid):
    """The processes `pid` started (from Linux's /proc; none elsewhere)."""
    kids = []
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/children") as f:
                kids += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return kids


def _stop_optimizers(pids):
    """Stop those of `pids` that are dg's LLVM optimizer processes (lowering/codegen/optimizer.py: quick
    start optimizes a large program in a process of its own, which runs on for minutes, and
    after its parent is gone)."""
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"dg.lowering.codegen.optimizer" in f.read():
                    os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _serve():
    """The worker's loop: a JSON request per line in, an outcome per line out (on a
    private copy of stdout; what dg prints goes to stderr)."""
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for line in sys.stdin:
        req = json.loads(line)
        print(f"\n@@case {req['seed']}", file=sys.stderr, flush=True)
        prog = gen.generate(req["seed"], req.get("features"), req.get("lines", gen.LINES))
        o = check(prog, req.get("src"), fd=req.get("fd", True), only=req.get("only"), api_grads=req.get("api_grads", True))
        out.write(MARK + json.dumps(asdict(o)) + "\n")
        out.flush()
        if os.environ.get("DG_CACHE") == "0":
            _stop_optimizers(_children(os.getpid()))


class Worker:
    """A child process that checks programs; `run` restarts it after a crash or a hang."""

    command = [sys.executable, "-m", "tests.fuzz.check", "--worker"]

    def __init__(self, env=None):
        self.env = dict(os.environ, **(env or {}))
        self.proc = None
        self.log = None

    def _start(self):
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(self.command, cwd=ROOT, env=self.env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, bufsize=1)

    def run(self, seed, src=None, features=None, fd=True, only=None, timeout=60.0, cutoff=None,
            lines=gen.LINES, api_grads=True):
        """The outcome of checking program `seed` (with `src` for its source); None if the
        clock passed `cutoff` first (the worker is stopped)."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        t0 = time.time()
        req = {"seed": seed, "src": src, "features": sorted(features) if features is not None else None, "fd": fd,
               "only": only, "lines": lines, "api_grads": api_grads}
        try:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        while True:
            if cutoff is not None and time.time() > cutoff:
                self.close()
                return None
            left = min(t0 + timeout, cutoff or float("inf")) - time.time()
            if time.time() >= t0 + timeout:
                self.close()
                return Outcome("hang", f"no answer within {timeout:.0f} s", seconds=round(time.time() - t0, 3))
            ready, _, _ = select.select([self.proc.stdout], [], [], max(left, 0))
            if not ready:
                continue
            line = self.proc.stdout.readline()
            if not line:
                rc = self.proc.wait()
                detail = f"the worker died (exit status {rc}): {self._log_tail()}"
                self.close()
                return Outcome("crash", detail, seconds=round(time.time() - t0, 3))
            if line.startswith(MARK):
                return Outcome(**json.loads(line[len(MARK):]))

    def _log_tail(self):
        self.log.seek(0)
        text = self.log.read().decode(errors="replace")
        return text.rsplit("@@case", 1)[-1].split("\n", 1)[-1].strip()[-2000:]

    def close(self):
        if self.proc is not None:
            kids = _children(self.proc.pid)
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            if self.env.get("DG_CACHE") == "0":
                _stop_optimizers(kids)
            self.proc = None
        if self.log is not None:
            self.log.close()
            self.log = None


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        _serve()
    else:
        for s in sys.argv[1:]:
            p = gen.generate(int(s))
            print(f"seed {s}: {check(p)}")
