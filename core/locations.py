"""Positions in `.dg` source and their MLIR form.

A `Loc` is written into the IR as a file location (`loc("f.dg":3:5)`, or a
name location naming the variable an op defines); `loc_of` reads one back
from the location of a parsed op.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Loc:
    """A position in a `.dg` file: 1-based line and column."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"

    def mlir(self, name: str | None = None) -> str:
        """The location as MLIR text: `loc("f.dg":3:5)`, or a name location."""
        inner = f'"{mlir_string(self.file)}":{self.line}:{self.col}'
        if name:
            return f'loc("{mlir_string(name)}"({inner}))'
        return f"loc({inner})"


GRADIENT = "dg.gradient"  # the name location around a backward op's forward location


def backward_loc(text: str) -> str:
    """The MLIR text of a backward op's location: its forward op's (`loc(...)` text) marked as
    a gradient's."""
    inner = text[4:-1] if text.startswith("loc(") and text.endswith(")") else None
    if inner is None or inner.startswith(f'"{GRADIENT}"'):
        return text
    return f'loc("{GRADIENT}"({inner}))'


def in_gradient(location) -> bool:
    """Whether a parsed op's location is a backward op's (backward_loc)."""
    while location is not None:
        if getattr(location, "name_str", None) == GRADIENT:
            return True
        if hasattr(location, "child_loc"):
            location = location.child_loc
        elif hasattr(location, "callee"):
            location = location.callee
        else:
            return False
    return False


def mlir_string(s: str) -> str:
    """The text of an MLIR string literal's contents: quotes, backslashes and bytes outside
    printable ASCII escaped."""
    if s.isascii() and s.isprintable() and '"' not in s and "\\" not in s:
        return s
    out = []
    for ch in s:
        o = ord(ch)
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif o < 0x20 or o >= 0x7F:
            for b in ch.encode("utf-8"):
                out.append(f"\\{b:02X}")
        else:
            out.append(ch)
    return "".join(out)


def loc_of(location) -> Loc | None:
    """The `.dg` position of an MLIR location (the bindings' typed locations: a file position, a
    name location around one, a call site, a fusion): in a call site (what inlining leaves) the
    callee's, as the interpreter, which does not inline, reports it; in a fusion the last that
    has one."""
    if location is None:
        return None
    if hasattr(location, "filename"):
        return Loc(location.filename, location.start_line, location.start_col)
    if hasattr(location, "child_loc"):
        return loc_of(location.child_loc)
    if hasattr(location, "callee"):
        return loc_of(location.callee) or loc_of(location.caller)
    if hasattr(location, "locations"):
        return next((found for found in map(loc_of, reversed(location.locations)) if found), None)
    return None


def loc_row(loc: Loc | None) -> list:
    """A place as a row of a table in a module or a cache entry: [file, line, col], [] if unknown."""
    return [loc.file, loc.line, loc.col] if loc else []


def loc_from_row(row) -> Loc | None:
    return Loc(*row) if row else None
