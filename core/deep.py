"""Room for the compiler's recursion: its walks follow the program's own nesting and calls (a
call's callee is specialized while its caller is emitted), so a chain of a few hundred calls
is a few thousand Python frames, past Python's default limit of 1000.

`deeply(fn)` runs `fn` on a thread of its own with a large stack and a raised recursion
limit, and gives back its result or raises its exception. Work already running deeply runs
in place. `room_to_recurse()` only raises the limit, for work on the caller's thread whose
recursion is Python calling Python (CPython 3.11 runs those without C stack): the
interpreter's dg calls. The recursion limit is the interpreter's, for all threads: it is
raised while any such work runs and put back when the last one ends.
"""
from __future__ import annotations

import contextlib
import contextvars
import sys
import threading

STACK_BYTES = 512 << 20  # virtual: a thread touches only the pages it uses
RECURSION_LIMIT = 100_000  # frames; a few KiB of C stack each at most, within STACK_BYTES

_lock = threading.Lock()
_running = 0  # blocks with room to recurse, on any thread
_saved_limit = 0  # the recursion limit before the first of them
_inside = threading.local()


def deeply(fn, *args):
    """fn(*args) with room for deep recursion (see the module's doc)."""
    if getattr(_inside, "deep", False):
        return fn(*args)
    context = contextvars.copy_context()
    outcome: list = []

    def body():
        _inside.deep = True
        try:
            outcome.append((True, context.run(fn, *args)))
        except BaseException as e:  # handed to the caller's thread
            outcome.append((False, e))

    with room_to_recurse():
        with _lock:  # the stack size is the process's setting for new threads: set it briefly
            old = threading.stack_size(STACK_BYTES)
            try:
                worker = threading.Thread(target=body, name="dg-deep", daemon=True)
                worker.start()
            finally:
                threading.stack_size(old)
        worker.join()
    ok, value = outcome[0]
    if ok:
        return value
    raise value.with_traceback(value.__traceback__)


@contextlib.contextmanager
def room_to_recurse():
    """Python's recursion limit raised to RECURSION_LIMIT while the block runs."""
    global _running, _saved_limit
    with _lock:
        if _running == 0:
            _saved_limit = sys.getrecursionlimit()
            sys.setrecursionlimit(max(_saved_limit, RECURSION_LIMIT))
        _running += 1
    try:
        yield
    finally:
        with _lock:
            _running -= 1
            if _running == 0:
                sys.setrecursionlimit(_saved_limit)
