"""After a failed size check, compiled code winds down before it raises; until then an operand
that may be too small is replaced so that no loop reads past its end (dialects/builder.py,
`stand_in_if`). Once MLIR has fused the element-wise ops, another input the op reads through the
same map stands in (lowering/stand_ins.py): no buffer and no copy of the operand at run time, and
a fifth less to compile in a gradient whose sizes are not declared."""
import re
import subprocess
import sys

import numpy as np
import pytest

import dg

SRC = """
def add(a: f32[N], b: f32[M]) -> f32[N]:
    return a + b

def fused(a: f32[N], b: f32[M]) -> f32[N]:
    return tanh(a * 2.0) + b

def add2(a: f32[N, K], b: f32[M, L]) -> f32[N, K]:
    return a + b

def chain(x: f32[N], w: f32[M]) -> f32:
    y = tanh(x * w + 0.5)
    y = tanh(y * w + 0.25)
    return sum(tanh(y * w))

def add_rows(a: f32[N, 3], b: f32[M, 1]) -> f32[N, 3]:
    return a + b

def steps(x: f32[?], w: f32[?], n: i64) -> f32:
    y = x
    for i in range(n):
        y = tanh(y * w) * 0.5 + y
    return sum(y * y)

def steps_grad(x: f32[?], w: f32[?], n: i64) -> f32[?]:
    return grad(steps, wrt=1)(x, w, n)
"""


@pytest.fixture(scope="module")
def m():
    return dg.loads(SRC, mode="compiled", filename="stand.dg")


def _f(*shape):
    return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) / 7


@pytest.mark.parametrize("name,args", [("add", (_f(4), _f(4))), ("fused", (_f(4), _f(4))),
                                       ("add2", (_f(2, 3), _f(2, 3)))])
def test_an_input_of_the_op_stands_in(m, name, args):
    """One buffer, the result's; the checked operand is neither copied nor replaced by a buffer
    of its own. (`fused`: the input that stands in is `a`, which the fused op reads; before
    fusion it was a product that the sum's check would have kept from fusing.)"""
    text = getattr(m, name).ir("bufferized", args=args)
    assert text.count("memref.alloc") == 1 and "memref.copy" not in text, text
    assert "arith.select" in text and "dg_rt_fail" in text, text
    want = {"fused": lambda a, b: np.tanh(a * 2) + b}.get(name, lambda a, b: a + b)(*args)
    np.testing.assert_allclose(getattr(m, name)(*args), want, rtol=1e-6)


def test_element_wise_ops_still_fuse(m):
    """A chain whose every step is checked against `w`: one loop (the sum's), and no buffer of
    the array's size, between its steps or for a stand-in."""
    args = (_f(5), _f(5))
    text = m.chain.ir("bufferized", args=args)
    assert text.count("linalg.generic") == 1 and "memref.alloc(%" not in text, text
    y = np.tanh(np.tanh(args[0] * args[1] + 0.5) * args[1] + 0.25)
    np.testing.assert_allclose(m.chain(*args), np.sum(np.tanh(y * args[1])), rtol=1e-5)


def test_without_an_input_of_its_type_a_fresh_tensor_stands_in(m):
    """`b` (?x1) is checked against `a` (?x3): no input of its type, so a buffer of its own."""
    args = (_f(2, 3), _f(2, 1))
    assert "memref.alloc" in m.add_rows.ir("bufferized", args=args)
    np.testing.assert_allclose(m.add_rows(*args), args[0] + args[1])


RUN = """
import sys
import numpy as np
import dg
m = dg.loads(sys.argv[1], mode="compiled", filename="stand.dg")
f = lambda *s: np.ones(s, np.float32)
cases = {"add": [(f(1 << 20), f(3)), (f(3), f(1 << 20))],
         "fused": [(f(1 << 20), f(3)), (f(3), f(1 << 20))],
         "add2": [(f(1024, 1024), f(2, 3)), (f(2, 3), f(1024, 1024))],
         "add_rows": [(f(1 << 18, 3), f(2, 1)), (f(2, 3), f(1 << 18, 1))]}
for name, calls in cases.items():
    for a, b in calls:
        try:
            getattr(m, name)(a, b)
            print("no error")
        except dg.DgRuntimeError as e:
            print(str(e).splitlines()[0])
"""


@pytest.mark.slow
def test_mismatched_sizes_raise_in_either_order():
    """A small operand against a large one and the other way round: a located error each time,
    never a read past an end (in a subprocess, so that a crash cannot take the run down)."""
    r = subprocess.run([sys.executable, "-c", RUN, SRC], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert len(lines) == 8 and all("could not be broadcast together" in ln for ln in lines), r.stdout


def test_a_gradient_does_not_copy_its_tape(m):
    """The gradient of a loop whose operands' sizes are unrelated (x and w, both f32[?], as in
    benchmarks/checkpoint.py): its reverse loop checks w against the tape's rows, and the
    stand-ins there are not views of the tape or the loop's carried values, so the tape (n + 1
    rows of x's size) is written in place and never copied whole (it was, once per call, to
    write its last row)."""
    x, w = _f(6), _f(6) / 5
    text = m.steps_grad.ir("bufferized", args=(x, w, 4))
    assert not re.search(r"memref.copy .* : memref<\?x\?xf32>", text), text
    eager = dg.loads(SRC, mode="interp", filename="stand.dg")
    np.testing.assert_allclose(m.steps_grad(x, w, 4), eager.steps_grad(x, w, 4), rtol=1e-5)
