"""From Python arguments to a dg argument signature, and results back.

An annotated parameter takes its declared type: its `?` and named dims stay
symbolic (so other sizes reuse the same code), static dims and the element
type are checked, and equal names must be equal sizes. An unannotated
parameter takes the exact type of its argument. Python scalars are weak:
they take a declared element type; unannotated, a float is `f32`, an int
`i64`, a bool `bool` (dg's literal defaults).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dg.core.errors import DgTypeError
from dg.core.types import DTYPES, ShapeError, Sym, TensorType, dtype_of_np, np_dtype
from dg.core.types import annotation_type as _annotation_type
from dg.dsl import ast as A
from dg.dsl.emit import type_key


@dataclass
class Signature:
    key: tuple
    param_types: list


def bind_python_args(fd: A.FuncDef, args, kwargs) -> list:
    params = fd.params
    if not kwargs and len(args) == len(params):
        return list(args)
    if len(args) > len(params):
        raise DgTypeError(f"{fd.name}() takes {len(params)} arguments but {len(args)} were given", fd.loc)
    out = list(args) + [_MISSING] * (len(params) - len(args))
    for k, v in kwargs.items():
        idx = next((i for i, p in enumerate(params) if p.name == k), None)
        if idx is None:
            raise DgTypeError(f"{fd.name}() has no parameter '{k}'", fd.loc)
        if out[idx] is not _MISSING:
            raise DgTypeError(f"{fd.name}() got two values for '{k}'", params[idx].loc)
        out[idx] = v
    for i, p in enumerate(params):
        if out[i] is _MISSING:
            if p.default is None:
                raise DgTypeError(f"{fd.name}() is missing the argument '{p.name}'", p.loc)
            out[i] = p.default.value
    return out


_MISSING = object()


def annotation_type(te, names: dict) -> TensorType | None:
    try:
        return _annotation_type(te, names)
    except ShapeError as e:
        raise DgTypeError(str(e), te.loc) from None


def _describe(x) -> str:
    if isinstance(x, np.ndarray):
        return f"a {x.dtype} array of shape {tuple(x.shape)}"
    return f"{type(x).__name__} {x!r}"


def to_array(x, p: A.Param, fn: str, dtype: str | None = None) -> np.ndarray:
    """A Python argument as a NumPy array (weak scalars take `dtype`)."""
    if isinstance(x, np.generic):  # NumPy scalars keep their dtype (np.float64 is a float subclass)
        return np.asarray(x)
    if isinstance(x, (bool, np.bool_)) and not isinstance(x, np.ndarray):
        return np.asarray(x, dtype=np_dtype(dtype) if dtype else np.bool_)
    if isinstance(x, (int,)) and not isinstance(x, bool):
        try:
            return np.asarray(x, dtype=np_dtype(dtype) if dtype else np.int64)
        except OverflowError:
            raise DgTypeError(f"argument '{p.name}' of {fn}() is the integer {x}, which does not fit in "
                              f"{dtype or 'i64'}", p.loc) from None
    if isinstance(x, float):
        if dtype and DTYPES[dtype][2] != "f":
            raise DgTypeError(f"argument '{p.name}' of {fn}() is the float {x!r}, but {dtype} was declared", p.loc)
        return np.asarray(x, dtype=np_dtype(dtype) if dtype else np.float32)
    if isinstance(x, (list, tuple)):
        try:
            arr = np.asarray(x)
        except ValueError as e:
            raise DgTypeError(f"argument '{p.name}' of {fn}() is not a rectangular array: {e}", p.loc) from None
        if arr.dtype == object:
            raise DgTypeError(f"argument '{p.name}' of {fn}() is not an array of numbers", p.loc)
        if arr.dtype == np.float64:
            arr = arr.astype(np_dtype(dtype) if dtype else np.float32)
        elif arr.dtype.kind in "iu" and dtype:
            wanted = np_dtype(dtype)
            if wanted.kind in "iu" and arr.size and not (np.iinfo(wanted).min <= arr.min() and arr.max() <= np.iinfo(wanted).max):
                raise DgTypeError(f"argument '{p.name}' of {fn}() has integers that do not fit in {dtype}", p.loc)
            arr = arr.astype(wanted)
        return arr
    if isinstance(x, (np.ndarray, np.generic)):
        return np.asarray(x)
    if hasattr(x, "__array__"):  # torch, JAX, CuPy ...: read by value
        if callable(getattr(x, "detach", None)):  # a torch tensor that requires grad refuses __array__
            x = x.detach()
            if getattr(x, "device", None) is not None and getattr(x.device, "type", "cpu") != "cpu":
                x = x.cpu()
        try:
            return np.asarray(x)
        except Exception as e:  # the library's own refusal, whatever its class
            raise DgTypeError(f"argument '{p.name}' of {fn}() ({type(x).__name__}) cannot be read as an array: "
                              f"{type(e).__name__}: {e}", p.loc) from None
    raise DgTypeError(f"argument '{p.name}' of {fn}() must be an array or a number, got {type(x).__name__}", p.loc)


@dataclass
class _Param:
    """What a call checks of one parameter, worked out once per function."""
    declared: TensorType | None
    np_dtype: np.dtype | None  # the declared element type's NumPy dtype
    key: tuple | None  # this parameter's part of the signature key, when declared
    static: tuple  # (axis, size) of the static dims
    named: tuple  # (axis, name) of the named symbolic dims


def _plan(fd: A.FuncDef) -> list:
    plan = fd.__dict__.get("_dg_call_plan")
    if plan is None:
        names: dict = {}
        plan = []
        for p in fd.params:
            t = annotation_type(p.annotation, names)
            if t is None:
                plan.append(_Param(None, None, None, (), ()))
                continue
            nd = DTYPES[t.dtype][1]
            plan.append(_Param(t, None if nd is None else np.dtype(nd), type_key(t),
                               tuple((i, d) for i, d in enumerate(t.shape) if isinstance(d, int)),
                               tuple((i, d.name) for i, d in enumerate(t.shape) if isinstance(d, Sym) and d.name)))
        fd.__dict__["_dg_call_plan"] = plan
    return plan


def _element_type(arr: np.ndarray, p: A.Param, fd: A.FuncDef) -> str:
    """The dg element type of an argument array, or a DgTypeError naming the parameter."""
    dt = dtype_of_np(arr.dtype)
    if dt is None or dt == "u64":
        raise DgTypeError(f"argument '{p.name}' of {fd.name}(): dtype {arr.dtype} is not a dg element type", p.loc)
    return dt


def fingerprint(values) -> tuple:
    """(the dtypes and shapes of the values, the values as arrays) when all are NumPy arrays or
    scalars, else (None, None): arguments with the same fingerprint have the same signature."""
    arrays = [x if type(x) is np.ndarray else np.asarray(x) if isinstance(x, np.generic) else None for x in values]
    if any(a is None for a in arrays):
        return None, None
    return tuple([(a.dtype, a.shape) for a in arrays]), arrays


def make_signature(fd: A.FuncDef, values: list):
    """(Signature, arrays) for a call's arguments, or a DgTypeError naming the parameter.

    Arrays of dtypes and shapes seen before (NumPy arrays and scalars, the usual training loop)
    take the signature that was worked out for them then."""
    fp, arrays = fingerprint(values)
    if fp is not None:
        seen = fd.__dict__.setdefault("_dg_signatures", {})
        sig = seen.get(fp)
        if sig is None:
            sig = _checked_signature(fd, arrays)[0]
            if len(seen) >= 64:  # many shapes: keep the newest
                seen.clear()
            seen[fp] = sig
        return sig, arrays
    return _checked_signature(fd, values)


def _checked_signature(fd: A.FuncDef, values: list):
    sizes: dict = {}
    types, arrays, key = [], [], []
    for p, pp, x in zip(fd.params, _plan(fd), values):
        declared = pp.declared
        if declared is None:
            arr = to_array(x, p, fd.name)
            dt = _element_type(arr, p, fd)
            types.append(TensorType(dt, tuple(int(s) for s in arr.shape)))
            key.append((dt, tuple(arr.shape)))
            arrays.append(arr)
            continue
        arr = x if type(x) is np.ndarray else to_array(x, p, fd.name, declared.dtype)
        if arr.dtype != pp.np_dtype:
            dt = _element_type(arr, p, fd)
            raise DgTypeError(
                f"argument '{p.name}' of {fd.name}() must be {declared}, got {_describe(arr)} "
                f"(element type {dt}, expected {declared.dtype})", p.loc)
        shape = arr.shape
        if len(shape) != declared.rank:
            raise DgTypeError(
                f"argument '{p.name}' of {fd.name}() must be {declared}, got {_describe(arr)} "
                f"(rank {arr.ndim}, expected {declared.rank})", p.loc)
        for axis, d in pp.static:
            if shape[axis] != d:
                raise DgTypeError(
                    f"argument '{p.name}' of {fd.name}() must be {declared}, got {_describe(arr)} "
                    f"(axis {axis} has size {shape[axis]}, expected {d})", p.loc)
        for axis, name in pp.named:
            s = shape[axis]
            seen = sizes.get(name)
            if seen is None:
                sizes[name] = (s, axis, p.name)
            elif seen[0] != s:
                raise DgTypeError(
                    f"size '{name}' is {seen[0]} in axis {seen[1]} of '{seen[2]}' but {s} in axis "
                    f"{axis} of '{p.name}' ({fd.name}() declares them equal)", p.loc)
        types.append(declared)
        key.append(pp.key)
        arrays.append(arr)
    return Signature(tuple(key), types), arrays


def declared_signature(fd: A.FuncDef, unknown_ok: bool = False) -> Signature:
    """The signature the annotations describe (for `dg check` and `.ir()` before a call)."""
    names: dict = {}
    types, key = [], []
    for p in fd.params:
        t = annotation_type(p.annotation, names)
        if t is None and p.default is not None:
            arr = to_array(p.default.value, p, fd.name)
            t = TensorType(dtype_of_np(arr.dtype), ())
        if t is None and not unknown_ok:
            raise DgTypeError(f"parameter '{p.name}' of {fd.name}() has no type annotation", p.loc)
        types.append(t)
        key.append(None if t is None else type_key(t))
    return Signature(tuple(key), types)


def to_python(out, proto):
    """Results as NumPy arrays (0-d as NumPy scalars), tuples as tuples."""
    if proto is None:
        return None
    if isinstance(proto, tuple):
        return _nest(proto, iter(out if isinstance(out, tuple) else (out,)))
    if isinstance(out, tuple):
        out = out[0]
    return _one(out, proto)


def _nest(proto: tuple, it):
    """The flat results from `it` arranged as `proto` nests them. (A plain function: a closure that
    calls itself would be a reference cycle, keeping the results alive until the next GC.)"""
    return tuple(_nest(p, it) if isinstance(p, tuple) else _one(next(it), p) for p in proto)


def _one(x, proto=None):
    a = np.asarray(x)
    if a.dtype == np.int64 and getattr(proto, "dtype", None) == "u64":  # (compiled code holds keys as i64)
        a = a.view(np.uint64)
    if a.ndim == 0:
        return a[()]
    if not a.flags.writeable:
        return a.copy()
    return a
