"""The CPU pipeline's order (runtime/cpu.py): what is lowered for one entry function."""
import numpy as np

import dg
from dg.dialects.mlir import ir

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
    from dg.runtime import cpu
    from dg.runtime.modes import parse_verified, run_text

    m = dg.loads(SRC, mode="compiled", filename="entry.dg")
    x = np.linspace(-1, 1, 8).astype(np.float32)
    v, g = m.step(x, x)
    np.testing.assert_allclose(g, x * (1 - np.tanh(x * x) ** 2), rtol=1e-5)
    text = run_text(m.step._last)  # what the executor compiles
    assert text.count("func.func @") >= 3, text  # step, the gradient's functions, loss
    _, b = cpu.bufferized(parse_verified(text), "step")
    defined = [ir.StringAttr(op.operation.attributes["sym_name"]).value for op in b.body.operations
               if op.operation.name == "func.func" and len(op.operation.regions[0].blocks)]
    assert defined == ["step"], str(b)


def test_no_import_is_tried_again_and_again(monkeypatch):
    """Wrapping dg's ops in the bindings does not look for a missing Python module each time."""
    import builtins

    from dg.runtime import cpu
    from dg.runtime.modes import parse_verified, run_text

    m = dg.loads(SRC, mode="compiled", filename="imports.dg")
    x = np.ones(8, np.float32)
    m.step(x, x)
    text = run_text(m.step._last)
    failed = []
    real = builtins.__import__

    def tracking(name, *args, **kwargs):
        try:
            return real(name, *args, **kwargs)
        except ImportError:
            failed.append(name)
            raise

    monkeypatch.setattr(builtins, "__import__", tracking)
    cpu.lower_to_llvm(parse_verified(text), "step")
    assert len(failed) <= 2, failed
