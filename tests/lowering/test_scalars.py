"""Element-wise ops on 0-d tensors (scalars) lower to plain arithmetic on the CPU."""
import numpy as np
import pytest

import dg
from dg.core.mlir import operations_under
from dg.dialects.dialect import parse
from dg.lowering import pipeline
from dg.runtime.modes import grad_text

SRC = """
def f(x: f64, k: i64) -> f64:
    y = x
    i = 0
    while i < k:
        y = y * 0.9 + sin(y) * 0.1 - abs(y) / 7.0
        i = i + 1
    return y

def d(x: f64, k: i64) -> f64:
    return grad(f)(x, k)
"""


@pytest.fixture(scope="module")
def modules():
    return {mode: dg.loads(SRC, mode=mode, filename="scalars.dg") for mode in ("interp", "compiled")}


def test_a_scalar_chain_is_arithmetic_not_linalg(modules):
    """No linalg op and no buffer per scalar op: after inlining, the loop body of `f` computes on
    f64 values (a generic per op, a buffer per op once bufferized, before); the loop carries its
    two values as an f64 and an i64, not as rank-0 tensors, and once bufferized its body
    allocates nothing (a buffer per carried value and iteration, before)."""
    fn = modules["compiled"].f
    fn(0.3, 4)
    m = pipeline.run_passes(parse(grad_text(fn._last)), ["to-linalg", "only-entry", "inline-and-simplify"], entry="f")
    names = [op.name for op in operations_under(m.body)]
    assert "linalg.generic" not in names, str(m)
    assert names.count("math.sin") == 1 and names.count("arith.mulf") >= 2, str(m)
    (loop,) = [op for op in operations_under(m.body) if op.name == "scf.while"]
    assert [str(r.type) for r in loop.results] == ["f64", "i64"], str(loop)
    b = pipeline.run_passes(m, ["bufferize"])
    (loop,) = [op for op in operations_under(b.body) if op.name == "scf.while"]
    body = [op.name for op in operations_under(loop.regions[1].blocks[0])]
    assert body.count("memref.alloc") == 0, str(loop)


@pytest.mark.parametrize("name", ["f", "d"])
def test_scalar_chains_agree_with_the_interpreter(modules, name):
    for x, k in ((0.3, 5), (-1.7, 0), (2.5, 12)):
        want = getattr(modules["interp"], name)(x, k)
        got = getattr(modules["compiled"], name)(x, k)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


def test_a_scalar_tape_stores_and_loads_elements(modules):
    """The gradient of the loop keeps the carried scalars on tapes: a push stores the element
    into the tape (tensor.insert) and a read loads it (tensor.extract), with no rank-0 slice
    (which bufferized into a buffer of its own and a copy per push and per read)."""
    fn = modules["compiled"].d
    fn(0.3, 4)
    m = pipeline.run_passes(parse(grad_text(fn._last)), ["to-linalg"])
    ops = list(operations_under(m.body))
    rank0 = [op for op in ops if op.name in ("tensor.insert_slice", "tensor.extract_slice")
             and any(str(v.type) in ("tensor<f64>", "tensor<i64>") for v in [*op.operands, *op.results])]
    assert not rank0, str(rank0[0])
    assert sum(op.name == "tensor.insert" for op in ops) >= 2, str(m)  # (y and i, pushed each iteration)
