"""Types of parameters and results: a tensor type, or a structure of them (a tuple, or a record
with string keys), from annotations; and the keys that select a specialization."""
from __future__ import annotations

from dg.core.types import Sym, TensorType, annotation_type

from .. import ast as A
from ..values import PackedList, Record, Static, flatten


def annotation_tree(te, names: dict):
    """The type an annotation declares: a TensorType, or tuples and Records of them; None for no
    annotation. Raises ShapeError for a bad tensor type."""
    if te is None:
        return None
    if isinstance(te, A.TupleTypeExpr):
        return tuple(annotation_tree(e, names) for e in te.elts)
    if isinstance(te, A.RecordTypeExpr):
        return Record(zip(te.keys, [annotation_tree(e, names) for e in te.elts]))
    if isinstance(te, A.ListTypeExpr):
        return list_type(annotation_tree(te.elt, {}))
    return annotation_type(te, names)


def list_type(item):
    """The types of a list's values (PackedList) for items of type `item` (a type or a structure of
    them): per leaf, the packed leaves (a first axis of any size, the item's other axes) and the
    offsets. An item's first axis takes any size, whatever its annotation says."""
    def packed(t: TensorType) -> list:
        return [TensorType(t.dtype, (Sym(),) + tuple(t.shape[1:])), TensorType("i64", (Sym(),))]
    return PackedList(item, [p for t in flatten(item) for p in packed(t)])


def type_key(t: TensorType):
    """The part of a type that selects a specialization (Syms compare by name)."""
    return (t.dtype, tuple(d if isinstance(d, int) else (d.name or "?") for d in t.shape))


def tree_key(t):
    """type_key of a type or a structure of types (its keys and nesting included)."""
    if isinstance(t, Record):
        return ("record", t.keys, tuple(tree_key(e) for e in t))
    if isinstance(t, PackedList):
        return ("list", tree_key(t.item), tuple(tree_key(e) for e in t))
    if isinstance(t, tuple):
        return ("tuple", tuple(tree_key(e) for e in t))
    if isinstance(t, Static):
        return ("static", t.dtype, t.value)
    return None if t is None else type_key(t)


def leaf_types(types: list) -> list:
    """The tensor types of the leaves of a list of (structures of) types, in order (None stays;
    static parameters, which are no arguments of the IR, are left out)."""
    return [x for t in types for x in ([None] if t is None else flatten(t)) if not isinstance(x, Static)]
