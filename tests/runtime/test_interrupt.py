"""Ctrl-C stops running dg code with KeyboardInterrupt in both modes, inside loops (`while` and
`for`) and recursion; the process and the loaded program stay usable. Each case runs in a
subprocess that is sent SIGINT once it is inside the call (a handshake: `WHEN_INSIDE`), never
after a guessed delay; the only clock is a guard against a hang."""
import os
import signal
import subprocess
import sys
import threading

import pytest

# A guard against a hang, not a speed limit: a child still running after this long is killed (and
# the test fails); an interrupted call ends in milliseconds.
HANG = 120

# For the child processes: when_inside(mode, then) calls then() once the next outermost dg call
# is running its code. Interpreted: at the first call into the interpreter's generated code (a
# profile hook on this thread). Compiled: once the call has armed Ctrl-C (runtime.interrupt): the
# flag, set to 7 here, is cleared by `dg_arm` right before the compiled code runs, and, where
# SIGINT has a Python handler, dg's handler is in front of it; a watching thread polls for that
# (the compiled call lets the GIL go), and calls then() from there. A SIGINT sent after then()
# sets the flag, which the compiled loop reads on its next iteration.
WHEN_INSIDE = """
import ctypes, signal, sys, threading, time
from dg.runtime import interrupt as _interrupt

def when_inside(mode, then):
    if mode == "interp":
        def hook(frame, event, arg):
            if event == "call" and frame.f_code.co_filename.startswith("<dg-interp-"):
                sys.setprofile(None)
                then()
        sys.setprofile(hook)
        return
    flag = _interrupt.flag()
    flag.value = 7
    ours = _interrupt._Handler.engine.get_function_address("dg_on_sigint")
    python = callable(signal.getsignal(signal.SIGINT))
    now = _interrupt._Sigaction()

    def in_front():
        _interrupt._libc.sigaction(signal.SIGINT, None, now)
        return ctypes.c_void_p.from_buffer(now).value == ours

    def watch():
        while flag.value != 0 or (python and not in_front()):
            time.sleep(0.001)  # (a poll of the flag the call clears, not a wait for time to pass)
        then()

    threading.Thread(target=watch, daemon=True).start()
"""

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


RUN = WHEN_INSIDE + """
import numpy as np
import dg
m = dg.loads(sys.argv[1], mode=sys.argv[2], filename="ctrl_c.dg")
name = sys.argv[3]
args = {"forever": (1.0,), "count": (10 ** 13,), "rows": (np.ones((4, 3)), 10 ** 13), "fib": (200,)}[name]
small = {"forever": (-1.0,), "count": (3,), "rows": (np.ones((4, 3)), 2), "fib": (10,)}[name]
fn = getattr(m, name)
print("warm", fn(*small), flush=True)
when_inside(sys.argv[2], lambda: print("inside", flush=True))
try:
    fn(*args)
    print("returned", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
print("again", fn(*small), flush=True)
"""


def interrupted_once_inside(argv: list, env=None) -> tuple:
    """Run `python argv...`; once it prints "inside" (WHEN_INSIDE), send it SIGINT, as Ctrl-C at a
    terminal does. Returns (the lines it printed up to "inside", the rest of its output, its
    standard error, its status). A child that hangs is killed after HANG s."""
    p = subprocess.Popen([sys.executable] + argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=at_a_terminal, env=env)
    guard = threading.Timer(HANG, p.kill)
    guard.start()
    try:
        lines = []
        for line in p.stdout:  # (the first call compiles)
            lines.append(line)
            if line.startswith("inside"):
                p.send_signal(signal.SIGINT)
                break
        assert lines and lines[-1].startswith("inside"), (lines, p.stderr.read() if p.poll() is not None else "")
        out, err = p.communicate()
    finally:
        guard.cancel()
        if p.poll() is None:
            p.kill()
    return lines, out, err, p.returncode


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["interp", "compiled"])
@pytest.mark.parametrize("name", ["forever", "count", "rows", "fib"])
def test_ctrl_c_raises_keyboard_interrupt_and_the_program_stays_usable(mode, name):
    lines, out, err, status = interrupted_once_inside(["-c", RUN, PROGRAM, mode, name])
    assert status == 0, (out, err)
    assert out.split("\n")[0] == "interrupted", (out, err)
    warm = lines[0].split()[1]
    assert f"again {warm}" in out, (lines, out)


@pytest.mark.slow
def test_a_program_without_a_sigint_handler_keeps_the_default():
    """Where SIGINT has its default action, dg installs nothing: Ctrl-C still ends the process."""
    code = (WHEN_INSIDE + "import dg\nsignal.signal(signal.SIGINT, signal.SIG_DFL)\n"
            f"m = dg.loads({PROGRAM!r}, mode='compiled', filename='d.dg')\n"
            "m.count(3)\nwhen_inside('compiled', lambda: print('inside', flush=True))\nm.forever(1.0)\n")
    _, out, err, status = interrupted_once_inside(["-c", code])
    # (ended by the default action itself: a KeyboardInterrupt that no one caught would end it with
    # SIGINT too, Python's way of exiting on one, but after printing its traceback)
    assert status == -signal.SIGINT and "KeyboardInterrupt" not in err, (status, out, err)


@pytest.mark.slow
@pytest.mark.skipif(os.name != "posix", reason="signals")
def test_a_handler_python_installs_later_is_chained_too():
    """A SIGINT handler set with signal.signal after dg's first call replaces dg's at the C level;
    the next call puts dg's back in front of it, so Ctrl-C still stops compiled code and still
    reaches the Python handler."""
    code = (WHEN_INSIDE + "import dg\n"
            f"m = dg.loads({PROGRAM!r}, mode='compiled', filename='d.dg')\n"
            "m.count(3)\nseen = []\n"
            "def on_int(s, f):\n    seen.append(s)\n    raise KeyboardInterrupt\n"
            "signal.signal(signal.SIGINT, on_int)\nwhen_inside('compiled', lambda: print('inside', flush=True))\n"
            "try:\n    m.forever(1.0)\nexcept KeyboardInterrupt:\n    print('interrupted', seen, flush=True)\n")
    _, out, err, _ = interrupted_once_inside(["-c", code])
    assert out == f"interrupted [{int(signal.SIGINT)}]\n", (out, err)


def test_ctrl_c_again_after_a_compile_that_installed_llvms_handler():
    """LLVM puts a SIGINT handler of its own in front while it writes an object file (one that
    raises SIGINT again from inside itself), in front of dg's when a dg call came before: a
    second Ctrl-C, after such a compile, still stops the loop, and the process does not crash
    (it recursed in the signal handlers until the stack ran out). The process sends itself
    SIGINT once each call is inside its loop."""
    code = (WHEN_INSIDE + "import os, numpy as np, dg\n"
            f"m = dg.loads({PROGRAM!r}, mode='compiled', filename='d.dg')\n"
            "def stop_inside():\n    when_inside('compiled', lambda: os.kill(os.getpid(), signal.SIGINT))\n"
            "m.forever(-1.0)\nstop_inside()\n"
            "try:\n    m.forever(1.0)\nexcept KeyboardInterrupt:\n    print('first', flush=True)\n"
            "m.forever(-2.0)\nm.count(5)\nstop_inside()\n"
            "try:\n    m.count(10 ** 13)\nexcept KeyboardInterrupt:\n    print('second', flush=True)\n"
            "print('again', m.count(7), flush=True)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG,
                       env={**os.environ, "DG_CACHE": "0"}, preexec_fn=at_a_terminal)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr[-2000:])
    assert r.stdout.split("\n") == ["first", "second", "again 7.0", ""], r.stdout
