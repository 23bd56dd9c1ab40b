"""Symbolic shapes and argument checking at a call (LANGUAGE.md section 1.3)."""
import numpy as np
import pytest

import dg

from .util import assert_same, at_page_end, check, load, load_src, randn

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

def stretch(x: f32[?], n: i64):
    return broadcast_to(x, [n, 3])

def stretch_fixed(x: f32[3], n: i64, k: i64):
    return broadcast_to(x, [n, k])

def stretch_rows(x: f32[?, 1], n: i64, k: i64):
    return broadcast_to(x, [n, k])

def assign(x: f32[?], y: f32[?], k: i64):
    x[0:k] = y
    return x

def assign_row(x: f32[?, ?], y: f32[?], i: i64):
    x[i] = y
    return x

def stretch_loss(x: f32[?], n: i64) -> f32:
    return sum(broadcast_to(x, [n, 3]) ** 3.0)

def stretch_grad(x: f32[?], n: i64):
    return grad(stretch_loss)(x, n)

def stretch_grad_sum(x: f32[?], n: i64) -> f32:
    return sum(grad(stretch_loss)(x, n))

def stretch_second(x: f32[?], n: i64):
    return grad(stretch_grad_sum)(x, n)

def assign_loss(x: f32[?], v: f32[?]) -> f32:
    y = x * 1.0
    y[0:2] = v
    return sum(y * y)

def assign_grad(x: f32[?], v: f32[?]):
    return grad(assign_loss, wrt=1)(x, v)

def element(x: f32[?], i: i64) -> f32:
    return x[i]

def row(x: f32[?, 3], i: i64):
    return x[i]

def columns(x: f32[?, ?], idx: i64[?]):
    return take(x, idx, axis=1)

def xent_any(x: f32[?, ?], y: i64[?]) -> f32:
    return cross_entropy(x, y)

def assign_part(x: f32[?], v: f32[?], k: i64):
    x[0:k] = v
    return x

def nested(a: f32[N], b: f32[K]) -> (f32[N], (f32[K], f32[N])):
    return a, (b, b)

def grow_loss(x: f32[?], n: i64) -> f32:
    y = x
    for i in range(n):
        y = concat([y, y * 2.0])
    return sum(y * y)

def grow_grad(x: f32[?], n: i64):
    return grad(grow_loss)(x, n)

def mixed_loss(a: f32[?], b: f32[2], c: f32[?, 2]) -> f32:
    return sum(a * b) + sum(where(c > 0.0, a - c, b * c))

def mixed_grad(a: f32[?], b: f32[2], c: f32[?, 2]):
    return grad(mixed_loss, wrt=(0, 1, 2))(a, b, c)

def sized(x: f32[?], n: i64):
    return broadcast_to(x, [n, 2]), zeros([n]), reshape(x, [n, -1])

def huge(n: i64) -> f32[A, B]:
    return zeros([n, 2]) + 1.0

def counted(n: i64, k: i64):
    return arange(n) + 1, eye(k)

def wrapped(x: f32[?], n: i64, m: i64) -> f32:
    return sum(reshape(x, [n, m]))

def hidden(n: i64, m: i64) -> f32[A, B]:
    return sum(zeros([0, n, m]), axis=0)

def spread(a: i64, b: i64) -> i64[A]:
    return arange(a, b)

def literal() -> f32:
    return sum(zeros([274177, 67280421310721]) + 1.0)

def first_failure(n: i64, m: i64):
    a = zeros([n])
    b = zeros([m, 2]) + 1.0
    return a, b

def stepped(x: f32[?], v: f32[?], a: i64, b: i64, c: i64):
    y = x * 1.0
    y[a:b:c] = v
    return x[a:b:c], y
'''


def _line(fn: str) -> str:
    """':LINE:' of the line after `def fn(` in SRC (a one-statement body)."""
    return f":{next(i for i, l in enumerate(SRC.splitlines(), 1) if l.startswith(f'def {fn}(')) + 1}:"


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


def test_sizes_that_differ_at_run_time_raise(m):
    """Sizes the annotations leave unrelated (M, P) that do not broadcast raise at the op, in
    every mode; compiled code reads nothing past an operand's end. Only sizes declared 1
    broadcast: one that is 1 only at run time raises too, in every mode (the types take two
    symbolic sizes to be equal, and gradients sum only over the axes the types stretch)."""
    w, g = randn(4, 3, seed=9), randn(4, 3, seed=10)
    check(m.differ(w, g), w - g)
    for rows in (5, 64, 3):
        with pytest.raises(dg.DgRuntimeError) as ei:
            m.differ(randn(rows, 3, seed=rows), g)
        msg = str(ei.value)
        assert ":24:12: error: " in msg and "could not be broadcast together" in msg, msg
    with pytest.raises(dg.DgRuntimeError) as ei:
        m.differ(randn(1, 3, seed=11), g)
    assert ":24:12: error: " in str(ei.value) and "only sizes declared as 1 broadcast" in str(ei.value)


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
            (m.batched, (x, randn(1, 4, 5, seed=34)), ":33:12: "),  # 1 only at run time
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


def test_broadcast_to_checks_sizes_at_run_time(m):
    """broadcast_to stretches a size that is 1 (declared or only at run time) and raises a
    located DgRuntimeError for one that is neither 1 nor the shape's, in every mode; compiled
    code read past x's end before."""
    for x in (np.arange(3, dtype=F32), np.full(1, 7.0, F32)):
        check(m.stretch(x, 2), np.broadcast_to(x, (2, 3)))
    x3 = np.arange(3, dtype=F32)
    check(m.stretch_fixed(x3, 2, 3), np.broadcast_to(x3, (2, 3)))
    col = np.arange(2, dtype=F32).reshape(2, 1)
    check(m.stretch_rows(col, 2, 4), np.broadcast_to(col, (2, 4)))
    check(m.stretch_rows(col[:1], 3, 2), np.broadcast_to(col[:1], (3, 2)))
    bad = [(m.stretch, (np.arange(2, dtype=F32), 2)), (m.stretch, (np.arange(64, dtype=F32), 2)),
           (m.stretch_fixed, (x3, 2, 5)), (m.stretch_rows, (np.zeros((3, 1), F32), 2, 4))]
    for fn, args in bad:
        with pytest.raises(dg.DgRuntimeError) as ei:
            fn(*args)
        assert _line(fn.name) + "12: error: " in str(ei.value) and "broadcast" in str(ei.value), str(ei.value)


def test_assignment_checks_sizes_at_run_time(m):
    """A value assigned to an indexed region must have the region's sizes, or 1 (which
    stretches), in every mode; compiled code cut or stretched it silently before."""
    x, y = np.zeros(5, F32), np.arange(1, 4, dtype=F32)
    want = x.copy()
    want[0:3] = y
    check(m.assign(x, y, 3), want)
    want = x.copy()
    want[0:2] = 9.0
    check(m.assign(x, np.full(1, 9.0, F32), 2), want)
    grid = np.zeros((2, 3), F32)
    want = grid.copy()
    want[1] = 4.0
    check(m.assign_row(grid, np.full(1, 4.0, F32), 1), want)
    bad = [(m.assign, (x, y, 2)), (m.assign, (x, np.ones(9, F32), 9)), (m.assign, (x, np.ones(2, F32), 3)),
           (m.assign_row, (grid, np.ones(2, F32), 1))]
    for fn, args in bad:
        with pytest.raises(dg.DgRuntimeError) as ei:
            fn(*args)
        assert _line(fn.name) + "5: error: " in str(ei.value), str(ei.value)


@pytest.mark.parametrize("n", [1, 3])
def test_gradients_sum_over_sizes_stretched_at_run_time(m, n):
    """The adjoint of an operand that broadcast_to or an assignment stretched from a size of 1
    known only at run time is summed over that axis (and has the operand's shape), in every
    mode, to second order too."""
    x = np.arange(1, n + 1, dtype=F32)
    reps = 2 * (3 // n)  # how many copies of each element the loss sees
    check(m.stretch_grad(x, 2), reps * 3 * x ** 2, rtol=1e-5)
    check(m.stretch_second(x, 2), reps * 6 * x, rtol=1e-5)
    xs = np.arange(4, dtype=F32)
    v = np.arange(5, 6 if n == 1 else 7, dtype=F32)  # stretched to the 2 slots, or not
    check(m.assign_grad(xs, v), 2 * v * (2 // v.size), rtol=1e-5)


def test_indexing_an_empty_axis_raises_without_reading_it(m):
    """An index into an axis of size 0 is out of bounds whatever it is: a located DgRuntimeError in
    every mode. Compiled code clamps a bad index into the axis to keep reading in bounds, which
    an empty axis has no room for; it read one element past the array's end (here, a fault)."""
    bad = [(m.element, (np.zeros(0, F32), 0)), (m.row, (np.zeros((0, 3), F32), 0)),
           (m.columns, (np.zeros((2, 0), F32), np.zeros(2, I64))),
           (m.xent_any, (np.zeros((2, 0), F32), np.zeros(2, I64))),
           (m.assign_part, (np.ones(3, F32), np.zeros(0, F32), 2))]
    for fn, args in bad:
        with pytest.raises(dg.DgRuntimeError) as ei:
            fn(*(at_page_end(a) if isinstance(a, np.ndarray) else a for a in args))
        assert _line(fn.name) in str(ei.value), str(ei.value)
    x = at_page_end(np.ones(3, F32))
    check(m.assign_part(x, at_page_end(np.zeros(0, F32)), 0), np.ones(3, F32))


def test_declared_sizes_of_nested_results_are_checked(m):
    """A result inside a nested tuple is checked against its declared sizes like any other."""
    a, b = randn(3, seed=35), randn(3, seed=36)
    got = m.nested(a, b)
    check(got[0], a)
    check(got[1][0], b)
    check(got[1][1], b)
    with pytest.raises(dg.DgRuntimeError) as ei:
        m.nested(a, randn(2, seed=37))
    assert _line("nested") + "5: error: " in str(ei.value) and "'N'" in str(ei.value), str(ei.value)


def test_a_loop_carried_value_that_changes_shape_cannot_be_taped(m):
    """Gradients need a loop's carried values to keep their sizes: a located DgRuntimeError in
    every mode. Compiled code wrote the larger value into the tape's row until the error was
    raised (a heap overflow that aborted the process)."""
    for n in (1000, 100000, 3):
        with pytest.raises(dg.DgRuntimeError) as ei:
            m.grow_grad(np.ones(n, F32), 2)
        assert "changed shape" in str(ei.value), str(ei.value)


def test_gradients_where_a_symbolic_size_meets_a_static_one(m):
    """An operand typed f32[?] whose partner fixes the size (f32[2]) gets an adjoint of f32[2]:
    it takes the operand's type (the gradient program did not parse)."""
    a, b, c = np.array([1.0, -2.0], F32), np.array([3.0, 4.0], F32), np.array([[1.0, -1.0], [-2.0, 0.5]], F32)
    da, db, dc = m.mixed_grad(a, b, c)
    pos = c > 0
    check(da, b + pos.sum(axis=0).astype(F32), rtol=1e-6)
    check(db, a + np.where(pos, 0, c).sum(axis=0), rtol=1e-6)
    check(dc, np.where(pos, -1.0, b).astype(F32), rtol=1e-6)


def test_negative_sizes_given_at_run_time_raise(m):
    x = np.ones(2, F32)
    for got, want in zip(m.sized(x, 2), (np.ones((2, 2), F32), np.zeros(2, F32), x.reshape(2, 1))):
        check(got, want)
    with pytest.raises(dg.DgRuntimeError) as ei:
        m.sized(x, -1)
    assert _line("sized") in str(ei.value) and "negative" in str(ei.value), str(ei.value)


@pytest.mark.parametrize("n,k", [(2**61, 2), (2**62, 2), (3, 2**31), (3, 2**62)])
def test_sizes_given_at_run_time_that_count_past_2_50_elements_raise(m, n, k):
    """In compiled code their byte count would wrap around, and too little be allocated."""
    with pytest.raises(dg.DgRuntimeError) as ei:
        m.huge(n) if k == 2 else m.counted(3, k)
    assert _line("huge" if k == 2 else "counted") in str(ei.value) and "2**50" in str(ei.value), str(ei.value)
    check(m.huge(3), np.ones((3, 2), F32))  # the next call runs as usual
    got = m.counted(4, 2)
    check(got[0], np.arange(4) + 1)
    check(got[1], np.eye(2, dtype=F32))


# 274177 * 67280421310721 is 2**64 + 1: a product that wraps around to 1 in i64
@pytest.mark.parametrize("fn,args", [("wrapped", (np.ones(1, F32), 274177, 67280421310721)),
                                     ("hidden", (274177, 67280421310721)), ("spread", (-2**62, 2**62)),
                                     ("literal", ())])
def test_element_counts_that_wrap_around_raise(m, fn, args):
    """Not an allocation or a view too small for the loops over it (a crash in compiled code)."""
    with pytest.raises(dg.DgRuntimeError) as ei:
        getattr(m, fn)(*args)
    assert _line(fn) in str(ei.value), str(ei.value)
    check(m.wrapped(np.arange(6, dtype=F32), 2, 3), np.float32(15))
    check(m.spread(2, 5), np.arange(2, 5))


@pytest.mark.parametrize("n", [-1, 2**51])
def test_a_failed_check_comes_before_a_later_value_too_large_for_memory(m, n):
    with pytest.raises(dg.DgRuntimeError) as ei:
        m.first_failure(n, 2**47)
    message = str(ei.value)  # the line of `a = zeros([n])`, not of b, which does not fit in memory
    assert _line("first_failure") in message and ("negative" in message or "2**50" in message), message


def test_a_value_too_large_for_memory_raises(m):
    """1 PiB: more than the address space of a 4-level page table, and than any memory."""
    with pytest.raises(dg.DgRuntimeError) as ei:
        m.huge(2**47)
    assert _line("huge") in str(ei.value) and "memory" in str(ei.value).lower(), str(ei.value)
    check(m.huge(5), np.ones((5, 2), F32))


@pytest.mark.parametrize("a,b,c", [(5, 0, -2), (-1, -8, -1), (0, 7, 2), (6, 1, -3), (3, 3, -1), (10, -10, -4)])
def test_slice_steps_given_at_run_time_take_either_sign(m, a, b, c):
    x = np.arange(7, dtype=F32)
    want = x.copy()
    v = np.arange(len(x[a:b:c]), dtype=F32) + 10
    want[a:b:c] = v
    got_slice, got = m.stepped(x, v, a, b, c)
    check(got_slice, x[a:b:c])
    check(got, want)


def test_a_zero_slice_step_raises(m):
    with pytest.raises(dg.DgRuntimeError) as ei:
        m.stepped(np.arange(3, dtype=F32), np.zeros(1, F32), 0, 3, 0)
    assert "slice step cannot be zero" in str(ei.value), str(ei.value)


EMPTY_ON_ONE_PATH = """
def pick(x: f32[N, 2], c: bool) -> f32[N, ?]:
    if c:
        y = x[:, 0:0]
    else:
        y = x
    return y

def total(x: f32[N, 2], c: bool) -> f32:
    if c:
        y = zeros([x.shape[0], 0])
    else:
        y = x
    return sum(y * 2.0) + mean(x)

def flat(x: f32[N, 2], c: bool) -> f32[?]:
    if c:
        y = x[:, 0:0]
    else:
        y = x
    return reshape(y, [-1])
"""


@pytest.mark.parametrize("empty", [True, False])
def test_a_variable_sized_n_by_0_on_one_path_and_n_by_2_on_the_other(mode, empty):
    """Its join is f32[N, ?]; compiled code reshaped the N x 0 one through a collapse that MLIR
    folds into an invalid one ('bufferization failed', an internal error)."""
    m = load(EMPTY_ON_ONE_PATH, mode)
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    y = x[:, :0] if empty else x
    assert_same(m.pick(x, empty), y)
    assert_same(m.total(x, empty), np.float32(2 * y.sum() + x.mean()))
    assert_same(m.flat(x, empty), y.reshape(-1))
