"""dg types: element types and tensor types with static, named or unknown dims.

A `TensorType` is what the checker knows of a value: its element type and,
per axis, either an `int` (a static size) or a `Sym` (a size known only at
run time; a named `Sym` comes from an annotation such as `f32[B, 784]`, and
equal names denote equal sizes). In MLIR every `Sym` prints as `?`.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Union

import numpy as np

try:  # bf16 for NumPy; optional at import time, required to run bf16 code.
    import ml_dtypes

    _BF16 = np.dtype(ml_dtypes.bfloat16)
except Exception:  # pragma: no cover
    _BF16 = None

# dg element type -> (MLIR element type, NumPy dtype, kind)
# kind: "f" float, "i" signed int, "b" bool, "u" unsigned (internal: keys)
DTYPES: dict[str, tuple[str, object, str]] = {
    "f16": ("f16", np.dtype(np.float16), "f"),
    "bf16": ("bf16", _BF16, "f"),
    "f32": ("f32", np.dtype(np.float32), "f"),
    "f64": ("f64", np.dtype(np.float64), "f"),
    "i32": ("i32", np.dtype(np.int32), "i"),
    "i64": ("i64", np.dtype(np.int64), "i"),
    "bool": ("i1", np.dtype(np.bool_), "b"),
    # Random keys: unsigned in NumPy, the same 64 bits as a signless i64 in MLIR
    # (arith works on signless integers; the ops that matter wrap or shift logically).
    "u64": ("i64", np.dtype(np.uint64), "u"),
}
MLIR_TO_DG = {v[0]: k for k, v in DTYPES.items() if k != "u64"}
FLOAT_RANK = {"f16": 1, "bf16": 1, "f32": 2, "f64": 3}
INT_RANK = {"i32": 1, "i64": 2}


def np_dtype(dt: str) -> np.dtype:
    d = DTYPES[dt][1]
    if d is None:
        raise RuntimeError("bf16 needs the ml_dtypes package")
    return d


def dtype_of_np(d: np.dtype) -> str | None:
    d = np.dtype(d)
    for k, (_, nd, _) in DTYPES.items():
        if nd is not None and nd == d:
            return k
    return None


def is_float(dt: str) -> bool:
    return DTYPES[dt][2] == "f"


def is_int(dt: str) -> bool:
    return DTYPES[dt][2] in ("i", "u")


def is_bool(dt: str) -> bool:
    return dt == "bool"


def py_cast(v, dt: str):
    """A Python number as the Python number of dg element type `dt` (a literal that takes a type)."""
    if is_float(dt):
        return float(v)
    if is_bool(dt):
        return bool(v)
    return int(v)


def promote(a: str, b: str) -> str:
    """NumPy-style promotion within dg's element types (int+float -> the float)."""
    if a == b:
        return a
    ka, kb = DTYPES[a][2], DTYPES[b][2]
    if ka == "f" and kb == "f":
        if {a, b} == {"f16", "bf16"}:
            return "f32"
        return a if FLOAT_RANK[a] >= FLOAT_RANK[b] else b
    if ka == "f":
        return a
    if kb == "f":
        return b
    if ka == "b":
        return b
    if kb == "b":
        return a
    if ka == "u" or kb == "u":
        return "u64"
    return a if INT_RANK[a] >= INT_RANK[b] else b


_sym_counter = itertools.count()


class Sym:
    """A size known only at run time. Named ones come from annotations."""

    __slots__ = ("name", "id")

    def __init__(self, name: str | None = None):
        self.name = name
        self.id = next(_sym_counter)

    def __repr__(self) -> str:
        return self.name if self.name else "?"


Dim = Union[int, Sym]


@dataclass(frozen=True)
class TensorType:
    dtype: str
    shape: tuple  # tuple[Dim, ...]

    @property
    def rank(self) -> int:
        return len(self.shape)

    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    def mlir(self) -> str:
        """The MLIR type: a ranked tensor (`tensor<?x3xf32>`), or `index` or `i1` (the scalars
        of loop bounds and conditions)."""
        if self.dtype in ("index", "i1"):
            return self.dtype
        dims = "".join(f"{d if isinstance(d, int) else '?'}x" for d in self.shape)
        return f"tensor<{dims}{DTYPES[self.dtype][0]}>"

    @property
    def element(self) -> str:
        """The MLIR element type of the scalars inside (signless: a u64 key is an i64)."""
        return DTYPES[self.dtype][0] if self.dtype not in ("index", "i1") else self.dtype

    def with_dtype(self, dt: str) -> "TensorType":
        return TensorType(dt, self.shape)

    def with_shape(self, shape) -> "TensorType":
        return TensorType(self.dtype, tuple(shape))

    def __str__(self) -> str:
        if not self.shape:
            return self.dtype
        return f"{self.dtype}[{', '.join(str(d) if isinstance(d, int) else repr(d) for d in self.shape)}]"


def scalar(dt: str) -> TensorType:
    return TensorType(dt, ())


def parse_mlir_type(text: str) -> TensorType:
    """`tensor<?x3xf32>` -> TensorType("f32", (Sym(), 3))."""
    text = text.strip()
    if text == "index":
        return TensorType("index", ())
    if text == "i1":
        return TensorType("i1", ())
    parts = text[len("tensor<"):-1].split("x")
    if not (text.startswith("tensor<") and text.endswith(">")) or parts[-1] not in MLIR_TO_DG:
        raise ShapeError(f"{text} is not a type of dg values (a ranked tensor of {', '.join(MLIR_TO_DG)})")
    return TensorType(MLIR_TO_DG[parts[-1]], tuple(Sym() if p == "?" else int(p) for p in parts[:-1]))


class ShapeError(Exception):
    """Raised by shape rules; the emitter turns it into a located DgTypeError."""


def same_dim(a: Dim, b: Dim) -> bool:
    return a is b or (isinstance(a, int) and isinstance(b, int) and a == b)


def broadcast_shapes(*shapes) -> tuple:
    """NumPy broadcasting over static and symbolic dims.

    Two different symbolic sizes are assumed equal (checked at run time); a
    static 1 takes the other size.
    """
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for ax in range(rank):
        dims = [s[len(s) - rank + ax] for s in shapes if len(s) - rank + ax >= 0]
        cur: Dim = 1
        for d in dims:
            if isinstance(cur, int) and cur == 1:
                cur = d
            elif isinstance(d, int) and d == 1:
                continue
            elif isinstance(cur, int) and isinstance(d, int):
                if cur != d:
                    raise ShapeError(
                        "shapes "
                        + " and ".join(_fmt_shape(s) for s in shapes)
                        + " do not broadcast"
                    )
            elif isinstance(cur, Sym) and isinstance(d, int):
                cur = d  # the symbol must equal d at run time
        out.append(cur)
    return tuple(out)


def _fmt_shape(s) -> str:
    return "[" + ", ".join(str(d) if isinstance(d, int) else repr(d) for d in s) + "]"



def annotation_type(te, names: dict):
    """A `TypeExpr` -> TensorType; named dims share one Sym per name in `names`.

    Returns None for a tuple type; raises ShapeError for an unknown element type.
    """
    if te is None or not hasattr(te, "dims"):
        return None
    if te.dtype not in DTYPES or te.dtype == "u64":
        raise ShapeError(f"unknown element type '{te.dtype}' (expected one of f32, f64, f16, bf16, i32, i64, bool)")
    if te.dims is None:
        return scalar(te.dtype)
    dims = []
    for d in te.dims:
        if d is None:
            dims.append(Sym())
        elif isinstance(d, str):
            dims.append(names.setdefault(d, Sym(d)))
        else:
            dims.append(int(d))
    return TensorType(te.dtype, tuple(dims))
