"""MLIR's conversions to LLVM on several threads (`to-llvm`, core.mlir.threaded)."""
import numpy as np

import dg
from dg.core.mlir import passmanager, threaded
from dg.dialects.dialect import asm, parse, shared_context
from dg.lowering import cpu, pipeline
from dg.lowering.llvm_ir import llvm_ir
from dg.runtime.modes import grad_text

SRC = """
def f(x: f32[?], w: f32[?]) -> f32:
    y = tanh(x * w) + exp(x)
    z = y * y - w
    return sum(z * x) + sum(sqrt(abs(y)))

def g(x: f32[?], w: f32[?]) -> f32[?]:
    return grad(f, wrt=1)(x, w)
"""


def _before_to_llvm():
    m = dg.loads(SRC, mode="compiled", filename="threaded.dg")
    x = np.linspace(-1, 1, 64).astype(np.float32)
    m.g(x, x)
    text = grad_text(m.g._last)
    names = pipeline.passes_to("llvm")[len(pipeline.passes_to("grad")):]
    before = pipeline.run_passes(parse(text), names[:names.index("to-llvm")], entry="g")
    return asm(before)


def test_the_per_function_conversions_run_under_func_func():
    """The conversions that work on one function at a time are nested in `func.func(…)`, where
    MLIR runs them on the functions (a loop's outlined functions among them) at once; the arith,
    cf, func and index dialects go to LLVM in one conversion of the module (one walk, not four)."""
    inner = cpu.TO_LLVM[len("builtin.module("):-1]
    passes = pipeline.split_top_level(inner)
    nested = [p for p in passes if p.startswith("func.func(")]
    assert any("convert-scf-to-cf" in p for p in nested), cpu.TO_LLVM
    assert any("convert-math-to-llvm" in p for p in nested), cpu.TO_LLVM
    assert any("expand-strided-metadata" in p for p in nested), cpu.TO_LLVM
    assert "convert-to-llvm" in passes and not any(f"convert-{d}-to-llvm" in inner for d in ("arith", "cf", "func", "index"))
    # what bufferization and outlining repeat is merged before anything is converted
    first = pipeline.split_top_level(cpu.TO_LLVM_FLOATS[len("builtin.module("):-1])[0]
    assert first.startswith("func.func(cse,"), cpu.TO_LLVM_FLOATS


def test_threaded_lowering_gives_the_same_llvm_ir_and_turns_threads_off_again():
    text = _before_to_llvm()
    assert text.count("func.func private @__dg_par_") >= 2  # several functions to share out
    one = parse(text)
    with shared_context():
        passmanager.PassManager.parse(cpu.TO_LLVM).run(one.operation)
        alone = llvm_ir(one)
    many = parse(text)
    with shared_context() as ctx:
        pipeline.run_passes(many, ["to-llvm"])
        assert ctx.get_num_threads() == 1  # off again: dg's own passes run faster without it
        assert llvm_ir(many) == alone
        assert ctx.get_num_threads() == 1


def test_threaded_turns_threads_off_after_a_failure():
    with shared_context() as ctx:
        try:
            with threaded(ctx):
                raise ValueError("stop")
        except ValueError:
            pass
        assert ctx.get_num_threads() == 1


def test_no_field_is_read_back_from_the_struct_it_was_just_put_in():
    """`to-llvm` ends with each function's canonicalization and cse: no `llvm.extractvalue` reads
    a field of a memref descriptor that an `llvm.insertvalue` chain of the same function built
    (the lowering's own pattern, a quarter of the LLVM IR without them)."""
    from dg.core.mlir import defining_op, operations_under

    m = parse(_before_to_llvm())
    with shared_context():
        pipeline.run_passes(m, ["to-llvm"])
    extracts = [op for op in operations_under(m.body) if op.name == "llvm.extractvalue"]
    from_inserts = [op for op in extracts if (d := defining_op(op.operands[0])) is not None and d.name == "llvm.insertvalue"]
    assert not from_inserts, len(from_inserts)
