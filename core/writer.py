"""The one writer of MLIR text that dg's stages make new IR with.

A `Writer` holds the lines being written, their indentation, a counter for
fresh SSA names and the location text the ops it writes get (`loc`).
`op` writes an operation in MLIR's generic form (the form dg ops print in,
as ops of a dialect defined in IRDL do), its regions written by callables;
`emit` writes one line in an op's custom form (`arith.addf %a, %b : f32`),
as the lowering rules do, so that a rule reads like the IR it makes.
Values a writer makes are `Value`s: an SSA name and a type. The emitter
(dsl/), the autodiff pass and the lowering (lowering/, dialects.builder)
all write through it; MLIR parses and verifies what they write.
"""
from __future__ import annotations

import contextlib
import itertools

from .types import parse_mlir_type


class Value:
    """An SSA value: its name in the text being written, its MLIR type text and, for the tensors,
    indices and booleans of dg IR, its TensorType (`tt`)."""

    __slots__ = ("type", "tt", "name")

    def __init__(self, type_text: str, name: str = ""):
        self.type = type_text
        self.tt = parse_mlir_type(type_text)
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name or 'value'} : {self.type}>"


def type_text(t) -> str:
    return t if isinstance(t, str) else t.mlir()


class Writer:
    """MLIR text, one op per line (a region's ops indented inside it), with fresh SSA names."""

    def __init__(self, counter=None, indent: int = 4):
        self.lines: list[str] = []
        self.indent = indent
        self.counter = counter or itertools.count()
        self.loc = ""  # the location text of the ops written without one

    def fresh(self, prefix: str = "v") -> str:
        return f"%{prefix}{next(self.counter)}"

    def value(self, t, prefix: str = "v") -> Value:
        return Value(type_text(t), self.fresh(prefix))

    def assign(self, text: str, prefix: str = "v") -> str:
        """An op of one result in custom form (`text`, what follows `%r = `) with the current
        location; the result's name."""
        r = self.fresh(prefix)
        self.emit(f"{r} = {text}")
        return r

    def line(self, text: str) -> None:
        """One line as it is (a block header, a region's closing brace)."""
        self.lines.append(" " * self.indent + text)

    def emit(self, text: str) -> None:
        """An op in its custom form, with the current location (not on a line that opens a region)."""
        self.line(text + (f" {self.loc}" if self.loc and not text.endswith("{") else ""))

    @contextlib.contextmanager
    def nested(self):
        """Lines written inside go into a region: indented by one more level."""
        self.indent += 2
        try:
            yield
        finally:
            self.indent -= 2

    def results(self, n: int, prefix: str = "r") -> tuple[str, list]:
        """(`%r:n = `, `%r = ` or "", the names) for an op with n results."""
        if not n:
            return "", []
        r = self.fresh(prefix)
        if n == 1:
            return f"{r} = ", [r]
        return f"{r}:{n} = ", [f"{r}#{i}" for i in range(n)]

    def op(self, name: str, operands: list, result_types: list, attrs: dict | None = None,
           regions: list | None = None, loc: str | None = None) -> list:
        """Write one op in generic form; `attrs` are attribute texts, `regions` callables that
        write a region's block (they get this writer). Its results, as Values."""
        head, names = self.results(len(result_types))
        results = [Value(type_text(t), n) for t, n in zip(result_types, names)]
        a = ", ".join(f"{k} = {v}" for k, v in (attrs or {}).items())
        a = f" {{{a}}}" if a else ""
        ins = ", ".join(o.name for o in operands)
        sig = f"({', '.join(type_text(o.type) for o in operands)}) -> ({', '.join(r.type for r in results)})"
        loc = self.loc if loc is None else loc
        if not regions:
            self.line(f'{head}"{name}"({ins}){a} : {sig} {loc}')
            return results
        self.line(f'{head}"{name}"({ins}) (')
        for i, write_region in enumerate(regions):
            self.line("{")
            write_region(self)
            self.line("}" + ("," if i < len(regions) - 1 else ""))
        self.line(f"){a} : {sig} {loc}")
        return results

    def block_header(self, args: list) -> None:
        self.lines.append(" " * (self.indent - 2) + "^bb0(" + ", ".join(f"{a.name}: {a.type}" for a in args) + "):")


def module_text(parts) -> str:
    """A module holding the given top-level texts (functions, declarations, globals)."""
    return "module {\n" + "\n".join(parts) + "\n}\n"

