"""What a failure at run time reports (LANGUAGE.md section 6), the same in both modes: the
values involved (the index and the size, the two sizes), and the dg call stack under the
message, `called from FILE:LINE:COL` with the calling line, innermost first."""
import re

import numpy as np
import pytest

import dg

from .util import load_src

SRC = """\
def pick(x: f64[N], i: i64) -> f64:
    return x[i]

def total(x: f64[N], i: i64) -> f64:
    s = 0.0
    for k in range(3):
        s = s + pick(x, i + k)
    return s

def down(x: f64[N], n: i64) -> f64:
    if n == 0:
        return x[n + 10]
    return down(x, n - 1)

def top(x: f64[N], n: i64) -> f64:
    a = total(x, 0)
    return a + down(x, n)

def add(x: f64[N], y: f64[M]) -> f64[N]:
    return x + y

def mm(a: f64[N, M], b: f64[K, L]) -> f64[N, L]:
    return a @ b

def rs(a: f64[N]) -> f64[2, 3]:
    return reshape(a, (2, 3))

def gather(x: f64[N], idx: i64[K]) -> f64[K]:
    return take(x, idx)

def stretch(x: f64[N], rows: i64) -> f64[R, N2]:
    return broadcast_to(x, (rows, 3))
"""
FILE = "reports.dg"


@pytest.fixture(scope="module", params=["interp", "compiled"])
def m(request):
    return load_src(SRC, request.param, FILE)


def _raise(fn, *args) -> str:
    with pytest.raises(dg.DgRuntimeError) as ei:
        fn(*args)
    return str(ei.value)


def _called_from(msg: str) -> list:
    return [(int(a), int(b)) for a, b in re.findall(rf"called from .*{FILE}:(\d+):(\d+)", msg)]


def test_an_index_out_of_bounds_names_the_index_and_the_size(m):
    msg = _raise(m.pick, np.ones(3), 7)
    assert msg.startswith(f"{FILE}:2:12: error: IndexError: index 7 is out of bounds for axis 0 with size 3"), msg
    assert "index -5 is out of bounds for axis 0 with size 4" in _raise(m.pick, np.ones(4), -5)
    assert "take: index 9 is out of bounds for axis 0 with size 3" in _raise(m.gather, np.ones(3), np.array([0, 9, 1]))


def test_size_mismatches_name_both_sizes(m):
    assert "sizes 3 and 4 differ at run time" in _raise(m.add, np.ones(3), np.ones(4))
    msg = _raise(m.rs, np.ones(5))
    assert "array of size 5" in msg, msg
    msg = _raise(m.mm, np.ones((2, 3)), np.ones((4, 2)))
    assert "3" in msg and "4" in msg and "matmul" in msg, msg


def test_a_compiled_size_check_names_its_sizes():
    """Compiled code reports the sizes its checks compared (the interpreter has NumPy's message)."""
    m = load_src(SRC, "compiled", FILE)
    assert "matmul: inner sizes 3 and 4 differ at run time" in _raise(m.mm, np.ones((2, 3)), np.ones((4, 2)))
    assert "cannot reshape array of size 5 into a shape of 6 elements" in _raise(m.rs, np.ones(5))
    msg = _raise(m.stretch, np.ones(4), 2)
    assert "size 4 of axis 0 is neither 1 nor the shape's 3" in msg, msg


def test_the_call_stack_names_each_calling_line(m):
    msg = _raise(m.total, np.ones(3), 1)
    assert _called_from(msg) == [(7, 17)], msg
    assert "      s = s + pick(x, i + k)" in msg
    msg = _raise(m.top, np.ones(5), 3)
    assert msg.startswith(f"{FILE}:12:16: error: IndexError: index 10 is out of bounds"), msg
    assert _called_from(msg) == [(13, 12), (17, 16)], msg
    assert "called from" in msg and f"{FILE}:13:12 (3 times)" in msg, msg


def test_a_call_that_ran_before_the_failure_is_not_on_the_stack(m):
    """`total` returned before `down` failed: only `down`'s calls are on the stack."""
    msg = _raise(m.top, np.ones(5), 0)
    assert _called_from(msg) == [(17, 16)], msg


def test_a_deep_recursion_keeps_the_innermost_and_the_outermost_calls(m):
    msg = _raise(m.top, np.ones(5), 200)
    lines = [(int(a), int(b)) for a, b in re.findall(rf"called from .*{FILE}:(\d+):(\d+)", msg)]
    assert lines[0] == (13, 12) and lines[-1] == (17, 16), msg
    counts = [int(c) for c in re.findall(r"\((\d+) times\)", msg)]
    missing = [int(c) for c in re.findall(r"\.\.\. (\d+) more calls", msg)]
    assert sum(counts) + sum(missing) == 200, msg  # every call of `down` is counted


@pytest.mark.parametrize("mode", ["interp", "compiled"])
def test_a_recursion_reads_as_one_line_with_its_count_in_both_modes(mode):
    """The interpreter keeps every call; compiled code keeps the innermost and outermost of a
    deep stack, and counts those between two calls of one site as that site's."""
    msg = _raise(load_src(SRC, mode, FILE).top, np.ones(5), 200)
    assert f"{FILE}:13:12 (200 times)" in msg and "more calls" not in msg, msg
    assert _called_from(msg) == [(13, 12), (17, 16)], msg


def test_calls_not_known_between_two_sites_are_counted_apart():
    from dg.core.errors import call_stack_lines
    from dg.core.locations import Loc

    a, b = Loc("a.dg", 1, 1), Loc("b.dg", 2, 1)
    assert call_stack_lines([a, a, 5, a, b]) == ["  called from a.dg:1:1 (8 times)", "  called from b.dg:2:1"]
    assert call_stack_lines([a, 5, b]) == ["  called from a.dg:1:1", "  ... 5 more calls", "  called from b.dg:2:1"]


STOPS = """\
def show(x: f64[N], i: i64) -> f64:
    print("visit", i)
    return x[i]

def walk(x: f64[N], n: i64) -> f64:
    s = 0.0
    for k in range(n):
        s = s + show(x, k)
        print("after", k)
    print("done")
    return s

def down(x: f64[N], n: i64) -> f64:
    print("down", n)
    if n == 0:
        return show(x, 99)
    r = down(x, n - 1)
    print("up", n)
    return r
"""


@pytest.mark.parametrize("mode", ["interp", "compiled"])
def test_nothing_runs_after_the_failing_op(mode, capsys):
    """In a loop, in a call and in a recursion: the prints before the failure, none after."""
    m = load_src(STOPS, mode, "stops.dg")
    with pytest.raises(dg.DgRuntimeError, match="index 3 is out of bounds"):
        m.walk(np.ones(3), 10)
    assert capsys.readouterr().out.split("\n") == [
        "visit 0", "after 0", "visit 1", "after 1", "visit 2", "after 2", "visit 3", ""]
    with pytest.raises(dg.DgRuntimeError, match="index 99 is out of bounds"):
        m.down(np.ones(3), 2)
    assert capsys.readouterr().out.split("\n") == ["down 2", "down 1", "down 0", "visit 99", ""]
