"""Element-wise ops and whole copies write over a buffer that dies there (lowering.in_place),
an argument only where every caller hands it over (call_copies.handed_arguments), and nowhere
a value is read afterwards or made outside a loop the op is in."""
import numpy as np

import dg
from dg.core.mlir import function_bodies, operations_under
from dg.dialects.dialect import parse
from dg.lowering import call_copies, deallocs, in_place, pipeline
from dg.runtime.modes import grad_text

ADD = """
#map = affine_map<(d0) -> (d0)>
func.func private @acc(%s: memref<4xf32>, %d: memref<4xf32>) -> memref<4xf32> attributes {dg.donated = array<i64: 0>} {
  %t = memref.alloc() : memref<4xf32>
  linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%s, %d : memref<4xf32>, memref<4xf32>) outs(%t : memref<4xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.addf %a, %b : f32
    linalg.yield %r : f32
  }
  return %t : memref<4xf32>
}
func.func @f(%d: memref<4xf32>) -> (memref<4xf32>, f32) {
  %c0 = arith.constant 0 : index
  %z = arith.constant 0.0 : f32
  %s = memref.alloc() : memref<4xf32>
  linalg.fill ins(%z : f32) outs(%s : memref<4xf32>)
  %r = func.call @acc(%s, %d) : (memref<4xf32>, memref<4xf32>) -> memref<4xf32>
  %v = memref.load %LATER[%c0] : memref<4xf32>
  return %r, %v : memref<4xf32>, f32
}
"""


def _module(text: str):
    m = parse(text)
    return m, m.context


def _allocs(m, name: str) -> int:
    (body,) = [b for b in function_bodies(m) if str(b.owner.attributes["sym_name"]) == f'"{name}"']
    return sum(1 for op in operations_under(body) if op.name == "memref.alloc")


def test_a_sum_is_written_over_the_shadow_its_caller_hands_over():
    m, ctx = _module(ADD.replace("%LATER", "%d"))
    with ctx:
        assert call_copies.handed_arguments(m, deallocs.returned_arguments(m)) == {"acc": frozenset([0])}
        assert in_place.outputs_in_place(m) == 1
    assert _allocs(m, "acc") == 0
    (gen,) = [op for op in operations_under(m.body) if op.name == "linalg.generic"]
    assert "outs(%arg0" in str(gen)


def test_not_where_the_caller_reads_what_it_passed():
    m, ctx = _module(ADD.replace("%LATER", "%s"))
    with ctx:
        assert call_copies.handed_arguments(m, deallocs.returned_arguments(m)) == {"acc": frozenset()}
        assert in_place.outputs_in_place(m) == 0
    assert _allocs(m, "acc") == 1


def test_not_an_argument_that_is_not_donated():
    m, ctx = _module(ADD.replace("%LATER", "%d").replace(" attributes {dg.donated = array<i64: 0>}", ""))
    with ctx:
        assert in_place.outputs_in_place(m) == 0


LOCAL = """
#map = affine_map<(d0) -> (d0)>
func.func @f(%d: memref<4xf32>, %n: index) -> (memref<4xf32>, f32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %z = arith.constant 0.0 : f32
  %x = memref.alloc() : memref<4xf32>
  linalg.fill ins(%z : f32) outs(%x : memref<4xf32>)
  OP
  return %t, %v : memref<4xf32>, f32
}
"""
SUM = """linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%x, %d : memref<4xf32>, memref<4xf32>) outs(%t : memref<4xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.addf %a, %b : f32
    linalg.yield %r : f32
  }"""
ADD_OP = "%t = memref.alloc() : memref<4xf32>\n  " + SUM + "\n  %v = memref.load %READ[%c0] : memref<4xf32>"
LOOP_OP = ("%t = memref.alloc() : memref<4xf32>\n  scf.for %i = %c0 to %n step %c1 {\n  " + SUM + "\n  }\n"
           "  %v = memref.load %t[%c0] : memref<4xf32>")
COPY_OP = """%t = memref.alloc() : memref<4xf32>
  memref.copy %x, %t : memref<4xf32> to memref<4xf32>
  memref.store %z, %t[%c1] : memref<4xf32>
  %v = memref.load %READ[%c0] : memref<4xf32>"""


def test_a_buffer_of_its_own_that_dies_is_written_over():
    m, ctx = _module(LOCAL.replace("OP", ADD_OP).replace("%READ", "%t"))
    with ctx:
        assert in_place.outputs_in_place(m) == 1
    assert _allocs(m, "f") == 1


def test_not_a_buffer_read_after_the_op():
    m, ctx = _module(LOCAL.replace("OP", ADD_OP).replace("%READ", "%x"))
    with ctx:
        assert in_place.outputs_in_place(m) == 0
    assert _allocs(m, "f") == 2


def test_not_a_buffer_made_outside_a_loop_the_op_is_in():
    m, ctx = _module(LOCAL.replace("OP", LOOP_OP))
    with ctx:
        assert in_place.outputs_in_place(m) == 0


def test_a_copy_of_a_buffer_that_dies_goes_and_one_read_after_stays():
    m, ctx = _module(LOCAL.replace("OP", COPY_OP).replace("%READ", "%t"))
    with ctx:
        assert in_place.outputs_in_place(m) == 1
    assert not [op for op in operations_under(m.body) if op.name == "memref.copy"]
    m, ctx = _module(LOCAL.replace("OP", COPY_OP).replace("%READ", "%x"))
    with ctx:
        assert in_place.outputs_in_place(m) == 0


TREE = """
def node(W: f32[?, ?], x: f32[?, ?], left: i64[?], n: i64) -> f32[?]:
    if left[n] < 0:
        return tanh(W @ x[n])
    return tanh(W @ node(W, x, left, left[n])) + tanh(W @ x[n])

def loss(W: f32[?, ?], x: f32[?, ?], left: i64[?]) -> f32:
    return sum(node(W, x, left, left.shape[0] - 1))

def g(W: f32[?, ?], x: f32[?, ?], left: i64[?]):
    return grad(loss, wrt=(0, 1))(W, x, left)
"""


def _failed_checks_stand_in(alloc) -> bool:
    """Whether `alloc` is made only once a size check failed: alone in a branch that gives it."""
    ops = [o.operation for o in alloc.block.operations]
    return len(ops) == 2 and ops[1].name == "scf.yield" and ops[1].operands[0] == alloc.result


def test_a_recursions_weight_gradient_is_one_buffer_added_into_at_every_depth():
    """The reverse function of a recursion that multiplies by a weight makes no buffer of the
    weight's size and copies none: the weight's gradient is the shadow handed down, which each
    call adds its outer product into. The gradients are the interpreter's."""
    rng = np.random.default_rng(0)
    W = rng.standard_normal((6, 6)).astype(np.float32) * 0.3
    x = rng.standard_normal((5, 6)).astype(np.float32)
    left = np.array([-1, 0, 1, 2, 3], np.int64)
    m = {mode: dg.loads(TREE, mode=mode, filename="tree.dg") for mode in ("interp", "compiled")}
    for got, want in zip(m["compiled"].g(W, x, left), m["interp"].g(W, x, left)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    fn = m["compiled"].g
    bufferized = pipeline.run_stage(parse(grad_text(fn._last)), "bufferized", start="grad", entry=fn._last.symbol)
    (reverse,) = [b for b in function_bodies(bufferized) if str(b.owner.attributes["sym_name"]).endswith('_sh"')]
    matrices = [str(op) for op in operations_under(reverse) if op.name == "memref.alloc" and "?x?" in str(op.result.type)
                and not _failed_checks_stand_in(op)]
    copies = [str(op) for op in operations_under(reverse) if op.name == "memref.copy" and "?x?" in str(op.operands[0].type)]
    assert not matrices and not copies, (matrices, copies)


CARRIED = """
func.func @f(%n: index) -> (memref<4xf32>, f32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %z = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %b = memref.alloc() : memref<4xf32>
  linalg.fill ins(%z : f32) outs(%b : memref<4xf32>)
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%x = %b) -> (memref<4xf32>) {
    %y = memref.alloc() : memref<4xf32>
    memref.copy %x, %y : memref<4xf32> to memref<4xf32>
    memref.store %one, %y[%c1] : memref<4xf32>
    scf.yield %y : memref<4xf32>
  }
  %v = memref.load %READ[%c0] : memref<4xf32>
  return %r, %v : memref<4xf32>, f32
}
"""


def test_a_loop_writes_the_buffer_it_carries_in_place():
    """The copy of the carried buffer each iteration makes before writing a row of it goes: the
    loop was given a buffer that dies there, and carries on only what it wrote."""
    m, ctx = _module(CARRIED.replace("%READ", "%r"))
    with ctx:
        assert in_place.outputs_in_place(m) == 1
    assert not [op for op in operations_under(m.body) if op.name == "memref.copy"]


def test_not_where_the_buffer_the_loop_was_given_is_read_after_it():
    m, ctx = _module(CARRIED.replace("%READ", "%b"))
    with ctx:
        assert in_place.outputs_in_place(m) == 0


SHOWN = """
#map = affine_map<(d0) -> (d0)>
func.func private @show(memref<*xf32> {bufferization.access = "read"})
func.func @f(%d: memref<4xf32>) -> memref<4xf32> {
  %z = arith.constant 0.0 : f32
  %x = memref.alloc() : memref<4xf32>
  linalg.fill ins(%z : f32) outs(%x : memref<4xf32>)
  %u = memref.cast %x : memref<4xf32> to memref<*xf32>
  %t = memref.alloc() : memref<4xf32>
  linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%x, %d : memref<4xf32>, memref<4xf32>) outs(%t : memref<4xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.addf %a, %b : f32
    linalg.yield %r : f32
  }
  func.call @show(%u) : (memref<*xf32>) -> ()
  return %t : memref<4xf32>
}
"""


def test_not_a_buffer_an_unranked_view_of_which_is_read_after():
    """A view cast to `memref<*x...>` (how a shadow-mode tap hands a value to the executor) is the
    buffer still: read after the op, the buffer is not written over."""
    m, ctx = _module(SHOWN)
    with ctx:
        assert in_place.outputs_in_place(m) == 0
