"""Adversarial end-to-end tests of dg's control flow and typing (interp mode).

Every program is run through `dg.loads(..., mode="interp")` and compared with
a plain Python / NumPy re-implementation, or checked to fail with a located
`dg.DgError` (`x.dg:LINE:COL: error: ...`). Tests that expose a dg bug are
kept as plain failing tests (no xfail), so that fixing the bug turns them green.
"""
import re
import signal
import textwrap
from contextlib import contextmanager

import numpy as np
import pytest

import dg

F = "x.dg"


def load(src: str):
    return dg.loads(textwrap.dedent(src).lstrip("\n"), mode="interp", filename=F)


def f32(*xs):
    return np.array(xs, dtype=np.float32)


def assert_same(got, want, rtol=1e-5, atol=1e-6):
    """Structural comparison: tuples element-wise, arrays by value and shape."""
    if isinstance(want, tuple):
        assert isinstance(got, tuple), f"expected a tuple, got {got!r}"
        assert len(got) == len(want), f"{got!r} vs {want!r}"
        for g, w in zip(got, want):
            assert_same(g, w, rtol, atol)
        return
    assert got is not None, "dg returned None"
    g, w = np.asarray(got), np.asarray(want)
    assert g.shape == w.shape, f"shape {g.shape} != {w.shape}: {g!r} vs {w!r}"
    if w.dtype == bool:
        np.testing.assert_array_equal(g, w)
    else:
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol)


def assert_located(exc, line, cls=dg.DgError):
    assert isinstance(exc, cls), f"{type(exc).__name__}: {exc}"
    msg = str(exc)
    assert re.match(rf"{re.escape(F)}:{line}:\d+: error:", msg), msg


class _Hung(BaseException):
    """Raised by the alarm; a BaseException so the interpreter does not wrap it."""


@contextmanager
def time_limit(seconds):
    def handler(*_):
        raise _Hung(f"did not finish within {seconds} s")

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def assert_located_type_error(call, match):
    """dg's documented restriction: a located DgTypeError whose message matches."""
    with pytest.raises(dg.DgTypeError) as e:
        call()
    assert re.match(rf"{re.escape(F)}:\d+:\d+: error:", str(e.value)), str(e.value)
    assert re.search(match, str(e.value)), str(e.value)


# =========================================================================
# break / continue / early return
# =========================================================================
NESTED = load("""
def nested(x, n):
    total = 0.0
    for i in range(n):
        if i % 2 == 1:
            continue
        for j in range(n):
            if j > i:
                break
            total = total + x[i] * x[j]
    return total

def whiles(x):
    n = x.shape[0]
    i = 0
    acc = 0.0
    while i < n:
        i += 1
        if x[i - 1] < 0.0:
            continue
        j = 0
        while True:
            if j >= i:
                break
            j += 1
            if j % 2 == 0:
                continue
            acc = acc + x[j - 1]
    return acc

def find(x, t):
    for i in range(x.shape[0]):
        j = 0
        while j < x.shape[1]:
            if x[i, j] == t:
                return i * 100 + j
            j += 1
    return -1

def early_nested(x):
    for i in range(3):
        for j in range(3):
            if i * 3 + j == x:
                return i * 10 + j
        assert x < 3 * i or x > 3 * i + 2, "ran on after an early return"
    return -1

def chain(x):
    acc = 0
    for i in range(x.shape[0]):
        if x[i] > 5:
            return acc
        elif x[i] < 0:
            acc = acc - 1
        elif x[i] == 0:
            continue
        else:
            acc = acc + x[i]
    return acc + 1000

def skip_nested_if(x):
    s = 0
    for i in range(x.shape[0]):
        if x[i] > 0:
            if x[i] > 10:
                continue
            s = s + 1
        s = s + 100
    return s
""")


def _nested(x, n):
    total = 0.0
    for i in range(n):
        if i % 2 == 1:
            continue
        for j in range(n):
            if j > i:
                break
            total += x[i] * x[j]
    return total


def _whiles(x):
    n, i, acc = len(x), 0, 0.0
    while i < n:
        i += 1
        if x[i - 1] < 0:
            continue
        j = 0
        while True:
            if j >= i:
                break
            j += 1
            if j % 2 == 0:
                continue
            acc += x[j - 1]
    return acc


@pytest.mark.parametrize("n", [0, 1, 2, 5, 6])
def test_break_inner_continue_outer(n):
    x = np.arange(1, 7, dtype=np.float32)
    assert_same(NESTED.nested(x, n), np.float32(_nested(x, n)))


@pytest.mark.parametrize("x", [f32(1, 2, 3, 4, 5), f32(-1, 2, -3, 4, 5, 6), f32(-1), f32()])
def test_nested_whiles_with_break_and_continue(x):
    assert_same(NESTED.whiles(x), np.float32(_whiles(x)))


def test_early_return_from_while_nested_in_for():
    a = np.arange(12).reshape(3, 4)
    for t in [0, 3, 5, 7, 11, 70, -1]:
        w = next((i * 100 + j for i in range(3) for j in range(4) if a[i, j] == t), -1)
        assert_same(NESTED.find(a, t), np.int64(w))


@pytest.mark.parametrize("t", [0, 1, 4, 5, 8, 100])
def test_early_return_in_inner_loop_skips_rest_of_outer_body(t):
    # the assert after the inner loop fails exactly when it runs after an early return
    want = next((i * 10 + j for i in range(3) for j in range(3) if i * 3 + j == t), -1)
    assert_same(NESTED.early_nested(t), np.int64(want))


def _chain(x):
    acc = 0
    for v in x:
        if v > 5:
            return acc
        elif v < 0:
            acc -= 1
        elif v == 0:
            continue
        else:
            acc += v
    return acc + 1000


@pytest.mark.parametrize("x", [[1, -2, 0, 3, 7, 1], [1, -2, 0, 3], [9], [], [0, 0, -1]])
def test_return_inside_if_elif_else_chain_in_loop(x):
    a = np.array(x, dtype=np.int64)
    assert_same(NESTED.chain(a), np.int64(_chain(x)))


def test_continue_in_nested_if_skips_enclosing_statements():
    x = np.array([1, 20, -3, 5, 11, 0])
    want = sum((0 if v > 10 else 101) if v > 0 else 100 for v in x)
    assert_same(NESTED.skip_nested_if(x), np.int64(want))


FALL = load("""
def fall(x):
    if x > 0:
        return x * 2

def first_pos(x):
    for i in range(x.shape[0]):
        if x[i] > 0.0:
            return i
""")


def test_fall_off_end_only_fails_on_that_path():
    assert_same(FALL.fall(3), np.int64(6))
    assert_same(FALL.fall(np.float32(2.5)), np.float32(5.0))
    for bad in (-3, np.float32(-1.0), 0):
        with pytest.raises(dg.DgRuntimeError) as e:
            FALL.fall(bad)
        assert str(e.value).startswith(f"{F}:"), str(e.value)
    assert_same(FALL.first_pos(f32(-1, -2, 3, 4)), np.int64(2))
    with pytest.raises(dg.DgRuntimeError):
        FALL.first_pos(f32(-1, -2))


def test_fall_off_end_after_static_zero_trip_loop():
    # x has static shape (0,): the loop is dropped at compile time, but falling off the
    # end must still be the same run-time error as for f32(-1, -2), not an internal name
    with pytest.raises(dg.DgRuntimeError) as e:
        FALL.first_pos(f32())
    assert "__ret" not in str(e.value), str(e.value)


WHILE_TRUE = load("""
def first_neg(x):
    i = 0
    while True:
        if x[i] < 0:
            break
        i += 1
    return i

def double_until(x):
    while True:
        if x > 10.0:
            return x
        x = x * 2.0

def stop_on_break(x):
    i = 0
    while x[i] > 0:
        i += 1
        if i == x.shape[0]:
            break
    return i
""")


def test_while_true_with_break_and_return():
    assert_same(WHILE_TRUE.first_neg(f32(1, 2, -3, 4)), np.int64(2))
    assert_same(WHILE_TRUE.double_until(np.float32(0.3)), np.float32(19.2))
    assert_same(WHILE_TRUE.double_until(np.float32(11.0)), np.float32(11.0))


def test_break_stops_before_the_condition_is_evaluated_again():
    # after `break`, x[i] with i == len(x) would be out of range
    assert_same(WHILE_TRUE.stop_on_break(f32(1, 2, 3)), np.int64(3))
    assert_same(WHILE_TRUE.stop_on_break(f32(1, -2, 3)), np.int64(1))


# =========================================================================
# definedness of variables
# =========================================================================
def test_variable_defined_on_some_paths_is_located_type_error():
    m = load("""
    def partial(x):
        if x > 0:
            y = x + 1
        return y
    """)
    for v in (3.0, -3.0):
        with pytest.raises(dg.DgTypeError) as e:
            m.partial(v)
        assert_located(e.value, 4)
        assert "'y'" in str(e.value)


def test_variable_defined_on_every_path_after_elif_chain():
    m = load("""
    def allpaths(x):
        if x > 0:
            y = x + 1
        elif x < -5:
            y = x * 2
        else:
            y = x - 1
        return y
    """)
    for v in (3.0, -7.0, -1.0, 0.0):
        want = v + 1 if v > 0 else (v * 2 if v < -5 else v - 1)
        assert_same(m.allpaths(v), np.float32(want))


def test_variable_only_defined_inside_loop():
    m = load("""
    def local_accum(x, n):
        for i in range(n):
            if i == 0:
                t = x
            else:
                t = t + x
        return t
    """)
    x = f32(1, 2, 3)
    assert_located_type_error(lambda: m.local_accum(x, 3), "'t' is only defined inside the loop")


def test_loop_variable_after_the_loop_keeps_python_semantics():
    m = load("""
    def last(n):
        i = 100
        for i in range(n):
            pass
        return i
    """)
    assert_same(m.last(5), np.int64(4))
    assert_same(m.last(0), np.int64(100))


def test_reassigning_the_loop_variable_does_not_change_iteration():
    m = load("""
    def f(x, n):
        s = x
        for i in range(n):
            i = i * 2
            s = s + f32(i)
        return s
    """)
    x = f32(1, 2, 3)
    assert_same(m.f(x, 3), x + 6)


# =========================================================================
# loop-carried values
# =========================================================================
GROW = load("""
def grow(n):
    v = zeros([0])
    i = 0
    while i < n:
        v = concat([v, ones([1]) * f32(i)], 0)
        i += 1
    return v

def runs(x):
    v = x[0:1]
    for i in range(1, x.shape[0]):
        if x[i] > v[-1]:
            v = concat([v, x[i:i+1]], 0)
    return v

def dbl(n):
    v = ones([1])
    for i in range(n):
        v = concat([v, v * 2.0], 0)
    return v

def tup(n):
    s = (0, 1)
    for i in range(n):
        a, b = s
        s = (b, a + b)
    return s

def tupw(x):
    p = (x, 0)
    while p[1] < 5:
        p = (p[0] * 2.0, p[1] + 1)
    return p

def tupgrow(n):
    p = (zeros([0]), 0)
    while p[1] < n:
        p = (concat([p[0], full([1], f32(p[1]))], 0), p[1] + 1)
    return p

def halfs(n):
    s = 1
    for i in range(n):
        s = s * 0.5
    return s

def found(x, t):
    found = False
    for i in range(x.shape[0]):
        if x[i] == t:
            found = True
    return found
""")


@pytest.mark.parametrize("n", [0, 1, 5, 17])
def test_concat_grows_vector_in_while(n):
    assert_same(GROW.grow(n), np.arange(n, dtype=np.float32))


def test_concat_grows_vector_conditionally_in_for():
    for x in (f32(1, 3, 2, 5, 4, 6), f32(5, 4, 3), f32(1)):
        want = [x[0]]
        for v in x[1:]:
            if v > want[-1]:
                want.append(v)
        assert_same(GROW.runs(x), np.array(want, np.float32))


def test_doubling_shape_in_loop():
    want = np.ones(1, np.float32)
    for n in range(5):
        assert_same(GROW.dbl(n), want)
        want = np.concatenate([want, want * 2])


def test_loop_carried_tuples():
    a, b = 0, 1
    for n in range(12):
        assert_same(GROW.tup(n), (np.int64(a), np.int64(b)))
        a, b = b, a + b
    assert_same(GROW.tupw(1.5), (np.float32(48.0), np.int64(5)))
    assert_same(GROW.tupgrow(4), (np.arange(4, dtype=np.float32), np.int64(4)))
    assert_same(GROW.tupgrow(0), (np.zeros(0, np.float32), np.int64(0)))


def test_weak_int_carried_becomes_float():
    assert_same(GROW.halfs(3), np.float32(0.125))
    assert_same(GROW.halfs(0), np.float32(1.0))


def test_bool_flag_carried():
    assert_same(GROW.found(f32(1, 2, 3), 2.0), np.bool_(True))
    assert_same(GROW.found(f32(1, 2, 3), 5.0), np.bool_(False))


def test_loop_carried_rank_change_by_broadcasting():
    # Python/NumPy: v goes from a scalar to a vector on the first iteration.
    m = load("""
    def forloop(x, n):
        v = 0.0
        for i in range(n):
            v = v + x
        return v

    def whileloop(x, n):
        v = 0.0
        i = 0
        while i < n:
            v = v + x
            i += 1
        return v
    """)
    x = f32(1, 2, 3)
    assert_located_type_error(lambda: m.forloop(x, 3), "'v' changes rank inside the loop")
    assert_located_type_error(lambda: m.whileloop(x, 3), "'v' changes rank inside the loop")


def test_loop_carried_rank_change_does_not_hang():
    m = load("""
    def hang(n):
        v = 0.0
        while sum(v) < 10.0:
            v = v + ones([2])
        return v
    """)
    with time_limit(3):
        assert_located_type_error(lambda: m.hang(3), "'v' changes rank inside the loop")


def test_loop_carried_list_display():
    m = load("""
    def listcarry(n):
        v = [1.0, 2.0]
        for i in range(n):
            v = v * 2.0
        return v

    def listwhile(n):
        v = [0.0, 1.0]
        while v[0] < f32(n):
            v = v + 1.0
        return v
    """)
    assert_same(m.listcarry(3), f32(8, 16))
    with time_limit(3):
        assert_same(m.listwhile(4), f32(4, 5))


def test_list_display_rebound_in_branch():
    m = load("""
    def lcif(x, c):
        v = [1.0, 2.0]
        if c > 0:
            v = v * 2.0
        return v
    """)
    assert_same(m.lcif(1.0, 1), f32(2, 4))
    assert_same(m.lcif(1.0, 0), f32(1, 2))


def test_loop_carried_tuple_changes_length():
    m = load("""
    def tuplen(x, n):
        p = (x, 1)
        for i in range(n):
            p = (x, 1, 2)
        return p
    """)
    x = f32(1, 2)
    assert_located_type_error(lambda: m.tuplen(x, 3), "'p' changes its structure inside the loop")


def test_nested_tuples_and_branch_dependent_shapes_carried():
    m = load("""
    def nestedtup(x, n):
        p = ((x, 1), 2)
        for i in range(n):
            p = ((p[0][0] * 2.0, p[0][1] + 1), p[1] * 3)
        return p

    def branchshape(x, n):
        v = x
        i = 0
        while i < n:
            if v[0] > 0.0:
                v = v[1:]
            else:
                v = concat([v, v[0:1] + 10.0], 0)
            i += 1
        return v, v.shape[0]

    def static_range_break(x):
        s = 0.0
        for i in range(10):
            if i >= x.shape[0] or x[i] < 0.0:
                break
            s = s + x[i]
        return s

    def last_in_loop(x, n):
        for i in range(n):
            last = x[i]
            if last > 2.0:
                break
        return last
    """)
    x = f32(1, 2, 3)
    assert_same(m.nestedtup(x, 3), ((x * 8, np.int64(4)), np.int64(54)))
    v = f32(1, -2, 3)
    for _ in range(4):
        v = v[1:] if v[0] > 0 else np.concatenate([v, v[:1] + 10])
    assert_same(m.branchshape(f32(1, -2, 3), 4), (v, np.int64(len(v))))
    assert_same(m.static_range_break(x), np.float32(6))
    assert_same(m.static_range_break(f32(1, 2, -1, 4)), np.float32(3))
    assert_located_type_error(lambda: m.last_in_loop(x, 3), "only defined inside the loop")


def _shift_register_src(k):
    names = "abcdefghjkmpqrstuvw"[:k]
    lines = ["def f(x, n):"] + [f"    {c} = x[0:1]" for c in names]
    lines.append("    for i in range(n):")
    lines += [f"        {names[j]} = {names[j - 1]}" for j in range(k - 1, 0, -1)]
    lines.append("        a = concat([a, x[0:1] + f32(i + 1)], 0)")
    lines.append(f"    return {', '.join(c + '.shape[0]' for c in names)}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("k", [3, 6, 7, 9])
def test_long_chain_of_loop_carried_shape_changes(k):
    # a grows every iteration; b gets a's old value, c gets b's, ...: sizes n+1, n, n-1, ...
    m = dg.loads(_shift_register_src(k), mode="interp", filename=F)
    n = 20
    want = tuple(np.int64(max(n + 1 - j, 1)) for j in range(k))
    assert_same(m.f(f32(5.0), n), want)


# =========================================================================
# short-circuit, zero-trip loops, ranges
# =========================================================================
GUARDS = load("""
def sc(x, n):
    i = 0
    while i < n and x[i] > 0:
        i += 1
    return i

def or_guard(x, n):
    i = 0
    s = 0.0
    while True:
        if i >= n or x[i] < 0.0:
            break
        s = s + x[i]
        i += 1
    return s, i

def not_guard(x):
    i = 0
    n = x.shape[0]
    while not (i >= n or x[i] < 0.0):
        i += 1
    return i

def ifexp_guard(x, i):
    return x[i] if i < x.shape[0] else -1.0
""")


@pytest.mark.parametrize("x", [[1, 2, 3], [1, -2, 3], [-1], [], [5, 5, 5, 5, 0]])
def test_short_circuit_and_guards_the_index(x):
    a = np.array(x, np.float32)
    i = 0
    while i < len(a) and a[i] > 0:
        i += 1
    assert_same(GUARDS.sc(a, len(a)), np.int64(i))
    s = 0.0
    j = 0
    while not (j >= len(a) or a[j] < 0):
        s += a[j]
        j += 1
    assert_same(GUARDS.or_guard(a, len(a)), (np.float32(s), np.int64(j)))
    assert_same(GUARDS.not_guard(a), np.int64(j))


def test_conditional_expression_guards_the_index():
    x = f32(1, 2, 3)
    assert_same(GUARDS.ifexp_guard(x, 1), np.float32(2))
    assert_same(GUARDS.ifexp_guard(x, 3), np.float32(-1))
    assert_same(GUARDS.ifexp_guard(x, 99), np.float32(-1))


def test_zero_trip_loops_leave_values_unchanged():
    m = load("""
    def zero_trip(x, n):
        y = x
        for i in range(0):
            y = y + 1.0
        z = x
        while z > 100.0:
            z = z - 1.0
        k = x
        for j in range(5, 2):
            k = k * 2.0
        w = x
        for j in range(n):
            w = w * 3.0
        r = x
        for row in zeros([0, 2]):
            r = r + sum(row)
        return y, z, k, w, r
    """)
    v = np.float32(1.5)
    assert_same(m.zero_trip(v, 0), (v, v, v, v, v))
    assert_same(m.zero_trip(v, -4), (v, v, v, v, v))
    assert_same(m.zero_trip(v, 2), (v, v, v, v * 9, v))


RANGES = load("""
def horner(lo, hi):
    acc = 0
    for i in range(hi, lo, -1):
        acc = acc * 3 + i
    return acc

def stepped(a, b, s):
    acc = 0
    cnt = 0
    for i in range(a, b, s):
        acc = acc + i
        cnt += 1
    return acc, cnt

def rev(x):
    out = x[0:0]
    for i in range(x.shape[0] - 1, -1, -1):
        out = concat([out, x[i:i+1]], 0)
    return out

def const_neg():
    acc = 0
    for i in range(10, -10, -7):
        acc = acc * 10 + i
    return acc
""")


@pytest.mark.parametrize("a,b,s", [(10, -3, -3), (0, 10, 3), (5, 5, -1), (-1, -10, -4), (3, 10, -1),
                                   (0, 250, 100), (7, 0, -100), (-5, 5, 1), (2, -2, -1)])
def test_range_with_data_dependent_bounds_and_steps(a, b, s):
    r = range(a, b, s)
    assert_same(RANGES.stepped(a, b, s), (np.int64(sum(r)), np.int64(len(r))))


def test_range_negative_step_order_matters():
    for lo, hi in [(-2, 4), (3, 3), (0, 1), (5, 2)]:
        acc = 0
        for i in range(hi, lo, -1):
            acc = acc * 3 + i
        assert_same(RANGES.horner(lo, hi), np.int64(acc))
    acc = 0
    for i in range(10, -10, -7):
        acc = acc * 10 + i
    assert_same(RANGES.const_neg(), np.int64(acc))
    assert_same(RANGES.rev(f32(1, 2, 3, 4)), f32(4, 3, 2, 1))
    assert_same(RANGES.rev(f32()), f32())


def test_range_with_zero_step_at_run_time_is_located_error():
    with pytest.raises(dg.DgError) as e:
        RANGES.stepped(0, 5, 0)
    assert_located(e.value, 10)


# =========================================================================
# recursion
# =========================================================================
REC_ANN = load("""
def depth(n: i64) -> i64:
    if n == 0:
        return 0
    return depth(n - 1) + 1

def is_even(n: i64) -> bool:
    if n == 0:
        return True
    return is_odd(n - 1)

def is_odd(n: i64) -> bool:
    if n == 0:
        return False
    return is_even(n - 1)

def fib2(n: i64) -> (i64, i64):
    if n == 0:
        return 0, 1
    a, b = fib2(n - 1)
    return b, a + b

def sumvec(x: f32[?], i: i64) -> f32:
    if i >= x.shape[0]:
        return 0.0
    return x[i] + sumvec(x, i + 1)

def prefix(x: f32[?], n: i64) -> f32[?]:
    if n == 0:
        return x[0:0]
    return concat([prefix(x, n - 1), x[n-1:n]], 0)

def inloop(n: i64) -> i64:
    s = 0
    for i in range(n):
        s = s + inloop(i)
    return s + 1
""")


def test_deep_recursion_annotated():
    assert_same(REC_ANN.depth(200), np.int64(200))
    assert_same(REC_ANN.depth(0), np.int64(0))


def test_too_deep_recursion_is_a_located_runtime_error():
    with pytest.raises(dg.DgRuntimeError) as e:
        REC_ANN.depth(100000)
    assert str(e.value).startswith(f"{F}:"), str(e.value)


def test_mutual_recursion_annotated():
    for n in (0, 1, 7, 10, 51):
        assert_same(REC_ANN.is_even(n), np.bool_(n % 2 == 0))
        assert_same(REC_ANN.is_odd(n), np.bool_(n % 2 == 1))


def test_recursion_with_tuple_returns_and_shapes():
    a, b = 0, 1
    for _ in range(10):
        a, b = b, a + b
    assert_same(REC_ANN.fib2(10), (np.int64(a), np.int64(b)))
    x = np.arange(5, dtype=np.float32)
    assert_same(REC_ANN.sumvec(x, 0), np.float32(10))
    assert_same(REC_ANN.sumvec(x, 7), np.float32(0))
    assert_same(REC_ANN.prefix(x, 3), x[:3])
    assert_same(REC_ANN.prefix(x, 0), x[:0])
    assert_same(REC_ANN.inloop(5), np.int64(32))


REC_PLAIN = load("""
def depth(n):
    if n == 0:
        return 0
    return depth(n - 1) + 1

def fact(n):
    if n <= 1:
        return 1.0
    return f32(n) * fact(n - 1)

def fib2(n):
    if n == 0:
        return 0, 1
    a, b = fib2(n - 1)
    return b, a + b

def expr_rec(n):
    return 0 if n == 0 else expr_rec(n - 1) + 2

def is_even(n):
    if n == 0:
        return True
    return is_odd(n - 1)

def is_odd(n):
    if n == 0:
        return False
    return is_even(n - 1)

def even_ann(n: i64) -> bool:
    if n == 0:
        return True
    return odd_plain(n - 1)

def odd_plain(n):
    if n == 0:
        return False
    return even_ann(n - 1)
""")




@pytest.mark.parametrize("name,arg,want", [
    ("depth", 200, np.int64(200)),
    ("depth", 3, np.int64(3)),
    ("fact", 6, np.float32(720)),
    ("fib2", 10, (np.int64(55), np.int64(89))),
    ("expr_rec", 4, np.int64(8)),
])
def test_recursion_without_annotations(name, arg, want):
    assert_same(getattr(REC_PLAIN, name)(arg), want)


@pytest.mark.parametrize("n", [0, 3, 10])
def test_mutual_recursion_without_annotations(n):
    assert_same(REC_PLAIN.is_even(n), np.bool_(n % 2 == 0))
    assert_same(REC_PLAIN.is_odd(n), np.bool_(n % 2 == 1))


@pytest.mark.parametrize("n", [0, 3, 6])
def test_mutual_recursion_entered_from_unannotated_side(n):
    assert_same(REC_PLAIN.even_ann(n), np.bool_(n % 2 == 0))
    assert_same(REC_PLAIN.odd_plain(n), np.bool_(n % 2 == 1))


# =========================================================================
# typing: weak literals, dtypes, arithmetic
# =========================================================================
WEAK = load("""
def scale(x, k):
    return x * k

def use_scale(x):
    return scale(x, 2), scale(x, 2.5), scale(3, 2), scale(x, x)

def h(x):
    return x * 2

def both(a, b):
    return h(a), h(b), h(3), h(2.5)
""")


def test_functions_called_with_weak_literals_and_tensors():
    x = f32(1, 2)
    assert_same(WEAK.use_scale(x), (x * 2, x * 2.5, np.int64(6), x * x))
    xi = np.array([1, 2])
    got = WEAK.use_scale(xi)
    assert_same(got, (xi * 2, f32(2.5, 5), np.int64(6), xi * xi))
    assert got[0].dtype == np.int64 and got[1].dtype == np.float32
    b = np.arange(9).reshape(3, 3)
    got = WEAK.both(x, b)
    assert_same(got, (x * 2, b * 2, np.int64(6), np.float32(5)))
    assert got[1].dtype == np.int64


def test_specialization_cache_per_dtype():
    results = [WEAK.h(3), WEAK.h(2.5), WEAK.h(np.int32(3)), WEAK.h(np.float64(2.5)),
               WEAK.h(np.array([1, 2], np.int32)), WEAK.h(True), WEAK.h(3)]
    dtypes = [np.asarray(r).dtype for r in results]
    assert dtypes == [np.int64, np.float32, np.int32, np.float64, np.int32, np.int64, np.int64]
    assert_same(results[0], np.int64(6))
    assert_same(results[3], np.float64(5.0))
    assert_same(results[5], np.int64(2))


def test_dtype_rebinding_is_located_type_error():
    m = load("""
    def branches(x, c):
        if c > 0:
            y = x
        else:
            y = i64(x)
        return y

    def in_loop(x, n):
        y = x
        for i in range(n):
            y = i64(y)
        return y

    def bool_branch(x):
        if x[0] > 0:
            y = x
        else:
            y = x > 1.0
        return y
    """)
    with pytest.raises(dg.DgTypeError) as e:
        m.branches(np.float32(1.5), 1)
    assert_located(e.value, 2)
    with pytest.raises(dg.DgTypeError) as e:
        m.in_loop(np.float32(1.5), 2)
    assert re.match(rf"{F}:(10|11):\d+: error:", str(e.value)), str(e.value)
    with pytest.raises(dg.DgTypeError) as e:
        m.bool_branch(f32(1, 2))
    assert_located(e.value, 15)


def test_augmented_assignment_matches_plain_binop():
    # `s += e` should mean `s = s + e` (tensors are values); NumPy would refuse an
    # unsafe in-place cast, Python would give 1.5; silently truncating to 1 is neither.
    m = load("""
    def aug(n):
        s = n
        s += 0.5
        return s

    def plain(n):
        s = n
        s = s + 0.5
        return s
    """)
    assert_same(m.plain(1), np.float32(1.5))
    assert_same(m.aug(1), np.float32(1.5))


def test_integer_floordiv_and_mod_follow_python_with_negatives():
    m = load("""
    def dm(a, b):
        return a // b, a % b

    def lit(a):
        return a // -3, a % -3, -7 // 2, -7 % 2, 7 // -2, 7 % -2, (-7) // (-2), -7 % -2
    """)
    a = np.array([7, -7, 7, -7, 0, -1, 1, -9])
    b = np.array([2, 2, -2, -2, 3, 5, -5, 3])
    assert_same(m.dm(a, b), (np.array([p // q for p, q in zip(a.tolist(), b.tolist())]),
                      np.array([p % q for p, q in zip(a.tolist(), b.tolist())])))
    for p, q in [(7, 2), (-7, 2), (7, -2), (-7, -2), (0, -3), (-1, 7)]:
        assert_same(m.dm(p, q), (np.int64(p // q), np.int64(p % q)))
    v = np.array([7, -7, 8, -8, 0])
    want = tuple([np.array([e // -3 for e in v.tolist()]), np.array([e % -3 for e in v.tolist()])]
                 + [np.int64(r) for r in (-7 // 2, -7 % 2, 7 // -2, 7 % -2, (-7) // (-2), -7 % -2)])
    assert_same(m.lit(v), want)
    af, bf = f32(7.5, -7.5, 7.5, -7.5), f32(2, 2, -2, -2)
    assert_same(m.dm(af, bf), (af // bf, af % bf))


def test_chained_comparisons_with_tensors():
    m = load("""
    def chain(x, lo, hi):
        return lo < x <= hi

    def chain3(x):
        return 0 < x < 1 < 2

    def gprint(x):
        print("g", x)
        return x

    def once(x):
        return 0 < gprint(x) < 10
    """)
    x = f32(0, 1, 1.5, 2, 3)
    assert_same(m.chain(x, 1.0, 2.0), (1.0 < x) & (x <= 2.0))
    y = f32(-1, 0.5, 1)
    assert_same(m.chain3(y), (0 < y) & (y < 1))
    for v in (0.5, 1.0, 2.0, 2.5):
        assert_same(m.chain(np.float32(v), 1.0, 2.0), np.bool_(1.0 < v <= 2.0))
    assert_same(m.once(3), np.bool_(True))


# =========================================================================
# functional updates, aliasing, iteration over rows
# =========================================================================
UPD = load("""
def setloop(n):
    y = zeros([n])
    for i in range(n):
        y[i] = f32(i * i)
    return y

def setrow(x):
    for i in range(x.shape[0]):
        x[i, :] = x[i, :] * f32(i)
        x[i, 0] += 100.0
    return x

def pairwise(x: f32[?, ?]):
    n = x.shape[0]
    d = zeros([n, n])
    for i in range(n):
        for j in range(i + 1, n):
            v = sum((x[i] - x[j]) ** 2.0)
            d[i, j] = v
            d[j, i] = v
    return d

def while_set(x: f32[?]):
    i = 0
    while i < x.shape[0] and x[i] >= 0.0:
        x[i] = -x[i]
        i += 1
    return x, i

def alias(x):
    y = x
    y[0] = 100.0
    return x, y

def mut(x):
    x[0] = 5.0
    return x

def noalias(x):
    y = mut(x)
    return x, y

def loopalias(x, n):
    prev = x
    cur = x
    for i in range(n):
        prev = cur
        cur[i] = cur[i] + 1.0
    return prev, cur
""")


def test_setitem_inside_loops():
    assert_same(UPD.setloop(5), np.arange(5, dtype=np.float32) ** 2)
    assert_same(UPD.setloop(0), f32())
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    keep = x.copy()
    want = x * np.arange(4, dtype=np.float32)[:, None]
    want[:, 0] += 100
    assert_same(UPD.setrow(x), want)
    np.testing.assert_array_equal(x, keep)  # the caller's array is untouched
    X = np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32)
    assert_same(UPD.pairwise(X), ((X[:, None] - X[None]) ** 2).sum(-1), rtol=1e-4, atol=1e-5)
    assert_same(UPD.pairwise(np.zeros((0, 2), np.float32)), np.zeros((0, 0), np.float32))
    assert_same(UPD.while_set(f32(1, 2, -3, 4)), (f32(-1, -2, -3, 4), np.int64(2)))
    assert_same(UPD.while_set(f32(1, 2)), (f32(-1, -2), np.int64(2)))


def test_updates_never_alias():
    x = f32(1, 2, 3)
    assert_same(UPD.alias(x), (x, f32(100, 2, 3)))
    assert_same(UPD.noalias(x), (x, f32(5, 2, 3)))
    assert_same(UPD.loopalias(x, 3), (f32(2, 3, 3), f32(2, 3, 4)))
    assert_same(x, f32(1, 2, 3))


ROWS = load("""
def rows(x: f32[?, 3]):
    acc = zeros([3])
    for row in x:
        acc = acc + row * row
    return acc

def rows_cat(x: f32[?, 3]):
    out = x[0:0, 0]
    for row in x:
        out = concat([out, row[-1:]], 0)
    return out

def brk_rows(x: f32[?, 3]):
    acc = zeros([3])
    for row in x:
        if sum(row) < 0.0:
            break
        acc = acc + row
    return acc

def rows_ret(x: f32[?, 3], t):
    k = 0
    for row in x:
        if sum(row) > t:
            return k, row
        k += 1
    return -1, zeros([3])
""")


@pytest.mark.parametrize("n", [0, 1, 4, 7])
def test_for_row_over_dynamic_first_dimension(n):
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3) - 5
    assert_same(ROWS.rows(x), (x * x).sum(0))
    assert_same(ROWS.rows_cat(x), x[:, -1])
    acc = np.zeros(3, np.float32)
    for r in x:
        if r.sum() < 0:
            break
        acc = acc + r
    assert_same(ROWS.brk_rows(x), acc)
    for t in (-100.0, 0.0, 20.0, 1e9):
        want = next(((np.int64(k), r) for k, r in enumerate(x) if r.sum() > t), (np.int64(-1), np.zeros(3, np.float32)))
        assert_same(ROWS.rows_ret(x, t), want)
    assert len(ROWS.rows._cache) == 1  # `?` dims are shape-generic


# =========================================================================
# names: builtins shadowed, parameters named like builtins
# =========================================================================
def test_shadowing_builtin_names():
    m = load("""
    def shadow(x):
        sum = 0.0
        for i in range(x.shape[0]):
            sum = sum + x[i]
        max = sum * 2.0
        return sum, max

    def param_builtin(sum, len, exp):
        return sum + len * exp

    def param_range(range, x):
        return range * x

    def shadow_range(n):
        range = 3
        return range + n

    def mean(x):
        return 42.0

    def use_mean(x):
        return mean(x)
    """)
    assert_same(m.shadow(f32(1, 2, 3)), (np.float32(6), np.float32(12)))
    assert_same(m.param_builtin(1.0, 2.0, 3.0), np.float32(7))
    assert_same(m.param_range(2, 5), np.int64(10))
    assert_same(m.shadow_range(5), np.int64(8))
    assert_same(m.use_mean(f32(1, 2)), np.float32(42))


def test_calling_a_shadowed_builtin_is_located_error():
    m = load("""
    def f(x):
        exp = 2.0
        return exp(x)
    """)
    with pytest.raises(dg.DgTypeError) as e:
        m.f(np.float32(1))
    assert_located(e.value, 3)


def test_user_names_that_look_like_rewrite_flags():
    # `__brk1` / `__t` are ordinary Python names; dg's break/return rewrite uses the same
    # spelling for its own flags and treats every `__` name as internal.
    m = load("""
    def user_brk(x, n):
        __brk1 = 0
        for i in range(n):
            if i == 2:
                break
            __brk1 = __brk1 + 1
        return __brk1

    def user_dunder(x, c):
        if c > 0:
            __t = x
        return __t
    """)
    assert_same(m.user_brk(f32(1), 5), np.int64(2))
    # Python raises UnboundLocalError only on the path without `__t`; dg checks every
    # path before running (as for any name), and must not invent a value.
    with pytest.raises(dg.DgTypeError, match="'__t' is not defined on every path"):
        m.user_dunder(f32(1, 2), 1)


# =========================================================================
# expressions, print, assert, defaults, nesting depth
# =========================================================================
def test_deeply_nested_conditional_expressions():
    m = load("""
    def nested_ifexp(x):
        return (1 if x < -2 else (2 if x < 0 else (3 if x < 2 else (4 if x < 4 else 5))))

    def nested_t(x, a, b):
        return a if x > 0 else (b if x < -1 else (a + b if x > -0.5 else a - b))
    """)
    for v, w in [(-3, 1), (-1, 2), (1, 3), (3, 4), (5, 5), (-2, 2), (4, 5)]:
        assert_same(m.nested_ifexp(np.float32(v)), np.int64(w))
    a = f32(1, 2, 3)
    b = a * 2
    for v in (1.0, -2.0, -0.2, -0.7):
        want = a if v > 0 else (b if v < -1 else (a + b if v > -0.5 else a - b))
        assert_same(m.nested_t(np.float32(v), a, b), want)


def test_print_inside_loops(capsys):
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
    """)
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


def test_assert_inside_loops():
    m = load("""
    def assertloop(x):
        s = 0.0
        for i in range(x.shape[0]):
            assert x[i] >= 0.0, "negative entry"
            s = s + sqrt(x[i])
        return s
    """)
    assert_same(m.assertloop(f32(1, 4, 9)), np.float32(6))
    with pytest.raises(dg.DgRuntimeError) as e:
        m.assertloop(f32(1, -4, 9))
    assert_located(e.value, 4)
    assert "negative entry" in str(e.value)


def test_default_arguments_and_loops():
    m = load("""
    def dflt(x, k=2, s=0.5):
        acc = x
        for i in range(k):
            acc = acc * s
        return acc

    def use(x):
        return dflt(x), dflt(x, 3), dflt(x, s=2.0), dflt(x, k=1, s=3.0)
    """)
    x = f32(1, 2, 3)
    assert_same(m.use(x), (x * 0.25, x * 0.125, x * 4, x * 3))
    assert_same(m.dflt(x=x, s=3.0), x * 9)


def test_while_condition_calls_a_function_with_a_loop():
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
    """)

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


def test_deeply_nested_loops_with_continue():
    m = dg.loads(_nest_src(5), mode="interp", filename=F)
    assert_same(m.f(3), np.int64(2 ** 5))
    assert_same(m.f(1), np.int64(1))
    assert_same(m.f(0), np.int64(0))


def test_deeply_nested_ifs():
    lines, ind = ["def f(x):", "    y = x"], "    "
    for k in range(40):
        lines.append(ind + f"if x > {k}:")
        ind += "    "
        lines.append(ind + f"y = y + {k}")
    lines.append("    return y")
    m = dg.loads("\n".join(lines) + "\n", mode="interp", filename=F)
    for x in (-1, 0, 10, 100):
        assert_same(m.f(x), np.int64(x + sum(range(min(max(x, 0), 40)))))


# =========================================================================
# errors: every user mistake is a located DgError
# =========================================================================
def test_errors_in_early_return_branches_are_dg_errors():
    # a mistake inside a `return` that the flag rewrite moves into an scf.if
    cases = [
        ("def f(x, c):\n    if c > 0:\n        return x + nothere\n    return x\n", 3),
        ("def f(x, c):\n    if c > 0:\n        return exp(x, x)\n    return x\n", 3),
        ("def f(x, c):\n    for i in range(3):\n        if x[i] > 0:\n            return nothere\n    return x[0]\n", 4),
        ("def f(x, c):\n    if c > 0:\n        return\n    return x\n", 3),
    ]
    failures = []
    for src, line in cases:
        m = dg.loads(src, mode="interp", filename=F)
        try:
            m.f(f32(1, -2, 3), 1)
            failures.append((src, "no error"))
        except dg.DgError as e:
            if not str(e).startswith(f"{F}:{line}:"):
                failures.append((src, str(e)))
        except Exception as e:  # noqa: BLE001 - the point of the test
            failures.append((src, f"{type(e).__name__}: {e}"))
    assert not failures, failures


def test_errors_inside_short_circuit_in_loops_are_dg_errors():
    # an error inside `and`/`if-else` expressions leaves a None-named binding behind
    cases = [
        ("def f(x, n):\n    i = 0\n    while i < n and x[i] > nothere:\n        i += 1\n    return i\n", 3),
        ("def f(x, n):\n    s = 0.0\n    for i in range(n):\n        s = s + (x[i] if i > 0 else nothere)\n"
         "    return s\n", 4),
    ]
    failures = []
    for src, line in cases:
        m = dg.loads(src, mode="interp", filename=F)
        try:
            m.f(f32(1, 2, 3), 2)
            failures.append((src, "no error"))
        except dg.DgError as e:
            if not str(e).startswith(f"{F}:{line}:"):
                failures.append((src, str(e)))
        except Exception as e:  # noqa: BLE001 - the point of the test
            failures.append((src, f"{type(e).__name__}: {e}"))
    assert not failures, failures


def test_error_messages_do_not_mention_rewrite_internals():
    m = load("""
    def retdt(x, c):
        if c > 0:
            return x
        return i64(x)

    def tup_or_t(x, c):
        if c > 0:
            return x, x
        return x
    """)
    for fn in (m.retdt, m.tup_or_t):
        with pytest.raises(dg.DgTypeError) as e:
            fn(f32(1, 2, 3), 1)
        assert str(e.value).startswith(f"{F}:"), str(e.value)
        assert "__ret" not in str(e.value), str(e.value)


X23 = np.arange(6, dtype=np.float32).reshape(2, 3)

MALFORMED = [
    ("undef_name", "def f(x):\n    y = x\n    return y + nothere\n", 3),
    ("exp_arity", "def f(x):\n    y = x\n    return exp(x, x)\n", 3),
    ("exp_no_args", "def f(x):\n    y = x\n    return exp()\n", 3),
    ("sum_bad_axis", "def f(x):\n    y = x\n    return sum(x, axis=3)\n", 3),
    ("sum_bad_kw", "def f(x):\n    y = x\n    return sum(x, axes=0)\n", 3),
    ("softmax_bad_axis", "def f(x):\n    y = x\n    return softmax(x, axis=5)\n", 3),
    ("reshape_size", "def f(x):\n    y = x\n    return reshape(x, [4, 2])\n", 3),
    ("reshape_two_minus1", "def f(x):\n    y = x\n    return reshape(x, [-1, -1])\n", 3),
    ("index_static_oob", "def f(x):\n    y = x\n    return x[5]\n", 3),
    ("index_static_neg_oob", "def f(x):\n    y = x\n    return x[0, -4]\n", 3),
    ("too_many_indices", "def f(x):\n    y = x\n    return x[0, 0, 0]\n", 3),
    ("float_index", "def f(x):\n    y = x\n    return x[1.5]\n", 3),
    ("slice_step_zero", "def f(x):\n    y = x\n    return x[::0]\n", 3),
    ("undef_function", "def f(x):\n    y = x\n    return frobnicate(x)\n", 3),
    ("unpack_3_into_2", "def f(x):\n    y = x\n    a, b = (x, x, x)\n    return a\n", 3),
    ("unpack_rows", "def f(x):\n    y = x\n    a, b, c = x\n    return a\n", 3),
    ("unpack_scalar", "def f(x):\n    y = x\n    a, b = x[0, 0]\n    return a\n", 3),
    ("matmul_shapes", "def f(x):\n    y = x\n    return x @ x\n", 3),
    ("broadcast_shapes", "def f(x):\n    y = x\n    return x + x[:, 0:2]\n", 3),
    ("truth_of_tensor", "def f(x):\n    y = x\n    if x > 0:\n        y = -x\n    return y\n", 3),
    ("concat_ranks", "def f(x):\n    y = x\n    return concat([x, x[0]], 0)\n", 3),
    ("stack_shapes", "def f(x):\n    y = x\n    return stack([x, x[:, 0:2]], 0)\n", 3),
    ("user_fn_arity", "def g(a):\n    return a\n\ndef f(x):\n    y = x\n    return g(x, x)\n", 6),
    ("user_fn_kw", "def g(a):\n    return a\n\ndef f(x):\n    y = x\n    return g(b=x)\n", 6),
    ("range_float", "def f(x):\n    y = x\n    for i in range(1.5):\n        y = y + 1.0\n    return y\n", 3),
    ("range_step_zero", "def f(x):\n    y = x\n    for i in range(0, 5, 0):\n        y = y + 1.0\n    return y\n", 3),
    ("bad_attribute", "def f(x):\n    y = x\n    return x.foo\n", 3),
    ("bad_perm", "def f(x):\n    y = x\n    return transpose(x, [0, 0])\n", 3),
    ("bad_dtype", "def f(x):\n    y = x\n    return zeros([2, 3], dtype=q32)\n", 3),
    ("tuple_index_oob", "def f(x):\n    y = x\n    return (x, x)[5]\n", 3),
    ("shape_index_oob", "def f(x):\n    y = x\n    return x.shape[5]\n", 3),
    ("where_arity", "def f(x):\n    y = x\n    return where(x > 0, x)\n", 3),
    ("len_of_scalar", "def f(x):\n    y = x\n    return len(x[0, 0])\n", 3),
    ("cast_arity", "def f(x):\n    y = x\n    return f32(x, x)\n", 3),
    ("broadcast_to", "def f(x):\n    y = x\n    return broadcast_to(x, [2, 5])\n", 3),
    ("squeeze_non_unit", "def f(x):\n    y = x\n    return squeeze(x, 0)\n", 3),
    ("setitem_shape", "def f(x):\n    y = x\n    y[0] = x\n    return y\n", 3),
    ("annotated_assign", "def f(x):\n    y = x\n    z: f32[5] = x\n    return z\n", 3),
    ("ifexp_ranks", "def f(x):\n    y = x\n    return x if x[0, 0] > 0 else x[0]\n", 3),
    ("negate_bool", "def f(x):\n    y = x > 0\n    return -y\n", 3),
    ("not_of_tensor", "def f(x):\n    y = x\n    return not x\n", 3),
    ("tuple_times", "def f(x):\n    y = x\n    return (x, x) * 2\n", 3),
    ("call_a_tensor", "def f(x):\n    y = x\n    return x(1)\n", 3),
    ("return_string", "def f(x):\n    y = x\n    return 'hello'\n", 3),
    ("use_none_result", "def g(a):\n    b = a\n\ndef f(x):\n    y = x\n    return g(x) + 1.0\n", 6),
    ("undef_in_loop", "def f(x):\n    y = x\n    for i in range(3):\n        y = y + zz\n    return y\n", 4),
    ("empty_list", "def f(x):\n    y = x\n    return []\n", 3),
    ("arange_of_tensor", "def f(x):\n    y = x\n    return arange(x)\n", 3),
    ("eye_of_tensor", "def f(x):\n    y = x\n    return eye(x)\n", 3),
    ("take_float_index", "def f(x):\n    y = x\n    return take(x, 1.5, 0)\n", 3),
    ("function_defined_twice", "def f(x):\n    return x\n\ndef f(x):\n    return x\n", 4),
    ("keyword_repeated", "def f(x):\n    y = x\n    return sum(x, axis=0, axis=1)\n", 3),
    ("none_value", "def f(x):\n    y = None\n    return x\n", 2),
    ("iterate_scalar", "def f(x):\n    y = x\n    for r in x[0, 0]:\n        y = y\n    return y\n", 3),
    ("break_outside_loop", "def f(x):\n    y = x\n    break\n    return y\n", 3),
    ("continue_outside_loop", "def f(x):\n    y = x\n    continue\n    return y\n", 3),
    ("rank_differs_on_branches", "def f(x):\n    if x[0, 0] > 0:\n        y = x\n    else:\n        y = x[0]\n    return y\n", 2),
    ("loop_dtype_change", "def f(x):\n    y = x\n    for i in range(2):\n        y = y > 0.0\n    return y\n", 3),
]


@pytest.mark.parametrize("name,src,line", MALFORMED, ids=[c[0] for c in MALFORMED])
def test_malformed_program_gives_located_dg_error(name, src, line):
    try:
        m = dg.loads(src, mode="interp", filename=F)
        m.f(X23)
    except dg.DgError as e:
        assert_located(e, line)
        return
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"leaked {type(e).__name__}: {e}")
    pytest.fail("no error")


RUNTIME = load("""
def idx(x: f32[?], i):
    y = x * 2.0
    return y[i]

def rs(x: f32[?]):
    y = x + 1.0
    return reshape(y, [2, 3])

def loop_idx(x: f32[?], n):
    s = 0.0
    for i in range(n):
        s = s + x[i]
    return s

def setidx(x: f32[?], i):
    y = x
    y[i] = 1.0
    return y

def bcast(x: f32[?], y: f32[?]):
    z = x
    return x + y

def mm(a: f32[?, ?], b: f32[?, ?]):
    z = a
    return a @ b

def cat(a: f32[?, ?], b: f32[?, ?]):
    z = a
    return concat([a, b], 0)
""")


@pytest.mark.parametrize("call,line", [
    (lambda: RUNTIME.idx(np.arange(4, dtype=np.float32), 7), 3),
    (lambda: RUNTIME.idx(np.arange(4, dtype=np.float32), -5), 3),
    (lambda: RUNTIME.rs(np.arange(4, dtype=np.float32)), 7),
    (lambda: RUNTIME.loop_idx(np.arange(4, dtype=np.float32), 6), 12),
    (lambda: RUNTIME.setidx(np.arange(4, dtype=np.float32), 9), 17),
    (lambda: RUNTIME.bcast(np.ones(4, np.float32), np.ones(3, np.float32)), 22),
    (lambda: RUNTIME.mm(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)), 26),
    (lambda: RUNTIME.cat(np.ones((2, 3), np.float32), np.ones((2, 4), np.float32)), 30),
], ids=["idx", "idx_neg", "reshape", "loop_idx", "setitem", "broadcast", "matmul", "concat"])
def test_runtime_shape_and_index_errors_are_located(call, line):
    with pytest.raises(dg.DgRuntimeError) as e:
        call()
    assert_located(e.value, line)


def test_negative_dynamic_index_is_numpy_semantics():
    assert_same(RUNTIME.idx(np.arange(4, dtype=np.float32), -2), np.float32(4))


PYAPI = load("""
def f(x, n):
    s = x
    for i in range(n):
        s = s + 1.0
    return s

def g(x: f32[?, 3]):
    return x
""")


@pytest.mark.parametrize("call", [
    lambda: PYAPI.f("abc", 1),
    lambda: PYAPI.f(np.array([1j]), 1),
    lambda: PYAPI.f(np.array([1], np.uint8), 1),
    lambda: PYAPI.f(np.array([None, 1]), 1),
    lambda: PYAPI.f(f32(1), 1, 2),
    lambda: PYAPI.f(f32(1), q=1),
    lambda: PYAPI.f(f32(1)),
    lambda: PYAPI.f(f32(1), 1.5),
    lambda: PYAPI.f(f32(1), np.array([1, 2])),
    lambda: PYAPI.f([[1.0], [1.0, 2.0]], 1),
    lambda: PYAPI.g(np.zeros((2, 4), np.float32)),
], ids=["str", "complex", "uint8", "object", "too_many", "bad_kw", "missing", "float_n", "vector_n",
        "ragged_list", "annotation"])
def test_bad_python_arguments_give_dg_errors(call):
    try:
        call()
    except dg.DgError as e:
        assert re.match(rf"{re.escape(F)}:\d+:\d+: error:", str(e)), str(e)
        return
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"leaked {type(e).__name__}: {e}")
    pytest.fail("no error")


def test_annotation_mismatch_message_shows_the_declared_type():
    with pytest.raises(dg.DgTypeError) as e:
        PYAPI.g(np.zeros((2, 4), np.float32))
    # internal symbol ids (`?30`) should not leak into messages
    assert "f32[?, 3]" in str(e.value), str(e.value)
