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
    """A name with no value on some path (defined in one branch, or only inside a loop).

    With `value` set it is bound on some paths and not on others (Python's rule: reading it is
    fine where a path that ran bound it): `value` is what it holds where bound (a placeholder
    elsewhere), `bound` a 0-d bool TypedValue, true at run time where a path bound it; a read
    checks `bound` (a DgRuntimeError at the read otherwise). Without `value`, no path bound it
    that the checker can see, and a read is a DgTypeError (`why`)."""

    why: str
    type: Optional[TensorType] = None  # the type it has where it is defined
    value: Any = None  # the value where bound: a TypedValue or a structure of them
    bound: Any = None  # the run-time flag: a 0-d bool TypedValue


@dataclass(eq=False)
class FuncRef:
    module: Any  # the ModuleSource holding it
    name: str


@dataclass(eq=False)
class CheckpointRef:
    """checkpoint(f, slots=c): f, whose gradient keeps at most c snapshots per loop (0: f's own)."""

    fn: Any
    slots: int


@dataclass(eq=False)
class VmapRef:
    """vmap(f, in_axes, out_axes): f mapped over a batch (§3.1); in_axes has one entry per
    argument (an int axis, or None for an argument every example shares), or one for all."""

    fn: Any
    in_axes: Any  # an int, None, or a tuple of them
    out_axes: int = 0


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
    vals: list  # the primals' leaves, as passed to f
    result_types: list
    result_proto: Any
    groups: list  # per primal: (index of its first leaf in vals, its structure)


@dataclass(eq=False)
class ModuleRef:
    module: Any


@dataclass(eq=False)
class ConstRef:
    """A top-level constant of a module (its `NAME = expr`): evaluated where it is read."""

    module: Any  # the source that defines it
    name: str


class Record(tuple):
    """A record `{"w": w, "b": b}`: its values in the order of its sorted keys (as a JAX pytree of a
    dict), so that records with the same keys have the same structure whatever order built them.
    A tuple to everything that walks structures (flatten, loop-carried values, branch merges); its
    keys tell it apart from a tuple of the same length (same_structure)."""

    keys: tuple

    def __new__(cls, items):
        pairs = sorted(dict(items).items(), key=lambda kv: kv[0])
        r = super().__new__(cls, [v for _, v in pairs])
        r.keys = tuple(k for k, _ in pairs)
        return r

    @classmethod
    def like(cls, proto: "Record", values):
        r = super().__new__(cls, list(values))
        r.keys = proto.keys
        return r

    def get(self, key):
        try:
            return self[self.keys.index(key)]
        except ValueError:
            return None

    def items(self):
        return zip(self.keys, self)

    def replaced(self, key, value) -> "Record":
        d = dict(self.items())
        d[key] = value
        return Record(d.items())

    def __repr__(self) -> str:
        return "{" + ", ".join(f"{k!r}: {v!r}" for k, v in self.items()) + "}"


class PackedList(tuple):
    """A list (`list[T]`, §1.3): items of one structure whose sizes differ item by item, stored
    packed. Per leaf of the item, two values: the items' leaves laid end to end along their first
    axis (a scalar item's leaf: one element each), then the offsets where each item starts, and
    the end (an i64 [n + 1]). To everything that walks structures it is a tuple of those values;
    `item` is the structure of the item's types (their first axes of any size), which tells it
    apart from a tuple of the same length."""

    item: Any

    def __new__(cls, item, values):
        r = super().__new__(cls, list(values))
        r.item = item
        return r

    @classmethod
    def like(cls, proto: "PackedList", values):
        return cls(proto.item, values)

    def parts(self) -> list:
        """(data, offsets) per leaf of the item."""
        return [(self[2 * i], self[2 * i + 1]) for i in range(len(self) // 2)]

    def __repr__(self) -> str:
        return f"list{tuple(self)!r}"


@dataclass(frozen=True)
class Static:
    """The type of a parameter that a call gives an integer or bool literal (`stride=2`,
    `n_head=4`): the callee is specialized for the value, which it sees as that literal, usable
    where a constant is needed (an op's option, a static size). Not an argument of the IR."""

    value: Any
    dtype: str


def is_tuple(x) -> bool:
    """A structure: a tuple or a record."""
    return isinstance(x, tuple)


def is_record(x) -> bool:
    return isinstance(x, Record)


def structure(x):
    """What two values must share to be the same structure: the nesting, the lengths and the keys
    (leaves are None)."""
    if isinstance(x, Record):
        return ("record", x.keys, tuple(structure(e) for e in x))
    if isinstance(x, PackedList):
        return ("list", structure(x.item))
    if isinstance(x, tuple):
        return ("tuple", tuple(structure(e) for e in x))
    return None


def same_structure(a, b) -> bool:
    return structure(a) == structure(b)


def describe_structure(x) -> str:
    if isinstance(x, Record):
        return "a record with keys " + ", ".join(repr(k) for k in x.keys)
    if isinstance(x, PackedList):
        return f"a list of {describe_structure(x.item) if isinstance(x.item, tuple) else 'tensors'}"
    if isinstance(x, tuple):
        return f"a tuple of {len(x)}"
    return "a tensor"


def flatten(x) -> list:
    if isinstance(x, tuple):
        out = []
        for e in x:
            out += flatten(e)
        return out
    return [x]


def leaf_paths(x, prefix: str = "") -> list:
    """The path of each leaf, as it is written in dg and Python (`p["w"][0]`), in flatten's order."""
    if isinstance(x, Record):
        return [q for k, e in x.items() for q in leaf_paths(e, f'{prefix}["{k}"]')]
    if isinstance(x, PackedList):
        return [f"{prefix}[:]{q}{part}" for q in leaf_paths(x.item) for part in ("", ".offsets")]
    if isinstance(x, tuple):
        return [q for i, e in enumerate(x) for q in leaf_paths(e, f"{prefix}[{i}]")]
    return [prefix]


def unflatten_like(proto, flat: list):
    it = iter(flat)

    def go(p):
        if isinstance(p, Record):
            return Record.like(p, [go(e) for e in p])
        if isinstance(p, PackedList):
            return PackedList.like(p, [go(e) for e in p])
        if isinstance(p, tuple):
            return tuple(go(e) for e in p)
        return next(it)

    return go(proto)


def map_leaves(fn, x):
    """fn applied to each leaf of x (a value, or a structure of them), the structure kept."""
    return unflatten_like(x, [fn(v) for v in flatten(x)])
