"""Errors a user can cause (LANGUAGE.md section 6): kinds, FILE:LINE:COL, caret line. Those the
front end finds (before any mode makes code: `made_no_code`) are checked once, in FRONT_END_MODE;
run-time errors in every mode."""
import re

import numpy as np
import pytest

import dg

from .util import FRONT_END_MODE, PROGRAMS, check, load_prog, made_no_code

F32, I64 = np.float32, np.int64


def _check_diagnostic(msg: str, file: str, line: int, col: int | None = None):
    """The message starts with FILE:LINE:COL: error:, then quotes the line with a caret under COL."""
    first = msg.splitlines()[0]
    mo = re.match(r"^(.*):(\d+):(\d+): error: ", first)
    assert mo, f"message does not start with FILE:LINE:COL: error: -- {msg!r}"
    assert mo.group(1).endswith(file), (mo.group(1), file)
    assert int(mo.group(2)) == line, f"line {mo.group(2)}, expected {line}: {msg}"
    got_col = int(mo.group(3))
    if col is not None:
        assert got_col == col, f"column {got_col}, expected {col}: {msg}"
    return got_col


def _check_caret(msg: str, src_line: str, col: int):
    lines = msg.splitlines()
    quoted = [i for i, l in enumerate(lines) if l.rstrip().endswith(src_line.rstrip()) and l.strip()]
    assert quoted, f"the source line {src_line!r} is not quoted: {msg}"
    i = quoted[0]
    assert i + 1 < len(lines), msg
    caret = lines[i + 1]
    assert caret.strip() == "^", f"no caret line under the source: {msg}"
    indent = len(lines[i]) - len(src_line.rstrip())
    assert caret.index("^") == indent + col - 1, f"caret not under column {col}: {msg}"


def _type_error(src: str, name: str, fn: str, args):
    """Load `src` as file NAME and call FN(*args); return the DgTypeError's message (raised before
    any code is made)."""
    with made_no_code(), pytest.raises(dg.DgTypeError) as ei:
        m = dg.loads(src, mode=FRONT_END_MODE, filename=name)
        getattr(m, fn)(*args)
    assert isinstance(ei.value, dg.DgError)
    return str(ei.value)


def _line_col(src, needle, col_of=None):
    for i, l in enumerate(src.splitlines()):
        if needle in l:
            return i + 1, l.index(col_of or needle) + 1, l
    raise AssertionError(needle)


def test_error_classes():
    assert issubclass(dg.DgTypeError, dg.DgError)
    assert issubclass(dg.DgRuntimeError, dg.DgError)
    assert issubclass(dg.DgSyntaxError, dg.DgError)
    assert issubclass(dg.DgError, Exception)


def test_shape_mismatch_in_add():
    src = "def bad(a: f32[3], b: f32[4]):\n    c = a * 2.0\n    return a + b\n"
    msg = _type_error(src, "bad_add.dg", "bad", (np.zeros(3, F32), np.zeros(4, F32)))
    line, _, text = _line_col(src, "return a + b")
    col = _check_diagnostic(msg, "bad_add.dg", line)
    assert col in (text.index("a + b") + 1, text.index("+") + 1), msg
    _check_caret(msg, text, col)


def test_matmul_shape_mismatch():
    src = "def mm(a: f32[2, 3], b: f32[2, 3]):\n    return a @ b\n"
    msg = _type_error(src, "bad_mm.dg", "mm", (np.zeros((2, 3), F32), np.zeros((2, 3), F32)))
    line, _, text = _line_col(src, "return a @ b")
    col = _check_diagnostic(msg, "bad_mm.dg", line)
    _check_caret(msg, text, col)


def test_undefined_name():
    src = "def f(x: f32[3]):\n    y = x + 1.0\n    return y * undefined_thing\n"
    msg = _type_error(src, "undef.dg", "f", (np.zeros(3, F32),))
    line, col, text = _line_col(src, "undefined_thing")
    _check_diagnostic(msg, "undef.dg", line, col)
    _check_caret(msg, text, col)
    assert "undefined_thing" in msg


def test_undefined_function():
    src = "def f(x: f32[3]):\n    return no_such_fn(x)\n"
    msg = _type_error(src, "undef_fn.dg", "f", (np.zeros(3, F32),))
    line, col, text = _line_col(src, "no_such_fn")
    col = _check_diagnostic(msg, "undef_fn.dg", line)
    _check_caret(msg, text, col)
    assert "no_such_fn" in msg


def test_wrong_number_of_arguments_in_dg_call():
    src = "def g(x):\n    return x * 2.0\n\ndef f(x: f32[3]):\n    return g(x, x)\n"
    msg = _type_error(src, "nargs.dg", "f", (np.zeros(3, F32),))
    line, _, text = _line_col(src, "return g(x, x)")
    col = _check_diagnostic(msg, "nargs.dg", line)
    _check_caret(msg, text, col)


def test_missing_argument_in_dg_call():
    src = "def g(x, y):\n    return x * y\n\ndef f(x: f32[3]):\n    return g(x)\n"
    msg = _type_error(src, "nargs2.dg", "f", (np.zeros(3, F32),))
    line, _, text = _line_col(src, "return g(x)")
    col = _check_diagnostic(msg, "nargs2.dg", line)
    _check_caret(msg, text, col)


def test_wrong_number_of_arguments_from_python():
    m = dg.loads("def f(x, y):\n    return x + y\n", mode=FRONT_END_MODE, filename="py_nargs.dg")
    with made_no_code(), pytest.raises(dg.DgTypeError) as ei:
        m.f(np.zeros(3, F32), np.zeros(3, F32), np.zeros(3, F32))
    assert "f" in str(ei.value)
    with made_no_code(), pytest.raises(dg.DgTypeError):
        m.f(np.zeros(3, F32))
    with made_no_code(), pytest.raises(dg.DgTypeError):
        m.f(np.zeros(3, F32), z=np.zeros(3, F32))


def test_result_annotation_mismatch():
    src = "def f(x: f32[3]) -> f32[4]:\n    return x * 2.0\n"
    msg = _type_error(src, "ret.dg", "f", (np.zeros(3, F32),))
    mo = re.match(r"^ret\.dg:(\d+):\d+: error: ", msg)
    assert mo and mo.group(1) in ("1", "2"), msg


def test_syntax_error():
    src = "def f(x):\n    y = x +\n    return y\n"
    with made_no_code(), pytest.raises(dg.DgSyntaxError) as ei:
        m = dg.loads(src, mode=FRONT_END_MODE, filename="syntax.dg")
        m.f(np.zeros(3, F32))
    _check_diagnostic(str(ei.value), "syntax.dg", 2)


# ---------------------------------------------------------------- runtime errors
@pytest.fixture
def em(mode):
    return load_prog("errors.dg", mode)


def _runtime_loc(needle, col_of=None):
    text = (PROGRAMS / "errors.dg").read_text()
    return _line_col(text, needle, col_of)


@pytest.mark.parametrize("i", [3, 10, -4])
def test_index_out_of_bounds(em, i):
    with pytest.raises(dg.DgRuntimeError) as ei:
        em.oob(np.zeros(3, F32), i)
    line, _, text = _runtime_loc("return y[i]")
    col = _check_diagnostic(str(ei.value), "errors.dg", line)
    _check_caret(str(ei.value), text, col)


def test_index_in_bounds_still_works(em):
    check(em.oob(np.array([1.0, 2.0, 3.0], F32), -1), F32(6.0))


def test_index_out_of_bounds_in_loop(em):
    x = np.array([1.0, 2.0, 3.0], F32)
    check(em.oob_loop(x, 3), F32(6.0))
    with pytest.raises(dg.DgRuntimeError) as ei:
        em.oob_loop(x, 4)
    line, _, text = _runtime_loc("s += x[i]")
    _check_diagnostic(str(ei.value), "errors.dg", line)


def test_update_out_of_bounds(em):
    x = np.array([1.0, 2.0, 3.0], F32)
    with pytest.raises(dg.DgRuntimeError) as ei:
        em.oob_update(x, 7)
    line, _, _ = _runtime_loc("x[i] = 0.0")
    _check_diagnostic(str(ei.value), "errors.dg", line)
    np.testing.assert_array_equal(x, [1.0, 2.0, 3.0])


def test_assert_in_loop(em):
    check(em.nested_assert(np.array([1.0, 2.0], F32)), F32(3.0))
    with pytest.raises(dg.DgRuntimeError) as ei:
        em.nested_assert(np.array([1.0, -2.0], F32))
    line, col, text = _runtime_loc("assert x[i] >= 0.0", "assert")
    _check_diagnostic(str(ei.value), "errors.dg", line, col)
    _check_caret(str(ei.value), text, col)
    assert "negative entry" in str(ei.value)
