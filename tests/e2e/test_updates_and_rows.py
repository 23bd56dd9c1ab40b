"""Programs checked by hand in every mode: functional updates (never aliased) and iteration over rows.

Each is compared with a plain Python / NumPy re-implementation, or must fail with a located
`dg.DgError` (`x.dg:LINE:COL: error: ...`).
"""

import numpy as np
import pytest

from .util import assert_same, f32, load

UPD = """
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
"""


def test_setitem_inside_loops(mode):
    assert_same(load(UPD, mode).setloop(5), np.arange(5, dtype=np.float32) ** 2)
    assert_same(load(UPD, mode).setloop(0), f32())
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    keep = x.copy()
    want = x * np.arange(4, dtype=np.float32)[:, None]
    want[:, 0] += 100
    assert_same(load(UPD, mode).setrow(x), want)
    np.testing.assert_array_equal(x, keep)  # the caller's array is untouched
    X = np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32)
    assert_same(load(UPD, mode).pairwise(X), ((X[:, None] - X[None]) ** 2).sum(-1), rtol=1e-4, atol=1e-5)
    assert_same(load(UPD, mode).pairwise(np.zeros((0, 2), np.float32)), np.zeros((0, 0), np.float32))
    assert_same(load(UPD, mode).while_set(f32(1, 2, -3, 4)), (f32(-1, -2, -3, 4), np.int64(2)))
    assert_same(load(UPD, mode).while_set(f32(1, 2)), (f32(-1, -2), np.int64(2)))


def test_updates_never_alias(mode):
    x = f32(1, 2, 3)
    assert_same(load(UPD, mode).alias(x), (x, f32(100, 2, 3)))
    assert_same(load(UPD, mode).noalias(x), (x, f32(5, 2, 3)))
    assert_same(load(UPD, mode).loopalias(x, 3), (f32(2, 3, 3), f32(2, 3, 4)))
    assert_same(x, f32(1, 2, 3))


ROWS = """
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
"""


@pytest.mark.parametrize("n", [0, 1, 4, 7])
def test_for_row_over_dynamic_first_dimension(mode, n):
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3) - 5
    assert_same(load(ROWS, mode).rows(x), (x * x).sum(0))
    assert_same(load(ROWS, mode).rows_cat(x), x[:, -1])
    acc = np.zeros(3, np.float32)
    for r in x:
        if r.sum() < 0:
            break
        acc = acc + r
    assert_same(load(ROWS, mode).brk_rows(x), acc)
    for t in (-100.0, 0.0, 20.0, 1e9):
        want = next(((np.int64(k), r) for k, r in enumerate(x) if r.sum() > t), (np.int64(-1), np.zeros(3, np.float32)))
        assert_same(load(ROWS, mode).rows_ret(x, t), want)
    assert len(load(ROWS, mode).rows._cache) == 1  # `?` dims are shape-generic
