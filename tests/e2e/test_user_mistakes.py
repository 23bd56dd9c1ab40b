"""Programs checked by hand: every user mistake is a located DgError.

Each is compared with a plain Python / NumPy re-implementation, or must fail with a located
`dg.DgError` (`x.dg:LINE:COL: error: ...`). Mistakes the front end finds (before any mode makes
code: `made_no_code`) are checked once, in FRONT_END_MODE; those found at run time, and bad
arguments from Python, in every mode.
"""
import re

import numpy as np
import pytest

import dg

from .util import F, FRONT_END_MODE, assert_located, assert_same, f32, load, made_no_code


def _not_located_errors(cases, *args) -> list:
    """The programs whose `f(*args)` does not raise a DgError at its line before any code is made
    (cases: (source, line)), each with what happened instead."""
    failures = []
    for src, line in cases:
        m = dg.loads(src, mode=FRONT_END_MODE, filename=F)
        try:
            with made_no_code():
                m.f(*args)
            failures.append((src, "no error"))
        except dg.DgError as e:
            if not str(e).startswith(f"{F}:{line}:"):
                failures.append((src, str(e)))
        except Exception as e:  # noqa: BLE001 - the point of the test (an AssertionError: code was made)
            failures.append((src, f"{type(e).__name__}: {e}"))
    return failures


def test_errors_in_early_return_branches_are_dg_errors():
    # a mistake inside a `return` that the flag rewrite moves into an scf.if
    cases = [
        ("def f(x, c):\n    if c > 0:\n        return x + nothere\n    return x\n", 3),
        ("def f(x, c):\n    if c > 0:\n        return exp(x, x)\n    return x\n", 3),
        ("def f(x, c):\n    for i in range(3):\n        if x[i] > 0:\n            return nothere\n    return x[0]\n", 4),
        ("def f(x, c):\n    if c > 0:\n        return\n    return x\n", 3),
    ]
    failures = _not_located_errors(cases, f32(1, -2, 3), 1)
    assert not failures, failures


def test_errors_inside_short_circuit_in_loops_are_dg_errors():
    # an error inside `and`/`if-else` expressions leaves a None-named binding behind
    cases = [
        ("def f(x, n):\n    i = 0\n    while i < n and x[i] > nothere:\n        i += 1\n    return i\n", 3),
        ("def f(x, n):\n    s = 0.0\n    for i in range(n):\n        s = s + (x[i] if i > 0 else nothere)\n"
         "    return s\n", 4),
    ]
    failures = _not_located_errors(cases, f32(1, 2, 3), 2)
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
    """, FRONT_END_MODE)
    for fn in (m.retdt, m.tup_or_t):
        with made_no_code(), pytest.raises(dg.DgTypeError) as e:
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
    """Found by the front end, before any code is made: one run stands for every mode."""
    try:
        with made_no_code():
            m = dg.loads(src, mode=FRONT_END_MODE, filename=F)
            m.f(X23)
    except dg.DgError as e:
        assert_located(e, line)
        return
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"leaked {type(e).__name__}: {e}")
    pytest.fail("no error")


RUNTIME = """
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
"""


@pytest.mark.parametrize("call,line", [
    (lambda m: m.idx(np.arange(4, dtype=np.float32), 7), 3),
    (lambda m: m.idx(np.arange(4, dtype=np.float32), -5), 3),
    (lambda m: m.rs(np.arange(4, dtype=np.float32)), 7),
    (lambda m: m.loop_idx(np.arange(4, dtype=np.float32), 6), 12),
    (lambda m: m.setidx(np.arange(4, dtype=np.float32), 9), 17),
    (lambda m: m.bcast(np.ones(4, np.float32), np.ones(3, np.float32)), 22),
    (lambda m: m.mm(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)), 26),
    (lambda m: m.cat(np.ones((2, 3), np.float32), np.ones((2, 4), np.float32)), 30),
], ids=["idx", "idx_neg", "reshape", "loop_idx", "setitem", "broadcast", "matmul", "concat"])
def test_runtime_shape_and_index_errors_are_located(mode, call, line):
    with pytest.raises(dg.DgRuntimeError) as e:
        call(load(RUNTIME, mode))
    assert_located(e.value, line)


def test_negative_dynamic_index_is_numpy_semantics(mode):
    assert_same(load(RUNTIME, mode).idx(np.arange(4, dtype=np.float32), -2), np.float32(4))


PYAPI = """
def f(x, n):
    s = x
    for i in range(n):
        s = s + 1.0
    return s

def g(x: f32[?, 3]):
    return x
"""


@pytest.mark.parametrize("call", [
    lambda m: m.f("abc", 1),
    lambda m: m.f(np.array([1j]), 1),
    lambda m: m.f(np.array([1], np.uint8), 1),
    lambda m: m.f(np.array([None, 1]), 1),
    lambda m: m.f(f32(1), 1, 2),
    lambda m: m.f(f32(1), q=1),
    lambda m: m.f(f32(1)),
    lambda m: m.f(f32(1), 1.5),
    lambda m: m.f(f32(1), np.array([1, 2])),
    lambda m: m.f([[1.0], [1.0, 2.0]], 1),
    lambda m: m.g(np.zeros((2, 4), np.float32)),
], ids=["str", "complex", "uint8", "object", "too_many", "bad_kw", "missing", "float_n", "vector_n",
        "ragged_list", "annotation"])
def test_bad_python_arguments_give_dg_errors(mode, call):
    try:
        call(load(PYAPI, mode))
    except dg.DgError as e:
        assert re.match(rf"{re.escape(F)}:\d+:\d+: error:", str(e)), str(e)
        return
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"leaked {type(e).__name__}: {e}")
    pytest.fail("no error")


def test_annotation_mismatch_message_shows_the_declared_type(mode):
    with pytest.raises(dg.DgTypeError) as e:
        load(PYAPI, mode).g(np.zeros((2, 4), np.float32))
    # internal symbol ids (`?30`) should not leak into messages
    assert "f32[?, 3]" in str(e.value), str(e.value)
