"""Python tracebacks of dg's errors show the user's frames, not dg's own.

Expects: the entry points of the Python API (calling a dg function or a gradient, `.ir`,
`dg.load`, ...) wrapped in `user_facing`, or re-raising through `reraise_for_user`.
Guarantees: a `DgError` or `KeyboardInterrupt` that leaves an entry point carries a traceback
with dg's frames removed (its packages' files, and the interpreter's generated code): what is
left is the user's code and the one frame of the entry point. The message already names the
`.dg` place and its dg call stack. The full traceback stays on the exception as
`__dg_traceback__`; `DG_TRACEBACK_FILTERING=off` keeps tracebacks whole.
"""
from __future__ import annotations

import functools
import os
import sys
import types

from .config import config
from .errors import DgError, format_diagnostic
from .locations import Loc

_DIRS: list = [-1, ()]  # how many modules were loaded when dg's folders were last read, and those folders


def filtering() -> bool:
    return config.traceback_filtering


def _dg_dirs() -> tuple:
    """The folders of dg's loaded packages (tests and samples are the user's), read again
    whenever modules were loaded since (dg loads some of its packages only when first used)."""
    if _DIRS[0] != len(sys.modules):
        dirs = set()
        for name, mod in list(sys.modules.items()):
            if (name == "dg" or name.startswith("dg.")) and not name.startswith(("dg.tests", "dg.samples")):
                f = getattr(mod, "__file__", None)
                if f and not f.endswith(("/tests/__init__.py", "/samples/__init__.py")):
                    dirs.add(os.path.dirname(os.path.abspath(f)) + os.sep)
        _DIRS[:] = [len(sys.modules), tuple(sorted(dirs))]
    return _DIRS[1]


def _hidden(code) -> bool:
    f = code.co_filename
    return f.startswith("<dg") or f.startswith(_dg_dirs())


def error_at_caller(message: str) -> DgError:
    """A DgError located at the user's line that called into dg (the first frame outside dg):
    for mistakes made from Python, which have no `.dg` place."""
    f = _users(sys._getframe(1))
    return DgError(message, Loc(f.f_code.co_filename, f.f_lineno, _column(f)) if f is not None else None)


def _users(frame):
    """The first frame from `frame` outward that is not dg's (None if there is none)."""
    while frame is not None and _hidden(frame.f_code):
        frame = frame.f_back
    return frame


def _column(frame) -> int:
    """The 1-based column of the expression a frame runs (the call into dg), else of its line's
    first character that is not a space."""
    try:
        col = list(frame.f_code.co_positions())[frame.f_lasti // 2][2]
    except (AttributeError, IndexError):  # (Python 3.10 has no positions)
        col = None
    if col is None:
        import linecache

        line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
        col = len(line) - len(line.lstrip(" \t"))
    return col + 1


def user_frames(tb):
    """The traceback without dg's frames."""
    kept = []
    while tb is not None:
        if not _hidden(tb.tb_frame.f_code):
            kept.append(tb)
        tb = tb.tb_next
    out = None
    for t in reversed(kept):
        out = types.TracebackType(out, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return out


def for_user(e: BaseException) -> BaseException:
    """`e` with its traceback filtered (the whole one kept the first time)."""
    if filtering():
        if not hasattr(e, "__dg_traceback__"):
            try:
                e.__dg_traceback__ = e.__traceback__
            except AttributeError:  # (an exception class with __slots__)
                return e
        e.with_traceback(user_frames(e.__traceback__))
    return e


def user_facing(fn):
    """An entry point of the API: dg's errors and Ctrl-C leave it with the user's frames only."""
    @functools.wraps(fn)
    def entry(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (DgError, KeyboardInterrupt) as e:
            raise for_user(placed(e, sys._getframe(1)))  # (dg's frames below this one are hidden:
            # DG_TRACEBACK_FILTERING=off shows them)
    return entry


COMMAND = [False]  # True in the `dg` command, whose errors with no place in a file are the command's


def placed(e: BaseException, frame) -> BaseException:
    """`e`, if it is a DgError with no place or a place in the source dg writes for a Python call
    (`<dg.grad of loss>`), located at the user's line that called into dg: the first frame from
    `frame` outward that is not dg's."""
    if not isinstance(e, DgError) or (e.loc is not None and not e.loc.file.startswith("<dg.")) or COMMAND[0]:
        return e
    frame = _users(frame)
    if frame is None:
        return e
    e.loc = Loc(frame.f_code.co_filename, frame.f_lineno, _column(frame))
    e.args = ("\n".join([format_diagnostic(e.loc, e.raw_message)] + e.notes),)
    return e
