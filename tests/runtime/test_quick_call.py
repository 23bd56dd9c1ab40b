"""The quick call (runtime.fastcall): after a first call, calls with arguments of the same
structure, dtypes and shapes go from Python straight into compiled code, and give exactly what
the general path gives: the same values and result types, the same located errors, Ctrl-C, the
same buffers owned, nothing leaked; anything else goes the general path."""
import gc
import os
import resource
import subprocess
import sys
import threading

import numpy as np
import pytest

import dg
from dg.runtime import fastcall
from dg.runtime.cpu import CpuProgram

from .test_interrupt import HANG, WHEN_INSIDE, at_a_terminal

SRC = """
def add_one(x: f32[?]) -> f32[?]:
    return x + 1.0

def pair(x: f32[?], y: f32[?]) -> (f32[?], f32):
    return x * y, sum(x)

def twice(x: f32[?]) -> f32[?]:
    return x * 2.0

def same(x: f32[?]) -> f32[?]:
    return x

def layer(p: {"w": f32[?, ?], "b": f32[?]}, xs: (f32[?, ?], f32[?, ?])) -> f32[?, ?]:
    return xs[0] @ p["w"] + p["b"] + xs[1]

def pick(x: f32[?], i: i64) -> f32:
    return x[i]

def scaled(x: f64[?], a: f64, n: i64) -> f64[?]:
    return x * a + f64(n)

def nothing(x: f32[?]):
    y = x + 1.0

def rate(x: f32[?], a: f32) -> f32[?]:
    return x * a

def rate64(x: f64[?], a: f64) -> f64[?]:
    return x * a

def loose(x, a):
    return x * a

def step(p: {"w": f32[?], "lr": f32}) -> f32[?]:
    return p["w"] * p["lr"]
"""


@pytest.fixture(scope="module")
def m():
    return dg.loads(SRC, mode="compiled", filename="quick.dg")


@pytest.fixture(scope="module")
def ref():
    return dg.loads(SRC, mode="interp", filename="quick.dg")


@pytest.fixture
def general_calls(monkeypatch):
    """How many calls went the general path (CpuProgram.call)."""
    count = [0]
    call = CpuProgram.call

    def counted(self, symbol, arrays):
        count[0] += 1
        return call(self, symbol, arrays)

    monkeypatch.setattr(CpuProgram, "call", counted)
    return count


def same_result(a, b):
    assert type(a) is type(b), (a, b)
    if isinstance(a, tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            same_result(x, y)
    elif a is not None:
        assert a.dtype == b.dtype and np.shape(a) == np.shape(b)
        np.testing.assert_allclose(a, b, rtol=1e-6)


def arguments():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(5).astype(np.float32)
    p = {"w": rng.standard_normal((3, 2)).astype(np.float32), "b": rng.standard_normal(2).astype(np.float32)}
    xs = (rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((4, 2)).astype(np.float32))
    return {
        "add_one": (x,), "pair": (x, x + 1), "twice": (np.ones(100_000, np.float32),), "same": (x,),
        "layer": (p, xs), "pick": (x, np.int64(3)), "scaled": (np.arange(3.0), np.float64(2.5), np.array(4)),
        "nothing": (x,),
    }


@pytest.mark.parametrize("name", ["add_one", "pair", "twice", "same", "layer", "pick", "scaled", "nothing"])
def test_repeated_calls_go_the_quick_way_and_give_what_the_general_path_gives(m, ref, general_calls, name):
    fn, args = getattr(m, name), arguments()[name]
    first = fn(*args)
    fn(*args)
    assert fn._quick is not None, "a quick call is made by the second call"
    before = general_calls[0]
    again = [fn(*args) for _ in range(3)]
    assert general_calls[0] == before, "the repeated calls did not go the general path"
    expected = getattr(ref, name)(*args)
    for r in [first] + again:
        same_result(r, expected)
    if name == "twice":  # a large result is an array on the call's own buffer, freed with it
        assert not again[0].flags.owndata and again[0].flags.writeable and again[0].flags.c_contiguous
    if name == "add_one":  # a small one is copied into an array of its own
        assert again[0].flags.owndata and again[0].flags.writeable
    if name == "same":  # a result that is an argument is copied, as the general path does
        assert again[0] is not args[0] and not np.shares_memory(again[0], args[0])


def test_other_arguments_go_the_general_path_with_its_answers(m, general_calls):
    x = np.arange(6, dtype=np.float32)
    m.add_one(x)
    m.add_one(x)
    quick = m.add_one._quick
    for other in (x[::2], x.reshape(2, 3)[:, 0], np.arange(7, dtype=np.float32)):  # views, another shape
        before = general_calls[0]
        np.testing.assert_array_equal(m.add_one(other), other + 1)
        assert general_calls[0] == before + 1
    with pytest.raises(dg.DgTypeError, match="float64 array"):
        m.add_one(x.astype(np.float64))
    np.testing.assert_array_equal(m.add_one(x=x), x + 1)  # keywords
    m.add_one(x)  # the first shape again: its quick call comes back
    assert m.add_one._quick is quick
    before = general_calls[0]
    m.add_one(x)
    assert general_calls[0] == before


def test_a_failed_check_raises_the_located_error_and_the_next_call_runs(m, general_calls):
    x = np.arange(4, dtype=np.float32)
    assert m.pick(x, np.int64(1)) == 1.0
    for _ in range(2):
        with pytest.raises(dg.DgRuntimeError) as e:
            m.pick(x, np.int64(9))
        assert "quick.dg:18:12" in str(e.value) and "index 9 is out of bounds" in str(e.value)
    assert m.pick(x, np.int64(2)) == 2.0


def test_calls_from_many_threads_agree(m):
    """The quick call is its first caller's thread's; the others take the general path, and
    each call of the program waits for the one running (their state words are one)."""
    x = np.arange(1000, dtype=np.float32)
    m.twice(x)
    errors = []

    def work(k):
        try:
            for i in range(300):
                y = x + (k * 1000 + i)
                np.testing.assert_array_equal(m.twice(y), y * 2)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    work(9)
    for t in threads:
        t.join()
    assert not errors, errors


def test_nothing_leaks(m):
    """Arguments keep their reference counts, the markers theirs, and result buffers are freed
    with their arrays (400 calls of 8 MB results would hold 3.2 GB)."""
    x = np.ones(2_000_000, np.float32)
    m.twice(x)
    m.twice(x)
    gc.collect()
    counts = sys.getrefcount(x), sys.getrefcount(fastcall.RAN), sys.getrefcount(fastcall.NOT_RUN), sys.getrefcount(None)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(400):
        m.twice(x)
    grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak) * 1024
    assert grew < 200e6, grew
    y = np.arange(3, dtype=np.float32)
    m.pick(y, np.int64(0))
    for i in range(50):
        with pytest.raises(dg.DgRuntimeError):
            m.pick(y, np.int64(5))  # (RAN)
        m.pick(y[::-1].copy(order="F")[::1], np.int64(0))
        m.nothing(y)
    gc.collect()
    now = sys.getrefcount(x), sys.getrefcount(fastcall.RAN), sys.getrefcount(fastcall.NOT_RUN)
    assert now == counts[:3]
    assert abs(sys.getrefcount(None) - counts[3]) < 50


@pytest.mark.parametrize("mode", ["compiled", "interp"])
def test_python_floats_take_their_parameters_dtype_on_every_call(mode, general_calls):
    """A Python float is weakly typed: an f32 parameter rounds it to f32, an unannotated one takes
    it as f32, an f64 one keeps it. Repeated calls (the fingerprint's signature, and in compiled
    mode the quick call, which rounds it itself) give exactly what the first call gives."""
    fns = dg.loads(SRC, mode=mode, filename="quick.dg")
    x32, x64 = np.arange(4, dtype=np.float32), np.arange(4.0)
    third = 1 / 3  # (not exact in f32: rounding shows)
    cases = [(fns.rate, (x32, third), np.float32), (fns.rate64, (x64, third), np.float64),
             (fns.loose, (x32, third), np.float32), (fns.step, ({"w": x32, "lr": third},), np.float32)]
    for fn, args, dtype in cases:
        first = fn(*args)
        fn(*args)
        before = general_calls[0]
        again = [fn(*args) for _ in range(3)]
        for r in [first] + again:
            assert r.dtype == dtype
            np.testing.assert_array_equal(r, np.arange(4, dtype=dtype) * dtype(third))
        if mode == "compiled":
            assert general_calls[0] == before and fn._quick is not None
        other = fn(*(args[:-1] + (2.5,)) if fn is not fns.step else ({"w": x32, "lr": 2.5},))
        np.testing.assert_array_equal(other, np.arange(4, dtype=dtype) * 2.5)
    with pytest.raises(dg.DgTypeError, match="is the float 0.5, but i64 was declared"):
        fns.pick(x32, 0.5)


CTRL_C = WHEN_INSIDE + """
import os, numpy as np, dg
from dg.runtime.cpu import CpuProgram
m = dg.loads('''
def rows(x: f64[N, M], n: i64) -> f64:
    s = 0.0
    for k in range(n):
        s = s + sum(x[k % 4] * 2.0)
    return s
''', mode="compiled", filename="ctrl_c.dg")
x = np.ones((4, 3))
print("warm", m.rows(x, np.int64(2)), m.rows(x, np.int64(3)), m.rows._quick is not None, flush=True)
general = []
call = CpuProgram.call
CpuProgram.call = lambda self, *a: general.append(1) or call(self, *a)
when_inside("compiled", lambda: os.kill(os.getpid(), signal.SIGINT))
try:
    m.rows(x, np.int64(10 ** 13))
except KeyboardInterrupt:
    print("interrupted", len(general), flush=True)
print("again", m.rows(x, np.int64(2)), flush=True)
"""


def test_ctrl_c_stops_a_quick_call():
    """The quick call releases the GIL while compiled code runs (a thread of the process sends it
    SIGINT once the call has armed Ctrl-C) and arms Ctrl-C as the general path does; the
    interrupted call made no general-path call."""
    r = subprocess.run([sys.executable, "-c", CTRL_C], capture_output=True, text=True, timeout=HANG,
                       env={**os.environ, "DG_CACHE": "0"}, preexec_fn=at_a_terminal)
    assert r.stdout.split("\n") == ["warm 12.0 18.0 True", "interrupted 0", "again 12.0", ""], (r.stdout, r.stderr)


def _run(code: str) -> str:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "DG_CACHE": "0"})  # (the timeout: a guard against a hang)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr[-3000:])
    return r.stdout


HELD = WHEN_INSIDE + """
import gc, numpy as np, dg
from dg.runtime.cpu import CpuProgram
m = dg.loads('''
def f(xs: (f64[?],), stop: f64) -> f64:
    k = 1.0
    s = sum(xs[0])
    while s != stop:  # (until another thread writes into the array)
        k = k + 1.0
        s = sum(xs[0] * k) / k
    return s
''', mode="compiled", filename="held.dg")
xs = [np.ones(8_000_000)]  # (64 MB: unmapped when freed)
m.f(xs, 8e6); m.f(xs, 8e6)
assert m.f._quick is not None
general = []
call = CpuProgram.call
CpuProgram.call = lambda self, *a: general.append(1) or call(self, *a)
gc.collect()

def drop_then_end():
    address = xs[0].__array_interface__["data"][0]
    xs[0] = None  # the list held the only other reference
    gc.collect()
    ctypes.c_double.from_address(address).value = 2.0  # (freed, unmapped memory: a crash) the loop ends

when_inside("compiled", drop_then_end)
print(m.f(xs, 8e6 + 1), xs[0], len(general))
"""


def test_an_array_taken_out_of_its_list_during_a_quick_call_lives_until_the_call_ends():
    """The quick call holds the arrays it found while the GIL is let go (another thread may drop
    the container's reference; reading freed memory crashed the process). Here the other thread
    drops it once the call is inside compiled code, and then writes into the array, which is what
    ends the call's loop: a quick call that did not hold it leaves that write to unmapped memory."""
    assert _run(HELD) == "8000001.0 None 0\n"


REENTER = WHEN_INSIDE + """
import os, numpy as np, dg
m = dg.loads('''
def g(x: f64[?], stop: f64) -> (f64[?], f64[?]):
    k = 1.0
    s = sum(x)
    while s != stop:  # (until another thread writes into x)
        k = k + 1.0
        s = sum(x * k) / k
    y = x * 0.0 + s
    return y, y
''', mode="compiled", filename="reenter.dg")
x = np.ones(100_000)
m.g(x, 1e5); m.g(x, 1e5)
assert m.g._quick is not None
inner = []
signal.signal(signal.SIGALRM, lambda sig, frame: inner.append(m.g(x, 1e5 + 1)))
tripped, wakeup = os.pipe()
os.set_blocking(wakeup, False)
signal.set_wakeup_fd(wakeup)  # (CPython's C handler writes the signal's number there)
address = x.__array_interface__["data"][0]

def alarm_then_end():
    os.kill(os.getpid(), signal.SIGALRM)
    os.read(tripped, 1)  # the Python handler is pending: it runs once the call has returned
    ctypes.c_double.from_address(address).value = 2.0  # the loop ends

when_inside("compiled", alarm_then_end)
outer = m.g(x, 1e5 + 1)  # (two results on one buffer: the general path finishes it)
print(len(inner), inner[0][0][0] == 100_001.0, outer[0][0] == 100_001.0, np.shares_memory(outer[0], inner[0][0]))
"""


@pytest.mark.slow
def test_a_quick_call_made_before_the_last_one_is_finished_changes_nothing_of_it():
    """A signal handler runs right after the quick call returned a call for the general path to
    finish, and calls again: each call gets its own results (they shared one results struct, and
    the second call's buffers were freed twice). The signal is sent while the call is inside
    compiled code, and the call's loop ends only after CPython has taken it."""
    assert _run(REENTER).split() == ["1", "True", "True", "False"]


WORKER = """
import threading, numpy as np, dg
from dg.runtime.cpu import CpuProgram
n = [0]
call = CpuProgram.call
def counted(self, *a):
    n[0] += 1
    return call(self, *a)
CpuProgram.call = counted
m = dg.loads("def f(x: f32[?]) -> f32[?]:\\n    return x + 1.0\\n", mode="compiled", filename="worker.dg")
x = np.ones(4, np.float32)
def work():
    for _ in range(100):
        assert (m.f(x) == 2).all()
t = threading.Thread(target=work)
t.start()
t.join()
print(n[0])
"""


def test_quick_calls_on_a_thread_when_the_main_thread_never_called():
    """Off the main thread, where Python's SIGINT handler cannot be learnt, calls run unarmed, as
    the general path runs them there (before, every call went the general path). The first two go the
    general path: the second makes the quick call."""
    assert _run(WORKER) == "2\n"


def test_the_general_path_gets_its_turn_beside_a_stream_of_quick_calls(m):
    """A thread on the general path waits for the program while another thread's quick calls
    keep coming: while it waits, those calls queue on the general path too."""
    x = np.arange(1000, dtype=np.float32)
    m.twice(x)
    done = threading.Event()

    def other():
        for _ in range(50):
            np.testing.assert_array_equal(m.twice(x), x * 2)
        done.set()

    t = threading.Thread(target=other)
    t.start()
    calls = 0
    while not done.is_set() and calls < 2_000_000:
        m.twice(x)
        calls += 1
    t.join()
    assert done.is_set(), f"the other thread did not finish while {calls} quick calls ran"


def test_a_list_of_arrays_that_a_parameter_takes_as_one_array(m):
    """f32[2, ?] takes [a, b] as one array (stacked): no fingerprint, nor quick call, may take it
    as two arrays (a second call failed, packing two descriptors for one)."""
    m2 = dg.loads("def f(x: f32[2, ?]) -> f32[?]:\n    return x[0] + x[1] * 10.0\n", mode="compiled",
                  filename="stacked.dg")
    a, b = np.ones(3, np.float32), np.full(3, 2, np.float32)
    for _ in range(3):
        np.testing.assert_array_equal(m2.f([a, b]), np.full(3, 21, np.float32))
    np.testing.assert_array_equal(m2.f(np.stack([a, b])), np.full(3, 21, np.float32))


def test_the_first_calls_arguments_are_not_kept(m):
    """Nothing the quick call keeps refers to the arguments it was made for (a reference cycle
    kept them until the next garbage collection)."""
    import weakref

    was = gc.isenabled()
    gc.disable()
    try:
        x = np.ones(1000, np.float32) * 3
        r = weakref.ref(x)
        m.add_one(x)
        m.add_one(x)
        assert m.add_one._quick is not None
        del x
        assert r() is None
    finally:
        if was:
            gc.enable()
