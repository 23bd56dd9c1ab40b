"""Programs checked by hand in every mode: recursion, annotated or not, direct or mutual.

Each is compared with a plain Python / NumPy re-implementation, or must fail with a located
`dg.DgError` (`x.dg:LINE:COL: error: ...`).
"""

import re

import numpy as np
import pytest

import dg

from .util import F, assert_located, assert_same, f32, load, load_src

REC_ANN = """
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
"""


def test_deep_recursion_annotated(mode):
    assert_same(load(REC_ANN, mode).depth(200), np.int64(200))
    assert_same(load(REC_ANN, mode).depth(0), np.int64(0))


def test_recursion_thousands_deep_runs_in_both_modes(mode):
    # The interpreter's dg calls are Python calls: past Python's default limit of 1000 they
    # still run, as compiled code's do until its stack budget is spent.
    assert_same(load(REC_ANN, mode).depth(5000), np.int64(5000))


def chain(n: int) -> str:
    """f0 calls f1 calls ... f{n}: no recursion, n calls deep."""
    return "".join(f"def f{i}(x: f32) -> f32:\n    return f{i + 1}(x) * 1.0 + 1.0\n\n" for i in range(n)) + \
        f"def f{n}(x: f32) -> f32:\n    return x * x\n"


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["interp", "compiled"])
def test_a_chain_of_hundreds_of_calls_compiles_and_differentiates(mode):
    # Each call nests the emitter's walk (and the interpreter's run) a dozen Python frames deeper.
    m = load_src(chain(300), mode, filename="chain.dg")
    assert_same(m.f0(np.float32(2.0)), np.float32(304.0))
    if mode != "compiled":  # compiled, the gradient of the 300-chain takes 12 s (every vjp recomputes its callee)
        assert_same(dg.grad(m.f0)(np.float32(2.0)), np.float32(4.0))
    shorter = load_src(chain(120), mode, filename="chain120.dg")
    assert_same(dg.grad(shorter.f0)(np.float32(3.0)), np.float32(6.0))


@pytest.mark.slow  # (about a minute of compiling: the slow tier)
def test_a_chain_too_deep_to_compile_is_a_located_error():
    # Emission runs out of room the same way in every mode.
    with pytest.raises(dg.DgError) as e:
        load_src(chain(9000), "interp", filename="chain9000.dg").f0(np.float32(1.0))
    assert "chain9000.dg:1:1: error: f0() calls functions nested too deeply" in str(e.value)


@pytest.mark.slow
def test_too_deep_recursion_is_a_located_runtime_error(mode):
    with pytest.raises(dg.DgRuntimeError) as e:
        load(REC_ANN, mode).depth(100000)
    assert str(e.value).startswith(f"{F}:"), str(e.value)


def test_mutual_recursion_annotated(mode):
    for n in (0, 1, 7, 10, 51):
        assert_same(load(REC_ANN, mode).is_even(n), np.bool_(n % 2 == 0))
        assert_same(load(REC_ANN, mode).is_odd(n), np.bool_(n % 2 == 1))


def test_recursion_with_tuple_returns_and_shapes(mode):
    a, b = 0, 1
    for _ in range(10):
        a, b = b, a + b
    assert_same(load(REC_ANN, mode).fib2(10), (np.int64(a), np.int64(b)))
    x = np.arange(5, dtype=np.float32)
    assert_same(load(REC_ANN, mode).sumvec(x, 0), np.float32(10))
    assert_same(load(REC_ANN, mode).sumvec(x, 7), np.float32(0))
    assert_same(load(REC_ANN, mode).prefix(x, 3), x[:3])
    assert_same(load(REC_ANN, mode).prefix(x, 0), x[:0])
    assert_same(load(REC_ANN, mode).inloop(5), np.int64(32))


REC_PLAIN = """
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
"""




@pytest.mark.parametrize("name,arg,want", [
    ("depth", 200, np.int64(200)),
    ("depth", 3, np.int64(3)),
    ("fact", 6, np.float32(720)),
    ("fib2", 10, (np.int64(55), np.int64(89))),
    ("expr_rec", 4, np.int64(8)),
])
def test_recursion_without_annotations(mode, name, arg, want):
    assert_same(getattr(load(REC_PLAIN, mode), name)(arg), want)


@pytest.mark.parametrize("n", [0, 3, 10])
def test_mutual_recursion_without_annotations(mode, n):
    assert_same(load(REC_PLAIN, mode).is_even(n), np.bool_(n % 2 == 0))
    assert_same(load(REC_PLAIN, mode).is_odd(n), np.bool_(n % 2 == 1))


@pytest.mark.parametrize("n", [0, 3, 6])
def test_mutual_recursion_entered_from_unannotated_side(mode, n):
    assert_same(load(REC_PLAIN, mode).even_ann(n), np.bool_(n % 2 == 0))
    assert_same(load(REC_PLAIN, mode).odd_plain(n), np.bool_(n % 2 == 1))


NO_WAY_OUT = """
def forever(x):
    return forever(x + 1.0)

def ping(x):
    return pong(x) * 2.0

def pong(x):
    return ping(x + 1.0)
"""


@pytest.mark.parametrize("name,line", [("forever", 1), ("ping", 4)])
def test_an_unannotated_recursion_with_no_way_out_names_its_function(mode, name, line):
    """Nothing returns a value to infer a result type from: a located error asking for one (the
    call was dropped and the function returned nothing)."""
    with pytest.raises(dg.DgTypeError) as e:
        getattr(load(NO_WAY_OUT, mode), name)(1.0)
    assert_located(e.value, line)
    assert "cannot be inferred" in str(e.value) and "annotate" in str(e.value)


ONE_COPY = """
def tsum(x, i):
    if i >= x.shape[0]:
        return 0.0 * x[0]
    return x[i] + tsum(x, i + 1)

def ping2(x, n):
    if n == 0:
        return x
    return pong2(x * 2.0, n - 1)

def pong2(x, n):
    return ping2(x + 1.0, n)

def top(x: f32[4]):
    return tsum(x * 2.0, 0), ping2(x, 2)

def both(y: f32[4]) -> f32:
    return tsum(y, 0) + sum(ping2(y, 2))

def g(x: f32[4]):
    return grad(both)(x)
"""


@pytest.mark.slow
def test_a_recursive_function_first_called_with_static_sizes_is_made_once(mode):
    """Its first call (static sizes, a Python int) and its recursive calls (dynamic sizes) share
    one specialization: before, the first call had one of its own, a whole second copy of the
    function (and of its gradient) to compile."""
    m = load(ONE_COPY, mode)
    x = f32(1, 2, 3, 4)
    assert_same(m.top(x), (np.float32(20), f32(7, 11, 15, 19)))
    assert_same(m.g(x), np.full(4, 5, np.float32))
    text = m.g.ir("dg", args=(x,))
    for name in ("tsum", "ping2", "pong2"):
        assert len(re.findall(rf"func\.func (?:private )?@{name}(?:_\d+)?\(", text)) == 1, name
