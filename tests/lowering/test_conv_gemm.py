"""Compiled CPU convolutions are gemms: the convolutions-as-matmuls pass makes conv2d and its two
gradients (groups = 1) an im2col copy and one `linalg.matmul` each, which the blas-matmuls pass
makes a BLAS call, reading the operands its indexing maps transpose as transposed views; and the
tiled-max-pool-grads pass makes the gradient of a max pool whose windows tile the input one
element-wise generic."""
import numpy as np
import pytest

import dg
from dg.core.mlir import ir
from dg.dialects.dialect import shared_context
from dg.lowering import blas

from .test_blas import _descriptor, _engine

SRC = """
def conv(x: f32[B, 3, H, W], w: f32[4, 3, 3, 2]) -> f32[B, 4, ?, ?]:
    return conv2d(x, w, stride=(2, 1), padding=(1, 2), dilation=(1, 2))

def loss(x: f32[B, 3, H, W], w: f32[4, 3, 3, 2], r: f32[B, 4, ?, ?]) -> f32:
    return sum(conv2d(x, w, stride=(2, 1), padding=(1, 2), dilation=(1, 2)) * r)

def grads(x: f32[B, 3, H, W], w: f32[4, 3, 3, 2], r: f32[B, 4, ?, ?]):
    return grad(loss, wrt=(0, 1))(x, w, r)

def grouped(x: f32[B, 4, 6, 6], w: f32[6, 2, 3, 3]) -> f32[B, 6, 4, 4]:
    return conv2d(x, w, groups=2)
"""


@pytest.fixture(scope="module")
def modes():
    return dg.loads(SRC, mode="compiled"), dg.loads(SRC, mode="interp")


def _args(batch, rng):
    x = rng.standard_normal((batch, 3, 7, 6)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 2)).astype(np.float32)
    r = rng.standard_normal((batch, 4, 4, 8)).astype(np.float32)
    return x, w, r


def test_conv_and_its_gradients_are_blas_calls(modes):
    compiled, _ = modes
    x, w, r = _args(2, np.random.default_rng(0))
    if blas.locate() is None:
        pytest.skip("no BLAS found: matmuls stay loops")
    assert compiled.conv.ir("llvm", args=(x, w)).count("call @dg_gemm_f32") >= 1
    text = compiled.grads.ir("bufferized", args=(x, w, r))
    # the forward is dead in the gradient; the input and weight gradients are one matmul each,
    # their transposed operands read through the matmul's indexing maps
    assert text.count("linalg.matmul") == 2 and text.count("linalg.matmul indexing_maps") == 2
    # no generic contracts over the kernel any more (the old lowering's 8-loop generics)
    assert '"reduction", "reduction", "reduction"' not in text
    assert compiled.grads.ir("llvm", args=(x, w, r)).count("call @dg_gemm_f32") == 2


@pytest.mark.parametrize("batch", [1, 3])
def test_gemm_convolutions_match_interpreter_with_symbolic_batch(modes, batch):
    compiled, interp = modes
    x, w, r = _args(batch, np.random.default_rng(batch))
    np.testing.assert_allclose(compiled.conv(x, w), interp.conv(x, w), rtol=1e-5, atol=1e-5)
    for got, want in zip(compiled.grads(x, w, r), interp.grads(x, w, r)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_grouped_convolution_keeps_its_generic(modes):
    compiled, interp = modes
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 4, 6, 6)).astype(np.float32)
    w = rng.standard_normal((6, 2, 3, 3)).astype(np.float32)
    assert "linalg.matmul" not in compiled.grouped.ir("bufferized", args=(x, w))
    np.testing.assert_allclose(compiled.grouped(x, w), interp.grouped(x, w), rtol=1e-5, atol=1e-5)


# matmuls whose indexing maps transpose A, B, both, or C (C transposed: no gemm takes it).
TRANSPOSED = """
#a = affine_map<(d0, d1, d2) -> (d0, d2)>
#at = affine_map<(d0, d1, d2) -> (d2, d0)>
#b = affine_map<(d0, d1, d2) -> (d2, d1)>
#bt = affine_map<(d0, d1, d2) -> (d1, d2)>
#c = affine_map<(d0, d1, d2) -> (d0, d1)>
#ct = affine_map<(d0, d1, d2) -> (d1, d0)>
func.func @run(%a: memref<8x6xf32>, %bt: memref<10x8xf32>, %b: memref<8x10xf32>, %c1: memref<6x10xf32>, %c2: memref<6x10xf32>,
               %ap: memref<6x8xf32>, %c3: memref<6x10xf32>, %c4: memref<10x6xf32>) attributes {llvm.emit_c_interface} {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%c1 : memref<6x10xf32>)
  linalg.matmul indexing_maps = [#at, #b, #c] ins(%a, %b : memref<8x6xf32>, memref<8x10xf32>) outs(%c1 : memref<6x10xf32>)
  linalg.matmul indexing_maps = [#at, #bt, #c] ins(%a, %bt : memref<8x6xf32>, memref<10x8xf32>) outs(%c2 : memref<6x10xf32>)
  linalg.matmul indexing_maps = [#a, #bt, #c] ins(%ap, %bt : memref<6x8xf32>, memref<10x8xf32>) outs(%c3 : memref<6x10xf32>)
  linalg.matmul indexing_maps = [#a, #bt, #ct] ins(%ap, %bt : memref<6x8xf32>, memref<10x8xf32>) outs(%c4 : memref<10x6xf32>)
  return
}
"""


def test_transposing_indexing_maps_become_transposed_views():
    if blas.locate() is None:
        pytest.skip("no BLAS found")
    with shared_context():
        mod = ir.Module.parse(TRANSPOSED)
        assert blas.route_matmuls(mod) == 3  # the one with a transposed C stays a matmul (loops)
        text = str(mod).split("func.func @run")[1].split("func.func")[0]
        assert text.count("memref.transpose") == 4 and text.count("linalg.matmul") == 1
        engine = _engine(mod)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((8, 6)).astype(np.float32)
    bt = rng.standard_normal((10, 8)).astype(np.float32)
    b8 = rng.standard_normal((8, 10)).astype(np.float32)
    ap = rng.standard_normal((6, 8)).astype(np.float32)
    c1 = np.full((6, 10), 7.0, np.float32)  # zero-filled first: overwritten
    c2 = np.full((6, 10), 0.5, np.float32)  # accumulated into
    c3 = np.zeros((6, 10), np.float32)
    c4 = np.full((10, 6), 0.25, np.float32)
    engine.invoke("run", *(_descriptor(v) for v in (a, bt, b8, c1, c2, ap, c3, c4)))
    np.testing.assert_allclose(c1, a.T @ b8, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(c2, 0.5 + a.T @ bt.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(c3, ap @ bt.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(c4, 0.25 + (ap @ bt.T).T, rtol=1e-5, atol=1e-5)


POOLS = """
def tiled_loss(x: f32[B, 3, H, W], r) -> f32:
    return sum(max_pool2d(x, 2) * r)

def tiled(x: f32[B, 3, H, W], r):
    return grad(tiled_loss)(x, r)

def tiled_static_loss(x: f32[B, 6, 24, 24], r: f32[B, 6, 12, 12]) -> f32:
    return sum(max_pool2d(x, 2) * r)

def tiled_static(x: f32[B, 6, 24, 24], r: f32[B, 6, 12, 12]):
    return grad(tiled_static_loss)(x, r)

def overlapping_loss(x: f32[B, 3, H, W], r) -> f32:
    return sum(max_pool2d(x, 3, stride=2) * r)

def overlapping(x: f32[B, 3, H, W], r):
    return grad(overlapping_loss)(x, r)
"""


def test_tiled_max_pool_gradient_has_no_gather():
    """stride = kernel, no padding: max_pool2d_grad is one element-wise generic over the windows'
    cells (no `tensor.extract` of the window's argmax per input element, no reduction over the
    window); overlapping windows keep the gather."""
    c = dg.loads(POOLS, mode="compiled")
    x, r = np.zeros((2, 3, 7, 6), np.float32), np.zeros((2, 3, 3, 3), np.float32)
    text = c.tiled.ir("linalg", args=(x, r))
    assert "tensor.extract " not in text and "tensor.expand_shape" in text
    generic = [g for g in text.split("linalg.generic")[1:] if '"parallel", "parallel", "parallel", "parallel", "parallel", "parallel"]' in g]
    assert len(generic) == 1 and "reduction" not in generic[0].split("}")[0]
    assert "tensor.extract " in c.overlapping.ir("linalg", args=(x, np.zeros((2, 3, 3, 2), np.float32)))
    # windows that cover the input: dx is written in place, one buffer, no copy
    xs, rs = np.zeros((2, 6, 24, 24), np.float32), np.zeros((2, 6, 12, 12), np.float32)
    buf = c.tiled_static.ir("bufferized", args=(xs, rs))
    assert buf.count("memref.alloc") == 1 and "memref.copy" not in buf
