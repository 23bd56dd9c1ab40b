"""dg's attributes as MLIR text and back: the attribute kinds of the op registry.

Kinds and their text (and the Python values they stand for): int `3 : i64`, ints `array<i64: 1, 2>`, float `0.5 : f64`, str `"s"`,
strs `["a", "b"]`, bool `true`, dtype a type attribute (`f32`), dense
`dense<...> : tensor<..>` (an array and its TensorType).
"""
from __future__ import annotations

import numpy as np

from .locations import mlir_string
from .mlir import ir
from .types import DTYPES, MLIR_TO_DG, TensorType, np_dtype, parse_mlir_type

# NaN, +inf, -inf as MLIR hexadecimal bit patterns, per float width.
_SPECIAL = {
    "f64": ("0x7FF8000000000000", "0x7FF0000000000000", "0xFFF0000000000000"),
    "f32": ("0x7FC00000", "0x7F800000", "0xFF800000"),
    "f16": ("0x7E00", "0x7C00", "0xFC00"),
    "bf16": ("0x7FC0", "0x7F80", "0xFF80"),
}


def mlir_float(v: float, mlir_elt: str = "f64") -> str:
    v = float(v)
    if v != v or v in (float("inf"), float("-inf")):
        nan, pinf, ninf = _SPECIAL[mlir_elt]
        return nan if v != v else (pinf if v > 0 else ninf)
    r = repr(v)
    mant, e, exp = r.partition("e")
    if "." not in mant:
        mant += ".0"  # MLIR's float literals need a decimal point: 1.0e-05, not 1e-05
    return mant + (e + exp if e else "")


def dense_text(value: np.ndarray, ttype: TensorType) -> str:
    """A DenseElementsAttr for a constant."""
    flat = np.asarray(value).reshape(-1)
    if ttype.dtype == "bool":
        items = ["true" if bool(x) else "false" for x in flat]
    elif DTYPES[ttype.dtype][2] == "f":
        items = [mlir_float(x, DTYPES[ttype.dtype][0]) for x in flat.astype(np.float64)]
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
        return f"{mlir_float(value)} : f64"
    if kind == "str":
        return f'"{mlir_string(value)}"'
    if kind == "strs":
        return "[" + ", ".join(f'"{mlir_string(v)}"' for v in value) + "]"
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
        return dense_value(attr), parse_mlir_type(str(attr.type))
    raise ValueError(kind)


def dense_value(attr) -> np.ndarray:
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


def literal_text(value) -> str:
    """A Python literal (str, bool, int, float, and lists or tuples of them, nested) as attribute
    text: tables the lowering puts into a module (its checks, its host calls) for the executor."""
    if isinstance(value, str):
        return f'"{mlir_string(value)}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value} : i64"
    if isinstance(value, float):
        return f"{mlir_float(value)} : f64"
    return "[" + ", ".join(literal_text(v) for v in value) + "]"


def literal_value(attr):
    """What literal_text wrote, back as Python values (lists for arrays)."""
    if isinstance(attr, ir.ArrayAttr):
        return [literal_value(a) for a in attr]
    if isinstance(attr, (ir.StringAttr, ir.BoolAttr, ir.IntegerAttr, ir.FloatAttr)):
        return attr.value
    raise ValueError(f"not a literal attribute: {attr}")


def set_table(module, name: str, rows) -> None:
    """Put a table (rows of literals) into the module as its attribute `name`."""
    module.operation.attributes[name] = ir.Attribute.parse(literal_text(rows), module.context)


def table(module, name: str) -> list:
    """The table set_table put into the module ([] when there is none)."""
    attrs = module.operation.attributes
    return literal_value(attrs[name]) if name in attrs else []
