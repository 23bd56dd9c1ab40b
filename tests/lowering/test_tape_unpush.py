"""The adjoint of a tape push (`dg.tape_unpush`, dialects/ops_autodiff.py): the adjoint of the
tape after the push, with the pushed row cleared, in the rows the tape had before it. Gradients
of gradients of loops differentiate the tape pushes of the first gradient's forward sweep; the
adjoint tape is carried by the reverse loop, and each iteration clears one row of it in place,
where a copy of the whole tape (a setitem, then a slice) had cost time quadratic in the number
of iterations, and a third more IR at the fourth order."""
import numpy as np
import pytest

import dg
from dg.core.mlir import operations_under
from dg.dialects.dialect import parse
from dg.dialects.ops_autodiff import _tape_unpush
from dg.runtime import interp
from dg.runtime.cpu import CpuProgram

UNPUSH = """
func.func @f(%d: tensor<?x{row}f64>, %k: tensor<i64>, %like: tensor<?x{row}f64>) -> tensor<?x{row}f64> {{
  %i = "dg.to_index"(%k) : (tensor<i64>) -> index
  %r = "dg.tape_unpush"(%d, %i, %like) : (tensor<?x{row}f64>, index, tensor<?x{row}f64>) -> tensor<?x{row}f64>
  return %r : tensor<?x{row}f64>
}}
"""


@pytest.mark.parametrize("rows", [(), (3,)], ids=["scalar-rows", "vector-rows"])
@pytest.mark.parametrize("m,n,k", [(5, 5, 2), (5, 3, 1), (5, 3, 4), (3, 5, 1), (5, 5, 7), (1, 1, 0)],
                         ids=["same", "fewer", "row-cut-off", "more", "k-past-the-end", "one-row"])
def test_compiled_agrees_with_the_interpreter(m, n, k, rows):
    row = "".join(f"{r}x" for r in rows)
    text = UNPUSH.format(row=row)
    rng = np.random.default_rng(0)
    d, like = rng.standard_normal((m, *rows)), rng.standard_normal((n, *rows))
    args = [d, np.int64(k), like]
    want = _tape_unpush(*args)
    assert want.shape == (n, *rows)
    got = np.asarray(CpuProgram.build(text).call("f", args))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.asarray(interp.run(interp.Translation(parse(text)), "f", args)), want)
    c = min(m, n)
    expect = np.zeros((n, *rows))
    expect[:c] = d[:c]
    if k < c:
        expect[k] = 0
    np.testing.assert_array_equal(want, expect)


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
    assert "dg.tape_unpush" in grad_ir
    assert "dg.setitem" not in grad_ir and "dg.getitem" not in grad_ir


def test_a_second_order_gradient_allocates_nothing_per_iteration(loop):
    """No loop of grad(grad(f)) allocates a buffer on each iteration: the adjoint tape the reverse
    loop carries is updated in place."""
    m = parse(loop.d2.ir("bufferized", args=(0.3,)))
    per_iteration = [inner for op in operations_under(m.body) if op.name in ("scf.for", "scf.while")
                     for region in op.regions for inner in region.blocks[0].operations
                     if inner.operation.name == "memref.alloc"]
    assert not per_iteration


def test_higher_orders_agree_with_the_interpreter(loop):
    eager = dg.loads(LOOP, mode="interp", filename="loop.dg")
    for name in ("d1", "d2", "d3"):
        assert float(getattr(loop, name)(0.3)) == pytest.approx(float(getattr(eager, name)(0.3)), rel=1e-12)
