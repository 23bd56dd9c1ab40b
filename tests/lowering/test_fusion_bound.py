"""bound-fusion: element-wise fusion makes no loop body larger than the bound (so that its work
stays linear in the chain's length), and the values are the interpreter's."""
import re

import numpy as np
import pytest

import dg
from dg.lowering import fusion_bound

SRC = """
def f(x: f32[N], w: f32[N]) -> f32:
    y = x
""" + "    y = tanh(y * w + 0.1) * 0.5 + y\n" * 24 + """    return sum(y * y)

def g(x: f32[N], w: f32[N]) -> f32[N]:
    return grad(f, wrt=1)(x, w)
"""


def _bodies(text: str) -> list:
    """The number of ops in each linalg.generic's body of bufferized IR."""
    out = []
    for part in text.split("linalg.generic")[1:]:
        body = part.split("^bb0", 1)[1].split("linalg.yield", 1)[0]
        out.append(len(re.findall(r"\n\s+%\S+ = ", body)) + 1)
    return out


@pytest.mark.slow
def test_no_fused_body_passes_the_bound(monkeypatch):
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(64).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    whole = _bodies(dg.loads(SRC, mode="compiled", filename="fb.dg").g.ir("bufferized", args=(x, w)))
    monkeypatch.setattr(fusion_bound, "FUSED_OPS", 40)
    m = dg.loads(SRC, mode="compiled", filename="fb.dg")
    text = m.g.ir("bufferized", args=(x, w))
    cut = _bodies(text)
    # (without the bound: one loop of about 1,400 ops; with it, none above the bound but for the
    # op that crosses it, whose own body comes on top)
    assert max(whole) > 4 * 40 and max(cut) <= 40 + 8
    assert "linalg.copy" in text or "memref.copy" in text
    np.testing.assert_allclose(m.g(x, w), dg.loads(SRC, mode="interp", filename="fb.dg").g(x, w), rtol=1e-4, atol=1e-5)
