"""Tapes in place (dialects/ops_autodiff.py): a push writes its row into a tape sized before the
loop, and its adjoint (`dg.tape_clear`) clears that row of the adjoint tape. Gradients of
gradients of loops differentiate the first gradient's tape pushes, and the reverse loop carries
the adjoint tape: each iteration updates one row of it, where a copy of the whole tape (a
setitem, then a slice) had cost time quadratic in the number of iterations. A push that could
grow its tape made each carried tape a buffer that is either the old one or a new one, whose
ownership bufferization then tracked through every loop."""
import numpy as np
import pytest

import dg
from dg.core.mlir import operations_under
from dg.dialects.dialect import parse
from dg.lowering.codegen.units import Unit
from dg.runtime import interp, targets
from dg.runtime.cpu import CPU

OPS = """
func.func @clear(%d: tensor<?x{row}f64>, %k: tensor<i64>) -> tensor<?x{row}f64> {{
  %i = "dg.to_index"(%k) : (tensor<i64>) -> index
  %r = "dg.tape_clear"(%d, %i) : (tensor<?x{row}f64>, index) -> tensor<?x{row}f64>
  return %r : tensor<?x{row}f64>
}}

func.func @push(%t: tensor<?x{row}f64>, %k: tensor<i64>, %v: tensor<{row}f64>) -> tensor<?x{row}f64> {{
  %i = "dg.to_index"(%k) : (tensor<i64>) -> index
  %r = "dg.tape_push"(%t, %i, %v) : (tensor<?x{row}f64>, index, tensor<{row}f64>) -> tensor<?x{row}f64>
  return %r : tensor<?x{row}f64>
}}
"""


@pytest.mark.parametrize("rows", [(), (3,)], ids=["scalar-rows", "vector-rows"])
@pytest.mark.parametrize("n,k", [(5, 2), (5, 0), (5, 4), (1, 0)], ids=["middle", "first", "last", "one-row"])
def test_compiled_agrees_with_the_interpreter(n, k, rows):
    row = "".join(f"{r}x" for r in rows)
    text = OPS.format(row=row)
    rng = np.random.default_rng(0)
    t, v = rng.standard_normal((n, *rows)), rng.standard_normal(rows)
    program, eager = targets.build(CPU, Unit(text)), interp.Translation(parse(text))
    cleared, pushed = t.copy(), t.copy()
    cleared[k], pushed[k] = 0, v
    for name, args, want in (("clear", [t, np.int64(k)], cleared), ("push", [t, np.int64(k), v], pushed)):
        np.testing.assert_array_equal(np.asarray(program.call(name, [a.copy() for a in args])), want)
        np.testing.assert_array_equal(np.asarray(interp.run(eager, name, [a.copy() for a in args])), want)


LOOP = """
def f(x: f64) -> f64:
    y = x
    i = 0
    while i < 5:
        y = y * 0.9 + sin(y) * 0.1
        i = i + 1
    return y

def d1(x: f64) -> f64:
    return grad(f)(x)

def d2(x: f64) -> f64:
    return grad(d1)(x)

def d3(x: f64) -> f64:
    return grad(d2)(x)
"""


@pytest.fixture(scope="module")
def loop():
    return dg.loads(LOOP, mode="compiled", filename="loop.dg")


@pytest.mark.parametrize("name", ["d2", "d3"])
def test_tape_pushes_differentiate_without_copies(loop, name):
    """The first gradient's tape pushes are differentiated without a setitem or a slice (each a
    copy of the whole adjoint tape), at every order."""
    grad_ir = getattr(loop, name).ir("grad", args=(0.3,))
    assert "dg.tape_clear" in grad_ir
    assert "dg.setitem" not in grad_ir and "dg.getitem" not in grad_ir


@pytest.mark.parametrize("name", ["d2", "d3"])
def test_gradients_of_gradients_allocate_nothing_per_iteration(loop, name):
    """No loop of grad(grad(f)) or grad(grad(grad(f))) allocates a buffer on each iteration: the
    tapes and adjoint tapes the loops carry are updated in place."""
    m = parse(getattr(loop, name).ir("bufferized", args=(0.3,)))
    per_iteration = [inner for op in operations_under(m.body) if op.name in ("scf.for", "scf.while")
                     for region in op.regions for inner in region.blocks[0].operations
                     if inner.operation.name == "memref.alloc"]
    assert not per_iteration


def test_higher_orders_agree_with_the_interpreter(loop):
    eager = dg.loads(LOOP, mode="interp", filename="loop.dg")
    for name in ("d1", "d2", "d3"):
        assert float(getattr(loop, name)(0.3)) == pytest.approx(float(getattr(eager, name)(0.3)), rel=1e-12)
