"""Every heap allocation of compiled CPU code goes through the guard (lowering/alloc_guard.py).

A `malloc` called directly would hand back NULL for a value too large for memory, and the code
would write through it; the e2e tests (test_shapes.py) check the located error that the guarded
allocation gives instead. This checks that no allocation is left unguarded.
"""
import re

import numpy as np

import dg
from dg.core.abi import GUARDED, LINKED
from dg.lowering import alloc_guard

SRC = """
def grow(x: f32[N], k: i64) -> f32[M]:
    for i in range(k):
        x = concat([x, x * 2.0], axis=0)
    return x

def loss(w: f32[N, K], x: f32[B, N]) -> f32:
    return sum(tanh(x @ w))

def step(w: f32[N, K], x: f32[B, N]):
    return value_and_grad(loss)(w, x)
"""


def test_every_malloc_goes_through_the_guard():
    m = dg.loads(SRC, mode="compiled", filename="guard.dg")
    for fn, args in (("grow", (np.ones(3, np.float32), np.int64(2))),
                     ("step", (np.ones((4, 5), np.float32), np.ones((2, 4), np.float32)))):
        text = getattr(m, fn).ir("llvm", args=args)
        functions = re.split(r"\n  llvm\.func ", text)
        calls = [f.split("(")[0] for f in functions if "llvm.call @malloc(" in f]
        assert calls == [f"internal @{alloc_guard.MALLOC}"], calls
        assert text.count(f"llvm.call @{alloc_guard.MALLOC}(") >= 2
        assert f"@{GUARDED}{LINKED}{fn}(" in text
        getattr(m, fn)(*args)


def test_dg_functions_may_have_the_names_of_the_c_library_calls_the_guard_makes():
    m = dg.loads("def longjmp(x: f32[N]) -> f32[N]:\n    return x * 2.0\n\n"
                 "def setjmp(x: f32[N]) -> f32[N]:\n    return longjmp(x) + 1.0\n",
                 mode="compiled", filename="names.dg")
    np.testing.assert_allclose(m.setjmp(np.ones(3, np.float32)), np.full(3, 3.0, np.float32))


def test_an_allocation_inlined_from_a_callee_is_located_in_the_callee():
    """A gradient's tape too large for memory (10**11 f64 rows), the loop inlined into the function
    dg.value_and_grad makes: located at the loop, as the interpreter locates it, not in the
    made-up file of that function."""
    src = "def power(x: f64, n: i64) -> f64:\n    s = x\n    for i in range(n):\n        s = s * x\n    return s\n"
    for mode in ("interp", "compiled"):
        m = dg.loads(src, mode=mode, filename="tape.dg")
        try:
            dg.value_and_grad(m.power)(1.01, 10 ** 11)
        except dg.DgRuntimeError as e:
            assert str(e).startswith("tape.dg:3:5: error: "), (mode, str(e))
        else:
            raise AssertionError(f"{mode}: no error")


def test_an_allocation_is_used_as_malloc_returns_it():
    """Buffers are not aligned past what malloc gives (one-shot-bufferize's buffer-alignment=0):
    a 64-byte alignment cost each allocation five instructions to round its address up (an
    eighth of the Tree-LSTM gradient's LLVM IR), for no speed measured (benchmarks/cpu.py's
    workloads). The descriptor's allocated and aligned pointers are the same value."""
    m = dg.loads(SRC, mode="compiled", filename="guard.dg")
    args = (np.ones((4, 5), np.float32), np.ones((2, 4), np.float32))
    text = m.step.ir("llvm", args=args)
    assert text.count(f"llvm.call @{alloc_guard.MALLOC}(") >= 2
    assert "llvm.urem" not in text, text
    m.step(*args)
