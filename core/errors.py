"""The errors a dg user can cause, each pointing at `.dg` source.

Every message starts with `FILE:LINE:COL: error: ...`, followed by the source
line and a caret under the column, so that editors and terminals can jump to
the place.
"""
from __future__ import annotations

import linecache

from .locations import Loc, loc_of  # noqa: F401  (errors are located)

# Source text registered for files that do not exist on disk (dg.loads, tests).
_SOURCES: dict[str, list[str]] = {}


def register_source(file: str, text: str) -> None:
    # Only \n, \r\n and \r end lines (as for Python and the parser), not \f or \x85.
    _SOURCES[file] = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def source_line(file: str, line: int) -> str | None:
    lines = _SOURCES.get(file)
    if lines is not None:
        return lines[line - 1] if 0 < line <= len(lines) else None
    text = linecache.getline(file, line)
    return text.rstrip("\n") if text else None


def format_diagnostic(loc: Loc | None, message: str, kind: str = "error") -> str:
    if loc is None:  # (the Python API and the command line give their errors a place: this is a fallback)
        return f"dg: {kind}: {message}"
    out = f"{loc}: {kind}: {message}"
    src = source_line(loc.file, loc.line)
    if src is not None:
        caret_col = max(loc.col - 1, 0)
        prefix = "".join(c if c == "\t" else " " for c in src[:caret_col])
        out += f"\n  {src}\n  {prefix}^"
    return out


class DgError(Exception):
    """Base class of every error a dg user can cause."""

    call_stack: list = []  # the `.dg` places of the calls a runtime error is inside, innermost first

    def __init__(self, message: str, loc: Loc | None = None, notes: list[str] | None = None):
        self.loc = loc
        self.raw_message = message
        self.notes = list(notes or [])
        text = format_diagnostic(loc, message)
        for n in self.notes:
            text += "\n" + n
        super().__init__(text)


def call_stack_lines(sites: list) -> list[str]:
    """The dg call stack under an error: `called from FILE:LINE:COL` and the source line for each
    call the failure is inside, innermost first; a call repeated at once (a recursion) is one
    entry with its count. An int among the sites stands for that many calls not known (compiled
    code keeps the innermost and outermost calls of a deep stack): between two calls of one site,
    they are counted as that site's, so that a runaway recursion reads as one line in both modes."""
    runs: list = []  # [site, count], or [None, count] for calls not known
    for k, s in enumerate(sites):
        if isinstance(s, int):
            if 0 < k < len(sites) - 1 and sites[k - 1] == sites[k + 1]:
                runs[-1][1] += s
            else:
                runs.append([None, s])
        elif runs and runs[-1][0] == s:
            runs[-1][1] += 1
        else:
            runs.append([s, 1])
    out = []
    for loc, n in runs:
        if loc is None:
            out.append(f"  ... {n} more call{'s' if n != 1 else ''}")
            continue
        out.append(f"  called from {loc}" + (f" ({n} times)" if n > 1 else ""))
        src = source_line(loc.file, loc.line)
        if src is not None and src.strip():
            out.append(f"      {src.strip()}")
    return out


def with_call_stack(err: "DgError", sites: list) -> "DgError":
    """The error again (same class, message and place) with the dg call stack under it (`sites`
    as call_stack_lines takes them)."""
    sites = [s for s in sites if s is not None and (isinstance(s, int) or not s.file.startswith("<dg."))]
    if not sites:  # (no call, or only those of the functions dg.grad and dg.vjp write)
        return err
    new = type(err)(err.raw_message, err.loc, notes=err.notes + call_stack_lines(sites))
    new.call_stack = sites
    return new


class DgSyntaxError(DgError):
    """The text is not dg syntax."""


class DgTypeError(DgError):
    """Names, element types and shapes that do not fit, found before running."""


class DgRuntimeError(DgError):
    """A failed assert, an index out of bounds, or a mismatch found while running."""


class DgErrors:
    """Collects several diagnostics and raises them together."""

    def __init__(self) -> None:
        self.errors: list[DgError] = []

    def add(self, err: DgError) -> None:
        for e in self.errors:
            if e.loc == err.loc and e.raw_message == err.raw_message:
                return
        self.errors.append(err)

    def raise_if_any(self) -> None:
        if not self.errors:
            return
        first = self.errors[0]
        if len(self.errors) == 1:
            raise first
        cls = type(first)
        combined = cls(first.raw_message, first.loc, notes=[str(e) for e in self.errors[1:]])
        combined.all_errors = list(self.errors)
        raise combined


for _cls in (DgError, DgSyntaxError, DgTypeError, DgRuntimeError):
    _cls.__module__ = "dg"  # (tracebacks name them as users reach them: dg.DgRuntimeError)
