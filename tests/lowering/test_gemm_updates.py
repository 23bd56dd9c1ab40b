"""An update `w ± s * (A @ B)` runs as one BLAS call (copy w, gemm with alpha = ±s, beta = 1).

The fused forms must give the results NumPy gives; forms that must not fuse (the product is
used again, w or the scale is computed) must still be right, and stay unfused.
"""
import numpy as np
import pytest

import dg
from dg.core.mlir import ir
from dg.dialects.dialect import shared_context
from dg.lowering import blas, gemm_updates

from .test_blas import _descriptor, _engine

SRC = """
def sgd(w: f32[5, 7], x: f32[B, 5], d: f32[B, 7], lr: f32) -> f32[5, 7]:
    return w - lr * (transpose(x) @ d)

def half(w: f64[6, 3], a: f64[6, K], b: f64[K, 3]) -> f64[6, 3]:
    return w + (a @ b) * 0.5

def minus(w: f32[6, 3], a: f32[6, K], b: f32[K, 3]) -> f32[6, 3]:
    return w - a @ b

def front(w: f32[6, 3], a: f32[6, K], b: f32[K, 3]) -> f32[6, 3]:
    return a @ b + w

def scaled_front(w: f32[6, 3], a: f32[6, K], b: f32[K, 3]) -> f32[6, 3]:
    return 0.5 * (a @ b) + w

def kept(w: f32[6, 3], a: f32[6, K], b: f32[K, 3], lr: f32):
    g = a @ b
    return w - lr * g, g

def doubled(w: f32[6, 3], a: f32[6, K], b: f32[K, 3]) -> f32[6, 3]:
    return 2.0 * w - a @ b

def rate(w: f32[6, 3], a: f32[6, K], b: f32[K, 3], lr: f32) -> f32[6, 3]:
    return w - (lr * 3.0) * (a @ b)

def dynamic(w: f32[M, N], a: f32[P, K], b: f32[K, N], lr: f32) -> f32[M, N]:
    return w - lr * (a @ b)
"""

# How many updates fuse: w and the product must have one static shape (w is copied into the
# product's buffer, and dynamic sizes are not checked against each other at run time).
FUSED = {"sgd": 1, "half": 1, "minus": 1, "front": 1, "scaled_front": 1, "kept": 0, "doubled": 0, "rate": 0,
         "dynamic": 0}


@pytest.fixture(scope="module")
def m():
    return dg.loads(SRC, mode="compiled", filename="updates.dg")


def _args(name, rng):
    f32 = name != "half"
    dt = np.float32 if f32 else np.float64
    if name == "sgd":
        return [rng.standard_normal(s).astype(dt) for s in ((5, 7), (4, 5), (4, 7))] + [np.float32(0.25)]
    args = [rng.standard_normal(s).astype(dt) for s in ((6, 3), (6, 4), (4, 3))]
    return args + ([np.float32(0.25)] if name in ("kept", "rate", "dynamic") else [])


def _reference(name, args):
    if name == "sgd":
        w, x, d, lr = args
        return w - lr * (x.T @ d)
    w, a, b = args[:3]
    g = a @ b
    lr = args[3] if len(args) > 3 else None
    return {"half": lambda: w + g * 0.5, "minus": lambda: w - g, "front": lambda: g + w,
            "scaled_front": lambda: 0.5 * g + w, "kept": lambda: (w - lr * g, g), "doubled": lambda: 2 * w - g,
            "rate": lambda: w - lr * 3 * g, "dynamic": lambda: w - lr * g}[name]()


@pytest.mark.parametrize("name", sorted(FUSED))
def test_updates_give_numpy_results(m, name):
    rng = np.random.default_rng(len(name))
    args = _args(name, rng)
    got, want = getattr(m, name)(*args), _reference(name, args)
    for g, w in zip(got if isinstance(want, tuple) else [got], want if isinstance(want, tuple) else [want]):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    text = getattr(m, name).ir("llvm", args=args)
    elt = "f64" if name == "half" else "f32"
    # (a product added as it is accumulates into w's copy by the helper that adds, lowering/sums.py)
    fused = text.count(f"call @dg_gemm_{elt}_scaled(") + text.count(f"call @dg_gemm_{elt}(")
    assert fused == (FUSED[name] if blas.locate() else 0), text[:2000]


def test_arguments_are_not_written(m):
    rng = np.random.default_rng(0)
    args = _args("sgd", rng)
    before = [np.copy(a) for a in args]
    for _ in range(2):
        m.sgd(*args)
    for a, b in zip(args, before):
        assert np.array_equal(a, b)


# The scaled helper's loop path: an operand strided in both dims, which BLAS cannot take.
STRIDED = """
#id = affine_map<(d0, d1) -> (d0, d1)>
#s = affine_map<(d0, d1) -> ()>
func.func @run(%w: memref<6x5xf32>, %a: memref<6x8xf32>, %b: memref<8x10xf32>, %lr: memref<f32>) -> memref<6x5xf32> attributes {llvm.emit_c_interface} {
  %zero = arith.constant 0.0 : f32
  %bs = memref.subview %b[0, 0][8, 5][1, 2] : memref<8x10xf32> to memref<8x5xf32, strided<[10, 2]>>
  %g = memref.alloc() : memref<6x5xf32>
  linalg.fill ins(%zero : f32) outs(%g : memref<6x5xf32>)
  linalg.matmul ins(%a, %bs : memref<6x8xf32>, memref<8x5xf32, strided<[10, 2]>>) outs(%g : memref<6x5xf32>)
  %out = memref.alloc() : memref<6x5xf32>
  linalg.generic {indexing_maps = [#id, #s, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%w, %lr, %g : memref<6x5xf32>, memref<f32>, memref<6x5xf32>) outs(%out : memref<6x5xf32>) {
  ^bb0(%x: f32, %s: f32, %y: f32, %o: f32):
    %p = arith.mulf %s, %y : f32
    %r = arith.subf %x, %p : f32
    linalg.yield %r : f32
  }
  memref.dealloc %g : memref<6x5xf32>
  return %out : memref<6x5xf32>
}
"""


@pytest.mark.skipif(blas.locate() is None, reason="no BLAS library found")
@pytest.mark.parametrize("elt", ["f32", "f64"])
def test_scaled_helper_runs_loops_for_layouts_blas_cannot_take(elt):
    import ctypes

    with shared_context():
        mod = ir.Module.parse(STRIDED.replace("f32", elt))
        assert blas.route_matmuls(mod) == 1
        assert gemm_updates.fuse_gemm_updates(mod) == 1
        run = str(mod).split("func.func @run")[1].split("func.func")[0]
        assert "linalg.generic" not in run and "memref.copy" in run and f"@dg_gemm_{elt}_scaled" in run
        engine = _engine(mod)
    dt = np.float32 if elt == "f32" else np.float64
    rng = np.random.default_rng(4)
    w = rng.standard_normal((6, 5)).astype(dt)
    a = rng.standard_normal((6, 8)).astype(dt)
    b = rng.standard_normal((8, 10)).astype(dt)
    lr = np.array(0.5, dt)
    result = (ctypes.c_int64 * 7)()
    engine.invoke("run", ctypes.pointer(ctypes.pointer(result)), *[_descriptor(x) for x in (w, a, b, lr)])
    ct = ctypes.c_float if elt == "f32" else ctypes.c_double
    out = np.ctypeslib.as_array((ct * 30).from_address(result[1])).reshape(6, 5)
    np.testing.assert_allclose(out, w - 0.5 * (a @ b[:, ::2]), rtol=1e-5, atol=1e-5)


def test_a_zero_rate_still_carries_inf_and_nan(m):
    """With alpha = 0 a BLAS may skip the product: the helper then runs its loops, so that
    w - 0 * (A @ B) is NaN where A @ B is not finite, as in NumPy."""
    rng = np.random.default_rng(5)
    w, x, d = (rng.standard_normal(s).astype(np.float32) for s in ((5, 7), (4, 5), (4, 7)))
    x[1, 2] = np.inf
    with np.errstate(invalid="ignore"):
        want = w - np.float32(0.0) * (x.T @ d)
    got = m.sgd(w, x, d, np.float32(0.0))
    assert np.isnan(want[2]).all()
    # (NumPy's OpenBLAS computes the product even then; the reference BLAS does not.)
    helper, _ = blas.helper_text("f32", "i64", overwrite=False, scaled=True)
    assert "arith.cmpf une, %alpha" in helper
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~np.isnan(want)], want[~np.isnan(want)])


def test_no_fusion_when_w_is_written_in_between():
    """The copy of w moves up to the product: a write to w between them (here, an op writing
    through a view of an argument in a hand-written module) keeps them apart."""
    text = STRIDED.replace("  %out = memref.alloc()", "  %wv = memref.cast %w : memref<6x5xf32> to memref<6x5xf32>\n"
                           "  linalg.fill ins(%zero : f32) outs(%wv : memref<6x5xf32>)\n  %out = memref.alloc()")
    with shared_context():
        mod = ir.Module.parse(text)
        assert blas.route_matmuls(mod) == 1
        assert gemm_updates.fuse_gemm_updates(mod) == 0
        mod = ir.Module.parse(STRIDED)
        assert blas.route_matmuls(mod) == 1
        assert gemm_updates.fuse_gemm_updates(mod) == 1
