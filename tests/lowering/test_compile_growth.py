"""Compile sizes grow like the program (issue: compile time linear in what it compiles): over the
generated families of benchmarks/compile.py, the dg IR after autodiff and the LLVM module grow
linearly, where a function called from several places and larger than inlining.INLINE_LIMIT is
called, not copied. Sizes, not times: times are the benchmark's."""
import importlib.util
from pathlib import Path

import pytest

import dg
from dg.lowering import inlining
from dg.runtime import modes

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "compile.py"


@pytest.fixture(scope="module")
def programs():
    spec = importlib.util.spec_from_file_location("compile_bench", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _sizes(programs, family: str, n: int, llvm: bool = True):
    src, fname, args, _ = getattr(programs, f"{family}_program")(n)
    fn = getattr(dg.loads(src, mode="interp", filename=f"growth_{family}_{n}.dg"), fname)
    comp, _ = fn.specialize(args, run=False)
    grad_ops = modes.grad_text(comp).count('"dg.')
    return grad_ops, (len(fn.ir("llvm", args=args).splitlines()) if llvm else None)


@pytest.mark.slow
def test_a_straight_line_body_compiles_to_sizes_in_proportion(programs):
    (g1, l1), (g2, l2), (g4, l4) = (_sizes(programs, "straight", m) for m in (30, 60, 120))
    for small, big in ((g1, g2), (g2, g4)):
        assert 1.8 <= big / small <= 2.2, (g1, g2, g4)
    # The LLVM module: what each doubling adds doubles too (a fixed part, the entry's argument
    # checks and the runtime's functions, stays).
    assert 1.8 <= (l4 - l2) / (l2 - l1) <= 2.2, (l1, l2, l4)
    assert l4 > 2.5 * l1, (l1, l2, l4)


def test_gradients_of_a_call_chain_grow_by_the_same_amount_per_function(programs):
    """Each function of the chain adds its forward and its reverse function: a constant amount of
    dg IR per level, however deep."""
    g = [_sizes(programs, "depth", d, llvm=False)[0] for d in (2, 4, 8, 16)]
    steps = [(b - a) / (db - da) for (a, b), (da, db) in zip(zip(g, g[1:]), ((2, 4), (4, 8), (8, 16)))]
    assert max(steps) == min(steps), g


@pytest.mark.slow
def test_shared_large_functions_keep_their_calls(monkeypatch, programs):
    """With the limit low, the chain's forward functions (called from a function and from its
    reverse) stay functions: the LLVM module then grows by a constant per level."""
    monkeypatch.setattr(inlining, "INLINE_LIMIT", 50)
    sizes = [_sizes(programs, "depth", d)[1] for d in (4, 8, 12)]
    assert abs((sizes[2] - sizes[1]) - (sizes[1] - sizes[0])) <= 0.1 * (sizes[1] - sizes[0]), sizes


@pytest.mark.slow
def test_a_call_chain_gradient_compiles_to_a_module_in_proportion(programs):
    """With the default limits, what each doubling of the chain adds to the LLVM module about
    doubles: inlining stays within its budget and nests loops no deeper than bufferization
    analyzes (without them, depth 16 added 3.9 times what depth 8 did)."""
    l4, l8, l16 = (_sizes(programs, "depth", d)[1] for d in (4, 8, 16))
    assert (l16 - l8) / (l8 - l4) <= 2.4, (l4, l8, l16)


def test_inlining_nests_loops_no_deeper_than_bufferization_analyzes(programs):
    from dg.dialects.dialect import parse
    from dg.lowering import pipeline

    src, fname, args, _ = programs.depth_program(16)
    fn = getattr(dg.loads(src, mode="interp", filename="growth_nesting.dg"), fname)
    comp, _ = fn.specialize(args, run=False)
    m = pipeline.run_passes(parse(modes.grad_text(comp)), ["to-linalg", "only-entry", "inline-and-simplify"],
                            entry=comp.symbol)
    assert inlining.scf_nesting(m.body) <= inlining.MAX_ANALYZED_NESTING


def test_inlining_keeps_within_its_budget(monkeypatch, programs):
    """A shared function's copies stop where the module would grow past INLINE_GROWTH times its
    size: with a budget of half again, less is inlined than with a budget of double."""
    from dg.core.mlir import operations_under
    from dg.dialects.dialect import parse
    from dg.lowering import pipeline

    src, fname, args, _ = programs.depth_program(8)
    fn = getattr(dg.loads(src, mode="interp", filename="growth_budget.dg"), fname)
    comp, _ = fn.specialize(args, run=False)
    before = pipeline.run_passes(parse(modes.grad_text(comp)), ["to-linalg", "only-entry"], entry=comp.symbol)
    start = len(list(operations_under(before.body)))
    monkeypatch.setattr(inlining, "INLINE_FLOOR", 0)
    kept = {}
    for growth in (1.5, 2.0):
        monkeypatch.setattr(inlining, "INLINE_GROWTH", growth)
        m = pipeline.run_passes(parse(str(before)), ["inline-and-simplify"])
        ops = list(operations_under(m.body))
        kept[growth] = sum(1 for op in ops if op.name == "func.call" and "no_inline" in op.attributes)
        assert len(ops) <= growth * start, (growth, len(ops), start)
    assert kept[1.5] > kept[2.0] > 0, kept
