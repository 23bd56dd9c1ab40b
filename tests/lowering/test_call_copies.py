"""The copies bufferization makes of what a call is passed go where dg knows the callee only
reads it (lowering.call_copies), and stay where it writes it: a caller's arrays are values."""
import numpy as np
import pytest

import dg
from dg.core.mlir import function_bodies, operations_under, user
from dg.dialects.dialect import parse
from dg.lowering import call_copies, deallocs, pipeline
from dg.runtime.modes import grad_text

WRITES = """
#map = affine_map<(d0) -> (d0)>
func.func private @reads(%a: memref<4xf32>, %b: memref<4xf32>) -> f32 {
  %c0 = arith.constant 0 : index
  %v = memref.load %a[%c0] : memref<4xf32>
  linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%a : memref<4xf32>) outs(%b : memref<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  }
  return %v : f32
}
func.func private @stores(%a: memref<4xf32>, %b: memref<4xf32>, %c: i1) {
  %s = arith.select %c, %a, %b : memref<4xf32>
  %v = memref.subview %s[1] [2] [1] : memref<4xf32> to memref<2xf32, strided<[1], offset: 1>>
  %c0 = arith.constant 0 : index
  %f = arith.constant 1.0 : f32
  memref.store %f, %v[%c0] : memref<2xf32, strided<[1], offset: 1>>
  return
}
func.func private @passes(%a: memref<4xf32>, %b: memref<4xf32>, %c: i1) {
  %r = scf.if %c -> memref<4xf32> {
    scf.yield %a : memref<4xf32>
  } else {
    scf.yield %b : memref<4xf32>
  }
  %x = memref.alloc() : memref<4xf32>
  memref.copy %x, %r : memref<4xf32> to memref<4xf32>
  return
}
func.func private @down(%a: memref<4xf32>, %b: memref<4xf32>, %c: i1) {
  scf.if %c {
    func.call @down(%b, %a, %c) : (memref<4xf32>, memref<4xf32>, i1) -> ()
    func.call @stores(%a, %a, %c) : (memref<4xf32>, memref<4xf32>, i1) -> ()
  }
  return
}
func.func private @up(%a: memref<4xf32>, %b: memref<4xf32>, %c: i1) {
  scf.if %c {
    func.call @up(%b, %a, %c) : (memref<4xf32>, memref<4xf32>, i1) -> ()
    %r = func.call @reads(%a, %b) : (memref<4xf32>, memref<4xf32>) -> f32
  }
  return
}
"""


def test_which_arguments_a_function_writes():
    """Through loads and linalg inputs nothing; through outputs, stores, a select, a view, an
    if's result, a call that writes, and a function's calls of itself, with the arguments
    exchanged, what it writes."""
    m = parse(WRITES)
    with m.context:
        written = call_copies.written_arguments(m)
    assert written == {"reads": frozenset([1]), "stores": frozenset([0, 1]), "passes": frozenset([0, 1]),
                       "down": frozenset([0, 1]), "up": frozenset([0, 1])}


SRC = """
def total(x: f32[?], k: i64) -> f32:
    if k <= 0:
        return sum(x)
    return total(x, k - 1) + x[0]

def scribble(x: f32[?], k: i64) -> f32:
    if k <= 0:
        y = x
        y[0] = 100.0
        return sum(y)
    return scribble(x, k - 1) + x[0]

def both(x: f32[?], k: i64) -> f32:
    return total(x, k) + scribble(x, k) + sum(x)

def loss(x: f32[?], k: i64) -> f32:
    return total(x * x, k)

def grad_loss(x: f32[?], k: i64):
    return grad(loss)(x, k)
"""


@pytest.fixture(scope="module")
def modules():
    return {mode: dg.loads(SRC, mode=mode, filename="calls.dg") for mode in ("interp", "compiled")}


def _copies_into_calls(fn, args) -> int:
    fn(*args)
    m = pipeline.run_stage(parse(grad_text(fn._last)), "bufferized", start="grad", entry=fn._last.symbol)
    return sum(1 for op in operations_under(m.body) if op.name == "memref.copy"
               and any(user(u).name == "func.call" for u in op.operands[1].uses))


def test_a_recursive_function_that_reads_its_argument_is_passed_it(modules):
    x = np.arange(1, 5, dtype=np.float32)
    assert _copies_into_calls(modules["compiled"].total, (x, np.int64(3))) == 0
    assert _copies_into_calls(modules["compiled"].grad_loss, (x, np.int64(3))) == 0


WRITES_ONE = """
func.func private @writes(%a: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %f = arith.constant 1.0 : f32
  memref.store %f, %a[%c0] : memref<4xf32>
  return
}
"""
CALLS = WRITES_ONE + """
func.func private @reads(%a: memref<4xf32>) -> f32 {
  %c0 = arith.constant 0 : index
  %v = memref.load %a[%c0] : memref<4xf32>
  return %v : f32
}
func.func private @both(%a: memref<4xf32>, %b: memref<4xf32>) -> f32 {
  %c0 = arith.constant 0 : index
  %f = arith.constant 1.0 : f32
  memref.store %f, %b[%c0] : memref<4xf32>
  %v = memref.load %a[%c0] : memref<4xf32>
  return %v : f32
}
func.func @f(%x: memref<4xf32>, %y: memref<4xf32>) -> (f32, f32, f32, f32) {
  %c0 = arith.constant 0 : index
  %f = arith.constant 2.0 : f32
  %a = memref.alloc() : memref<4xf32>
  memref.copy %x, %a : memref<4xf32> to memref<4xf32>
  func.call @writes(%a) : (memref<4xf32>) -> ()
  %b = memref.alloc() : memref<4xf32>
  memref.copy %x, %b : memref<4xf32> to memref<4xf32>
  %r = func.call @reads(%b) : (memref<4xf32>) -> f32
  %c = memref.alloc() : memref<4xf32>
  memref.copy %x, %c : memref<4xf32> to memref<4xf32>
  memref.store %f, %x[%c0] : memref<4xf32>
  %s = func.call @reads(%c) : (memref<4xf32>) -> f32
  %d = memref.alloc() : memref<4xf32>
  memref.copy %y, %d : memref<4xf32> to memref<4xf32>
  %t = func.call @both(%d, %y) : (memref<4xf32>, memref<4xf32>) -> f32
  %e = memref.alloc() : memref<4xf32>
  memref.copy %y, %e : memref<4xf32> to memref<4xf32>
  %n = memref.alloc() : memref<4xf32>
  %u = func.call @both(%e, %n) : (memref<4xf32>, memref<4xf32>) -> f32
  return %r, %s, %t, %u : f32, f32, f32, f32
}
"""


def test_only_the_copies_for_calls_that_read_go():
    """Kept: the copy for a call that writes it (@writes), one with a store between it and the
    call, and one for a call that writes another of its arguments, the buffer copied from.
    Gone: the copy for a call that reads it, and for one that writes only a buffer of its own."""
    m = parse(CALLS)
    with m.context:
        assert call_copies.drop_call_copies(m) == 2
    calls = [str(op).split(" : ")[0] for op in operations_under(m.body) if op.name == "func.call"]
    assert calls == ["func.call @writes(%alloc)", "%0 = func.call @reads(%arg0)", "%1 = func.call @reads(%alloc_0)",
                     "%2 = func.call @both(%alloc_1, %arg1)", "%3 = func.call @both(%arg1, %alloc_2)"], calls


@pytest.mark.parametrize("name", ["total", "scribble", "both", "grad_loss"])
def test_the_callers_arrays_stay_as_they_were(modules, name):
    x = np.arange(1, 5, dtype=np.float32)
    want = getattr(modules["interp"], name)(x.copy(), np.int64(3))
    got = getattr(modules["compiled"], name)(x, np.int64(3))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)
    np.testing.assert_array_equal(x, np.arange(1, 5, dtype=np.float32))


def test_returned_arguments_see_through_selects():
    m = parse("""
func.func private @pick(%a: memref<4xf32>, %b: memref<4xf32>, %c: i1) -> memref<4xf32> {
  %s = arith.select %c, %a, %b : memref<4xf32>
  return %s : memref<4xf32>
}
""")
    with m.context:
        assert deallocs.returned_arguments(m) == {"pick": frozenset([0, 1])}


HANDED = """
func.func private @bump(%a: memref<4xf32>) -> memref<4xf32> {
  %c0 = arith.constant 0 : index
  %f = arith.constant 1.0 : f32
  memref.store %f, %a[%c0] : memref<4xf32>
  return %a : memref<4xf32>
}
func.func private @hands(%x: memref<4xf32>) -> memref<4xf32> {
  %a = memref.alloc() : memref<4xf32>
  memref.copy %x, %a : memref<4xf32> to memref<4xf32>
  %r = func.call @bump(%a) : (memref<4xf32>) -> memref<4xf32>
  %b = memref.alloc() : memref<4xf32>
  memref.copy %r, %b : memref<4xf32> to memref<4xf32>
  %s = func.call @bump(%b) : (memref<4xf32>) -> memref<4xf32>
  return %s : memref<4xf32>
}
func.func private @keeps(%x: memref<4xf32>) -> (memref<4xf32>, f32) {
  %c0 = arith.constant 0 : index
  %a = memref.alloc() : memref<4xf32>
  memref.copy %x, %a : memref<4xf32> to memref<4xf32>
  %r = func.call @bump(%a) : (memref<4xf32>) -> memref<4xf32>
  %v = memref.load %x[%c0] : memref<4xf32>
  return %r, %v : memref<4xf32>, f32
}
func.func private @branches(%x: memref<4xf32>, %c: i1) -> memref<4xf32> {
  %r = scf.if %c -> memref<4xf32> {
    %a = memref.alloc() : memref<4xf32>
    memref.copy %x, %a : memref<4xf32> to memref<4xf32>
    %s = func.call @bump(%a) : (memref<4xf32>) -> memref<4xf32>
    scf.yield %s : memref<4xf32>
  } else {
    scf.yield %x : memref<4xf32>
  }
  return %r : memref<4xf32>
}
func.func private @looped(%x: memref<4xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %n step %c1 {
    %a = memref.alloc() : memref<4xf32>
    memref.copy %x, %a : memref<4xf32> to memref<4xf32>
    %r = func.call @bump(%a) : (memref<4xf32>) -> memref<4xf32>
  }
  return
}
func.func @entry(%x: memref<4xf32>) -> memref<4xf32> {
  %a = memref.alloc() : memref<4xf32>
  memref.copy %x, %a : memref<4xf32> to memref<4xf32>
  %r = func.call @bump(%a) : (memref<4xf32>) -> memref<4xf32>
  return %r : memref<4xf32>
}
"""


def test_a_buffer_the_caller_hands_over_is_written_in_place():
    """A callee that writes its argument gets the caller's own buffer, not a copy, where nothing
    reads that buffer once the call is made: a private function's argument (@hands, both calls:
    the second is given what the first gave back), also inside a branch whose other side yields
    the argument (@branches). Kept: where the caller reads the argument after the call (@keeps),
    where the call is in a loop (@looped: the next iteration would see the write), and where the
    buffer is the caller's caller's (@entry, public)."""
    m = parse(HANDED)
    with m.context:
        assert call_copies.drop_call_copies(m) == 3
    calls = {ir_name: [str(op).split(" : ")[0] for op in operations_under(body) if op.name == "func.call"]
             for ir_name, body in ((str(b.owner.attributes["sym_name"]).strip('"'), b) for b in function_bodies(m))}
    assert calls["hands"] == ["%0 = func.call @bump(%arg0)", "%1 = func.call @bump(%0)"], calls["hands"]
    assert calls["branches"] == ["%1 = func.call @bump(%arg0)"], calls["branches"]
    assert calls["keeps"] == ["%0 = func.call @bump(%alloc)"], calls["keeps"]
    assert calls["looped"] == ["%0 = func.call @bump(%alloc)"], calls["looped"]
    assert calls["entry"] == ["%0 = func.call @bump(%alloc)"], calls["entry"]


def test_a_gradients_shadow_goes_down_a_recursion_uncopied():
    """The gradient of a recursive function with respect to a table it reads rows of: the
    shadow (lowering/ad) is handed to each recursive call, not copied, the reverse function makes
    no gradient of the table's size, and the gradient is the interpreter's."""
    src = ("def node(E: f32[?, ?], left: i64[?], n: i64) -> f32[?]:\n"
           "    if left[n] < 0:\n"
           "        return tanh(E[n])\n"
           "    return node(E, left, left[n]) * 0.5 + tanh(E[n])\n"
           "def loss(E: f32[?, ?], left: i64[?]) -> f32:\n"
           "    return sum(node(E, left, left.shape[0] - 1))\n"
           "def g(E: f32[?, ?], left: i64[?]) -> f32[?, ?]:\n"
           "    return grad(loss)(E, left)\n")
    E = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    left = np.array([-1, 0, 1, 2, 3], np.int64)
    m = {mode: dg.loads(src, mode=mode, filename="shadow.dg") for mode in ("interp", "compiled")}
    np.testing.assert_allclose(m["compiled"].g(E, left), m["interp"].g(E, left), rtol=1e-5, atol=1e-6)
    assert _copies_into_calls(m["compiled"].g, (E, left)) == 0
    bufferized = pipeline.run_stage(parse(grad_text(m["compiled"].g._last)), "bufferized", start="grad",
                                    entry=m["compiled"].g._last.symbol)
    (reverse,) = [b for b in function_bodies(bufferized) if "__vjp_" in str(b.owner.attributes["sym_name"])
                  and "_sh" in str(b.owner.attributes["sym_name"])]
    table_sized = [str(op) for op in operations_under(reverse) if op.name == "memref.alloc"
                   and "?x?" in str(op.result.type)]
    # None: the row is added into the shadow in place, and the shadow is given back as it is
    # (a private function takes and gives the ownership of its buffers). Five before shadows:
    # the zeros of a fresh gradient of E per call, the sums, the row added, the copy for the
    # call; one before that, the copy MLIR's deallocation made of the shadow given back.
    assert len(table_sized) == 0, table_sized


LOOPED = WRITES_ONE + """
func.func @f(%n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %z = arith.constant 0.0 : f32
  %b = memref.alloc() : memref<4xf32>
  linalg.fill ins(%z : f32) outs(%b : memref<4xf32>)
  scf.for %i = %c0 to %n step %c1 {
    %c = memref.alloc() : memref<4xf32>
    memref.copy %b, %c : memref<4xf32> to memref<4xf32>
    func.call @writes(%c) : (memref<4xf32>) -> ()
  }
  return
}
"""


def test_a_copy_for_a_call_in_a_loop_over_a_buffer_made_before_it_stays():
    """Each iteration's call gets a copy of the zeros made before the loop, which nothing reads
    after it: handed over, the buffer would hold what the first call wrote when the second
    reads it."""
    m = parse(LOOPED)
    with m.context:
        assert call_copies.drop_call_copies(m) == 0
    assert [op for op in operations_under(m.body) if op.name == "memref.copy"]
