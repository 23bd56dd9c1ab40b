"""The CPU pipeline's order (lowering/codegen/lower.py): what is lowered for one entry function."""
import numpy as np
import pytest

import dg
from dg.core.mlir import ir

SRC = """
def loss(x: f32[N], w: f32[N]) -> f32:
    return sum(tanh(x * w))

def step(x: f32[N], w: f32[N]):
    return value_and_grad(loss, wrt=1)(x, w)

def unused(x: f32[N]) -> f32[N]:
    return exp(x)
"""


def test_only_what_the_entry_reaches_is_bufferized():
    """The functions the entry calls (the loss, its gradient's) are inlined and dropped before
    bufferization: they are not bufferized and lowered once more each on their own."""
    from dg.dialects.dialect import parse
    from dg.lowering import pipeline
    from dg.runtime.modes import grad_text

    m = dg.loads(SRC, mode="compiled", filename="entry.dg")
    x = np.linspace(-1, 1, 8).astype(np.float32)
    v, g = m.step(x, x)
    np.testing.assert_allclose(g, x * (1 - np.tanh(x * x) ** 2), rtol=1e-5)
    text = grad_text(m.step._last)  # what the executor compiles
    assert text.count("func.func @") >= 3, text  # step, the gradient's functions, loss
    b = pipeline.run_stage(parse(text), "bufferized", start="grad", entry="step")
    defined = [ir.StringAttr(op.operation.attributes["sym_name"]).value for op in b.body.operations
               if op.operation.name == "func.func" and len(op.operation.regions[0].blocks)]
    assert defined == ["step"], str(b)


def test_no_import_is_tried_again_and_again(monkeypatch):
    """Wrapping dg's ops in the bindings does not look for a missing Python module each time."""
    import builtins

    from dg.dialects.dialect import parse
    from dg.lowering import pipeline
    from dg.runtime.modes import grad_text

    m = dg.loads(SRC, mode="compiled", filename="imports.dg")
    x = np.ones(8, np.float32)
    m.step(x, x)
    text = grad_text(m.step._last)
    failed = []
    real = builtins.__import__

    def tracking(name, *args, **kwargs):
        try:
            return real(name, *args, **kwargs)
        except ImportError:
            failed.append(name)
            raise

    monkeypatch.setattr(builtins, "__import__", tracking)
    pipeline.run_stage(parse(text), "llvm", start="grad", entry="step")
    assert len(failed) <= 2, failed


# A loop with a data-dependent bound, nested ifs, a `break` and an early return of a 10-tuple,
# and no return after the loop: LLVM's SLP vectorizer spent 35 to 200 s on it (on 2 cores), now
# off (lowering/codegen/objects.py); the whole call takes about a second.
SLOW_TO_VECTORIZE = """
def g(x: f32[N], w: f32[?, ?], a: f32, n: i64):
    s = a * 0.5
    h = x
    t = f32(1.0)
    k = 0
    flag = a > 0.0
    mask = zeros_like(x) > 1.0
    c = i64(x > a)
    d = f64(a)
    dv = f64(x) * 0.5
    H = w
    for i1 in range(0, minimum(sum(c), 4), 3):
        if sqrt(1.0 + f32(len(x)) * mean(x)) < 0.1:
            q2 = 0
            if q2 > minimum(sum(c), 4):
                break
            return (s, h, t, k, flag, mask, c, d, dv, H)
        s = (f32(d) - 3.0)
"""


@pytest.mark.slow
def test_a_function_slp_vectorized_for_minutes_compiles(tmp_path):
    """Compiled at full optimization (DG_QUICK_START=0) in a process of its own, in which each
    LLVM pipeline made (llvmlite's create_pass_builder) must have the SLP vectorizer off: a
    pipeline with it on fails at once, before it runs for minutes. No time limit but a guard
    against a hang."""
    import subprocess
    import sys

    (tmp_path / "g.dg").write_text(SLOW_TO_VECTORIZE)
    code = ("import sys, numpy as np, llvmlite.binding as llvm, dg\n"
            "made = []\n"
            "builder = llvm.create_pass_builder\n"
            "def watched(machine, tuning):\n"
            "    made.append(tuning.slp_vectorization)\n"
            "    if tuning.slp_vectorization:\n"
            "        raise SystemExit('an LLVM pipeline with the SLP vectorizer on')\n"
            "    return builder(machine, tuning)\n"
            "llvm.create_pass_builder = watched\n"
            "m = dg.load(sys.argv[1], mode='compiled')\n"
            "try:\n"
            "    m.g(np.ones(3, np.float32), np.ones((3, 3), np.float32), np.float32(0.5), 3)\n"
            "except dg.DgRuntimeError as e:\n"
            "    print(str(e).splitlines()[0])\n"
            "print(len(made) > 0 and not any(made))\n")
    env = dict(__import__("os").environ, DG_CACHE="0", DG_QUICK_START="0")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "g.dg")], env=env, capture_output=True,
                         text=True, timeout=600)  # (a guard against a hang)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0].endswith("g.dg:13:5: error: assertion failed: g() reached its end without a return"), lines
    assert lines[1] == "True", lines


def test_invalid_ir_is_caught_before_llvm_without_per_pass_verification(monkeypatch, tmp_path):
    """By default MLIR's verifier does not run after every pass (core.mlir.pass_manager); the
    module is verified once before its translation to LLVM IR, so a pass that made invalid IR is
    an error there, not a crash in the translation."""
    from dg.dialects.dialect import parse
    from dg.lowering import pipeline
    from dg.lowering.codegen import tiers
    from dg.lowering.codegen.units import Unit

    monkeypatch.delenv("DG_VERIFY_PASSES", raising=False)
    monkeypatch.setenv("DG_CACHE_DIR", str(tmp_path))

    def breaks_a_block(m):
        for op in m.body.operations:
            op = op.operation
            if op.name == "llvm.func" and len(op.regions[0].blocks):
                list(op.regions[0].blocks[0].operations)[-1].erase()  # the block's terminator
                return

    monkeypatch.setitem(pipeline.PASSES, "function-attributes", breaks_a_block)
    m = parse("func.func @f(%x: f64) -> f64 {\n  %y = arith.addf %x, %x : f64\n  return %y : f64\n}")
    with pytest.raises(ir.MLIRError, match="terminator|block"):
        tiers.make(Unit(module=m, entry="f"))
