"""Statement forms (LANGUAGE.md section 1.1): programs/statements.dg vs NumPy/Python."""
import re

import numpy as np
import pytest

import dg

from .util import PROGRAMS, check, load_prog, load_src, randn


@pytest.fixture
def m(mode):
    return load_prog("statements.dg", mode)


I64 = np.int64
F32 = np.float32


# ---------------------------------------------------------------- definitions
def test_annotated_params(m):
    x, w = randn(5, 3, seed=1), randn(3, 2, seed=2)
    check(m.annotated(x, w), x @ w)


def test_unannotated_params_take_argument_types(m):
    x, y = randn(4, seed=1), randn(4, seed=2)
    check(m.unannotated(x, y), x * y + 1.0)
    xd, yd = x.astype(np.float64), y.astype(np.float64)
    check(m.unannotated(xd, yd), xd * yd + 1.0, rtol=1e-12)
    xi, yi = np.arange(4, dtype=I64), np.arange(4, dtype=I64) + 3
    r = m.unannotated(xi, yi)
    # int tensor + float literal promotes to a float type
    assert np.asarray(r).dtype.kind == "f"
    np.testing.assert_allclose(r, xi * yi + 1.0)


def test_default_args_from_python(m):
    x = randn(4, seed=3)
    check(m.defaults(x), x * 2.0 + 3.0)
    check(m.defaults(x, 3.0), x * 3.0 + 3.0)
    check(m.defaults(x, n=10, flag=False), x * 2.0)
    check(m.defaults(x, scale=0.5, n=1), x * 0.5 + 1.0)


def test_default_args_from_dg(m):
    x = randn(4, seed=3)
    a, b, c, d = m.call_defaults(x)
    check(a, x * 2.0 + 3.0)
    check(b, x * 3.0 + 3.0)
    check(c, x * 2.0)
    check(d, x * 0.5 + 3.0)


# ---------------------------------------------------------------- assignments
def test_assign_forms(m):
    x = randn(6, seed=4)
    a, b, c, n = m.assign_forms(x)
    check(a, x + 1.0)
    check(b, (x + 1.0) * 2.0)
    check(c, np.sum((x + 1.0) * 2.0, dtype=F32))
    check(n, I64(6))


def test_tuple_unpacking(m):
    x = randn(7, seed=5)
    a, b = m.unpack(x)
    check(a, np.max(x))
    check(b, np.sum(x, dtype=F32))


def test_tuple_unpacking_of_shape(m):
    check(m.unpack_shape(np.zeros((3, 4), F32)), I64(34))
    check(m.unpack_shape(np.zeros((2, 9), F32)), I64(29))


def test_augmented_assignments(m):
    x = randn(3, seed=6)
    mm = randn(3, 3, seed=7)
    x0 = x.copy()
    xo, y = m.augmented(x, mm)
    ref = x + 1.0
    ref = ref - x * 0.5
    ref = ref * 3.0
    ref = ref / 2.0
    ref = ref @ mm
    check(y, ref)
    check(xo, x0)  # `y = x; y += 1` does not change x
    np.testing.assert_array_equal(x, x0)


def test_int_augmented_assignments(m):
    check(m.int_augmented(4), I64(((4 + 5) - 2) * 3))


def test_functional_update(m):
    x = randn(4, 3, seed=8)
    v = randn(3, seed=9)
    x0, v0 = x.copy(), v.copy()
    xo, y = m.update(x, v)
    ref = x.copy()
    ref[1] = v
    ref[0, 2] = -1.0
    ref[2:, 0] = 7.0
    ref[-1] = ref[-1] * 2.0
    check(y, ref)
    # the other name bound to the old value is unchanged ...
    check(xo, x0)
    # ... and so are the caller's arrays
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(v, v0)


def test_update_in_loop_with_negative_step(m):
    x = randn(5, seed=10)
    x0 = x.copy()
    check(m.reverse(x), x[::-1])
    check(m.reverse(x[:2].copy()), x[:2][::-1])
    np.testing.assert_array_equal(x, x0)


# ---------------------------------------------------------------- branches
@pytest.mark.parametrize("vals,want", [
    ([5.0, 6.0, 1.0], 2), ([1.0, 2.0], 1), ([1.0, -1.0], 0), ([-3.0, 1.0], -1),
])
def test_if_elif_else_data_dependent(m, vals, want):
    check(m.classify(np.array(vals, F32)), I64(want))


def test_if_without_else(m):
    x = np.array([3.0, 4.0], F32)
    check(m.clamp_norm(x, F32(1.0)), x / 5.0)
    check(m.clamp_norm(x, F32(10.0)), x)


# ---------------------------------------------------------------- for loops
@pytest.mark.parametrize("n", [0, 1, 5])
def test_range_stop(m, n):
    check(m.range_stop(n), I64(sum(i * i for i in range(n))))


def _fold(r, k):
    s = 0
    for i in r:
        s = s * k + i
    return s


@pytest.mark.parametrize("a,b", [(2, 7), (-3, 3), (5, 5), (6, 2)])
def test_range_start_stop(m, a, b):
    check(m.range_start_stop(a, b), I64(_fold(range(a, b), 2)))


@pytest.mark.parametrize("a,b,c", [
    (0, 10, 3), (1, 8, 2), (10, 0, -1), (9, -2, -3), (5, -5, -4), (0, 5, -1), (3, 3, -1), (-4, 4, 5),
])
def test_range_step(m, a, b, c):
    check(m.range_step(a, b, c), I64(_fold(range(a, b, c), 3)))


def test_range_bound_from_float_value(m):
    x = randn(8, seed=11)
    check(m.float_bound(x, F32(3.7)), np.sum(x[:3], dtype=F32))
    check(m.float_bound(x, F32(6.0)), np.sum(x[:6], dtype=F32))
    check(m.float_bound(x, F32(0.5)), F32(0.0))


def _shape_bound(x):
    acc = np.zeros(x.shape[1], F32)
    for i in range(x.shape[0]):
        acc = acc * F32(0.5) + x[i] * F32(i)
    return acc


def test_range_bound_from_shape(m):
    for n in (1, 3, 6):
        x = randn(n, 4, seed=n)
        check(m.shape_bound(x), _shape_bound(x))


def test_for_row_in_x(m):
    x = randn(5, 3, seed=12)
    acc = np.zeros(3, F32)
    for row in x:
        acc = acc * F32(0.5) + row
    check(m.rows(x), acc)
    check(m.rows(x[:1].copy()), x[0])


def test_nested_loops(m):
    a, b = randn(3, 4, seed=13), randn(4, 2, seed=14)
    check(m.loop_matmul(a, b), a @ b)
    a, b = randn(2, 5, seed=15), randn(5, 3, seed=16)
    check(m.loop_matmul(a, b), a @ b)


# ---------------------------------------------------------------- while loops
def _newton(a, tol):
    a, tol = F32(a), F32(tol)
    y, it = a, 0
    while abs(y * y - a) > tol:
        y = F32(0.5) * (y + a / y)
        it += 1
    return y, it


@pytest.mark.parametrize("a", [2.0, 9.0, 150.0, 1.0])
def test_while_newton(m, a):
    y, it = m.newton_sqrt(F32(a), F32(1e-3))
    ry, rit = _newton(a, 1e-3)
    check(y, ry)
    check(it, I64(rit))
    np.testing.assert_allclose(y, np.sqrt(a), rtol=1e-3)


def _collatz(n):
    s = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        s += 1
    return s


@pytest.mark.parametrize("n", [1, 6, 7, 27])
def test_while_collatz(m, n):
    check(m.collatz(n), I64(_collatz(n)))


def _while_true_break(n):
    i = s = 0
    while True:
        i += 1
        if i % 3 == 0:
            continue
        s += i
        if i >= n:
            break
    return s


@pytest.mark.parametrize("n", [1, 4, 10])
def test_while_true_break_continue(m, n):
    check(m.while_true_break(n), I64(_while_true_break(n)))


# ---------------------------------------------------------------- break / continue
def _break_continue(x, limit):
    s, count = F32(0.0), 0
    for v in x:
        if v < 0:
            continue
        if s + v > limit:
            break
        s += v
        count += 1
    return s, count


def test_break_continue(m):
    x = np.array([1.0, -2.0, 3.0, -1.0, 4.0, 5.0, 1.0], F32)
    for limit in (0.5, 4.5, 8.5, 100.0):
        s, c = m.break_continue(x, F32(limit))
        rs, rc = _break_continue(x, limit)
        check(s, F32(rs))
        check(c, I64(rc))


def test_nested_break_continue(m):
    def ref(n):
        t = 0
        for i in range(n):
            for j in range(n):
                if j > i:
                    break
                if (i + j) % 2 == 1:
                    continue
                t += i * 10 + j
        return t

    for n in (0, 1, 4, 6):
        check(m.nested_break(n), I64(ref(n)))


# ---------------------------------------------------------------- early return
def test_early_return_in_loop(m):
    x = np.array([0.5, 2.0, -1.0, 7.0, 3.0], F32)
    check(m.first_above(x, F32(1.0)), I64(1))
    check(m.first_above(x, F32(5.0)), I64(3))
    check(m.first_above(x, F32(10.0)), I64(-1))


def test_early_return_in_nested_loops(m):
    x = np.array([3, 8, 1, 5, 9], I64)
    i, j = m.find_pair(x, 6)
    check(i, I64(2))
    check(j, I64(3))
    i, j = m.find_pair(x, 17)
    check(i, I64(1))
    check(j, I64(4))
    i, j = m.find_pair(x, 100)
    check(i, I64(-1))
    check(j, I64(-1))


@pytest.mark.parametrize("n,want", [(0, 0), (1, 1), (10, 4), (16, 4), (17, 5), (100000, -1)])
def test_early_return_in_while(m, n, want):
    check(m.early_while(n), I64(want))


@pytest.mark.parametrize("x,want", [(20.0, 2.0), (3.0, 1.0), (-1.0, 0.0)])
def test_early_return_in_nested_branches(m, x, want):
    check(m.early_branch(F32(x)), F32(want))


# A loop's returned tensors start as placeholders of size 0, or as a fixed-size value, and take
# other sizes inside the loop: compiled code once returned the placeholder (an empty array) or
# failed to compile.
@pytest.mark.parametrize("k", [0, 2, 4, 9])
def test_early_return_of_tensors_in_loop(m, k):
    a = np.arange(4, dtype=F32)
    first, rest = m.early_tensors(a, k)
    check(first, a if k < 5 else a * 2)
    check(rest, a[1:] if k < 5 else a)


@pytest.mark.parametrize("t,want", [(2.0, [30.0]), (5.5, [2.0, 3.0]), (100.0, [0.0, 1.0, 2.0, 3.0])])
def test_early_return_of_a_shrinking_tensor(m, t, want):
    check(m.early_shrinking(np.arange(4, dtype=F32), F32(t)), np.array(want, F32))


@pytest.mark.parametrize("k", [0, 2, 9])
def test_early_return_of_a_value_shrinking_from_a_fixed_size(m, k):
    """The early return's slot takes every size the loop's value takes, not its initial one."""
    a = np.arange(4, dtype=F32)
    check(m.early_rest(a, k), a[min(k, 4):])


@pytest.mark.parametrize("n", [0, 1, 3])
def test_loop_carried_tensor_grows_from_a_fixed_size(m, n):
    want = np.ones(1, F32)
    for _ in range(n):
        want = np.concatenate([want, want * 2])
    check(m.growing(n), want)


# ---------------------------------------------------------------- pass / assert / print
def test_pass(m):
    x = np.array([1.0, 2.0], F32)
    check(m.with_pass(x), x)
    check(m.with_pass(-x), x)


def test_assert_passes(m):
    check(m.checked_div(F32(3.0), F32(2.0)), F32(1.5))


def test_assert_fails_with_location(m):
    with pytest.raises(dg.DgRuntimeError) as ei:
        m.checked_div(F32(3.0), F32(0.0))
    msg = str(ei.value)
    lines = (PROGRAMS / "statements.dg").read_text().splitlines()
    lineno = next(i + 1 for i, l in enumerate(lines) if "assert b != 0.0" in l)
    col = lines[lineno - 1].index("assert") + 1
    assert re.match(rf"^\S*statements\.dg:{lineno}:{col}: error: ", msg), msg
    assert "division by zero" in msg
    assert isinstance(ei.value, dg.DgError)


def test_print(m, capfd):
    r = m.show(4)
    check(r, I64(4))
    out = capfd.readouterr().out
    assert out.splitlines() == ["0 0", "1 1", "2 4", "3 9"], out


def _floats(text):
    return [float(t) for t in re.findall(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?", text)]


def test_print_strings_and_tensors(m, capfd):
    x = np.array([1.5, -2.25, 4.0], F32)
    check(m.show_values(x), F32(3.25))
    lines = capfd.readouterr().out.splitlines()
    assert len(lines) == 2, lines
    words = lines[0].split()
    assert words[0] == "sum" and words[2] == "first", lines[0]
    assert float(words[1]) == 3.25 and float(words[3]) == 1.5, lines[0]
    assert _floats(lines[1]) == [3.0, -4.5, 8.0], lines[1]


# ---------------------------------------------------------------- recursion
@pytest.mark.parametrize("n", [0, 1, 5, 10])
def test_recursive_factorial(m, n):
    import math

    check(m.factorial(n), I64(math.factorial(n)))


@pytest.mark.parametrize("n", [0, 1, 2, 10])
def test_recursive_fibonacci(m, n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    check(m.fib(n), I64(a))


def _tree(nodes, i, w, b):
    if 2 * i + 1 >= nodes.shape[0]:
        return nodes[i]
    left = _tree(nodes, 2 * i + 1, w, b)
    right = _tree(nodes, 2 * i + 2, w, b)
    return np.tanh((left + right) @ w + b + nodes[i])


@pytest.mark.parametrize("size", [1, 3, 7, 15])
def test_recursive_tree_model(m, size):
    nodes, w, b = randn(size, 4, seed=20), randn(4, 4, seed=21) * F32(0.5), randn(4, seed=22)
    check(m.tree(nodes, 0, w, b), _tree(nodes, 0, w, b), rtol=1e-4, atol=1e-5)
    if size > 1:
        check(m.tree(nodes, 1, w, b), _tree(nodes, 1, w, b), rtol=1e-4, atol=1e-5)


def _deep(x, w, depth):
    if depth == 0:
        return np.tanh(x @ w)
    a = _deep(x, w * F32(0.5), depth - 1)
    b = _deep(-x, w, depth - 1)
    return np.tanh((a + b) @ w)


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_recursive_depth_model(m, depth):
    x, w = randn(2, 3, seed=23), randn(3, 3, seed=24) * F32(0.5)
    check(m.deep(x, w, depth), _deep(x, w, depth), rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- calls
def test_calls_with_keywords_and_tuples(m):
    x = randn(5, seed=25)
    z = (x * 2.0 + 1.0) * 0.5 - 1.0
    check(m.calls(x), np.sum(z, dtype=F32) + np.max(z), rtol=1e-5)


# ---------------------------------------------------------------- names
RUNTIME_NAMES = """
def malloc(x: f32[N]) -> f32[N]:
    return exp(x) + 1.0

def memrefCopy(x: f32[N], k: i64) -> f32[?]:
    if k <= 0:
        return x[::2]
    return memrefCopy(x * 2.0, k - 1)

def dg_state(x: f32[N]) -> f32[N]:
    return malloc(x) * 2.0

def dg_rt_fail(x: f32[N]) -> f32:
    assert sum(x) > 0.0, "positive"
    return sum(memrefCopy(x, 2))

def _mlir_ciface_free(x: f32[N]) -> f32[N]:
    return dg_state(x) + dg_rt_fail(x)

def top(x: f32[N]) -> f32[N]:
    return _mlir_ciface_free(x)

def memcpy(x: f32[N]) -> f32[N]:
    return x

def sinf(x: f32[N]) -> f32[N]:
    return sin(x) + 1.0

def powf(x: f32[N]) -> f32[N]:
    return x ** x

def __dg_par_0_loop(x: f32[N], k: i64) -> f32[N]:
    if k <= 0:
        return exp(x) * 2.0
    return __dg_par_0_loop(x, k - 1)

def par(x: f32[N]) -> f32[N]:
    return __dg_par_0_loop(x, 1)

def _mlir_ciface_f(x: f32[N], k: i64) -> f32[N]:
    if k <= 0:
        return x
    return _mlir_ciface_f(x, k - 1) * 0.5

def f_1(x: f32[N], k: i64) -> f32[N]:
    return _mlir_ciface_f(x, k) + 1.0

def f_2(x: f32[N], k: i64) -> f32[N]:
    return _mlir_ciface_f(x, k) + 2.0
"""


def test_functions_may_have_the_names_the_runtime_uses(mode):
    """The allocator, MLIR's copy function, dg's state word, check and C interfaces, C library
    functions: a dg function of such a name is a function like any other, called from Python and
    from dg."""
    m = load_src(RUNTIME_NAMES, mode)
    x = np.linspace(0.5, 2.0, 8).astype(np.float32)
    check(m.malloc(x), np.exp(x) + 1.0)
    check(m.memrefCopy(x, I64(2)), (x * 4.0)[::2])
    check(m.dg_rt_fail(x), np.float32(np.sum((x * 4.0)[::2])))
    check(m.top(x), (np.exp(x) + 1.0) * 2.0 + np.sum((x * 4.0)[::2]))
    with pytest.raises(dg.DgRuntimeError, match="positive"):
        m.dg_rt_fail(-x)
    # names of the C library's functions, which LLVM's own calls (memcpy, sinf, powf) reach
    check(m.memcpy(x), x)
    check(m.sinf(x), np.sin(x) + 1.0)
    check(m.powf(x), x ** x)
    # a name the compiler gives its own functions; a name made by adding a number
    check(m.par(x), np.exp(x) * 2.0)
    check(m.f_1(x, I64(2)), x * 0.25 + 1.0)
    check(m.f_2(x, I64(3)), x * 0.125 + 2.0)



UNICODE_NAMES = """
def fé(x: f32[N]) -> f32[N]:
    return x * 2.0

def f_e9(x: f32[N]) -> f32[N]:
    return x + 10.0

def f__e9_(x: f32[N]) -> f32[N]:
    return x + 20.0

def 函数(x: f32[N]) -> f32[N]:
    y_é = fé(x) + f_e9(x) + f__e9_(x)
    return y_é * π(x)

def π(x: f32[N]) -> f32[N]:
    return x * 0.0 + 3.0

def total(x: f32[N]) -> f32:
    return sum(函数(x))
"""


def test_functions_may_have_names_beyond_ascii(mode):
    """Python identifiers may use any letters; so may dg functions and variables, called from
    Python, from dg and through grad, and kept apart from ASCII names that look like them."""
    m = load_src(UNICODE_NAMES, mode)
    x = np.linspace(0.5, 2.0, 4).astype(np.float32)
    check(getattr(m, "fé")(x), x * 2.0)
    check(m.f_e9(x), x + 10.0)
    check(m.f__e9_(x), x + 20.0)
    check(m.函数(x), (4 * x + 30.0) * 3.0)
    check(dg.grad(m.total)(x), np.full(4, 12.0, np.float32))


LISTS_AND_TUPLES = """
def updated_list() -> f32[3]:
    x = [1.0, 2.0, 3.0]
    x[0] = 5.0
    x[2] += 1.0
    return x

def over_a_tuple(t: f32, a: f32[3], b: f32[3]) -> f32:
    s = 0.0
    for v in (1.0, 2.0, t):
        s = s + v
    w = zeros(3)
    for row in (a, b):
        w = w + row * s
    return sum(w)

def mixed_tuple(a: f32[3]) -> f32:
    s = 0.0
    for v in (a, 1.0):
        s = s + sum(v)
    return s

def tuple_update(a: f32[3]) -> f32:
    t = (a, a)
    t[0] = a
    return sum(a)
"""


def test_an_element_of_a_list_display_is_updated(mode):
    """`x = [..]; x[0] = v` updates the list (the update was dropped silently before)."""
    m = load_src(LISTS_AND_TUPLES, mode, "lists.dg")
    check(m.updated_list(), np.array([5.0, 2.0, 4.0], F32))


def test_a_for_loop_over_a_tuple_visits_each_item(mode):
    """(It ran zero times before, silently.)"""
    m = load_src(LISTS_AND_TUPLES, mode, "lists.dg")
    a, b = np.ones(3, F32), np.arange(3, dtype=F32)
    check(m.over_a_tuple(F32(3.0), a, b), F32(6.0 * (3 + 3)))
    g = dg.grad(m.over_a_tuple, wrt=(0, 1))(F32(3.0), a, b)
    check(g[0], F32(6.0))
    check(g[1], np.full(3, 6.0, F32))


def test_loops_over_mixed_tuples_unroll_and_tuple_updates_are_errors(mode):
    m = load_src(LISTS_AND_TUPLES, mode, "lists.dg")
    assert m.mixed_tuple(np.arange(3, dtype=F32)) == 4.0  # (a, 1.0): one iteration per item
    with pytest.raises(dg.DgTypeError, match="'t' is a tuple, which cannot be updated by index"):
        m.tuple_update(np.ones(3, F32))
