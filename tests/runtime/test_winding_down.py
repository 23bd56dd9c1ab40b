"""After a failed check, compiled code winds down instead of hanging, and runaway recursion is a
located error instead of a crash (each case in a subprocess, so that a regression cannot take
the test run down with it)."""
import json
import subprocess
import sys

import pytest

PROGRAM = """
def depth(n: i64) -> i64:
    if n == 0:
        return 0
    return depth(n - 1) + 1

def spin(x: f32[N], i: i64) -> f32:
    s = 0.0
    while x[i] > 0.0:
        s = s + 1.0
    return s

def spin_after_call(x: f32[N], i: i64) -> f32:
    s = 0.0
    k = 0
    while s < 10.0:
        s = s + pick(x, i + k) * 0.0
        k = k + 1
    return s

def pick(x: f32[N], i: i64) -> f32:
    return x[i]

def spin_for(x: f32[N], i: i64) -> f32:
    s = 0.0
    for k in range(1000000000000):
        s = s + x[i + k]
    return s
"""

RUN = """
import json, sys
import numpy as np
import dg
m = dg.loads(sys.argv[1], mode=sys.argv[2], filename="w.dg")
args = json.loads(sys.argv[4])
fn = getattr(m, sys.argv[3])
if sys.argv[3] != "depth":
    args = [np.ones(3, np.float32)] + args
try:
    print(json.dumps({"value": float(fn(*args))}))
except dg.DgError as e:
    print(json.dumps({"error": type(e).__name__, "text": str(e)}))
"""


def in_a_process(code: str, *argv: str, timeout: int = 120) -> str:
    """What `python -c code *argv` prints; it must exit cleanly within `timeout` seconds."""
    r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def run(mode, name, args):
    return json.loads(in_a_process(RUN, PROGRAM, mode, name, json.dumps(args), timeout=240).strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["interp", "compiled"])
def test_runaway_recursion_is_a_located_error(mode):
    """Located at the function that could not be entered, the same in both modes."""
    out = run(mode, "depth", [-1])
    assert out["error"] == "DgRuntimeError" and "recursion too deep" in out["text"]
    assert out["text"].startswith("w.dg:2:1: error: recursion too deep"), out["text"]


def test_deep_recursion_within_the_stack_works():
    assert run("compiled", "depth", [20000]) == {"value": 20000.0}


@pytest.mark.parametrize("name", ["spin", "spin_after_call", "spin_for"])
def test_a_failed_check_ends_the_loops_it_would_keep_going(name):
    """A `for` loop too: no iteration starts after the failure (10**12 of them would take hours)."""
    out = run("compiled", name, [7])
    assert out["error"] == "DgRuntimeError" and "out of bounds" in out["text"] and "w.dg:" in out["text"]


def test_threads_calling_one_recursive_function():
    """Calls from several threads each get their own stack budget and failure state."""
    import threading

    import dg

    m = dg.loads(PROGRAM, mode="compiled", filename="w.dg")
    results, errors = [], []

    def work(n):
        try:
            for _ in range(20):
                results.append(int(m.depth(n)))
        except Exception as e:  # collected, so that the assertion below reports it
            errors.append(e)

    threads = [threading.Thread(target=work, args=(1000 + 7 * i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(set(results)) == [1000, 1007, 1014, 1021] and len(results) == 80
    with pytest.raises(dg.DgRuntimeError, match="recursion too deep"):
        m.depth(-1)
    assert int(m.depth(5)) == 5  # the failure did not stay behind


def test_a_thread_with_a_small_stack_gets_an_error_not_a_crash():
    code = ("import json, sys, threading\n"
            "import dg\n"
            "m = dg.loads(sys.argv[1], mode='compiled', filename='w.dg')\n"
            "out = {}\n"
            "def work():\n"
            "    try:\n"
            "        out['value'] = int(m.depth(10 ** 6))\n"
            "    except dg.DgError as e:\n"
            "        out['error'] = str(e)\n"
            "threading.stack_size(512 * 1024)\n"
            "t = threading.Thread(target=work)\n"
            "t.start(); t.join()\n"
            "print(json.dumps(out))\n")
    out = json.loads(in_a_process(code, PROGRAM, timeout=240).strip().splitlines()[-1])
    assert "recursion too deep" in out["error"] and "w.dg:" in out["error"]


EARLY_EXITS = """
def search(n: i64) -> i64:
    k = 0
    for i in range(n):
        k += 1
        if k > 5:
            break
    return k

def first_over(n: i64) -> i64:
    for i in range(3, n, 2):
        if i > 10:
            return i
    return -1

def first_negative(x: f64[N]) -> f64:
    s = 0.0
    for e in x:
        if e < 0.0:
            break
        s += e * e
    return s

def power_until(x: f64, n: i64) -> f64:
    s = x
    for i in range(n):
        s = s * x
        if i > 3:
            break
    return s
"""


@pytest.mark.parametrize("mode", ["interp", "compiled"])
def test_break_and_return_end_a_for_loop(mode):
    """A `for` left by `break` or `return` stops there: it ran the rest of its trip count with
    nothing to do (2**40 trips: hours), and a gradient's tape was sized for all of them (10**10
    iterations of f64: out of memory). In a process of its own, so that a regression fails the
    test instead of stalling the suite."""
    code = ("import sys, numpy as np, dg\n"
            "m = dg.loads(sys.argv[1], mode=sys.argv[2], filename='e.dg')\n"
            "x = np.array([1.0, 2.0, -1.0, 5.0])\n"
            "v, g = dg.value_and_grad(m.power_until)(1.01, 10 ** 10)\n"
            "print(m.search(2 ** 40), m.first_over(2 ** 40), m.first_negative(x), dg.grad(m.first_negative)(x).tolist(),\n"
            "      round(float(v), 6), round(float(g), 6))\n")
    assert in_a_process(code, EARLY_EXITS, mode).split() == ["6", "11", "5.0", "[2.0,", "4.0,", "0.0,", "0.0]", "1.06152", "6.30606"]


FOREVER = """
def same(x: f32) -> f32:
    return same(x)

def rows(x: f32[N]) -> f32[N]:
    return rows(x)

def grows(x: f64) -> f64:
    return grows(x + 1.0)
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["interp", "compiled"])
def test_a_recursion_with_no_way_out_is_a_located_error(mode):
    """`return f(x)` is a tail call, which LLVM turns into a jump: the stack never grew, so the
    guard never fired, and the loop spun forever. Calls stay calls (function-attributes)."""
    code = ("import sys, numpy as np, dg\n"
            "m = dg.loads(sys.argv[1], mode=sys.argv[2], filename='f.dg')\n"
            "for name, arg in (('same', 1.0), ('rows', np.ones(3, np.float32)), ('grows', 1.0)):\n"
            "    try:\n"
            "        getattr(m, name)(arg)\n"
            "    except dg.DgRuntimeError as e:\n"
            "        print(str(e).splitlines()[0])\n")
    lines = in_a_process(code, FOREVER, mode).splitlines()
    assert [line.split(": error: ")[0] for line in lines] == ["f.dg:2:1", "f.dg:5:1", "f.dg:8:1"], lines
    assert all("recursion too deep" in line for line in lines), lines
