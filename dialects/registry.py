"""The dg op registry: one entry per op, every facet side by side.

An `OpDef` holds an op's signature (operand count, attribute names and
kinds, result count), its shape/type rule (on `TensorType`s), its NumPy
implementation (run by the interpreter), and slots for its vector-Jacobian
product (`vjp`, dg IR builders used by the autodiff pass) and its lowering
(`lower`, used by the compiled backends). The IRDL definition of the `dg`
dialect is generated from this table (`dialects.dialect`).

Operands are tensors (or `index`/`i1` for the few conversion ops). Every
op's operands share one element type unless its rule says otherwise: the
emitter inserts explicit casts, so the NumPy implementations never promote.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from dg.dsl.types import DTYPES, MLIR_TO_DG, TensorType, np_dtype

# Attribute kinds and their MLIR text form.
#   int: `3 : i64`   ints: `array<i64: 1, 2>`   float: `0.5 : f64`
#   str: `"s"`       strs: `["a", "b"]`          bool: `true`
#   dtype: a type attribute (`f32`)             dense: `dense<...> : tensor<..>`


@dataclass
class OpDef:
    name: str
    infer: Callable  # (in_types: list[TensorType], **attrs) -> TensorType | list[TensorType]
    impl: Callable  # (*np_arrays, **attrs) -> array | tuple of arrays
    nargs: Optional[int] = 1  # None: `nfixed` operands, then a variadic tail of one type
    nfixed: int = 1
    attrs: dict = field(default_factory=dict)  # name -> kind
    defaults: dict = field(default_factory=dict)
    nresults: Optional[int] = 1  # None: variadic (tuple-returning)
    pure: bool = True
    doc: str = ""
    vjp: Optional[Callable] = None
    lower: Optional[Callable] = None
    # Sizes NumPy would broadcast that the types do not declare 1 must agree at run time, in both
    # modes: (operand types, result type) -> (groups of (operand, axis) of one size, message).
    agree: Optional[Callable] = None
    # Extra per-target lowering overrides, e.g. {"cuda": fn}.
    lower_for: dict = field(default_factory=dict)
    # For registry tests: a function(rng) -> (list of arrays, attrs) or None.
    sample: Optional[Callable] = None

    @property
    def mlir_name(self) -> str:
        return f"dg.{self.name}"


OPS: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    if op.name in OPS:
        raise ValueError(f"op dg.{op.name} registered twice")
    OPS[op.name] = op
    return op


def op(name: str, **kw):
    """Decorator form: the decorated function is the NumPy implementation."""

    def deco(impl):
        register(OpDef(name=name, impl=impl, **kw))
        return impl

    return deco


def get(name: str) -> OpDef:
    return OPS[name]


# ---------------------------------------------------------------- attributes
# NaN, +inf, -inf as MLIR hexadecimal bit patterns, per float width.
_SPECIAL = {
    "f64": ("0x7FF8000000000000", "0x7FF0000000000000", "0xFFF0000000000000"),
    "f32": ("0x7FC00000", "0x7F800000", "0xFF800000"),
    "f16": ("0x7E00", "0x7C00", "0xFC00"),
    "bf16": ("0x7FC0", "0x7F80", "0xFF80"),
}


def _mlir_float(v: float, mlir_elt: str = "f64") -> str:
    v = float(v)
    if v != v or v in (float("inf"), float("-inf")):
        nan, pinf, ninf = _SPECIAL[mlir_elt]
        return nan if v != v else (pinf if v > 0 else ninf)
    r = repr(v)
    mant, e, exp = r.partition("e")
    if "." not in mant:
        mant += ".0"  # MLIR's float literals need a decimal point: 1.0e-05, not 1e-05
    return mant + (e + exp if e else "")


def _esc(s: str) -> str:
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


def dense_text(value: np.ndarray, ttype: TensorType) -> str:
    """A DenseElementsAttr for a constant."""
    flat = np.asarray(value).reshape(-1)
    if ttype.dtype == "bool":
        items = ["true" if bool(x) else "false" for x in flat]
    elif DTYPES[ttype.dtype][2] == "f":
        items = [_mlir_float(x, DTYPES[ttype.dtype][0]) for x in flat.astype(np.float64)]
    else:
        items = [str(int(x)) for x in flat]
    if len(items) and all(i == items[0] for i in items):
        body = items[0]
    else:
        body = _nest(items, ttype.shape)
    return f"dense<{body}> : {ttype.mlir()}"


def _nest(items, shape):
    if not shape:
        return items[0]
    if len(shape) == 1:
        return "[" + ", ".join(items) + "]"
    n = len(items) // shape[0] if shape[0] else 0
    return "[" + ", ".join(_nest(items[i * n:(i + 1) * n], shape[1:]) for i in range(shape[0])) + "]"


def attr_text(kind: str, value) -> str:
    if kind == "int":
        return f"{int(value)} : i64"
    if kind == "ints":
        vals = ", ".join(str(int(v)) for v in value)
        return f"array<i64{': ' + vals if vals else ''}>"
    if kind == "float":
        return f"{_mlir_float(value)} : f64"
    if kind == "str":
        return f'"{_esc(value)}"'
    if kind == "strs":
        return "[" + ", ".join(f'"{_esc(v)}"' for v in value) + "]"
    if kind == "bool":
        return "true" if value else "false"
    if kind == "dtype":
        return DTYPES[value][0]
    if kind == "dense":
        arr, ttype = value
        return dense_text(arr, ttype)
    raise ValueError(kind)


def attr_value(kind: str, attr):
    """MLIR attribute (bindings object) -> Python value. Run once per op at translation."""
    from dg.dialects.mlir import ir

    if kind == "int":
        return ir.IntegerAttr(attr).value
    if kind == "ints":
        return tuple(int(v) for v in ir.DenseI64ArrayAttr(attr))
    if kind == "float":
        return ir.FloatAttr(attr).value
    if kind == "str":
        return ir.StringAttr(attr).value
    if kind == "strs":
        return tuple(ir.StringAttr(a).value for a in ir.ArrayAttr(attr))
    if kind == "bool":
        return ir.BoolAttr(attr).value
    if kind == "dtype":
        return MLIR_TO_DG[str(ir.TypeAttr(attr).value)]
    if kind == "dense":
        return dense_value(attr)
    raise ValueError(kind)


def dense_value(attr) -> np.ndarray:
    from dg.dialects.mlir import ir
    from dg.dsl.types import parse_mlir_type

    t = ir.ShapedType(attr.type)
    tt = parse_mlir_type(str(attr.type))
    shape = tuple(t.shape)
    dt = np_dtype(tt.dtype)
    if tt.dtype in ("bf16",):
        # No buffer protocol for bf16: read the elements one by one.
        a = ir.DenseFPElementsAttr(attr)
        if a.is_splat:
            return np.full(shape, float(a.get_splat_value().value), dtype=dt)
        return np.array([float(a[i]) for i in range(len(a))], dtype=dt).reshape(shape)
    arr = np.array(attr)
    if arr.shape != shape:
        arr = np.broadcast_to(arr.reshape(()) if arr.size == 1 else arr, shape)
    return np.array(arr, dtype=dt)
