"""Programs checked by hand in every mode: deep nesting, print and assert inside loops, default arguments.

Each is compared with a plain Python / NumPy re-implementation, or must fail with a located
`dg.DgError` (`x.dg:LINE:COL: error: ...`).
"""

import numpy as np
import pytest

import dg

from .util import F, FRONT_END_MODE, assert_located, assert_same, dg_mode, f32, load, made_no_code


def test_deeply_nested_conditional_expressions(mode):
    m = load("""
    def nested_ifexp(x):
        return (1 if x < -2 else (2 if x < 0 else (3 if x < 2 else (4 if x < 4 else 5))))

    def nested_t(x, a, b):
        return a if x > 0 else (b if x < -1 else (a + b if x > -0.5 else a - b))
    """, mode)
    for v, w in [(-3, 1), (-1, 2), (1, 3), (3, 4), (5, 5), (-2, 2), (4, 5)]:
        assert_same(m.nested_ifexp(np.float32(v)), np.int64(w))
    a = f32(1, 2, 3)
    b = a * 2
    for v in (1.0, -2.0, -0.2, -0.7):
        want = a if v > 0 else (b if v < -1 else (a + b if v > -0.5 else a - b))
        assert_same(m.nested_t(np.float32(v), a, b), want)


def test_print_inside_loops(mode, capsys):
    m = load("""
    def printloop(n):
        s = 0
        for i in range(n):
            if i % 2 == 0:
                print("even", i)
                continue
            s = s + i
            print("s", s)
            if s > 5:
                break
        return s
    """, mode)
    capsys.readouterr()
    r = m.printloop(7)
    want_lines, s = [], 0
    for i in range(7):
        if i % 2 == 0:
            want_lines.append(f"even {i}")
            continue
        s += i
        want_lines.append(f"s {s}")
        if s > 5:
            break
    assert_same(r, np.int64(s))
    assert capsys.readouterr().out.split("\n")[:-1] == want_lines


def test_assert_inside_loops(mode):
    m = load("""
    def assertloop(x):
        s = 0.0
        for i in range(x.shape[0]):
            assert x[i] >= 0.0, "negative entry"
            s = s + sqrt(x[i])
        return s
    """, mode)
    assert_same(m.assertloop(f32(1, 4, 9)), np.float32(6))
    with pytest.raises(dg.DgRuntimeError) as e:
        m.assertloop(f32(1, -4, 9))
    assert_located(e.value, 4)
    assert "negative entry" in str(e.value)


def test_default_arguments_and_loops(mode):
    m = load("""
    def dflt(x, k=2, s=0.5):
        acc = x
        for i in range(k):
            acc = acc * s
        return acc

    def use(x):
        return dflt(x), dflt(x, 3), dflt(x, s=2.0), dflt(x, k=1, s=3.0)
    """, mode)
    x = f32(1, 2, 3)
    assert_same(m.use(x), (x * 0.25, x * 0.125, x * 4, x * 3))
    assert_same(m.dflt(x=x, s=3.0), x * 9)


def test_while_condition_calls_a_function_with_a_loop(mode):
    m = load("""
    def count_pos(v):
        c = 0
        for e in v:
            if e > 0.0:
                c += 1
        return c

    def grow_until(x, k):
        i = 0
        while count_pos(x[0:i]) < k and i < x.shape[0]:
            i += 1
        return i
    """, mode)
    def ref(x, k):
        i = 0
        while (x[:i] > 0).sum() < k and i < len(x):
            i += 1
        return i

    for x, k in [(f32(-1, 2, -3, 4, 5), 2), (f32(-1, 2), 5), (f32(1), 0)]:
        assert_same(m.grow_until(x, k), np.int64(ref(x, k)))


def _nest_src(d):
    lines, ind = ["def f(n):", "    s = 0"], "    "
    for k in range(d):
        lines.append(ind + f"for i{k} in range(n):")
        ind += "    "
        lines += [ind + f"if i{k} == 1:", ind + "    continue"]
    lines += [ind + "s = s + 1", "    return s"]
    return "\n".join(lines) + "\n"


def test_deeply_nested_loops_with_continue(mode):
    m = dg.loads(_nest_src(5), mode=dg_mode(mode), filename=F)
    assert_same(m.f(3), np.int64(2 ** 5))
    assert_same(m.f(1), np.int64(1))
    assert_same(m.f(0), np.int64(0))


def test_deeply_nested_ifs(mode):
    lines, ind = ["def f(x):", "    y = x"], "    "
    for k in range(40):
        lines.append(ind + f"if x > {k}:")
        ind += "    "
        lines.append(ind + f"y = y + {k}")
    lines.append("    return y")
    m = dg.loads("\n".join(lines) + "\n", mode=dg_mode(mode), filename=F)
    for x in (-1, 0, 10, 100):
        assert_same(m.f(x), np.int64(x + sum(range(min(max(x, 0), 40)))))


NESTING = r'''
import sys
import numpy as np
import dg

def nest(depth, head, tail=(), leaf="s = s * 1.5 + 1.0"):
    """`depth` loops, each opened by head(i) (lines, the last opening the next level)."""
    lines, pad = ["def f(x: f32) -> f32:", "    s = x"], "    "
    for i in range(depth):
        for line in head(i):
            lines.append(pad + line)
        pad += "    "
    return "\n".join(lines + [pad + leaf, "    return s"]) + "\n"

def single(i):  # two trips at the three outermost levels, one below
    return [f"for i{i} in range({2 if i < 3 else 1}):"]

def broken(i):  # each left by `break` on its second trip
    return [f"for i{i} in range(3):", f"    if i{i} > 0:", "        break"]

mode = sys.argv[1]
cases = [("for", single, 60, True), ("for", single, 30, True), ("break", broken, 30, False), ("break", broken, 8, True)]
out = []
for name, head, depth, grad in cases:
    src = nest(depth, head)
    m = dg.loads(src, mode=mode, filename=f"{name}{depth}.dg")
    value = float(m.f(1.0))
    got = [name, depth, round(value, 3)]
    if grad:
        got.append(round(float(dg.grad(m.f)(1.0)), 3))
    out.append(got)
print(out)
'''


@pytest.mark.slow
@pytest.mark.parametrize("run_mode", ["interp", "compiled"])
def test_dozens_of_nested_loops_compile_in_seconds(run_mode):
    """The emitter probed each loop body two or three times, and each probe probed the loops
    inside again: 10 nested loops took 4 s, 12 over 40, 60 used gigabytes. Probes now share their
    answers; a loop inside a probe is not written out; the interpreter gives loops nested deeper
    than Python compiles (20) functions of their own. A process of its own, under a timeout that
    only guards against a hang (the number of probes is counted in the test below, not timed)."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", NESTING, run_mode], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    got = eval(r.stdout.strip().splitlines()[-1])
    # s -> 1.5 s + 1 eight times (2 * 2 * 2 trips) from 1: 1.5**8 + 2 (1.5**8 - 1); its derivative 1.5**8.
    value, slope = round(1.5 ** 8 + 2 * (1.5 ** 8 - 1), 3), round(1.5 ** 8, 3)
    assert got == [["for", 60, value, slope], ["for", 30, value, slope], ["break", 30, 2.5], ["break", 8, 2.5, 1.5]]


def test_the_emitter_probes_nested_loops_a_number_of_times_linear_in_their_depth(monkeypatch):
    """How the slow compile of deep nests was ended, counted rather than timed: probes of a loop
    inside a probe are remembered, so that the emitter's loop probes (ControlFlow.loop_carried)
    for a nest of depth d number 5 d - 6, for its value and for its gradient (they were 3**d)."""
    from dg.dsl.emit.control import ControlFlow

    calls = []
    probe = ControlFlow.loop_carried

    def counted(self, *args, **kwargs):
        calls.append(1)
        return probe(self, *args, **kwargs)

    monkeypatch.setattr(ControlFlow, "loop_carried", counted)
    heads = {"for": lambda i: [f"for i{i} in range({2 if i < 3 else 1}):"],
             "break": lambda i: [f"for i{i} in range(3):", f"    if i{i} > 0:", "        break"]}
    for name, head in heads.items():
        for depth in (4, 8, 12):
            lines, pad = ["def f(x: f32) -> f32:", "    s = x"], "    "
            for i in range(depth):
                lines += [pad + line for line in head(i)]
                pad += "    "
            m = dg.loads("\n".join(lines + [pad + "s = s * 1.5 + 1.0", "    return s"]) + "\n", mode="interp",
                         filename=f"probes_{name}{depth}.dg")
            calls.clear()
            m.f(np.float32(1.0))
            assert len(calls) == 5 * depth - 6, (name, depth, len(calls))
            calls.clear()
            dg.grad(m.f)(np.float32(1.0))
            assert len(calls) == 5 * depth - 6, (name, depth, "gradient", len(calls))


def test_a_function_first_called_inside_a_loop_reports_its_errors():
    """Its emission ran while the loop body was probed, with errors silenced: the undefined name
    was dropped and the call returned its argument."""
    m = load("""
    def g(x: f32) -> f32:
        return x + nope

    def f(x: f32) -> f32:
        s = x
        for i in range(3):
            s = g(s)
        return s
    """, FRONT_END_MODE)
    with made_no_code(), pytest.raises(dg.DgTypeError) as e:
        m.f(1.0)
    assert_located(e.value, 2)
    assert "'nope' is not defined" in str(e.value)
