"""Names bound on some paths only (LANGUAGE.md 1.1, Python's rule): a name bound inside a loop or
a branch may be read after it; reading one that no executed path bound is a DgRuntimeError at
the read (Python's UnboundLocalError), in every mode; one that no path can have bound is a
DgTypeError before running.

Each function is also run as Python (the same text, NumPy for dg's built-ins): dg must give
Python's value where Python gives one, and fail where Python raises UnboundLocalError.
"""
import re

import numpy as np
import pytest

import dg

from .util import FRONT_END_MODE, check, load_src, made_no_code

FILE = "unbound.dg"
SRC = """\
def after_for(n: i64, xs: f32[N, 3]):
    for i in range(n):
        last = xs[i] * 2.0
    return last

def after_if(c: f32):
    if c > 0.0:
        y = c * 2.0
    return y

def first_above(xs: f32[N], t: f32):
    for x in xs:
        if x > t:
            found = x
            break
    return found

def after_while(x: f32, n: i64):
    i = 0
    while i < n:
        v = x * f32(i)
        i = i + 1
    return v

def after_continue(xs: f32[N]):
    for x in xs:
        if x < 0.0:
            continue
        pos = x
    return pos

def nested(xs: f32[N, M]):
    for row in xs:
        for v in row:
            if v > 2.0:
                big = v
    return big

def elifs(c: i64, x: f32):
    if c == 0:
        r = x
    elif c == 1:
        r = x * 2.0
    elif c == 2:
        q = x
    else:
        r = x * 3.0
    return r

def loop_variable(n: i64):
    for i in range(n):
        pass
    return i

def earlier_iteration(x: f32[3], n: i64):
    for i in range(n):
        if i == 0:
            t = x
        else:
            t = t + x
    return t

def early_return(xs: f32[N]):
    for x in xs:
        if x > 5.0:
            return x
        last = x
    return last

def helper(xs: f32[N]):
    for x in xs:
        if x > 1.0:
            hit = x
            break
    return hit

def caller(xs: f32[N]):
    return helper(xs) * 2.0

def a_pair(xs: f32[N]):
    for k in range(len(xs)):
        pair = (xs[k], k)
    a, b = pair
    return a, b

def growing(n: i64):
    for i in range(n):
        z = zeros(i + 1)
    return z

def read_twice(c: f32):
    if c > 0.0:
        y = c
    a = y + 1.0
    b = y * 2.0
    return a + b

def in_while_test(xs: f32[N]):
    k = 0
    while k < len(xs):
        if xs[k] > 0.0:
            s = xs[k]
        k = k + 1
        if k >= 2:
            if s > 100.0:
                break
    return k
"""

_PY = {"zeros": lambda n: np.zeros(n, np.float32), "f32": np.float32, "len": len}


def _python():
    ns = dict(_PY)
    exec(compile("from __future__ import annotations\n" + SRC, "<python>", "exec"), ns)
    return ns


def _read_at(fn: str, line_text: str, name: str) -> tuple:
    """LINE, COL of the first `name` on the first line `line_text` of function `fn` in SRC."""
    lines = SRC.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"def {fn}("))
    i = next(i for i in range(start, len(lines)) if lines[i].strip() == line_text)
    return i + 1, re.search(rf"\b{name}\b", lines[i]).start() + 1


@pytest.fixture
def m(mode):
    return load_src(SRC, mode, FILE)


F32 = np.float32
CASES = [
    # (function, arguments, the line of the read, the name read)
    ("after_for", (2, np.arange(12, dtype=F32).reshape(4, 3)), "return last", "last"),
    ("after_for", (0, np.arange(12, dtype=F32).reshape(4, 3)), "return last", "last"),
    ("after_if", (F32(1.5),), "return y", "y"),
    ("after_if", (F32(-1.5),), "return y", "y"),
    ("first_above", (np.array([0.5, 3.0, 4.0], F32), F32(1.0)), "return found", "found"),
    ("first_above", (np.array([0.5, 0.25], F32), F32(1.0)), "return found", "found"),
    ("first_above", (np.zeros(0, F32), F32(1.0)), "return found", "found"),
    ("after_while", (F32(2.0), 3), "return v", "v"),
    ("after_while", (F32(2.0), 0), "return v", "v"),
    ("after_continue", (np.array([1.0, -1.0, 2.0, -3.0], F32),), "return pos", "pos"),
    ("after_continue", (np.array([-1.0, -3.0], F32),), "return pos", "pos"),
    ("nested", (np.arange(6, dtype=F32).reshape(2, 3),), "return big", "big"),
    ("nested", (np.zeros((2, 2), F32),), "return big", "big"),
    ("nested", (np.zeros((0, 2), F32),), "return big", "big"),
    ("elifs", (0, F32(2.0)), "return r", "r"),
    ("elifs", (1, F32(2.0)), "return r", "r"),
    ("elifs", (2, F32(2.0)), "return r", "r"),
    ("elifs", (3, F32(2.0)), "return r", "r"),
    ("loop_variable", (4,), "return i", "i"),
    ("loop_variable", (0,), "return i", "i"),
    ("earlier_iteration", (np.array([1.0, 2.0, 3.0], F32), 3), "return t", "t"),
    ("earlier_iteration", (np.array([1.0, 2.0, 3.0], F32), 0), "return t", "t"),
    ("early_return", (np.array([1.0, 2.0, 9.0, 3.0], F32),), "return last", "last"),
    ("early_return", (np.array([1.0, 2.0], F32),), "return last", "last"),
    ("early_return", (np.array([7.0], F32),), "return last", "last"),
    ("early_return", (np.zeros(0, F32),), "return last", "last"),
    ("a_pair", (np.array([1.0, 2.0, 3.0], F32),), "a, b = pair", "pair"),
    ("a_pair", (np.zeros(0, F32),), "a, b = pair", "pair"),
    ("growing", (3,), "return z", "z"),
    ("growing", (0,), "return z", "z"),
    ("read_twice", (F32(1.0),), "a = y + 1.0", "y"),
    ("read_twice", (F32(-1.0),), "a = y + 1.0", "y"),
    ("in_while_test", (np.array([1.0, 2.0, 3.0], F32),), "if s > 100.0:", "s"),
    ("in_while_test", (np.array([-1.0, -2.0, 3.0], F32),), "if s > 100.0:", "s"),
]


@pytest.mark.parametrize("name, args, line, read", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_as_python(m, name, args, line, read):
    """Python's value where a path bound the name; where none did, UnboundLocalError in Python and
    a DgRuntimeError located at the read in dg."""
    py = _python()[name]
    try:
        want = py(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
    except UnboundLocalError:
        want = None
    if want is not None:
        got = getattr(m, name)(*args)
        if isinstance(want, tuple):
            assert len(got) == len(want)
            for g, w in zip(got, want):
                assert np.allclose(np.asarray(g), np.asarray(w)), (got, want)
        else:
            assert np.allclose(np.asarray(got), np.asarray(want)), (got, want)
        return
    with pytest.raises(dg.DgRuntimeError) as ei:
        getattr(m, name)(*args)
    msg = str(ei.value)
    ln, col = _read_at(name, line, read)
    assert msg.startswith(f"{FILE}:{ln}:{col}: error: UnboundLocalError: local variable '{read}' "
                          f"is referenced before assignment"), msg


def test_a_call_that_fails_names_its_caller(m):
    with pytest.raises(dg.DgRuntimeError) as ei:
        m.caller(np.array([0.5], F32))
    msg = str(ei.value)
    ln, col = _read_at("helper", "return hit", "hit")
    assert msg.startswith(f"{FILE}:{ln}:{col}: error: UnboundLocalError: local variable 'hit'"), msg
    ln, _ = _read_at("caller", "return helper(xs) * 2.0", "helper")
    assert re.search(rf"called from .*{FILE}:{ln}:", msg), msg
    check(m.caller(np.array([0.5, 3.0], F32)), F32(6.0))


def test_only_names_read_after_a_loop_are_carried():
    """A temporary of the body (not read after the loop) costs nothing: no extra carried value,
    no flag, no check (the emitter's IR, the same in every mode: once)."""
    m = load_src("""
def k(xs: f32[N], n: i64):
    s = 0.0
    for i in range(n):
        t = xs[i] * 2.0
        if t > 1.0:
            u = t
            s = s + u
        s = s + t
    return s
""", "interp")
    ir = m.k.ir("dg")
    assert "dg.check" not in ir and "dg.undef" not in ir, ir
    assert re.search(r"iter_args\(%\w+ = %\w+\) -> \(tensor<f32>\)", ir), ir
    assert "scf.if %" in ir and "-> (tensor<f32>)" in ir


GRAD_SRC = """\
def loss(w: f64[3], xs: f64[N, 3], n: i64) -> f64:
    for i in range(n):
        h = tanh(xs[i] * w)
        if sum(h) > 0.0:
            last = h * w
    return sum(last * last)

def first_hit(w: f64[3], xs: f64[N, 3]) -> f64:
    for row in xs:
        if sum(row) > 1.0:
            hit = row * w
            break
    return sum(sin(hit))

def earlier_iteration(w: f64[3], n: i64) -> f64:
    for i in range(n):
        if i == 0:
            t = w
        else:
            t = t * w + 1.0
    return sum(t)
"""


def _finite_difference(f, w, *args, eps=1e-6):
    g = np.zeros_like(w)
    for i in range(w.size):
        d = np.zeros_like(w)
        d[i] = eps
        g[i] = (f(w + d, *args) - f(w - d, *args)) / (2 * eps)
    return g


@pytest.mark.parametrize("name, args", [
    ("loss", (np.random.default_rng(0).standard_normal((5, 3)), 4)),
    ("first_hit", (np.random.default_rng(1).standard_normal((6, 3)),)),
    ("earlier_iteration", (3,)),
])
def test_gradients_through_a_name_bound_in_a_loop(mode, name, args):
    m = load_src(GRAD_SRC, mode, "unbound_grad.dg")
    ref = load_src(GRAD_SRC, "interp", "unbound_grad.dg")
    w = np.array([0.3, -0.7, 1.1])
    g = dg.grad(getattr(m, name))(w, *args)
    check(g, dg.grad(getattr(ref, name))(w, *args), rtol=1e-9, atol=1e-12)
    check(g, _finite_difference(getattr(ref, name), w, *args), rtol=1e-5, atol=1e-8)


def test_gradient_of_an_unbound_read_fails_at_the_read(mode):
    m = load_src(GRAD_SRC, mode, "unbound_grad.dg")
    with pytest.raises(dg.DgRuntimeError, match=r"unbound_grad.dg:6:16: error: UnboundLocalError: local variable 'last'"):
        dg.grad(m.loss)(np.ones(3), np.ones((2, 3)), 0)


@pytest.mark.parametrize("src, args, where, match", [
    ("def f(c: f32):\n    if False:\n        y = c\n    return y\n", (F32(1.0),), "4:12",
     "name 'y' is not defined"),
    ("def f(c: f32):\n    for i in range(0):\n        y = c\n    return y\n", (F32(1.0),), "4:12",
     "name 'y' is not defined"),
    # Unbound at the read in every run (the first iteration's, or the return's when none ran).
    ("def f(c: f32, n: i64):\n    for i in range(n):\n        y = y + c\n    return y\n", (F32(1.0), 2), "3:13",
     "name 'y' is not defined"),
    ("def f(c: f32, x: f32[3]):\n    if c > 0.0:\n        y = c\n    elif c < -1.0:\n        y = x\n    return y\n",
     (F32(1.0), np.zeros(3, F32)), "2:5", "'y' has rank 0 on one path and 1 on another"),
    ("def f(c: f32, n: i64):\n    if c > 0.0:\n        y = c\n    elif c < -1.0:\n        y = n\n    return y\n",
     (F32(1.0), 2), "2:5", "'y' is f32 on one path and i64 on another"),
    ("def h(x):\n    return x\n\ndef f(x: f32[3], n: i64):\n    for i in range(n):\n        g = h\n    return g(x)\n",
     (np.zeros(3, F32), 2), "7:12", "'g' is bound inside the loop body to a value that cannot be carried out of the loop"),
])
def test_what_the_checker_rejects_before_running(src, args, where, match):
    """Always unbound where read, or bound to values of different types on different paths: a
    located DgTypeError before running (before any code is made: one run stands for every mode)."""
    m = dg.loads(src, mode=FRONT_END_MODE, filename="never.dg")
    with made_no_code(), pytest.raises(dg.DgTypeError) as ei:
        m.f(*args)
    msg = str(ei.value)
    assert f"never.dg:{where}: error:" in msg, msg
    assert match in msg, msg
