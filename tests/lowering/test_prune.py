"""The gradient of a recursive function gives back only its shadows, and its forward sweep's
copies that only made the results it no longer gives are gone (lowering/ad/prune.py): each
level calls the forward on its subtrees once, in the reverse branch, not twice. Code with
effects (a print) is kept as it was."""
import re

import numpy as np

import dg
from dg.lowering.transforms import differentiate
from dg.dialects.dialect import parse

SRC = """
def tree(x: f32[?], left: i64[?], n: i64) -> f32:
    if left[n] < 0:
        return tanh(x[n])
    return tanh(tree(x, left, left[n]) + x[n])

def loss(x: f32[?], left: i64[?]) -> f32:
    return tree(x, left, left.shape[0] - 1)

def g(x: f32[?], left: i64[?]):
    return grad(loss)(x, left)
"""


def _functions(text: str) -> dict:
    """name -> (its header line, its body's text) of the module's functions."""
    out, name = {}, None
    for line in text.splitlines():
        m = re.match(r"\s*func\.func (?:private )?@([\w.]+)\(", line)
        if m:
            name = m.group(1)
            out[name] = [line, ""]
        elif name is not None:
            out[name][1] += line + "\n"
    return out


def _forward_calls(body: str) -> int:
    """How many calls of `tree` (the forward) a function's text makes."""
    return len(re.findall(r"call @tree\(|callee = @tree\}", body))


def _grad_stage(src: str) -> dict:
    m = dg.loads(src, mode="interp", filename="prune.dg")
    return _functions(differentiate(parse(m.g.ir("dg"))))


def test_a_recursions_gradient_gives_back_only_its_shadows_and_runs_each_subtree_once_per_level():
    funcs = _grad_stage(SRC)
    (name,) = [n for n in funcs if n.endswith("_sh")]
    header, body = funcs[name]
    assert header.split("->")[-1].count("tensor<") == 1, header  # the shadow of x alone
    assert _forward_calls(body) == 1, body  # the reverse branch's, on the subtree
    x = np.linspace(-1, 1, 5).astype(np.float32)
    left = np.array([-1, 0, 1, 2, 3], np.int64)
    got = dg.loads(SRC, mode="compiled", filename="prune.dg").g(x, left)
    want = dg.loads(SRC, mode="interp", filename="prune.dg").g(x, left)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_a_recursion_that_prints_keeps_its_forward_and_prints_as_often_in_both_modes(capfd):
    src = SRC.replace("    if left[n] < 0:", '    print("at", n)\n    if left[n] < 0:')
    funcs = _grad_stage(src)
    (name,) = [n for n in funcs if n.endswith("_sh")]
    assert _forward_calls(funcs[name][1]) == 2  # (the forward sweep's copy stays)
    x = np.linspace(-1, 1, 3).astype(np.float32)
    left = np.array([-1, 0, 1], np.int64)
    counts = []
    for mode in ("interp", "compiled"):
        capfd.readouterr()
        dg.loads(src, mode=mode, filename="prune.dg").g(x, left)
        counts.append(capfd.readouterr().out.count("at "))
    assert counts[0] == counts[1] > 0, counts
