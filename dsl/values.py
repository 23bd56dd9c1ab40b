"""What the emitter knows of a value while it walks the AST.

`TypedValue` is one SSA value (or a literal not yet materialized: `name` None, with
`const` set and `weak` True, so that `x * 2` keeps `x`'s element type).
A `TypedValue` whose `type` is None is poison: the result of an expression that
already produced an error; ops on poison produce poison, silently, so one
mistake gives one message.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from dg.core.types import TensorType


@dataclass(eq=False)
class TypedValue:
    name: Optional[str]
    type: Optional[TensorType]
    const: Any = None
    weak: bool = False

    @property
    def poison(self) -> bool:
        return self.type is None

    @property
    def dtype(self) -> str:
        return self.type.dtype

    @property
    def rank(self) -> int:
        return self.type.rank

    def __repr__(self) -> str:
        c = f" ={self.const!r}" if self.const is not None else ""
        return f"TypedValue({self.name}: {self.type}{c}{' weak' if self.weak else ''})"


POISON = TypedValue(None, None)


@dataclass(eq=False)
class ListVal:
    """A list display not yet turned into a tensor: `[a, b]` or a shape `[n, 3]`."""

    items: list
    loc: Any


@dataclass(eq=False)
class Str:
    value: str


@dataclass(eq=False)
class Undefined:
    """A name with no value on some path (defined in one branch, or only inside a loop)."""

    why: str
    type: Optional[TensorType] = None  # the type it has where it is defined


@dataclass(eq=False)
class FuncRef:
    module: Any  # the ModuleSource holding it
    name: str


@dataclass(eq=False)
class GradRef:
    """grad(f, wrt) or value_and_grad(f, wrt): a function value; f is a FuncRef or a GradRef."""

    kind: str
    fn: Any
    wrt: Any  # an int or a tuple of ints


@dataclass(eq=False)
class Pullback:
    """The second result of vjp(f, *primals): called with cotangents of f's results."""

    symbol: str
    vals: list  # the primals, as passed to f
    result_types: list
    result_proto: Any


@dataclass(eq=False)
class ModuleRef:
    module: Any


@dataclass(eq=False)
class ConstRef:
    """A top-level constant of a module (its `NAME = expr`): evaluated where it is read."""

    module: Any  # the source that defines it
    name: str


def is_tuple(x) -> bool:
    return isinstance(x, tuple)


def flatten(x) -> list:
    if isinstance(x, tuple):
        out = []
        for e in x:
            out += flatten(e)
        return out
    return [x]


def unflatten_like(proto, flat: list):
    it = iter(flat)

    def go(p):
        if isinstance(p, tuple):
            return tuple(go(e) for e in p)
        return next(it)

    return go(proto)
