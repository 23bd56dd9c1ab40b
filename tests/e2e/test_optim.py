"""The standard library's optimizers (stdlib/optim.dg): pure functions over structures that give
torch.optim's updates step for step, in every mode; checked against PyTorch where it is
installed and against NumPy transcriptions of torch.optim's formulas everywhere."""
import numpy as np
import pytest

from .util import load_src

try:
    import torch
except ImportError:  # CI installs no torch: the NumPy references still run
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed: the references come from it")

F32 = np.float32
STEPS = 6

SRC = """
import optim

def loss(p, x) -> f32:
    h = tanh(x @ p["layer"]["w"] + p["layer"]["b"])
    return sum(h * h) + sum(p["scale"][0] * p["scale"][1])

def sgd(p, x, n: i64, lr: f32, wd: f32):
    s = optim.sgd_init(p)
    for i in range(n):
        p, s = optim.sgd(p, grad(loss)(p, x), s, lr=lr, weight_decay=wd)
    return p, s["step"]

def momentum(p, x, n: i64, lr: f32, mom: f32, damp: f32, wd: f32, nesterov: bool):
    s = optim.momentum_init(p)
    for i in range(n):
        p, s = optim.momentum(p, grad(loss)(p, x), s, lr=lr, momentum=mom, dampening=damp, weight_decay=wd,
                              nesterov=nesterov)
    return p

def adam(p, x, n: i64, lr: f32, b1: f32, b2: f32, wd: f32):
    s = optim.adam_init(p)
    for i in range(n):
        p, s = optim.adam(p, grad(loss)(p, x), s, lr=lr, betas=(b1, b2), weight_decay=wd)
    return p, s

def adamw(p, x, n: i64, lr: f32, wd: f32):
    s = optim.adamw_init(p)
    for i in range(n):
        p, s = optim.adamw(p, grad(loss)(p, x), s, lr=lr, weight_decay=wd)
    return p

def adam_defaults(p, x):
    s = optim.adam_init(p)
    p, s = optim.adam(p, grad(loss)(p, x), s)
    return p
"""


@pytest.fixture
def m(mode):
    return load_src(SRC, mode, "optim_test.dg")


def make(seed=0):
    rng = np.random.default_rng(seed)
    p = {"layer": {"w": rng.standard_normal((3, 2)).astype(F32), "b": rng.standard_normal(2).astype(F32)},
         "scale": (rng.standard_normal(2).astype(F32), rng.standard_normal(2).astype(F32))}
    x = rng.standard_normal((4, 3)).astype(F32)
    return p, x


def leaves(p):
    return [p["layer"]["b"], p["layer"]["w"], p["scale"][0], p["scale"][1]]


def np_grads(ls, x):
    b, w, s0, s1 = (a.astype(np.float64) for a in ls)
    h = np.tanh(x @ w + b)
    dz = 2 * h * (1 - h * h)
    return [dz.sum(0), x.T @ dz, s1, s0]


def np_run(kind, p, x, n, **hp):
    """torch.optim's update rules, transcribed, in float64."""
    ps = [a.astype(np.float64) for a in leaves(p)]
    state = [dict(m=np.zeros_like(a), v=np.zeros_like(a), buf=None) for a in ps]
    for t in range(1, n + 1):
        gs = np_grads(ps, x)
        for i, (a, g) in enumerate(zip(ps, gs)):
            st = state[i]
            if kind == "sgd":
                ps[i] = a - hp["lr"] * (g + hp["wd"] * a)
            elif kind == "momentum":
                d = g + hp["wd"] * a
                st["buf"] = d if st["buf"] is None else hp["mom"] * st["buf"] + (1 - hp["damp"]) * d
                ps[i] = a - hp["lr"] * (d + hp["mom"] * st["buf"] if hp["nesterov"] else st["buf"])
            else:
                if kind == "adamw":
                    a = a * (1 - hp["lr"] * hp["wd"])
                    b1, b2 = 0.9, 0.999
                else:
                    g = g + hp["wd"] * a
                    b1, b2 = hp["b1"], hp["b2"]
                st["m"] = b1 * st["m"] + (1 - b1) * g
                st["v"] = b2 * st["v"] + (1 - b2) * g * g
                denom = np.sqrt(st["v"]) / np.sqrt(1 - b2 ** t) + 1e-8
                ps[i] = a - hp["lr"] / (1 - b1 ** t) * st["m"] / denom
    return ps


def torch_run(kind, p, x, n, **hp):
    ts = [torch.tensor(a, requires_grad=True) for a in leaves(p)]
    if kind == "sgd":
        opt = torch.optim.SGD(ts, lr=hp["lr"], weight_decay=hp["wd"])
    elif kind == "momentum":
        opt = torch.optim.SGD(ts, lr=hp["lr"], momentum=hp["mom"], dampening=hp["damp"], weight_decay=hp["wd"],
                              nesterov=hp["nesterov"])
    elif kind == "adam":
        opt = torch.optim.Adam(ts, lr=hp["lr"], betas=(hp["b1"], hp["b2"]), weight_decay=hp["wd"])
    else:
        opt = torch.optim.AdamW(ts, lr=hp["lr"], weight_decay=hp["wd"])
    xt = torch.tensor(x)
    for _ in range(n):
        opt.zero_grad()
        b, w, s0, s1 = ts
        h = torch.tanh(xt @ w + b)
        ((h * h).sum() + (s0 * s1).sum()).backward()
        opt.step()
    return [t.detach().numpy() for t in ts]


CASES = [
    ("sgd", dict(lr=0.05, wd=0.0)),
    ("sgd", dict(lr=0.05, wd=0.1)),
    ("momentum", dict(lr=0.05, mom=0.9, damp=0.0, wd=0.0, nesterov=False)),
    ("momentum", dict(lr=0.05, mom=0.8, damp=0.3, wd=0.01, nesterov=False)),
    ("momentum", dict(lr=0.05, mom=0.9, damp=0.0, wd=0.01, nesterov=True)),
    ("adam", dict(lr=0.01, b1=0.9, b2=0.999, wd=0.0)),
    ("adam", dict(lr=0.01, b1=0.8, b2=0.99, wd=0.1)),
    ("adamw", dict(lr=0.01, wd=0.05)),
]


def run_dg(m, kind, p, x, hp):
    args = {k: (F32(v) if isinstance(v, float) else v) for k, v in hp.items()}
    out = getattr(m, kind)(p, x, STEPS, *args.values())
    return out[0] if isinstance(out, tuple) else out


@pytest.mark.parametrize("kind, hp", CASES, ids=[f"{k}-{i}" for i, (k, _) in enumerate(CASES)])
def test_matches_torch_optim_formulas(m, kind, hp):
    p, x = make()
    got = run_dg(m, kind, p, x, hp)
    assert isinstance(got, dict) and isinstance(got["scale"], tuple)  # the structure comes back
    for g, w in zip(leaves(got), np_run(kind, p, x, STEPS, **hp)):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)


@needs_torch
@pytest.mark.parametrize("kind, hp", CASES, ids=[f"{k}-{i}" for i, (k, _) in enumerate(CASES)])
def test_matches_torch_optim(m, kind, hp):
    p, x = make(1)
    got = run_dg(m, kind, p, x, hp)
    for g, w in zip(leaves(got), torch_run(kind, p, x, STEPS, **hp)):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)


def test_state_is_a_structure_of_the_parameters_shape(m):
    p, x = make(2)
    _, s = m.adam(p, x, 2, F32(0.01), F32(0.9), F32(0.999), F32(0.0))
    assert sorted(s) == ["m", "step", "v"] and s["step"] == 2.0
    for part in ("m", "v"):
        assert sorted(s[part]) == ["layer", "scale"] and isinstance(s[part]["scale"], tuple)
        assert s[part]["layer"]["w"].shape == (3, 2)
    _, step = m.sgd(p, x, 3, F32(0.1), F32(0.0))
    assert step == 3.0


def test_pytorch_defaults(m):
    """adam(params, grads, state) alone is torch.optim.Adam's defaults: lr=1e-3, betas=(0.9, 0.999)."""
    p, x = make(3)
    got = m.adam_defaults(p, x)
    for g, w in zip(leaves(got), np_run("adam", p, x, 1, lr=1e-3, b1=0.9, b2=0.999, wd=0.0)):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)
