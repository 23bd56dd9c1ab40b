"""Strided copies in compiled code are loops, not calls of MLIR's `memrefCopy` (served in Python)."""
import numpy as np

import dg
from dg.core.mlir import ir
from dg.dialects.dialect import shared_context
from dg.lowering import copies

from .test_autodiff import RECOMPUTE_SRC as SRC  # a tanh RNN and its gradient, for and while

MODULE = """
func.func @f(%a: memref<4x6xf32>, %b: memref<8x6xf32>, %c: memref<4x6xf32>, %i: index) {
  %row = memref.subview %b[%i, 0] [4, 6] [1, 1] : memref<8x6xf32> to memref<4x6xf32, strided<[6, 1], offset: ?>>
  memref.copy %a, %row : memref<4x6xf32> to memref<4x6xf32, strided<[6, 1], offset: ?>>
  memref.copy %a, %c : memref<4x6xf32> to memref<4x6xf32>
  return
}
"""

def test_only_strided_copies_become_loops():
    with shared_context():
        mod = ir.Module.parse(MODULE)
        assert copies.strided_copies_as_loops(mod) == 1
        text = str(mod)
    assert text.count("linalg.copy") == 1 and text.count("memref.copy") == 1
    assert "ins(%arg0 : memref<4x6xf32>) outs(%subview" in text.split("linalg.copy")[1]


def test_tape_pushes_do_not_call_memref_copy():
    rng = np.random.default_rng(0)
    args = (rng.standard_normal((5, 2, 3)).astype(np.float32), rng.standard_normal((2, 4)).astype(np.float32),
            rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((4, 4)).astype(np.float32))
    m = dg.loads(SRC, mode="compiled")
    assert "memrefCopy" not in m.g_for.ir("llvm", args=args)
    for got, want in zip(m.g_for(*args), dg.loads(SRC, mode="interp").g_for(*args)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
