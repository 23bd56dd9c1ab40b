"""send and recv (LANGUAGE.md §7, model parallelism) and pipeline parallelism under `mpiexec`: the
messages in both modes; their gradients (a send's adjoint is a receive) and tangents against
central differences of the sum over the processes; a model split into pipeline stages over
micro-batches, whose gradient through the loop is the GPipe schedule and whose 1F1B schedule
(parallel.dg) gives the same gradients, trains to the one-process parameters, alone (2 stages)
and in a 2 x 2 grid with data parallelism."""
import pytest

from .test_collectives import assert_every_rank_clean, on_ranks

SRC = '''
import parallel

def ping(x: f32[N], h: bf16[N]):
    if rank() == 0:
        t = send(x * 2.0, to=1)
        t2 = send(h, to=1)
        return recv(x, frm=1), h
    y = recv(x, frm=0)
    z = recv(h, frm=0)
    t = send(y + 1.0, to=0)
    return y, z

def to_self(x: f32[N]):
    return send(x, to=rank())

def two_stages(x: f64[N], w: f64[N, N]) -> f64:
    if rank() == 0:
        return send(tanh(x @ w), to=1)
    return sum(tanh(recv(x, frm=0) @ w) ** 2)

def stage(p, h):
    return tanh(h @ p["w"] + p["b"])

def pipe_loss(p, x: f64[M, B, D], y: f64[M, B, D]) -> f64:
    """The model's loss, each process of the pipeline group one stage, over M micro-batches: its
    gradient (the reverse of this loop) is the GPipe schedule."""
    total = 0.0
    for k in range(x.shape[0]):
        h = stage(p, parallel.stage_input(x[k]))
        if parallel.last_stage():
            total = total + mean((h - y[k]) ** 2)
        else:
            total = total + parallel.stage_output(h)
    return total / f64(x.shape[0])

def gpipe_step(p, x: f64[M, B, D], y: f64[M, B, D], lr: f64):
    g = allreduce(grad(pipe_loss)(p, x, y), op="mean", group="dp")
    return tree_map(sgd, p, g, lr=lr)

def sgd(p, g, lr: f64):
    return p - lr * g

def loss_grad_of_output(h: f64[B, D], y: f64[B, D]):
    return grad(mb_loss)(h, y)

def mb_loss(h: f64[B, D], y: f64[B, D]) -> f64:
    return mean((h - y) ** 2)

def one_f_one_b(p, x: f64[M, B, D], y: f64[M, B, D]):
    """The same gradient by the 1F1B schedule: each stage runs its forwards ahead of its backwards
    by as many micro-batches as stages come after it, then one forward and one backward in turn
    (parallel.one_f_one_b_order), each backward from its micro-batch's saved input."""
    m = x.shape[0]
    saved = zeros_like(x)
    total = zeros_like(p)
    order = parallel.one_f_one_b_order(m)
    for i in range(order.shape[0]):
        k = order[i, 1]
        if order[i, 0] == 0:
            a = parallel.stage_input(x[k])
            saved[k] = a
            h = stage(p, a)
            if not parallel.last_stage():
                t = parallel.stage_output(h)
        else:
            a = saved[k]
            h, pb = vjp(stage, p, a)
            if parallel.last_stage():
                dh = loss_grad_of_output(h, y[k]) / f64(m)
            else:
                dh = parallel.output_grad(h)
            dp, da = pb(dh)
            total = tree_map(add, total, dp)
            t = parallel.input_grad(da)
    return allreduce(total, op="mean", group="dp")

def add(a, b):
    return a + b

def whole_loss(ps, x: f64[M, B, D], y: f64[M, B, D]) -> f64:
    total = 0.0
    for k in range(x.shape[0]):
        h = x[k]
        for p in ps:
            h = stage(p, h)
        total = total + mean((h - y[k]) ** 2)
    return total / f64(x.shape[0])

def whole_step(ps, x: f64[M, B, D], y: f64[M, B, D], lr: f64):
    g = grad(whole_loss)(ps, x, y)
    return tree_map(sgd, ps, g, lr=lr)
'''

CHECKS = r"""
import json, sys
import numpy as np
import ml_dtypes
import dg
SRC, pp = sys.argv[1], int(sys.argv[2])
r, n = dg.dist.rank(), dg.dist.world_size()
bad = []
place = dg.dist.groups(pp=pp)
s, d = place["pp"], place["dp"]
dp = n // pp

def close(name, got, want, rtol=1e-9, atol=1e-12):
    if not np.allclose(got, want, rtol=rtol, atol=atol):
        bad.append(f"{name}: {np.abs(np.asarray(got) - np.asarray(want)).max()}")

for mode in ("interp", "compiled"):
    m = dg.loads(SRC, mode=mode, filename="pipe.dg")
    if n == 2:
        x = np.arange(3, dtype=np.float32)
        hb = (np.arange(3) + 1).astype(ml_dtypes.bfloat16)
        got, gh = m.ping(x, hb)
        close(f"{mode} ping", got, x * 2 + 1 if r == 0 else x * 2)
        close(f"{mode} bf16", gh.astype(np.float32), hb.astype(np.float32))
        try:
            m.to_self(x)
            bad.append(f"{mode}: a send to itself went")
        except dg.DgRuntimeError as e:
            if "send and recv: rank " + str(r) + " is not another process of this group of 2" not in str(e):
                bad.append(f"{mode}: {e}")
        # the gradient and the tangent through a send and a recv, against central differences
        w = [(np.arange(9).reshape(3, 3) * 0.1 - 0.4) * (k + 1) for k in range(2)]
        x0 = np.arange(3) * 0.5 - 0.3
        gx, gw = dg.grad(m.two_stages, wrt=(0, 1))(x0, w[r])
        def whole(x, w0, w1):
            return np.sum(np.tanh(np.tanh(x @ w0) @ w1) ** 2)
        eps = 1e-6
        i, j = 1, 2
        step = np.zeros((3, 3)); step[i, j] = eps
        if r == 0:
            fd = (whole(x0, w[0] + step, w[1]) - whole(x0, w[0] - step, w[1])) / (2 * eps)
        else:
            fd = (whole(x0, w[0], w[1] + step) - whole(x0, w[0], w[1] - step)) / (2 * eps)
        close(f"{mode} grad through send and recv", gw[i, j], fd, rtol=1e-6, atol=1e-9)
        t = np.array([0.3, -0.2, 0.1])
        _, tan = dg.jvp(m.two_stages, (x0, w[r]), (t if r == 0 else np.zeros(3), np.zeros((3, 3))))
        fd = (whole(x0 + eps * t, *w) - whole(x0 - eps * t, *w)) / (2 * eps)
        close(f"{mode} tangent through send and recv", dg.dist.allreduce(np.float64(tan)), fd, rtol=1e-6, atol=1e-9)
    # pipeline training: stage s of pp holds layer s; data parallel over dp; 4 micro-batches
    rng = np.random.default_rng(0)
    D, B, M = 4, 3, 4
    layers = [{"w": rng.normal(0, 0.5, (D, D)), "b": rng.normal(0, 0.1, D)} for _ in range(pp)]
    xs = rng.normal(size=(dp, M, B, D))
    ys = rng.normal(size=(dp, M, B, D))
    mine, lr = layers[s], 0.1
    g1 = m.one_f_one_b(mine, xs[d], ys[d])
    g0 = dg.dist.allreduce(dg.grad(m.pipe_loss)(mine, xs[d], ys[d]), op="mean", group="dp")
    for k in g0:
        close(f"{mode} 1F1B against GPipe {k}", g1[k], g0[k])
    for _ in range(5):
        mine = m.gpipe_step(mine, xs[d], ys[d], lr)
    # one process: the whole model, the whole batch (every replica's micro-batches: their mean)
    whole = tuple(layers)
    for _ in range(5):
        whole = m.whole_step(whole, xs.reshape(dp * M, B, D), ys.reshape(dp * M, B, D), lr)
    for k in mine:
        close(f"{mode} after 5 steps {k}", mine[k], whole[s][k])
print(json.dumps({"rank": r, "bad": bad}), flush=True)
"""


@pytest.mark.slow  # (pipelines trained 5 steps, both modes: CI runs the slow tier)
@pytest.mark.parametrize("n, pp", [(2, 2), (4, 2), (4, 4)])
# (4 oversubscribes this 2-core machine, as CI does: the slow tier)
def test_send_recv_and_pipeline_schedules(n, pp):
    assert_every_rank_clean(on_ranks(n, CHECKS, SRC, str(pp), timeout=300), list(range(n)))


FAILS = r"""
import sys, numpy as np, dg
dg.dist.groups(pp=2)
p = dg.loads(sys.argv[1], mode=sys.argv[2], filename="stages.dg")
p.run(np.ones((3, 2, 4)))
print("never", flush=True)
"""
FAILING = '''
import parallel

def run(x: f64[M, B, D]) -> f64:
    total = 0.0
    for k in range(x.shape[0]):
        h = tanh(parallel.stage_input(x[k]))
        if parallel.last_stage():
            assert k < 1, "the last stage gives up"
            total = total + sum(h)
        else:
            total = total + parallel.stage_output(h)
    return allreduce(total, op="sum", group="pp")
'''


@pytest.mark.parametrize("mode", ["interp", "compiled"])
def test_a_failure_in_a_stage_ends_every_stage(mode):
    """The last stage fails a check at its second micro-batch while the first stage has sent on
    and waits for the total: every process ends with the located message, none hangs."""
    r = on_ranks(2, FAILS, FAILING, mode, timeout=120)
    assert r.returncode != 0 and "never" not in r.stdout
    assert "stages.dg:9:13: error: assertion failed: the last stage gives up" in r.stderr, r.stderr[-3000:]
