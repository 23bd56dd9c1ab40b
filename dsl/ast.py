"""The dg abstract syntax tree: plain dataclasses, every node with a `Loc`.

Produced by `dsl.parser` (from `.dg` text) and by `dsl.embed` (from
`@dg.function` bodies); consumed by `dsl.controlflow` (which rewrites
`break`/`continue`/early `return` into flags) and `dsl.emit`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Union

from dg.core.errors import Loc


@dataclass
class Node:
    loc: Loc


# ---------------------------------------------------------------- types
@dataclass
class TypeExpr(Node):
    """`f32` (dims None: a scalar) or `f32[B, 784, ?]` (dims: int | str | None for `?`)."""

    dtype: str
    dims: Optional[list] = None


@dataclass
class TupleTypeExpr(Node):
    elts: list  # list[TypeExpr | TupleTypeExpr | RecordTypeExpr]


@dataclass
class RecordTypeExpr(Node):
    """`{"w": f32[I, H], "b": f32[H]}`."""

    keys: list  # list[str]
    elts: list  # their types


@dataclass
class ListTypeExpr(Node):
    """`list[f32[?, D]]`: items of one type whose first axes differ item by item."""

    elt: Any  # the item's type


# ---------------------------------------------------------------- expressions
@dataclass
class Const(Node):
    value: Union[int, float, bool, str, None]


@dataclass
class Name(Node):
    id: str


@dataclass
class Tuple(Node):
    elts: list


@dataclass
class List(Node):
    elts: list


@dataclass
class Dict(Node):
    """A record display `{"w": w, "b": b}`."""

    keys: list  # list[str]
    values: list


@dataclass
class BinOp(Node):
    op: str  # + - * / // % ** @
    left: "Expr"
    right: "Expr"


@dataclass
class UnaryOp(Node):
    op: str  # - + not
    operand: "Expr"


@dataclass
class BoolOp(Node):
    op: str  # and or
    values: list


@dataclass
class Compare(Node):
    left: "Expr"
    ops: list  # list[str]: < <= > >= == !=
    comparators: list


@dataclass
class IfExp(Node):
    test: "Expr"
    body: "Expr"
    orelse: "Expr"


@dataclass
class Keyword(Node):
    name: str
    value: "Expr"


@dataclass
class Call(Node):
    func: "Expr"
    args: list
    kwargs: list = field(default_factory=list)  # list[Keyword]


@dataclass
class Attribute(Node):
    value: "Expr"
    attr: str


@dataclass
class Slice(Node):
    lower: Optional["Expr"] = None
    upper: Optional["Expr"] = None
    step: Optional["Expr"] = None


@dataclass
class EllipsisLit(Node):
    pass


@dataclass
class Subscript(Node):
    value: "Expr"
    items: list  # list[Expr | Slice | EllipsisLit]; Const(None) is a new axis


Expr = Union[Const, Name, Tuple, List, Dict, BinOp, UnaryOp, BoolOp, Compare, IfExp, Call, Attribute, Subscript]


# ---------------------------------------------------------------- statements
@dataclass
class Assign(Node):
    targets: list  # chained `a = b = e`: each a Name, Tuple of targets, or Subscript
    value: Expr


@dataclass
class AnnAssign(Node):
    target: Name
    annotation: TypeExpr
    value: Expr


@dataclass
class AugAssign(Node):
    target: Union[Name, Subscript]
    op: str  # + - * / @ (and // % **)
    value: Expr


@dataclass
class ExprStmt(Node):
    value: Expr


@dataclass
class If(Node):
    test: Expr
    body: list
    orelse: list = field(default_factory=list)


@dataclass
class For(Node):
    target: Name
    iter: Expr
    body: list
    # The flags whose setting ends the loop (`break`, `return`): set by controlflow's rewrite, not the parser.
    stops: list = field(default=None, metadata={"rewrite": True})


@dataclass
class While(Node):
    test: Expr
    body: list


@dataclass
class Break(Node):
    pass


@dataclass
class Continue(Node):
    pass


@dataclass
class Return(Node):
    value: Optional[Expr] = None


@dataclass
class Pass(Node):
    pass


@dataclass
class Assert(Node):
    test: Expr
    msg: Optional[Expr] = None


# ---------------------------------------------------------------- top level
@dataclass
class Param(Node):
    name: str
    annotation: Optional[Union[TypeExpr, TupleTypeExpr, RecordTypeExpr]] = None
    default: Optional[Const] = None


@dataclass
class FuncDef(Node):
    name: str
    params: list  # list[Param]
    returns: Optional[Union[TypeExpr, TupleTypeExpr, RecordTypeExpr]]
    body: list


@dataclass
class Import(Node):
    """`import layers` (names None) or `from layers import a, b`."""

    module: str
    names: Optional[list] = None
    alias: Optional[str] = None


@dataclass
class Module(Node):
    file: str
    imports: list
    funcs: list  # list[FuncDef]
    consts: list = field(default_factory=list)  # list[Assign]: `NAME = expr` at the top level
