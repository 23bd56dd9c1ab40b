"""Symbolic shapes and argument checking at a call (LANGUAGE.md section 1.3)."""
import numpy as np
import pytest

import dg

from .util import check, load_src, randn

F32, F64, I64 = np.float32, np.float64, np.int64

SRC = '''
def rowsum(images: f32[N, 3]) -> f32[N]:
    return sum(images, axis=1)

def gram(a: f32[N, M]) -> f32[M, M]:
    return a.T @ a

def xent(logits: f32[B, 4], labels: i64[B]) -> f32:
    return cross_entropy(logits, labels)

def transposed(a: f32[N, M], b: f32[M, N]) -> f32[N, N]:
    return a @ b

def scaled(s: f32, vec: f32[N]) -> f32[N]:
    return vec * s

def anydims(x: f32[?, ?]):
    return x.shape[0] * 1000 + x.shape[1]

def flatten(x: f32[B, H, W]) -> f32[B, ?]:
    return reshape(x, [x.shape[0], -1])

def differ(w: f32[M, N], g: f32[P, N]):
    return w - g

def inner(a: f32[M, K], b: f32[L, N]):
    return a @ b

def inner_t(a: f32[K, M], b: f32[L, N]):
    return transpose(a) @ b

def batched(a: f32[P, M, K], b: f32[Q, L, N]):
    return a @ b

def vector(a: f32[M, K], v: f32[L]):
    return a @ v

def square(a: f32[M, 1], b: f32[N]) -> f32[M, M]:
    return a + b

def swapped(a: f32[M, N]) -> f32[N, M]:
    return a

def three(x: f32[N]) -> f32[3]:
    return x

def alike(a: f32[?, ?]) -> f32[K, K]:
    return a

def shorter(x: f32[N]):
    y: f32[N] = x[1:]
    return y

def wide(a: f32[N, M]) -> f32[N, 3]:
    return a

def ident(x: f32[N]) -> f32[N]:
    return x

def callee_name(a: f32[N], b: f32[M]) -> f32[N]:
    return ident(b)

def early(x: f32[N], k: i64) -> f32[N]:
    for i in range(k):
        if i == 2:
            return x[1:]
    return x

def regroup(x: f32[N]):
    return reshape(x, [2, 3])
'''


@pytest.fixture
def m(mode):
    return load_src(SRC, mode)


def test_named_dim_varies_between_calls(m):
    for n in (1, 2, 5, 100, 3):
        x = randn(n, 3, seed=n)
        check(m.rowsum(x), x.sum(axis=1))


def test_named_dims_result_shape(m):
    for shape in [(4, 2), (3, 5), (1, 1)]:
        a = randn(*shape, seed=1)
        check(m.gram(a), a.T @ a, rtol=1e-5)
    for shape in [(2, 3, 4), (5, 1, 2)]:
        x = randn(*shape, seed=2)
        check(m.flatten(x), x.reshape(shape[0], -1))


def test_question_mark_dims(m):
    check(m.anydims(np.zeros((3, 7), F32)), I64(3007))
    check(m.anydims(np.zeros((12, 1), F32)), I64(12001))


def test_equal_names_must_match_and_do(m):
    for b in (1, 6):
        logits, labels = randn(b, 4, seed=b), np.arange(b, dtype=I64) % 4
        ls = logits.astype(F64) - np.log(np.exp(logits.astype(F64)).sum(1, keepdims=True))
        check(m.xent(logits, labels), F32(-ls[np.arange(b), labels].mean()), rtol=1e-5)
    a, bb = randn(2, 3, seed=3), randn(3, 2, seed=4)
    check(m.transposed(a, bb), a @ bb, rtol=1e-5)


def test_python_scalars_for_scalar_params(m):
    v = randn(4, seed=5)
    check(m.scaled(2.0, v), v * 2.0)
    check(m.scaled(3, v), v * 3.0)  # a Python int is weak: it takes the declared f32
    check(m.scaled(F32(0.5), v), v * 0.5)


def _raises_naming(fn, args, *names):
    with pytest.raises(dg.DgTypeError) as ei:
        fn(*args)
    assert isinstance(ei.value, dg.DgError)
    msg = str(ei.value)
    assert any(n in msg for n in names), msg
    return msg


def test_static_dim_violation(m):
    _raises_naming(m.rowsum, (np.zeros((4, 4), F32),), "'images'", "images")
    _raises_naming(m.xent, (np.zeros((2, 5), F32), np.zeros(2, I64)), "logits")


def test_static_dim_violation_after_good_call(m):
    m.rowsum(np.zeros((2, 3), F32))
    _raises_naming(m.rowsum, (np.zeros((2, 4), F32),), "images")


def test_wrong_dtype(m):
    _raises_naming(m.rowsum, (np.zeros((2, 3), F64),), "images")
    _raises_naming(m.rowsum, (np.zeros((2, 3), I64),), "images")
    _raises_naming(m.xent, (np.zeros((2, 4), F32), np.zeros(2, F32)), "labels")


def test_wrong_rank(m):
    _raises_naming(m.rowsum, (np.zeros(3, F32),), "images")
    _raises_naming(m.rowsum, (np.zeros((1, 2, 3), F32),), "images")
    _raises_naming(m.scaled, (np.ones(2, F32), np.ones(2, F32)), "'s'", " s ", "s:")


def test_inconsistent_named_dims(m):
    _raises_naming(m.xent, (np.zeros((3, 4), F32), np.zeros(2, I64)), "labels", "logits")
    _raises_naming(m.transposed, (np.zeros((2, 3), F32), np.zeros((2, 3), F32)), "'b'", "'a'")


def test_inconsistent_named_dims_after_good_call(m):
    # the specialization for these element types and ranks already exists
    logits, labels = randn(3, 4, seed=6), np.array([0, 1, 2], I64)
    m.xent(logits, labels)
    _raises_naming(m.xent, (np.zeros((3, 4), F32), np.zeros(5, I64)), "labels", "logits")
    _raises_naming(m.xent, (np.zeros((7, 4), F32), labels), "labels", "logits")
    a, bb = randn(2, 3, seed=7), randn(3, 2, seed=8)
    m.transposed(a, bb)
    _raises_naming(m.transposed, (np.zeros((4, 3), F32), bb), "'b'", "'a'")


def test_sizes_that_differ_at_run_time_raise(m, mode):
    """Sizes the annotations leave unrelated (M, P) that do not broadcast raise at the op, in
    every mode; compiled code reads nothing past an operand's end. A size that is 1 only at
    run time broadcasts in the interpreter; compiled code broadcasts only sizes declared 1."""
    w, g = randn(4, 3, seed=9), randn(4, 3, seed=10)
    check(m.differ(w, g), w - g)
    for rows in (5, 64, 3):
        with pytest.raises(dg.DgRuntimeError) as ei:
            m.differ(randn(rows, 3, seed=rows), g)
        msg = str(ei.value)
        assert ":24:12: error: " in msg and "could not be broadcast together" in msg, msg
    one = randn(1, 3, seed=11)
    if mode == "interp":
        check(m.differ(one, g), one - g)
    else:
        with pytest.raises(dg.DgRuntimeError, match="declared as 1"):
            m.differ(one, g)


def test_matmul_sizes_that_differ_at_run_time_raise(m):
    """Inner and batch sizes of `@` that the annotations leave unrelated are checked at run time
    in every mode: a located DgRuntimeError where they differ, NumPy's product where they agree
    (a transposed operand included)."""
    a, b = randn(3, 4, seed=12), randn(4, 2, seed=13)
    check(m.inner(a, b), a @ b, rtol=1e-5)
    check(m.inner_t(a.T.copy(), b), a @ b, rtol=1e-5)
    x, y = randn(2, 3, 4, seed=14), randn(2, 4, 5, seed=15)
    check(m.batched(x, y), x @ y, rtol=1e-5)
    v = randn(4, seed=16)
    check(m.vector(a, v), a @ v, rtol=1e-5)
    bad = [(m.inner, (a, randn(k, 2, seed=k)), ":27:12: ") for k in (3, 5, 64)]
    bad += [(m.inner_t, (a.T.copy(), randn(5, 2, seed=17)), ":30:12: "),
            (m.batched, (x, randn(2, 6, 5, seed=18)), ":33:12: "),
            (m.batched, (x, randn(3, 4, 5, seed=19)), ":33:12: "),
            (m.vector, (a, randn(9, seed=20)), ":36:12: ")]
    for fn, args, where in bad:
        with pytest.raises(dg.DgRuntimeError) as ei:
            fn(*args)
        assert where + "error: " in str(ei.value), str(ei.value)


def test_declared_sizes_are_checked_at_run_time(m):
    """A result (or an annotated assignment) whose sizes the declaration names but the code
    cannot prove raises a located DgRuntimeError where they differ, in every mode."""
    a1, b3 = randn(3, 1, seed=21), randn(3, seed=22)
    check(m.square(a1, b3), a1 + b3)
    sq = randn(2, 2, seed=23)
    check(m.swapped(sq), sq)
    check(m.three(b3), b3)
    check(m.alike(sq), sq)
    check(m.wide(randn(2, 3, seed=33)), randn(2, 3, seed=33))
    check(m.callee_name(b3, b3), b3)
    check(m.early(b3, 2), b3)
    bad = [(m.square, (a1, randn(5, seed=24)), ":39:5: ", "axis 1", "'M'"),
           (m.swapped, (randn(2, 3, seed=25),), ":42:5: ", "axis 0", "'N'"),
           (m.three, (randn(4, seed=26),), ":45:5: ", "axis 0", "3"),
           (m.alike, (randn(2, 3, seed=27),), ":48:5: ", "axis 1", "'K'"),
           (m.shorter, (b3,), ":51:5: ", "'y'", "'N'"),
           (m.three, (randn(1, seed=28),), ":45:5: ", "axis 0", "3"),
           (m.wide, (randn(4, 2, seed=29),), ":55:5: ", "axis 1", "3"),
           (m.callee_name, (randn(4, seed=30), randn(2, seed=31)), ":61:5: ", "axis 0", "'N'"),
           (m.early, (randn(4, seed=32), 5), ":63:33: ", "axis 0", "'N'")]
    for fn, args, where, *words in bad:
        with pytest.raises(dg.DgRuntimeError) as ei:
            fn(*args)
        msg = str(ei.value)
        assert where + "error: " in msg and all(w in msg for w in words), msg


def test_a_reshape_to_another_element_count_raises(m):
    x = np.arange(6, dtype=F32)
    check(m.regroup(x), x.reshape(2, 3))
    for n in (4, 1, 64):
        with pytest.raises(dg.DgRuntimeError) as ei:
            m.regroup(np.arange(n, dtype=F32))
        assert ":70:12: error: " in str(ei.value) and "reshape" in str(ei.value), str(ei.value)
