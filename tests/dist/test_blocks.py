"""allgather, reduce_scatter and all_to_all (LANGUAGE.md §7, model parallelism) under `mpiexec`: from Python
and inside dg code, in both modes, along any axis, on structures and half floats; their
gradients and tangents checked against central differences of the sum over every rank of what
each computes (the gradient's meaning for collectives), and the check of reduce_scatter's
sizes. Each case runs a script on 2 processes (and 4, oversubscribed on this 2-core machine)."""
from pathlib import Path

import numpy as np
import pytest

import dg

from .test_collectives import assert_every_rank_clean, on_ranks, reports_in

SRC = '''
def ag(x: f32[N, 3], h: f16[4]):
    return allgather(x), allgather(x, axis=1), allgather((x, x * 2.0), axis=-1), allgather(h)

def rs(x: f32[N, 3], y: f64[3, M], h: bf16[K]):
    return reduce_scatter(x), reduce_scatter(x, op="mean"), reduce_scatter(x, op="max"), reduce_scatter(y, axis=1), reduce_scatter(h)

def loss(x: f64[N, 3], w: f64[3, M]) -> f64:
    g = allgather(x * x, axis=1)
    s = reduce_scatter(tanh(x @ w), axis=1, op="sum")
    m = reduce_scatter(x, op="mean")
    return sum(g * 0.5) + sum(s * s) + sum(m * m * m)

def tangent(x: f64[N, 3], w: f64[3, M], t: f64[N, 3]):
    return jvp(loss, (x, w), (t, zeros_like(w)))

def a2a(x: f32[A, B, C], h: f16[A, B]):
    return all_to_all(x), all_to_all(x, split_axis=1, concat_axis=0), all_to_all(x, split_axis=2, concat_axis=1), all_to_all(x, split_axis=0, concat_axis=-1), all_to_all(h, split_axis=1, concat_axis=0)

def a2a_loss(x: f64[A, B]) -> f64:
    y = all_to_all(tanh(x), split_axis=1, concat_axis=0)
    return sum(y * y * y) + sum(all_to_all(x * x) * 0.5)
'''

CHECKS = r'''
import json, sys
import numpy as np
import ml_dtypes
import dg
r, n = dg.dist.rank(), dg.dist.world_size()
bad = []

def same(name, got, want, rtol=1e-6, atol=0.0):
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        bad.append(f"{name}: {got.dtype}{got.shape}, want {want.dtype}{want.shape}")
        return
    try:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)
    except AssertionError as e:
        bad.append(f"{name}: {e}")

def of(k, shape, dtype=np.float32):
    """Rank k's argument: what every rank can work out for every other."""
    return (np.arange(np.prod(shape)).reshape(shape) * 0.25 + k).astype(dtype)

rows = 2 * n
x = [of(k, (rows, 3)) for k in range(n)]
h = [of(k, (4,), np.float16) for k in range(n)]
y = [of(k, (3, 2 * n), np.float64) for k in range(n)]
hb = [of(k, (n,), ml_dtypes.bfloat16) for k in range(n)]
total = sum(x)
block = slice(r * rows // n, (r + 1) * rows // n)

# from Python
same("py allgather axis 1", dg.dist.allgather(x[r], axis=1), np.concatenate(x, axis=1))
got = dg.dist.reduce_scatter({"a": x[r], "b": (x[r] * 2,)}, axis=0, op="sum")
same("py reduce_scatter", got["a"], total[block])
same("py reduce_scatter tuple", got["b"][0], 2 * total[block])
same("py reduce_scatter axis 1", dg.dist.reduce_scatter(y[r], axis=1, op="max"), np.max(y, axis=0)[:, 2 * r:2 * r + 2])

for mode in ("interp", "compiled"):
    p = dg.loads(sys.argv[1], mode=mode, filename="blocks.dg")
    a0, a1, (t1, t2), ah = p.ag(x[r], h[r])
    same(f"{mode} allgather", a0, np.concatenate(x))
    same(f"{mode} allgather axis 1", a1, np.concatenate(x, axis=1))
    same(f"{mode} allgather tuple", t1, np.concatenate(x, axis=1))
    same(f"{mode} allgather tuple 2x", t2, np.concatenate([2 * v for v in x], axis=1))
    same(f"{mode} allgather f16", ah, np.concatenate(h))
    s, m, mx, sy, sh = p.rs(x[r], y[r], hb[r])
    same(f"{mode} reduce_scatter sum", s, total[block])
    same(f"{mode} reduce_scatter mean", m, (total / n).astype(np.float32)[block])
    same(f"{mode} reduce_scatter max", mx, np.max(x, axis=0)[block])
    same(f"{mode} reduce_scatter axis 1", sy, sum(y)[:, 2 * r:2 * r + 2])
    same(f"{mode} reduce_scatter bf16", sh.astype(np.float32), sum(v.astype(np.float32) for v in hb)[r:r + 1])
    # the gradient and the tangent of the sum over every rank, against central differences
    xs = [of(k, (rows, 3), np.float64) * 0.3 for k in range(n)]
    w = of(0, (3, 2 * n), np.float64) * 0.1
    gx = dg.grad(p.loss)(xs[r], w)
    grads = dg.dist.allgather(gx[None], axis=0)  # every rank's gradient, on every rank
    eps = 1e-6
    for q, (i, j) in ((0, (0, 1)), (n - 1, (rows - 1, 2)), (n // 2, (1, 0))):
        def objective(delta):
            mine = xs[r].copy()
            if r == q:
                mine[i, j] += delta
            return dg.dist.allreduce(np.float64(p.loss(mine, w)), "sum")
        fd = (objective(eps) - objective(-eps)) / (2 * eps)
        same(f"{mode} grad ({q}, {i}, {j})", grads[q][i, j], fd, rtol=1e-5, atol=1e-7)
    t = of(r, (rows, 3), np.float64) * 0.01 - 0.02
    _, tan = p.tangent(xs[r], w, t)
    fd = (dg.dist.allreduce(np.float64(p.loss(xs[r] + eps * t, w)), "sum")
          - dg.dist.allreduce(np.float64(p.loss(xs[r] - eps * t, w)), "sum")) / (2 * eps)
    same(f"{mode} tangent", dg.dist.allreduce(np.float64(tan), "sum"), fd, rtol=1e-5, atol=1e-7)
    # all_to_all along every pair of axes, its gradient against central differences
    cube = [of(k, (2 * n, 2 * n, 2 * n)) for k in range(n)]
    hh = [of(k, (2 * n, 2 * n), np.float16) for k in range(n)]
    outs = p.a2a(cube[r], hh[r])
    for got, (src, sa, ca) in zip(outs, [(cube, 0, 0), (cube, 1, 0), (cube, 2, 1), (cube, 0, 2), (hh, 1, 0)]):
        same(f"{mode} all_to_all {sa} {ca}", got, np.concatenate([np.split(src[k], n, axis=sa)[r] for k in range(n)], axis=ca))
    if mode == "compiled":
        same("py all_to_all", dg.dist.all_to_all({"c": (cube[r],)}, split_axis=2, concat_axis=1)["c"][0],
             np.concatenate([np.split(cube[k], n, axis=2)[r] for k in range(n)], axis=1))
    xa = of(r, (2 * n, 2 * n), np.float64) * 0.05
    ga = dg.dist.allgather(dg.grad(p.a2a_loss)(xa)[None], axis=0)
    for q, (i, j) in ((0, (1, 2)), (n - 1, (2 * n - 1, 0))):
        def objective(delta):
            mine = xa.copy()
            if r == q:
                mine[i, j] += delta
            return dg.dist.allreduce(np.float64(p.a2a_loss(mine)), "sum")
        same(f"{mode} all_to_all grad ({q}, {i}, {j})", ga[q][i, j], (objective(eps) - objective(-eps)) / (2 * eps),
             rtol=1e-5, atol=1e-7)
    # axis 0's size not a multiple of the world's: every rank stops with the located error
    if n > 1:
        try:
            p.rs(x[r][:2 * n - 1], y[r], hb[r])
            bad.append(f"{mode}: no error for {2 * n - 1} rows")
        except dg.DgRuntimeError as e:
            if f"blocks.dg:6:12: error: ValueError: reduce_scatter: axis size {2 * n - 1} is not a multiple of the group's {n} processes" not in str(e):
                bad.append(f"{mode}: {e}")
print(json.dumps({"rank": r, "size": n, "bad": bad}), flush=True)
'''


@pytest.mark.slow  # (every collective, both modes, many programs: CI runs the slow tier)
@pytest.mark.parametrize("n", [2, 4])  # (4 oversubscribes this 2-core machine, as CI does)
def test_allgather_and_reduce_scatter_on_every_rank(n):
    r = on_ranks(n, CHECKS, SRC, timeout=600)
    assert_every_rank_clean(r, list(range(n)))
    assert all(rep["size"] == n for rep in reports_in(r.stdout))


def test_a_world_of_one_gathers_and_scatters_its_own(tmp_path):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(dg.dist.allgather(x, axis=1), x)
    np.testing.assert_array_equal(dg.dist.reduce_scatter((x,), op="max")[0], x)
    for mode in ("interp", "compiled"):
        p = dg.loads(SRC, mode=mode, filename="blocks1.dg")
        a0, a1, _, _ = p.ag(x, np.ones(4, np.float16))
        np.testing.assert_array_equal(a0, x)
        np.testing.assert_array_equal(a1, x)
        assert dg.grad(p.loss)(x.astype(np.float64), np.ones((3, 2))).shape == (2, 3)
    with pytest.raises(dg.DgError, match="op must be one of"):
        dg.dist.reduce_scatter(x, op="min")
    with pytest.raises(dg.DgError, match="axis 2 is out of range"):
        dg.dist.allgather(x, axis=2)
    with pytest.raises(dg.DgTypeError, match='reduce_scatter: op must be "sum", "mean" or "max"'):
        dg.loads('def f(x: f32[4]) -> f32[4]:\n    return reduce_scatter(x, op="min")\n', filename="c.dg").f(np.ones(4, np.float32))
    np.testing.assert_array_equal(dg.dist.all_to_all(x, split_axis=1, concat_axis=0), x)
    for mode in ("interp", "compiled"):
        p = dg.loads(SRC, mode=mode, filename="blocks2.dg")
        c = np.arange(8, dtype=np.float32).reshape(2, 2, 2)
        for got in p.a2a(c, np.ones((2, 2), np.float16))[:4]:
            np.testing.assert_array_equal(got, c)
    with pytest.raises(dg.DgTypeError, match="all_to_all: concat_axis 3 is out of range for an array of rank 2"):
        dg.loads('def f(x: f32[4, 4]):\n    return all_to_all(x, concat_axis=3)\n', filename="e.dg").f(np.ones((4, 4), np.float32))
    with pytest.raises(dg.DgTypeError, match="allgather: axis 1 is out of range for an array of rank 1"):
        dg.loads('def f(x: f32[4]):\n    return allgather(x, axis=1)\n', filename="d.dg").f(np.ones(4, np.float32))


STARTED = r"""
import json, sys
from pathlib import Path
import numpy as np
import dg
r, n = dg.dist.rank(), dg.dist.world_size()
bad = []
overlap = dg.load(Path(sys.argv[1]) / "benchmarks" / "overlap.dg", mode=sys.argv[2])
m = dg.loads('''
def f(x: f32[N], w: f32[N, N]):
    p = allreduce_start({"a": x * 2.0, "b": (w,)}, op="sum")
    q = allreduce_start(x, op="mean")
    h = tanh(x @ w)
    for i in range(20):
        h = tanh(h @ w)
    return allreduce_wait(p, op="sum"), allreduce_wait(q, op="mean"), h

def pair_loss(x: f64[N]) -> f64:
    y = allreduce_wait(allreduce_start(x * x, op="mean"), op="mean")
    return sum(tanh(y) * x)
''', mode=sys.argv[2], filename="started.dg")
x = np.arange(4, dtype=np.float32) + r
w = np.eye(4, dtype=np.float32) * (r + 1)
got, mean, h = m.f(x, w)
tot = sum(np.arange(4, dtype=np.float32) + k for k in range(n))
if not np.allclose(got["a"], 2 * tot) or not np.allclose(got["b"][0], np.eye(4) * sum(k + 1 for k in range(n))):
    bad.append(f"sum {got}")
if not np.allclose(mean, tot / n):
    bad.append(f"mean {mean}")
# the pair's gradient (reversed: a start of the cotangent, then its wait) against central differences
x0 = [np.arange(3) * 0.3 + 0.1 * k for k in range(n)]
gx = dg.dist.allgather(dg.grad(m.pair_loss)(x0[r])[None], axis=0)
for q, i in ((0, 1), (n - 1, 2)):
    def total(delta):
        mine = x0[r].copy()
        if r == q:
            mine[i] += delta
        return dg.dist.allreduce(np.float64(m.pair_loss(mine)))
    fd = (total(1e-6) - total(-1e-6)) / 2e-6
    if abs(gx[q][i] - fd) > 1e-6 * max(1.0, abs(fd)):
        bad.append(f"grad ({q}, {i}): {gx[q][i]} against {fd}")
rng = np.random.default_rng(0)
ls = tuple({"w": rng.normal(0, 0.3, (16, 16)).astype(np.float32), "b": np.zeros(16, np.float32)} for _ in range(3))
xs, ys = rng.normal(size=(8, 16)).astype(np.float32) + r, rng.normal(size=(8, 16)).astype(np.float32)
a = overlap.blocking_step(ls, xs, ys, np.float32(0.1))
b = overlap.overlapped_step(ls, xs, ys, np.float32(0.1))
if any(not np.allclose(p[k], q[k], rtol=1e-6, atol=1e-7) for p, q in zip(a, b) for k in p):
    bad.append("the overlapped step differs from the blocking one")
print(json.dumps({"rank": r, "bad": bad}), flush=True)
"""


@pytest.mark.parametrize("mode", ["interp", "compiled"])
def test_reductions_started_and_waited_for_apart(mode):
    """allreduce_start / allreduce_wait (a structure leaf by leaf, sum and mean, work in between)
    give allreduce's values; benchmarks/overlap.dg's overlapped data-parallel step (each layer's
    gradients reduced while the backward pass goes on) gives the blocking step's parameters."""
    root = str(Path(__file__).resolve().parents[2])
    assert_every_rank_clean(on_ranks(2, STARTED, root, mode, timeout=300), [0, 1])
