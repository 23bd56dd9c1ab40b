"""Whole programs: softmax regression trained with hand-written gradients (programs/train.dg)."""
import numpy as np
import pytest

from .util import check, load_prog

F32, F64, I64 = np.float32, np.float64, np.int64


@pytest.fixture
def m(mode):
    return load_prog("train.dg", mode)


def _data(b, d=4, c=3, seed=0):
    r = np.random.default_rng(seed)
    centers = r.standard_normal((c, d)) * 3.0
    labels = r.integers(0, c, b).astype(I64)
    x = (centers[labels] + r.standard_normal((b, d))).astype(F32)
    w = (r.standard_normal((d, c)) * 0.1).astype(F32)
    bias = np.zeros(c, F32)
    return x, labels, w, bias


def _softmax(z):
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def _xent(z, labels):
    ls = z - z.max(1, keepdims=True)
    ls = ls - np.log(np.exp(ls).sum(1, keepdims=True))
    return -ls[np.arange(len(labels)), labels].mean()


def _train(x, labels, w, b, lr, steps):
    x, w, b = x.astype(F64), w.astype(F64), b.astype(F64)
    y = np.eye(w.shape[1])[labels]
    losses = []
    for _ in range(steps):
        z = x @ w + b
        losses.append(_xent(z, labels))
        g = (_softmax(z) - y) / x.shape[0]
        w = w - lr * (x.T @ g)
        b = b - lr * g.sum(0)
    return w, b, np.array(losses)


def test_one_hot(m):
    labels = np.array([2, 0, 1, 2], I64)
    check(m.one_hot(labels, 3), np.eye(3, dtype=F32)[labels])
    check(m.one_hot(labels, 5), np.eye(5, dtype=F32)[labels])


@pytest.mark.parametrize("batch,steps", [(16, 20), (7, 5), (32, 0)])
def test_train_matches_numpy(m, batch, steps):
    x, labels, w, b = _data(batch, seed=batch)
    x0, w0 = x.copy(), w.copy()
    w1, b1, losses = m.train(x, labels, w, b, F32(0.5), steps)
    rw, rb, rl = _train(x, labels, w, b, 0.5, steps)
    check(w1, rw.astype(F32), rtol=1e-4, atol=1e-5)
    check(b1, rb.astype(F32), rtol=1e-4, atol=1e-5)
    check(losses, rl.astype(F32), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(w, w0)
    if steps > 1:
        assert losses[-1] < losses[0]
        check(m.predict(x, w1, b1), np.argmax(x.astype(F64) @ rw + rb, axis=1).astype(I64))


def test_train_until_tolerance(m):
    x, labels, w, b = _data(24, seed=3)
    loss, steps = m.train_until(x, labels, w, b, F32(0.5), F32(0.1))
    xd, wd, bd = x.astype(F64), w.astype(F64), b.astype(F64)
    y = np.eye(3)[labels]
    rl, rs = _xent(xd @ wd + bd, labels), 0
    while rl > 0.1 and rs < 500:
        g = (_softmax(xd @ wd + bd) - y) / 24
        wd, bd = wd - 0.5 * (xd.T @ g), bd - 0.5 * g.sum(0)
        rl, rs = _xent(xd @ wd + bd, labels), rs + 1
    assert 0 < rs < 500
    assert np.asarray(steps).dtype == I64 and abs(int(steps) - rs) <= 1, (steps, rs)
    assert float(loss) <= 0.1 and np.asarray(loss).dtype == F32
    np.testing.assert_allclose(loss, rl, rtol=0.05)
