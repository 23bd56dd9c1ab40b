"""merge-repeats: once a gradient's functions are inlined, the forward that a callee's reverse
recomputes (and that its caller already computed) is computed once, with each product writing
into a buffer of its own; the values are the interpreter's."""
import numpy as np
import pytest

import dg

# grad(loss): loss's reverse calls layer__vjp, which recomputes layer's forward (its product) and
# calls act__vjp, which recomputes act's forward; loss's own forward called layer too.
SRC = """
def act(h: f32[N, D]) -> f32[N, D]:
    return tanh(h) * h

def layer(x: f32[N, C], w: f32[C, D]) -> f32[N, D]:
    return act(x @ w)

def loss(x: f32[N, C], w: f32[C, D], v: f32[D, E]) -> f32:
    return sum(layer(x, w) @ v)

def g(x: f32[N, C], w: f32[C, D], v: f32[D, E]):
    return grad(loss, wrt=(1, 2))(x, w, v)
"""


@pytest.fixture(scope="module")
def mods():
    return dg.loads(SRC, mode="compiled", filename="repeats.dg"), dg.loads(SRC, mode="interp", filename="repeats.dg")


def _args():
    rng = np.random.default_rng(0)
    return tuple(rng.standard_normal(s).astype(np.float32) for s in ((6, 4), (4, 5), (5, 3)))


def _products(text: str) -> list:
    """The operands (`ins`) of each matrix product of the IR."""
    return [line.split("ins(")[1].split(" :")[0] for line in text.splitlines() if "linalg.matmul " in line]


def test_recomputed_forward_is_computed_once(mods):
    products = _products(mods[0].g.ir("bufferized", args=_args()))
    # Without the merge, x @ w stood twice: in loss's forward and in layer__vjp's recomputation.
    assert len(products) == 4
    assert len(set(products)) == len(products)


def test_each_product_writes_into_a_buffer_of_its_own(mods):
    text = mods[0].g.ir("bufferized", args=_args())
    outs = [line.split("outs(")[1].split(" ")[0] for line in text.splitlines() if "linalg.matmul " in line]
    assert len(outs) == len(set(outs))
    assert "memref.copy" not in text


def test_values_are_the_interpreters(mods):
    args = _args()
    for a, b in zip(mods[0].g(*args), mods[1].g(*args)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
