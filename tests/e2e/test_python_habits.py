"""Python habits (LANGUAGE.md 1.1-1.2): the NumPy methods that mirror built-ins, x.dtype where an
element type is expected, and `for` over enumerate() and zip(), in every mode."""
import numpy as np
import pytest

import dg

from .util import FRONT_END_MODE, check, dg_mode, load_src, made_no_code

SRC = """
def methods(x: f32[2, 3]):
    return (x.sum(axis=0), x.mean(), x.max(axis=1), x.min(), x.reshape(3, 2), x.reshape((6,)),
            x.transpose(1, 0), x.transpose([1, 0]), x.astype(f64), x.argmax(axis=1), x.var(), x.prod(axis=0))

def dtypes(x: f32[2, 3], y: f64[3]):
    z = zeros(3, dtype=x.dtype)
    return z, y.astype(x.dtype), x.astype(y.dtype)

def pairs(x: f32[N, 3], y: f32[M, 3]) -> f32:
    s = 0.0
    for i, row in enumerate(x):
        s = s + f32(i) * sum(row)
    for a, b in zip(x, y):
        s = s + sum(a * b)
    return s

def first_above(x: f32[N], t: f32) -> i64:
    at = -1
    for i, v in enumerate(x):
        if v > t:
            at = i
            break
    return at

"""


@pytest.fixture
def m(mode):
    return load_src(SRC, mode, "habits.dg")


def test_numpy_methods_are_their_built_ins(m):
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.0
    got = m.methods(x)
    want = (x.sum(axis=0), x.mean(), x.max(axis=1), x.min(), x.reshape(3, 2), x.reshape(6), x.T, x.T,
            x.astype(np.float64), x.argmax(axis=1), x.var(), x.prod(axis=0))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        check(g, w, rtol=1e-6)


def test_x_dtype_names_an_element_type(m):
    z, a, b = m.dtypes(np.ones((2, 3), np.float32), np.arange(3.0))
    assert z.dtype == np.float32 and a.dtype == np.float32 and b.dtype == np.float64


def test_enumerate_and_zip(m):
    x, y = np.arange(12, dtype=np.float32).reshape(4, 3), np.ones((2, 3), np.float32)
    want = sum(i * x[i].sum() for i in range(4)) + sum((x[i] * y[i]).sum() for i in range(2))  # zip stops at the shorter
    check(m.pairs(x, y), np.float32(want))
    gx, gy = dg.grad(m.pairs, wrt=(0, 1))(x, y)
    check(gx, np.arange(4, dtype=np.float32)[:, None] * np.ones((4, 3), np.float32) + np.vstack([y, np.zeros((2, 3))]).astype(np.float32))
    check(gy, x[:2])
    assert int(m.first_above(np.array([1.0, 3.0, 5.0], np.float32), np.float32(2.0))) == 1
    assert int(m.first_above(np.array([1.0], np.float32), np.float32(2.0))) == -1


def test_mistakes_are_located():
    bad = load_src("def f(x: f32[3, 2]) -> f32:\n    s = 0.0\n    for a, b in x:\n        s = s + a\n    return s\n\n"
                   "def g(x: f32[3]):\n    return x.foo()\n\ndef h(x: f32[3]):\n    return x.astype(3)\n", FRONT_END_MODE, "bad_habits.dg")
    with made_no_code(), pytest.raises(dg.DgTypeError, match=r"bad_habits.dg:3:9: error: a for loop variable must be a single name"):
        bad.f(np.ones((3, 2), np.float32))
    with made_no_code(), pytest.raises(dg.DgTypeError, match="tensors have no attribute 'foo'"):
        bad.g(np.ones(3, np.float32))
    with made_no_code(), pytest.raises(dg.DgTypeError, match="dtype must be one of"):
        bad.h(np.ones(3, np.float32))


CONSTS = """
EPS = 1e-5
SCALE = 2.0 * EPS
SIZES = (3, 4)
TABLE = [[1.0, 2.0], [3.0, 4.0]]

def f(x: f32[N]) -> f32:
    return sum(x) * SCALE + EPS

def g() -> f32[2, 2]:
    return TABLE * f32(SIZES[0])
"""


def test_top_level_constants(mode, tmp_path):
    """`NAME = value` at the top level: read in the module's functions, and imported by others
    (`from m import EPS`, `m.SCALE`)."""
    (tmp_path / "consts.dg").write_text(CONSTS)
    (tmp_path / "user.dg").write_text("import consts\nfrom consts import EPS\n\n"
                                      "def h(x: f32[N]) -> f32:\n    return consts.f(x) + EPS + consts.SCALE\n")
    m, u = (dg.load(tmp_path / n, mode=dg_mode(mode)) for n in ("consts.dg", "user.dg"))
    check(m.f(np.ones(3, np.float32)), np.float32(3 * 2e-5 + 1e-5), rtol=1e-6)
    check(m.g(), np.array([[3.0, 6.0], [9.0, 12.0]], np.float32))
    check(u.h(np.ones(3, np.float32)), np.float32(7e-5 + 1e-5 + 2e-5), rtol=1e-6)


def test_constant_mistakes_are_located():
    cyc = load_src("A = B + 1\nB = A\n\ndef f() -> f32:\n    return f32(A)\n", FRONT_END_MODE, "cycle.dg")
    with made_no_code(), pytest.raises(dg.DgTypeError, match="cycle.dg:2:5: error: the constant 'A' is defined in terms of itself"):
        cyc.f()
    with made_no_code(), pytest.raises(dg.DgTypeError, match="'f' is defined twice at the top level"):
        load_src("f = 1.0\n\ndef f() -> f32:\n    return 1.0\n", FRONT_END_MODE, "twice.dg").f()
    with made_no_code(), pytest.raises(dg.DgSyntaxError, match="only 'def', 'import' and constants"):
        load_src("print(1)\n\ndef f() -> f32:\n    return 1.0\n", FRONT_END_MODE, "stmt.dg").f()
