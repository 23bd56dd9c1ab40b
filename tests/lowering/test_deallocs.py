"""A buffer that no call can return is freed plainly (lowering.deallocs), not compared at run time
with every buffer its function returns; what calls may return is still compared, and every
buffer is freed once."""
import ctypes
import importlib.util
from pathlib import Path

import numpy as np
import pytest

import dg
from dg.core.mlir import operations_under
from dg.dialects.dialect import parse
from dg.lowering import deallocs, pipeline
from dg.runtime.modes import grad_text

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "compile.py"


@pytest.fixture(scope="module")
def tree():
    """benchmarks/compile.py's Tree-LSTM, smaller: a recursive function whose gradient returns
    what its calls of itself return, each branch's buffers freed at its end."""
    spec = importlib.util.spec_from_file_location("compile_bench", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    args = bench.tree_setup(depth=2, d=8, h=8)
    return {mode: dg.loads(bench.TREE_SRC, mode=mode, filename="tree.dg") for mode in ("interp", "compiled")}, args


def _bufferized(fn, args, dealloc_split=True):
    fn(*args)
    names = ["to-linalg", "only-entry", "inline-and-simplify", "bufferize"]
    split = deallocs.split_deallocs
    if not dealloc_split:
        deallocs.split_deallocs = lambda m: 0
    try:
        return pipeline.run_passes(parse(grad_text(fn._last)), names, entry=fn._last.symbol)
    finally:
        deallocs.split_deallocs = split


def _counts(m) -> tuple[int, int]:
    """(allocations, buffers compared at run time with those a dealloc keeps)."""
    names = [op.name for op in operations_under(m.body)]
    return names.count("memref.alloc"), names.count("memref.extract_aligned_pointer_as_index")


@pytest.mark.slow
def test_buffers_no_call_returns_are_freed_without_comparisons(tree):
    modules, args = tree
    allocs, compared = _counts(_bufferized(modules["compiled"].tree_grad, args))
    allocs_before, compared_before = _counts(_bufferized(modules["compiled"].tree_grad, args, dealloc_split=False))
    # MLIR's simplification alone compares nearly every buffer (the branch that recurses holds
    # most of them); split, a buffer the recursive calls are passed, or that they return, is:
    # well under two thirds as many (153 of 275). The gradients' shadows, which each recursive
    # call is handed, writes in place and gives back with its ownership, are among those: about
    # half the buffers; a quarter before shadows, 39 of 268; 143 of 303 before they were written
    # in place, when each call added into a new buffer.
    assert compared_before > allocs_before / 2, (allocs_before, compared_before)
    assert compared < compared_before * 0.6, (compared, compared_before)


def test_what_functions_return_is_found_through_recursion(tree):
    """The forward `node` returns buffers of its own at every depth of its recursion (FRESH)."""
    modules, args = tree
    fn = modules["compiled"].tree_grad
    fn(*args)
    m = pipeline.run_passes(parse(grad_text(fn._last)), ["to-linalg", "only-entry", "inline-and-simplify"],
                            entry=fn._last.symbol)
    with m.context:
        pipeline.run_pipeline(m, pipeline.BUFFERIZE)
        returns = deallocs.returned_arguments(m)
    (forward,) = [n for n in returns if n.startswith("node") and "vjp" not in n]
    assert returns[forward] == deallocs.FRESH


RETURNS = """
func.func private @external(memref<4xf32>) -> memref<4xf32>
func.func private @own(%a: memref<4xf32>) -> (memref<4xf32>, memref<4xf32>) {
  %x = memref.alloc() : memref<4xf32>
  %y = memref.alloc() : memref<4xf32>
  return %x, %y : memref<4xf32>, memref<4xf32>
}
func.func private @twice(%a: memref<4xf32>) -> (memref<4xf32>, memref<4xf32>) {
  %x = memref.alloc() : memref<4xf32>
  return %x, %x : memref<4xf32>, memref<4xf32>
}
func.func private @again(%a: memref<4xf32>) -> (memref<4xf32>, memref<4xf32>) {
  %r:2 = call @twice(%a) : (memref<4xf32>) -> (memref<4xf32>, memref<4xf32>)
  return %r#0, %r#1 : memref<4xf32>, memref<4xf32>
}
func.func private @either(%a: memref<4xf32>, %b: memref<4xf32>, %c: i1) -> memref<4xf32> {
  %r = scf.if %c -> memref<4xf32> {
    scf.yield %b : memref<4xf32>
  } else {
    %x = memref.alloc() : memref<4xf32>
    scf.yield %x : memref<4xf32>
  }
  return %r : memref<4xf32>
}
func.func private @through(%a: memref<4xf32>, %b: memref<4xf32>) -> memref<4xf32> {
  %r = call @external(%a) : (memref<4xf32>) -> memref<4xf32>
  return %r : memref<4xf32>
}
func.func private @down(%a: memref<4xf32>, %n: i1) -> memref<4xf32> {
  %r = scf.if %n -> memref<4xf32> {
    %d = func.call @down(%a, %n) : (memref<4xf32>, i1) -> memref<4xf32>
    %v = memref.cast %d : memref<4xf32> to memref<4xf32>
    scf.yield %v : memref<4xf32>
  } else {
    %x = memref.alloc() : memref<4xf32>
    scf.yield %x : memref<4xf32>
  }
  return %r : memref<4xf32>
}
"""


def test_what_a_function_may_return():
    """FRESH: buffers of its own, none twice, whatever its calls of itself return; else the
    arguments it may return (through a branch, a call that may return what it is passed). What
    a function not FRESH returns is not a buffer of the caller's own (@again)."""
    m = parse(RETURNS)
    with m.context:
        returns = deallocs.returned_arguments(m)
    assert returns == {"own": deallocs.FRESH, "twice": frozenset(), "again": frozenset(), "either": frozenset([1]),
                       "through": frozenset([0]), "down": deallocs.FRESH}


def _in_use() -> int:
    """The bytes malloc has handed out and not had back (glibc's mallinfo2, main arena)."""
    class Info(ctypes.Structure):
        _fields_ = [(f, ctypes.c_size_t) for f in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
    libc = ctypes.CDLL(None)
    if not hasattr(libc, "mallinfo2"):
        pytest.skip("this C library has no mallinfo2")
    libc.mallinfo2.restype = Info
    return libc.mallinfo2().uordblks


def test_compiled_gradients_agree_and_free_every_buffer(tree):
    modules, args = tree
    want = modules["interp"].tree_grad(*args)
    fn = modules["compiled"].tree_grad
    got = fn(*args)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=2e-4, atol=1e-5)
    for _ in range(20):
        fn(*args)
    before = _in_use()
    for _ in range(300):
        out = fn(*args)
    del out
    assert _in_use() - before < 256 * 1024  # (each call allocates about 70 buffers)
