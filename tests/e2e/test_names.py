"""Programs checked by hand in every mode: built-in names shadowed, parameters named like built-ins or like the rewrite's flags.

Each is compared with a plain Python / NumPy re-implementation, or must fail with a located
`dg.DgError` (`x.dg:LINE:COL: error: ...`).
"""

import numpy as np
import pytest

import dg

from .util import FRONT_END_MODE, assert_located, assert_same, f32, load, made_no_code


def test_shadowing_builtin_names(mode):
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
    """, mode)
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
    """, FRONT_END_MODE)
    with made_no_code(), pytest.raises(dg.DgTypeError) as e:
        m.f(np.float32(1))
    assert_located(e.value, 3)


def test_user_names_that_look_like_rewrite_flags(mode):
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
    """, mode)
    assert_same(m.user_brk(f32(1), 5), np.int64(2))
    # As Python: `__t` is read where the path that ran bound it, and on the path without it the
    # read fails (UnboundLocalError) rather than give an invented value.
    assert_same(m.user_dunder(f32(1, 2), 1), f32(1, 2))
    with pytest.raises(dg.DgRuntimeError, match="local variable '__t' is referenced before assignment"):
        m.user_dunder(f32(1, 2), 0)
