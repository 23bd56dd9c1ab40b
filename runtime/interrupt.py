"""Ctrl-C in compiled code: a flag that a signal handler sets and compiled loops test.

Expects: compiled code that reads the process-wide i64 `core.abi.INTERRUPT` (a symbol this
module defines) where it tests for a failed check: each loop iteration and each entry of a
function that can call itself. Guarantees: `arm()`, called before an outermost compiled call,
clears the flag and makes sure SIGINT sets it. The handler is machine code (made here with
llvmlite: a signal handler may not run Python) that sets the flag and then calls the handler
that was installed before it, Python's, so that Python raises `KeyboardInterrupt` as usual once
the compiled call has wound down. Where SIGINT had no handler (the default action, or ignored),
none is installed: dg does not take Ctrl-C from a program that does not handle it.
"""
from __future__ import annotations

import ctypes
import signal
import threading

from dg.core.abi import INTERRUPT

_HANDLER_IR = f"""
@{INTERRUPT} = global i64 0, align 8
@dg_previous_handler = global ptr null, align 8

define void @dg_on_sigint(i32 %sig, ptr %info, ptr %context) {{
entry:
  store atomic i64 1, ptr @{INTERRUPT} seq_cst, align 8
  %prev = load atomic ptr, ptr @dg_previous_handler seq_cst, align 8
  %word = ptrtoint ptr %prev to i64
  %real = icmp ugt i64 %word, 1
  br i1 %real, label %chain, label %done
chain:
  call void %prev(i32 %sig, ptr %info, ptr %context)
  br label %done
done:
  ret void
}}
"""

# struct sigaction as the C library lays it out on Linux (x86-64 and AArch64): the handler, a
# 1024-bit signal mask, the flags (an int, padded), the restorer.
_Sigaction = ctypes.c_char * (8 + 128 + 8 + 8)  # (one type: each `c_char * n` would make a new one)


class _Handler:
    lock = threading.Lock()
    engine = None
    flag = None  # the flag, a ctypes view of the global
    previous = None  # ctypes view of @dg_previous_handler
    address = 0  # of dg_on_sigint


def _make() -> None:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_default_triple().create_target_machine()
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(_HANDLER_IR), target)
    engine.finalize_object()
    _Handler.flag = ctypes.c_int64.from_address(engine.get_global_value_address(INTERRUPT))
    _Handler.previous = ctypes.c_void_p.from_address(engine.get_global_value_address("dg_previous_handler"))
    _Handler.address = engine.get_function_address("dg_on_sigint")
    _Handler.engine = engine


def flag_address() -> int:
    """The address of the flag, for the compiled code to link with."""
    if _Handler.engine is None:
        with _Handler.lock:
            if _Handler.engine is None:
                _make()
    return ctypes.addressof(_Handler.flag)


_libc = ctypes.CDLL(None, use_errno=True)
_libc.sigaction.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]


def _install() -> None:
    """Put the handler in front of SIGINT's, unless it is there already or SIGINT has none."""
    now = _Sigaction()
    if _libc.sigaction(signal.SIGINT, None, now) != 0:
        return
    current = ctypes.c_void_p.from_buffer(now).value or 0
    if current == _Handler.address or current <= 1:  # ours, or SIG_DFL / SIG_IGN
        return
    _Handler.previous.value = current
    ctypes.c_void_p.from_buffer(now).value = _Handler.address  # the same mask and flags
    _libc.sigaction(signal.SIGINT, now, None)


def arm() -> None:
    """Before an outermost compiled call on this thread: the flag cleared (a Ctrl-C while no dg
    code ran is Python's alone) and the handler in place (Python's `signal.signal` replaces it)."""
    flag_address()
    _Handler.flag.value = 0
    _install()


def interrupted() -> bool:
    """Whether a Ctrl-C came since `arm`."""
    return _Handler.flag is not None and _Handler.flag.value != 0
