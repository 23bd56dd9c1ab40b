"""The call path into compiled code (runtime/descriptors.py): the packing and adoption made per
signature, and the general path they fall back on, give the same results."""
import numpy as np
import pytest

import dg
from dg.runtime import descriptors

SRC = """
def scale(x: f32[?]) -> f32[?]:
    return x * 2.0

def pair(x: f32[?], y: f32[?, ?]) -> (f32[?], f32[?, ?]):
    return x + 1.0, y * 3.0

def same(x: f32[?]) -> f32[?]:
    return x

def twice(x: f32[?]) -> (f32[?], f32[?]):
    y = x * 2.0
    return y, y

def first(x: f64[?, ?]) -> f64:
    return x[0, 0]
"""


@pytest.fixture(scope="module")
def m():
    return dg.loads(SRC, mode="compiled", filename="calls.dg")


def _entry(fn):
    comp = fn._last
    return comp.runner.entry(comp.symbol).layout


@pytest.mark.parametrize("n", [4, 10_000])  # copied out (16 bytes), and adopted (40 KB)
def test_small_results_are_copied_and_large_ones_adopted(m, n):
    x = np.arange(n, dtype=np.float32)
    r = m.scale(x)
    np.testing.assert_array_equal(r, 2 * x)
    assert r.flags.writeable and r.flags.c_contiguous
    if n * 4 <= descriptors.SMALL_RESULT:
        assert r.base is None  # NumPy's own memory; the compiled code's buffer was freed
    else:
        assert isinstance(r.base, descriptors.Memory) and r.base.owned  # freed when the array goes
    r[0] = 7  # the result is the caller's
    np.testing.assert_array_equal(m.scale(x), 2 * x)


def test_several_results_of_mixed_sizes(m):
    x, y = np.ones(3, np.float32), np.ones((100, 100), np.float32)
    a, b = m.pair(x, y)
    np.testing.assert_array_equal(a, x + 1)
    np.testing.assert_array_equal(b, y * 3)
    assert a.base is None and isinstance(b.base, descriptors.Memory)


def test_results_that_alias_an_argument_or_each_other_are_copies(m):
    x = np.arange(5, dtype=np.float32)
    r = m.same(x)
    assert r is not x and not np.shares_memory(r, x)
    np.testing.assert_array_equal(r, x)
    big = np.arange(10_000, dtype=np.float32)
    u, v = m.twice(big)
    assert not np.shares_memory(u, v)
    u[0] = -1
    assert v[0] == 0 and big[0] == 0


def test_arguments_the_signature_s_packing_declines_take_the_general_path(m):
    base = np.arange(8, dtype=np.float32)
    m.scale(base)
    pack = _entry(m.scale).pack
    descs = _entry(m.scale).buffers()[0]
    assert pack([base], descs) == (base.ctypes.data,)
    assert pack([base[::2]], descs) is None  # not contiguous
    assert pack([base.astype(np.float64)], descs) is None  # another dtype
    assert pack([bytearray(32)], descs) is None  # a writable buffer that is no array
    assert pack([base, base], descs) is None and pack([], descs) is None  # not one argument
    frozen = base.copy()
    frozen.setflags(write=False)
    assert pack([frozen], descs) is None  # read-only: the buffer protocol asks for writable memory
    for arg in (base[::2], frozen):
        np.testing.assert_array_equal(m.scale(arg), 2 * arg)


def test_scalar_results_and_two_dimensional_arguments(m):
    x = np.arange(12, dtype=np.float64).reshape(3, 4) + 5
    assert m.first(x) == 5.0 and isinstance(m.first(x), np.float64)
    assert m.first(np.asfortranarray(x)) == 5.0
    assert m.first(x[1:]) == 9.0


@pytest.mark.parametrize("n", [4, 10_000])
def test_bf16_results_small_and_large(n):
    import ml_dtypes

    m = dg.loads("def half(x: bf16[?]) -> bf16[?]:\n    return x * 0.5\n", mode="compiled", filename="bf.dg")
    x = np.arange(n).astype(ml_dtypes.bfloat16)
    r = m.half(x)
    assert r.dtype == ml_dtypes.bfloat16 and r.shape == (n,) and r.flags.writeable
    np.testing.assert_array_equal(r.astype(np.float32), (x.astype(np.float32) * 0.5).astype(ml_dtypes.bfloat16)
                                  .astype(np.float32))
