"""Sums made cheaper (lowering.sums): zeros added are dropped, a product added to a value
accumulates into it (one gemm that adds), and an outer product fuses with the sum it is added
into; with the same values as NumPy, and the same located error where sizes differ."""
import numpy as np
import pytest

import dg
from dg.core.mlir import operations_under
from dg.dialects.dialect import parse
from dg.lowering import blas, pipeline
from dg.runtime.modes import grad_text

SRC = """
def product(w: f32[?, ?], a: f32[?, ?], b: f32[?, ?]) -> f32[?, ?]:
    return w + a @ b

def outer(w: f32[?, ?], u: f32[?], v: f32[?]) -> f32[?, ?]:
    return w + expand_dims(u, 1) * v

def zero(w: f32[?, ?]) -> f32[?, ?]:
    return w + zeros_like(w)

def unused(w: f32[?, ?], v: f32[?, ?], x: f32[?]) -> f32:
    return sum(tanh(w @ x))

def grads(w: f32[?, ?], v: f32[?, ?], x: f32[?]):
    return grad(unused, wrt=(0, 1))(w, v, x)
"""


@pytest.fixture(scope="module")
def modules():
    return {mode: dg.loads(SRC, mode=mode, filename="sums.dg") for mode in ("interp", "compiled")}


def _bufferized(fn, args):
    fn(*args)
    return pipeline.run_stage(parse(grad_text(fn._last)), "bufferized", start="grad", entry=fn._last.symbol)


def _ops(m, name):
    return [op for op in operations_under(m.body) if op.name == name]


def test_a_product_added_to_a_value_accumulates_into_it(modules):
    rng = np.random.default_rng(0)
    w, a, b = (rng.standard_normal(s).astype(np.float32) for s in ((4, 5), (4, 3), (3, 5)))
    for mode in ("interp", "compiled"):
        np.testing.assert_allclose(modules[mode].product(w, a, b), w + a @ b, rtol=1e-5, atol=1e-6)
    m = _bufferized(modules["compiled"].product, (w, a, b))
    (mm,) = _ops(m, "linalg.matmul")
    assert not _ops(m, "linalg.generic"), "the sum is the product's own accumulation"
    assert not _ops(m, "linalg.fill"), "nothing zeroed for the product"
    if blas.routed() is not None:
        text = modules["compiled"].product.ir("llvm", args=(w, a, b))
        assert "call @dg_gemm_f32(" in text and "call @dg_gemm_f32_new(" not in text


def test_an_outer_product_and_the_sum_it_is_added_into_are_one_loop(modules):
    rng = np.random.default_rng(1)
    w, u, v = rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal(4).astype(np.float32), \
        rng.standard_normal(5).astype(np.float32)
    for mode in ("interp", "compiled"):
        np.testing.assert_allclose(modules[mode].outer(w, u, v), w + u[:, None] * v, rtol=1e-6)
    m = _bufferized(modules["compiled"].outer, (w, u, v))
    two_d = [g for g in _ops(m, "linalg.generic") if len(list(g.attributes["iterator_types"])) == 2
             and len(g.operands) > 2]
    assert len(two_d) == 1, [str(g)[:200] for g in two_d]


def test_zeros_added_are_dropped(modules):
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    for mode in ("interp", "compiled"):
        np.testing.assert_array_equal(modules[mode].zero(w), w)
    assert not _ops(_bufferized(modules["compiled"].zero, (w,)), "linalg.generic")


def test_a_gradient_of_an_unused_argument_is_its_zeros(modules):
    rng = np.random.default_rng(2)
    w, v, x = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((2, 2)).astype(np.float32), \
        rng.standard_normal(4).astype(np.float32)
    got = modules["compiled"].grads(w, v, x)
    want = modules["interp"].grads(w, v, x)
    for g, e in zip(got, want):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got[1], np.zeros_like(v))


@pytest.mark.parametrize("name", ["product", "outer"])
def test_sizes_that_differ_fail_as_before(modules, name):
    """The accumulation writes into a stand-in of the product's sizes once the add's size check
    failed: the call raises the located error the interpreter raises, and reads nothing past an
    end (the process lives)."""
    rng = np.random.default_rng(3)
    if name == "product":
        args = (rng.standard_normal((4, 6)).astype(np.float32), rng.standard_normal((4, 3)).astype(np.float32),
                rng.standard_normal((3, 5)).astype(np.float32))
    else:
        args = (rng.standard_normal((4, 6)).astype(np.float32), rng.standard_normal(4).astype(np.float32),
                rng.standard_normal(5).astype(np.float32))
    messages = []
    for mode in ("interp", "compiled"):
        with pytest.raises(dg.DgError) as e:
            getattr(modules[mode], name)(*args)
        messages.append(str(e.value).splitlines()[0])
    assert messages[0] == messages[1] and "sums.dg:" in messages[0], messages
