"""Ctrl-C stops running dg code with KeyboardInterrupt in both modes, inside loops (`while` and
`for`) and recursion, within a second or two; the process and the loaded program stay usable.
Each case runs in a subprocess that is sent SIGINT."""
import os
import signal
import subprocess
import sys
import time

import pytest

PROGRAM = """
def forever(x: f64) -> f64:
    while x > 0.0:
        x = x + 1.0
    return x

def count(n: i64) -> f32:
    s = 0.0
    for k in range(n):
        s = s + 1.0
    return s

def rows(x: f64[N, M], n: i64) -> f64:
    s = 0.0
    for k in range(n):
        s = s + sum(x[k % 4] * 2.0)
    return s

def fib(n: i64) -> i64:
    if n < 2:
        return n
    return fib(n - 1) + fib(n - 2)
"""

def at_a_terminal() -> None:
    """Run in a child before it starts (`preexec_fn`): SIGINT's default action, as a process
    started at a terminal has. A shell without job control starts a background job with SIGINT
    ignored, and a child inherits that; Python then leaves SIGINT ignored (no KeyboardInterrupt),
    and so does dg."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


RUN = """
import sys, time
import numpy as np
import dg
m = dg.loads(sys.argv[1], mode=sys.argv[2], filename="ctrl_c.dg")
name = sys.argv[3]
args = {"forever": (1.0,), "count": (10 ** 13,), "rows": (np.ones((4, 3)), 10 ** 13), "fib": (200,)}[name]
small = {"forever": (-1.0,), "count": (3,), "rows": (np.ones((4, 3)), 2), "fib": (10,)}[name]
fn = getattr(m, name)
print("warm", fn(*small), flush=True)
print("ready", flush=True)
t = time.perf_counter()
try:
    fn(*args)
    print("returned", flush=True)
except KeyboardInterrupt:
    print(f"interrupted {time.perf_counter() - t:.3f}", flush=True)
print("again", fn(*small), flush=True)
"""


@pytest.mark.parametrize("mode", ["interp", "compiled"])
@pytest.mark.parametrize("name", ["forever", "count", "rows", "fib"])
def test_ctrl_c_raises_keyboard_interrupt_and_the_program_stays_usable(mode, name):
    p = subprocess.Popen([sys.executable, "-c", RUN, PROGRAM, mode, name], stdout=subprocess.PIPE,
                         preexec_fn=at_a_terminal,
                         stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # (the first call compiles)
            line = p.stdout.readline()
            lines.append(line)
            if line.startswith("ready") or not line:
                break
        assert lines[-1].startswith("ready"), (lines, p.stderr.read() if p.poll() is not None else "")
        time.sleep(0.5)  # inside the long call by now
        sent = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=10)
        took = time.monotonic() - sent
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, (out, err)
    assert "interrupted" in out, (out, err)
    assert took < 3.0, took
    warm = lines[0].split()[1]
    assert f"again {warm}" in out, (lines, out)


def interrupted_once_ready(code: str, wait: float = 0.5) -> subprocess.CompletedProcess:
    """Run `python -c code`; when it prints a line starting with "ready", wait, send it SIGINT,
    and return what it printed and its status."""
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=at_a_terminal)
    try:
        first = p.stdout.readline()
        assert first.startswith("ready"), (first, p.stderr.read() if p.poll() is not None else "")
        time.sleep(wait)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def test_a_program_without_a_sigint_handler_keeps_the_default():
    """Where SIGINT has its default action, dg installs nothing: Ctrl-C still ends the process."""
    code = ("import signal, sys, dg\nsignal.signal(signal.SIGINT, signal.SIG_DFL)\n"
            f"m = dg.loads({PROGRAM!r}, mode='compiled', filename='d.dg')\n"
            "m.count(3)\nprint('ready', flush=True)\nm.forever(1.0)\n")
    assert interrupted_once_ready(code, 0.3).returncode == -signal.SIGINT


@pytest.mark.skipif(os.name != "posix", reason="signals")
def test_a_handler_python_installs_later_is_chained_too():
    """A SIGINT handler set with signal.signal after dg's first call replaces dg's at the C level;
    the next call puts dg's back in front of it, so Ctrl-C still stops compiled code and still
    reaches the Python handler."""
    code = ("import signal, sys, dg\n"
            f"m = dg.loads({PROGRAM!r}, mode='compiled', filename='d.dg')\n"
            "m.count(3)\nseen = []\n"
            "def on_int(s, f):\n    seen.append(s)\n    raise KeyboardInterrupt\n"
            "signal.signal(signal.SIGINT, on_int)\nprint('ready', flush=True)\n"
            "try:\n    m.forever(1.0)\nexcept KeyboardInterrupt:\n    print('interrupted', seen, flush=True)\n")
    r = interrupted_once_ready(code)
    assert f"interrupted [{int(signal.SIGINT)}]" in r.stdout, (r.stdout, r.stderr)


def test_ctrl_c_again_after_a_compile_that_installed_llvms_handler():
    """LLVM puts a SIGINT handler of its own in front while it writes an object file (one that
    raises SIGINT again from inside itself), in front of dg's when a dg call came before: a
    second Ctrl-C, after such a compile, still stops the loop, and the process does not crash
    (it recursed in the signal handlers until the stack ran out)."""
    code = ("import os, signal, sys, threading, time, numpy as np, dg\n"
            f"m = dg.loads({PROGRAM!r}, mode='compiled', filename='d.dg')\n"
            "def stop_in(s):\n    threading.Timer(s, lambda: os.kill(os.getpid(), signal.SIGINT)).start()\n"
            "m.forever(-1.0)\nstop_in(0.5)\n"
            "try:\n    m.forever(1.0)\nexcept KeyboardInterrupt:\n    print('first', flush=True)\n"
            "m.forever(-2.0)\nm.count(5)\nstop_in(0.5)\n"
            "try:\n    m.count(10 ** 13)\nexcept KeyboardInterrupt:\n    print('second', flush=True)\n"
            "print('again', m.count(7), flush=True)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "DG_CACHE": "0"}, preexec_fn=at_a_terminal)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr[-2000:])
    assert r.stdout.split("\n") == ["first", "second", "again 7.0", ""], r.stdout
