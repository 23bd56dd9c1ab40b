"""reshapes-as-views: a reshape of a row-major buffer is a reinterpret_cast to the sizes its
shape buffer held, and the shape buffer (a heap allocation per reshape and call) is gone; the
values are the interpreter's."""
import re

import numpy as np
import pytest

import dg
from dg.dialects.dialect import parse
from dg.lowering import pipeline

SRC = """
def rows(a: f32[B, T, C], w: f32[C, D]) -> f32[B, T, D]:
    return tanh(a @ w)

def heads(q: f32[B, H, T, D], k: f32[B, H, D, S]) -> f32[B, H, T, S]:
    return q @ k

def flat(x: f32[?, ?, ?]) -> f32[?, ?]:
    return reshape(x * 2.0, (-1, 4))

def loss(a: f32[B, T, C], w: f32[C, D], q: f32[B, H, T, D], k: f32[B, H, D, S]) -> f32:
    return sum(rows(a, w) * 0.5) + sum(tanh(heads(q, k)))

def g(a: f32[B, T, C], w: f32[C, D], q: f32[B, H, T, D], k: f32[B, H, D, S]):
    return grad(loss, wrt=(0, 1, 2, 3))(a, w, q, k)
"""


@pytest.fixture(scope="module")
def mods():
    return dg.loads(SRC, mode="compiled", filename="reshapes.dg"), dg.loads(SRC, mode="interp", filename="reshapes.dg")


def _args(rng, name):
    r = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    return {"rows": (r(2, 3, 4), r(4, 5)), "heads": (r(2, 3, 4, 5), r(2, 3, 5, 6)), "flat": (r(2, 3, 4),),
            "g": (r(2, 3, 4), r(4, 5), r(2, 3, 3, 5), r(2, 3, 5, 6))}[name]


def _through(fn, args, last: str) -> str:
    """The function's IR after the `llvm` stage's passes up to `last`."""
    passes = pipeline.STAGES["llvm"][1]
    return str(pipeline.run_passes(parse(fn.ir("bufferized", args=args)), passes[:passes.index(last) + 1]))


@pytest.mark.parametrize("name", ["rows", "heads", "g"])
def test_reshapes_become_views_without_shape_buffers(mods, name):
    args = _args(np.random.default_rng(0), name)
    fn = getattr(mods[0], name)
    before = _through(fn, args, "fuse-gemm-updates")
    after = _through(fn, args, "reshapes-as-views")
    reshapes = before.count("memref.reshape ")
    assert reshapes and "memref.reshape " not in after
    assert after.count("memref.reinterpret_cast ") - before.count("memref.reinterpret_cast ") == reshapes
    shape_buffers = lambda text: re.findall(r"memref\.alloc\(\) [^\n]*: memref<\d+xindex>", text)  # noqa: E731
    assert shape_buffers(before) and not shape_buffers(after)


@pytest.mark.parametrize("name", ["rows", "heads", "flat", "g"])
def test_values_match_the_interpreter(mods, name):
    args = _args(np.random.default_rng(1), name)
    got, want = getattr(mods[0], name)(*args), getattr(mods[1], name)(*args)
    got, want = (list(x) if isinstance(x, tuple) else [x] for x in (got, want))
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5)
