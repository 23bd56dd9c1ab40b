"""Run-time size checks fold away where the sizes are known to be equal (lowering/fold_sizes.py).

A size the annotations name alike in two arguments is one SSA value in a function that only
Python calls (its calls check the names), so the checks between them fold and the slices that
keep a contraction in bounds drop out. A function that dg code calls trusts no names.
"""
import numpy as np
import pytest

import dg
from dg.core.mlir import ir, passmanager
from dg.dialects.dialect import shared_context
from dg.lowering import fold_sizes, pipeline

SRC = """
def named(a: f32[N, K], b: f32[K, M]) -> f32[N, M]:
    return a @ b

def unrelated(a: f32[N, K], b: f32[L, M]) -> f32[N, M]:
    return a @ b

def backward(x: f32[B, 5], d: f32[B, 7]) -> f32[5, 7]:
    return transpose(x) @ d

def rec(a: f32[N, K], b: f32[K, M], n: i64) -> f32[N, M]:
    if n == 0:
        return a @ b
    c = b
    for i in range(1):
        c = c[1:]
    return rec(a, c, n - 1)

def outer(a: f32[N, K], b: f32[L, M]) -> f32[N, M]:
    return rec(a, b, 0)

def loss(x: f32[B, 5], w: f32[5, 7], d: f32[B, 7]) -> f32:
    return sum((x @ w) * d)

def step(x: f32[B, 5], w: f32[5, 7], d: f32[B, 7]):
    return grad(loss, wrt=1)(x, w, d)
"""


@pytest.fixture(scope="module")
def m():
    return dg.loads(SRC, mode="compiled", filename="sizes.dg")


def _args(name, rng):
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    return {"named": (f(3, 4), f(4, 2)), "unrelated": (f(3, 4), f(4, 2)), "backward": (f(6, 5), f(6, 7)),
            "step": (f(6, 5), f(5, 7), f(6, 7))}[name]


@pytest.mark.parametrize("name,checks", [("named", 0), ("unrelated", 1), ("backward", 0), ("step", 0)])
def test_checks_fold_where_names_agree(m, name, checks):
    """(`step` differentiates `loss`: the copies autodiff makes keep the names.)"""
    args = _args(name, np.random.default_rng(0))
    a, b = args[:2]
    want = {"backward": lambda: a.T @ b, "step": lambda: a.T @ args[2]}.get(name, lambda: a @ b)()
    np.testing.assert_allclose(getattr(m, name)(*args), want, rtol=1e-5)
    text = getattr(m, name).ir("llvm", args=args)
    assert text.count("llvm.call @dg_rt_fail(") == checks, text[:3000]


def test_dg_ir_names_the_sizes(m):
    text = m.named.ir("dg", args=_args("named", np.random.default_rng(0)))
    assert 'dg.sizes = [["N", "K"], ["K", "M"]]' in text, text


def test_calls_from_dg_code_that_break_the_names_raise(m):
    """`rec` declares a and b to share K; dg code calls it with sizes that do not share it
    (`outer` with unrelated ones, `rec` itself with one row fewer): the check must raise."""
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((4, 2)).astype(np.float32)
    np.testing.assert_allclose(m.outer(a, b), a @ b, rtol=1e-5)
    np.testing.assert_allclose(m.rec(a, b, 0), a @ b, rtol=1e-5)
    for rows in (2, 6, 64):
        with pytest.raises(dg.DgRuntimeError, match=f"inner sizes 4 and {rows} differ"):
            m.outer(a, rng.standard_normal((rows, 2)).astype(np.float32))
    with pytest.raises(dg.DgRuntimeError, match="inner sizes 4 and 3 differ"):
        m.rec(a, b, 1)


FUNC = """
func.func @f(%a: tensor<?x?xf32>, %b: tensor<?x?xf32>) -> (index, tensor<?x?xf32>) attributes {SIZES} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %k1 = tensor.dim %a, %c1 : tensor<?x?xf32>
  %k2 = tensor.dim %b, %c0 : tensor<?x?xf32>
  %k3 = tensor.dim %a, %c1 : tensor<?x?xf32>
  %n = tensor.dim %a, %c0 : tensor<?x?xf32>
  %s = tensor.extract_slice %a[0, 0] [%n, %k3] [1, 1] : tensor<?x?xf32> to tensor<?x?xf32>
  %x = arith.addi %k1, %k2 : index
  %y = arith.addi %x, %k3 : index
  %z = arith.addi %y, %n : index
  return %z, %s : index, tensor<?x?xf32>
}
"""


def _run(sizes_attr: str, call: bool = False) -> str:
    text = FUNC.replace("{SIZES}", sizes_attr or "{}")
    if call:
        text += """
func.func @g(%a: tensor<?x?xf32>) -> index {
  %r:2 = func.call @f(%a, %a) : (tensor<?x?xf32>, tensor<?x?xf32>) -> (index, tensor<?x?xf32>)
  return %r#0 : index
}
"""
    with shared_context():
        mod = ir.Module.parse(text)
        fold_sizes.share_argument_dims(mod)
        passmanager.PassManager.parse("builtin.module(canonicalize)").run(mod.operation)
        return str(mod)


def test_one_dim_op_per_argument_axis():
    text = _run("")
    f = text[text.index("func.func @f"):]
    assert f.count("tensor.dim %arg0, %c1") == 1 and f.count("tensor.dim %arg1, %c0") == 1, text


def test_named_sizes_become_one_value():
    text = _run('{dg.sizes = [["N", "K"], ["K", "M"]]}')
    f = text[text.index("func.func @f"):]
    assert "tensor.dim %arg1" not in f, text


def test_names_of_a_called_function_are_not_trusted():
    text = _run('{dg.sizes = [["N", "K"], ["K", "M"]]}', call=True)
    f = text[text.index("func.func @f"):text.index("func.func @g")]
    assert f.count("tensor.dim %arg1") == 1, text


def test_full_slices_drop_out():
    with shared_context():
        mod = ir.Module.parse(FUNC.replace("{SIZES}", "{}"))
        fold_sizes.share_argument_dims(mod)
        passmanager.PassManager.parse(pipeline.SIMPLIFY).run(mod.operation)
        assert "tensor.extract_slice" in str(mod)
        assert fold_sizes.fold_full_slices(mod) == 1
        assert "tensor.extract_slice" not in str(mod)


def test_partial_slices_stay():
    text = FUNC.replace("{SIZES}", "{}").replace("[%n, %k3]", "[%n, %k2]")
    with shared_context():
        mod = ir.Module.parse(text)
        assert fold_sizes.fold_full_slices(mod) == 0
        assert "tensor.extract_slice" in str(mod)


def test_a_rank_reducing_slice_is_not_read_by_result_axis():
    """y drops x's axis 0, so y's axis 1 is x's axis 2 (%c): z takes %b of it, not all."""
    text = """
func.func @f(%x: tensor<?x?x?xf32>, %b: index, %c: index) -> tensor<?x?xf32> {
  %c0 = arith.constant 0 : index
  %y = tensor.extract_slice %x[0, 0, 0] [1, %b, %c] [1, 1, 1] : tensor<?x?x?xf32> to tensor<?x?xf32>
  %d0 = tensor.dim %y, %c0 : tensor<?x?xf32>
  %z = tensor.extract_slice %y[0, 0] [%d0, %b] [1, 1] : tensor<?x?xf32> to tensor<?x?xf32>
  return %z : tensor<?x?xf32>
}
"""
    with shared_context():
        mod = ir.Module.parse(text)
        assert fold_sizes.fold_full_slices(mod) == 0


def test_simplify_keeps_a_loops_results_dynamic():
    """A cast to a more static type stays outside the loop: its results may take any size.

    MLIR's ForOpTensorCastFolder would give the loop the type of its placeholder (0 elements)
    and cast every yield to it. pipeline.SIMPLIFY turns that pattern off by name, in the inliner's
    canonicalization too; a new MLIR that renamed it would fail here.
    """
    src = """
    func.func private @empty() -> tensor<?xf32> {
      %c0 = arith.constant 0 : index
      %e = tensor.empty(%c0) : tensor<?xf32>
      return %e : tensor<?xf32>
    }
    func.func @f(%a: tensor<?xf32>, %n: index) -> tensor<?xf32> {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %e = func.call @empty() : () -> tensor<?xf32>
      %r = scf.for %i = %c0 to %n step %c1 iter_args(%x = %e) -> (tensor<?xf32>) {
        scf.yield %a : tensor<?xf32>
      }
      return %r : tensor<?xf32>
    }
    """
    with shared_context():
        m = ir.Module.parse(src)
        passmanager.PassManager.parse(pipeline.SIMPLIFY).run(m.operation)
        text = str(m)
    assert "tensor<0xf32>" in text  # the placeholder's size is folded...
    assert "-> (tensor<?xf32>)" in text and "-> (tensor<0xf32>)" not in text  # ...the loop's is not
