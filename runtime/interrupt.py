"""Ctrl-C in compiled code: a flag that a signal handler sets and compiled loops test.

Expects: compiled code that reads the process-wide i64 `core.abi.INTERRUPT` (a symbol this
module defines) where it tests for a failed check: each loop iteration and each entry of a
function that can call itself. Guarantees: `arm()`, called before an outermost compiled call,
clears the flag and makes sure SIGINT sets it. The handler is machine code (made here with
llvmlite: a signal handler may not run Python) that sets the flag and then calls Python's own
handler (CPython's C handler, whatever Python function it dispatches to), so that Python raises
`KeyboardInterrupt` as usual once the compiled call has wound down (runtime/ll/interrupt.ll). `arm` is machine code too
(it runs before every call): it tests SIGINT's handler and puts ours back in front of Python's
where something replaced it. Where SIGINT has no Python handler (the default action, or
ignored), none is installed: dg does not take Ctrl-C from a program that does not handle it.
"""
from __future__ import annotations

import ctypes
import signal
import threading

from dg.core.abi import INTERRUPT

from .natives import compile_native

# struct sigaction as the C library lays it out on Linux (x86-64 and AArch64): the handler, a
# 1024-bit signal mask, the flags (an int, padded), the restorer.
SIGACTION_BYTES = 8 + 128 + 8 + 8


class _Handler:
    lock = threading.Lock()
    engine = None
    flag = None  # the flag, a ctypes view of the global
    python = None  # ctypes view of @dg_python_handler: CPython's C handler, once learnt
    arm = None  # dg_arm, callable


def _constants() -> dict:
    """What runtime/ll/interrupt.ll's placeholders stand for."""
    return {"INTERRUPT": INTERRUPT, "SIGINT": int(signal.SIGINT), "SIGACTION_BYTES": SIGACTION_BYTES}


def _make() -> None:
    engine = compile_native("interrupt", _constants(),
                            {"sigaction": ctypes.cast(_libc.sigaction, ctypes.c_void_p).value})
    _Handler.flag = ctypes.c_int64.from_address(engine.get_global_value_address(INTERRUPT))
    _Handler.python = ctypes.c_void_p.from_address(engine.get_global_value_address("dg_python_handler"))
    _Handler.arm = ctypes.CFUNCTYPE(ctypes.c_int32)(engine.get_function_address("dg_arm"))
    _Handler.engine = engine


_libc = ctypes.CDLL(None)
_libc.sigaction.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
_Sigaction = ctypes.c_char * SIGACTION_BYTES


def _python_handler_again() -> None:
    """SIGINT's handler is one dg_arm does not know: Python's own, not yet learnt, or one that
    was installed behind Python's back (LLVM installs one while it writes object files, which
    raises SIGINT again from inside the handler). Where Python has a handler of its own, it is
    put back (signal.signal installs CPython's C handler), its address learnt, and ours put in
    front of it. (Only the main thread may set handlers; elsewhere this call goes unarmed.)"""
    if threading.current_thread() is not threading.main_thread():
        return
    handler = signal.getsignal(signal.SIGINT)
    if not callable(handler):  # SIG_DFL, SIG_IGN, or one Python did not set: not Python's to give
        return
    signal.signal(signal.SIGINT, handler)
    now = _Sigaction()
    if _libc.sigaction(signal.SIGINT, None, now) == 0:
        _Handler.python.value = ctypes.c_void_p.from_buffer(now).value
        _Handler.arm()


def flag_address() -> int:
    """The address of the flag, for the compiled code to link with."""
    if _Handler.engine is None:
        with _Handler.lock:
            if _Handler.engine is None:
                _make()
    return ctypes.addressof(_Handler.flag)


def arm() -> None:
    """Before an outermost compiled call on this thread: the flag cleared (a Ctrl-C while no dg
    code ran is Python's alone) and the handler in front of Python's (Python's `signal.signal`,
    and LLVM, replace it). One call into machine code, which only tests SIGINT's handler."""
    if _Handler.arm is None:
        flag_address()
    if _Handler.arm():
        _python_handler_again()


def arm_address() -> int:
    """The address of `dg_arm` (`int32 ()`), for machine code that arms before its calls."""
    flag_address()
    return ctypes.cast(_Handler.arm, ctypes.c_void_p).value


def interrupted() -> bool:
    """Whether a Ctrl-C came since `arm`."""
    return _Handler.flag is not None and _Handler.flag.value != 0


def flag():
    """The flag, a ctypes int64 (nonzero after a Ctrl-C since `arm`)."""
    flag_address()
    return _Handler.flag
