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
from dg.dsl import ast as A
from dg.dsl.emit import annotation_tree, tree_key, type_key
from dg.dsl.values import PackedList, Record, describe_structure, flatten, leaf_paths, unflatten_like


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


def annotation_type(te, names: dict):
    """The declared type of a parameter: a TensorType, a structure of them, or None."""
    try:
        return annotation_tree(te, names)
    except ShapeError as e:
        raise DgTypeError(str(e), te.loc) from None


# ----------------------------------------------------------------- structures from Python
def _array_like(x) -> bool:
    return isinstance(x, np.ndarray) or (hasattr(x, "__array__") and not isinstance(x, (np.generic, list, tuple)))


def is_structure(x) -> bool:
    """A dict, or a tuple or list that holds arrays, dicts or such tuples, or a tuple that holds
    NumPy scalars (as dg returns a tuple of scalar results): a structure whose leaves are
    arguments. A list of numbers, or a tuple of Python numbers (nested lists of numbers), is an
    array, as in NumPy."""
    if isinstance(x, dict):
        return True
    if isinstance(x, (list, tuple)):
        return any(_array_like(e) or is_structure(e) or (isinstance(x, tuple) and isinstance(e, np.generic))
                   for e in x)
    return False


def _keys_of(d: dict, path: str, p: A.Param, fn: str):
    for k in d:
        if not isinstance(k, str):
            raise DgTypeError(f"argument '{p.name}{path}' of {fn}(): a dict passed to dg has string keys, "
                              f"not {type(k).__name__} {k!r}", p.loc)
    return sorted(d)


def py_flatten(x, p: A.Param, fn: str, path: str = ""):
    """(structure with None leaves, leaves, their paths) of a Python structure; dict keys in sorted order."""
    if isinstance(x, dict):
        keys = _keys_of(x, path, p, fn)
        parts = [py_flatten(x[k], p, fn, f'{path}["{k}"]') for k in keys]
        return (Record(zip(keys, [q[0] for q in parts])), [v for q in parts for v in q[1]],
                [v for q in parts for v in q[2]])
    if isinstance(x, (list, tuple)) and is_structure(x):
        parts = [py_flatten(e, p, fn, f"{path}[{i}]") for i, e in enumerate(x)]
        return tuple(q[0] for q in parts), [v for q in parts for v in q[1]], [v for q in parts for v in q[2]]
    return None, [x], [path]


def _match(x, declared, p: A.Param, fn: str, path: str = ""):
    """(leaf, path) for each leaf of the Python value x, in the declared structure's order; a
    DgTypeError naming the path where the two differ."""
    where = f"argument '{p.name}{path}' of {fn}()"
    if isinstance(declared, Record):
        if not isinstance(x, dict):
            raise DgTypeError(f"{where} must be {describe_structure(declared)} (a dict), got {_describe(x)}", p.loc)
        keys = _keys_of(x, path, p, fn)
        missing = [k for k in declared.keys if k not in x]
        extra = [k for k in keys if k not in declared.keys]
        if missing or extra:
            what = "; ".join(([f"missing key{'s' if len(missing) > 1 else ''} " + ", ".join(map(repr, missing))]
                              if missing else []) +
                             ([f"unexpected key{'s' if len(extra) > 1 else ''} " + ", ".join(map(repr, extra))]
                              if extra else []))
            raise DgTypeError(f"{where} must be {describe_structure(declared)}: {what}", p.loc)
        out = []
        for k, d in declared.items():
            out += _match(x[k], d, p, fn, f'{path}["{k}"]')
        return out
    if isinstance(declared, tuple):
        if not isinstance(x, (list, tuple)) or len(x) != len(declared):
            raise DgTypeError(f"{where} must be {describe_structure(declared)}, got {_describe(x)}", p.loc)
        out = []
        for i, (e, d) in enumerate(zip(x, declared)):
            out += _match(e, d, p, fn, f"{path}[{i}]")
        return out
    return [(x, path)]


def _holds_numpy_floats(x) -> bool:
    """Whether nested lists and tuples of numbers hold a NumPy float (np.float64(0.1))."""
    if isinstance(x, (list, tuple)):
        return any(_holds_numpy_floats(e) for e in x)
    return isinstance(x, np.floating)


def _describe(x) -> str:
    if isinstance(x, np.ndarray):
        return f"a {x.dtype} array of shape {tuple(x.shape)}"
    if isinstance(x, dict):
        return "a dict with keys " + ", ".join(repr(k) for k in x)
    if isinstance(x, (list, tuple)) and is_structure(x):
        return f"a {type(x).__name__} of {len(x)}"
    text = repr(x)
    return f"{type(x).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def to_array(x, p: A.Param, fn: str, dtype: str | None = None, path: str = "") -> np.ndarray:
    """A Python argument (or the leaf at `path` of one) as a NumPy array (weak scalars take `dtype`)."""
    if isinstance(x, np.generic):  # NumPy scalars keep their dtype (np.float64 is a float subclass)
        return np.asarray(x)
    if isinstance(x, (bool, np.bool_)) and not isinstance(x, np.ndarray):
        return np.asarray(x, dtype=np_dtype(dtype) if dtype else np.bool_)
    if isinstance(x, (int,)) and not isinstance(x, bool):
        try:
            return np.asarray(x, dtype=np_dtype(dtype) if dtype else np.int64)
        except OverflowError:
            raise DgTypeError(f"argument '{p.name}{path}' of {fn}() is the integer {x}, which does not fit in "
                              f"{dtype or 'i64'}", p.loc) from None
    if isinstance(x, float):
        if dtype and DTYPES[dtype][2] != "f":
            raise DgTypeError(f"argument '{p.name}{path}' of {fn}() is the float {x!r}, but {dtype} was declared", p.loc)
        return np.asarray(x, dtype=np_dtype(dtype) if dtype else np.float32)
    if isinstance(x, (list, tuple)):
        try:
            arr = np.asarray(x)
        except ValueError as e:
            raise DgTypeError(f"argument '{p.name}{path}' of {fn}() is not a rectangular array: {e}", p.loc) from None
        if arr.dtype == object:
            raise DgTypeError(f"argument '{p.name}{path}' of {fn}() is not an array of numbers", p.loc)
        if arr.dtype == np.float64 and not _holds_numpy_floats(x):  # (Python floats are weak; NumPy's keep their type)
            arr = arr.astype(np_dtype(dtype) if dtype else np.float32)
        elif arr.dtype.kind in "iu" and dtype:
            wanted = np_dtype(dtype)
            if wanted.kind in "iu" and arr.size and not (np.iinfo(wanted).min <= arr.min() and arr.max() <= np.iinfo(wanted).max):
                raise DgTypeError(f"argument '{p.name}{path}' of {fn}() has integers that do not fit in {dtype}", p.loc)
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
            raise DgTypeError(f"argument '{p.name}{path}' of {fn}() ({type(x).__name__}) cannot be read as an array: "
                              f"{type(e).__name__}: {e}", p.loc) from None
    raise DgTypeError(f"argument '{p.name}{path}' of {fn}() must be an array or a number, got {type(x).__name__}", p.loc)


@dataclass
class _Param:
    """What a call checks of one parameter, worked out once per function."""
    declared: TensorType | None
    np_dtype: np.dtype | None  # the declared element type's NumPy dtype
    key: tuple | None  # this parameter's part of the signature key, when declared
    static: tuple  # (axis, size) of the static dims
    named: tuple  # (axis, name) of the named symbolic dims


def _leaf_plan(t: TensorType) -> _Param:
    nd = DTYPES[t.dtype][1]
    return _Param(t, None if nd is None else np.dtype(nd), type_key(t),
                  tuple((i, d) for i, d in enumerate(t.shape) if isinstance(d, int)),
                  tuple((i, d.name) for i, d in enumerate(t.shape) if isinstance(d, Sym) and d.name))


def _plan(fd: A.FuncDef) -> list:
    """Per parameter: a _Param (a tensor or undeclared), or (declared structure, its key, a _Param per leaf)."""
    plan = fd.__dict__.get("_dg_call_plan")
    if plan is None:
        names: dict = {}
        plan = []
        for p in fd.params:
            t = annotation_type(p.annotation, names)
            if t is None:
                plan.append(_Param(None, None, None, (), ()))
            elif isinstance(t, tuple):
                plan.append((t, tree_key(t), [_leaf_plan(x) for x in flatten(t)]))
            else:
                plan.append(_leaf_plan(t))
        fd.__dict__["_dg_call_plan"] = plan
    return plan


def _element_type(arr: np.ndarray, p: A.Param, fd: A.FuncDef, path: str = "") -> str:
    """The dg element type of an argument array, or a DgTypeError naming the parameter."""
    dt = dtype_of_np(arr.dtype)
    if dt is None or dt == "u64":
        raise DgTypeError(f"argument '{p.name}{path}' of {fd.name}(): dtype {arr.dtype} is not a dg element type", p.loc)
    return dt


def _packed(x, declared: PackedList, p: A.Param, fn: str, sizes: dict | None = None) -> list:
    """(leaf, path) for each value of a list argument (a Python list of items of the declared item
    structure): per leaf of the item, the items' leaves concatenated along their first axis, then
    the offsets where each starts and the end. Items differ only in their first axis. An empty
    list's named sizes are those the arguments before it gave (`sizes`), else 0."""
    where = f"argument '{p.name}' of {fn}()"
    if not isinstance(x, (list, tuple)) or _array_like(x):
        raise DgTypeError(f"{where} must be a list, got {_describe(x)}", p.loc)
    item_types = flatten(declared.item)
    items = []
    for i, e in enumerate(x):
        leaves = _match(e, declared.item, p, fn, f"[{i}]") if isinstance(declared.item, tuple) else [(e, f"[{i}]")]
        items.append([to_array(v, p, fn, t.dtype, path) for (v, path), t in zip(leaves, item_types)])
    out = []
    for j, t in enumerate(item_types):
        arrs = [it[j] for it in items]
        for i, a in enumerate(arrs):
            if a.ndim != t.rank or a.shape[1:] != arrs[0].shape[1:]:
                raise DgTypeError(f"{where}: item {i} is {_describe(a)}; the items of a list must be of rank {t.rank} "
                                  f"and differ only in their first axis", p.loc)
            first = t.shape[0] if t.rank else None
            if (isinstance(first, int) or getattr(first, "name", None)) and a.shape[0] != (
                    first if isinstance(first, int) else arrs[0].shape[0]):
                raise DgTypeError(f"{where}: item {i} is {_describe(a)}; the list declares items of one size in their "
                                  f"first axis ({first if isinstance(first, int) else first.name})", p.loc)
        if t.rank == 0:
            data = np.asarray(arrs, dtype=np_dtype(t.dtype)) if arrs else np.zeros(0, np_dtype(t.dtype))
            offsets = np.arange(len(arrs) + 1, dtype=np.int64)
        else:
            known = sizes or {}
            rest = arrs[0].shape[1:] if arrs else tuple(
                d if isinstance(d, int) else known[d.name][0] if d.name in known else 0 for d in t.shape[1:])
            data = np.concatenate(arrs) if arrs else np.zeros((0,) + tuple(rest), np_dtype(t.dtype))
            offsets = np.zeros(len(arrs) + 1, dtype=np.int64)
            np.cumsum([len(a) for a in arrs], out=offsets[1:])
        out += [(data, "[:]"), (offsets, "[:].offsets")]
    return out


def unpacked(values: list, proto: PackedList) -> list:
    """A list result back as a Python list: each item cut from the packed leaves by its offsets."""
    parts = [(np.asarray(values[2 * i]), np.asarray(values[2 * i + 1])) for i in range(len(values) // 2)]
    n = len(parts[0][1]) - 1 if parts else 0
    leaves = flatten(proto.item)
    out = []
    for i in range(n):
        item = []
        for (data, offsets), t in zip(parts, leaves):
            a, b = int(offsets[i]), int(offsets[i + 1])
            item.append(_one(data[a]) if getattr(t, "rank", 1) == 0 else data[a:b].copy())
        out.append(_nest(proto.item, iter(item)) if isinstance(proto.item, tuple) else item[0])
    return out


def fingerprint(values) -> tuple:
    """(the dtypes and shapes of the values' leaves and the structures holding them, the leaves as
    arrays) when every leaf is a NumPy array or scalar, else (None, None): arguments with the same
    fingerprint have the same signature."""
    fp, arrays = [], []
    for x in values:
        if type(x) is np.ndarray:
            fp.append((x.dtype, x.shape))
            arrays.append(x)
        elif not _fast_leaves(x, fp, arrays):
            return None, None
    return tuple(fp), arrays


def same_leaves(raw: list, leaves: list) -> bool:
    """Whether `fingerprint`'s leaves are the signature's (`leaves`, its arrays for them): the
    same count, dtypes and shapes (a Python float: any). Not so where the fingerprint read a
    structure that a parameter declared as an array takes as one (a list of arrays, stacked):
    such arguments must go the slow way."""
    return len(raw) == len(leaves) and all(
        type(x) is float or (x.dtype == a.dtype and x.shape == a.shape) for x, a in zip(raw, leaves))


def weak_floats(raw: list, leaves: list) -> tuple:
    """((leaf index, dtype), ...) for the Python floats among `fingerprint`'s leaves `raw`: the
    dtypes `leaves` (the signature's arrays for them) gave them, which the parameters decide
    (`to_array`), the same for every float."""
    return tuple((i, a.dtype) for i, (x, a) in enumerate(zip(raw, leaves)) if type(x) is float)


def with_weak_floats(arrays: list, floats: tuple) -> list:
    """`fingerprint`'s leaves with its Python floats made arrays of their dtypes (`weak_floats`)."""
    if floats:
        arrays = list(arrays)
        for i, dt in floats:
            arrays[i] = np.asarray(arrays[i], dtype=dt)
    return arrays


def _fast_leaves(v, fp: list, arrays: list) -> bool:
    """Append v's leaves (NumPy arrays and scalars in dicts with string keys, tuples and lists) to
    `arrays` and their structure, dtypes and shapes to `fp`, in prefix order; False for anything
    else (a list of numbers is an array, worked out the slow way)."""
    t = type(v)
    if t is np.ndarray:
        fp.append((v.dtype, v.shape))
        arrays.append(v)
        return True
    if t is float:  # (its dtype is its parameter's: weak_floats)
        fp.append(float)
        arrays.append(v)
        return True
    if t is dict:
        try:
            keys = sorted(v)
        except TypeError:  # keys that do not compare: not strings
            return False
        fp.append(tuple(keys))
        for k in keys:
            if type(k) is not str or not _fast_leaves(v[k], fp, arrays):
                return False
        return True
    if t is tuple or t is list:
        if not v or not any(type(e) in (np.ndarray, dict, tuple, list) or (t is tuple and isinstance(e, np.generic))
                            for e in v):
            return False
        fp.append(len(v) if t is tuple else -len(v))
        for e in v:
            if not _fast_leaves(e, fp, arrays):
                return False
        return True
    if isinstance(v, np.generic):
        a = np.asarray(v)
        fp.append((a.dtype, a.shape))
        arrays.append(a)
        return True
    return False


def make_signature(fd: A.FuncDef, values: list):
    """(Signature, the arguments' leaves as arrays) for a call's arguments, or a DgTypeError naming
    the parameter (and the leaf, in a structure).

    Arrays of dtypes and shapes seen before (NumPy arrays and scalars, or structures of them: the
    usual training loop) take the signature that was worked out for them then."""
    fp, arrays = fingerprint(values)
    if fp is not None:
        seen = fd.__dict__.setdefault("_dg_signatures", {})
        hit = seen.get(fp)
        if hit is None:
            sig, leaves = _checked_signature(fd, values)
            if same_leaves(arrays, leaves):
                if len(seen) >= 64:  # many shapes: keep the newest
                    seen.clear()
                seen[fp] = (sig, weak_floats(arrays, leaves))
            return sig, leaves
        sig, floats = hit
        return sig, with_weak_floats(arrays, floats)
    return _checked_signature(fd, values)


def _checked_signature(fd: A.FuncDef, values: list):
    sizes: dict = {}
    types, arrays, key = [], [], []
    for p, pp, x in zip(fd.params, _plan(fd), values):
        if isinstance(pp, tuple):  # a declared structure
            declared, skey, leaf_plans = pp
            leaves = _packed(x, declared, p, fd.name, sizes) if isinstance(declared, PackedList) else \
                _match(x, declared, p, fd.name)
            for (leaf, path), lp in zip(leaves, leaf_plans):
                arrays.append(_checked_leaf(leaf, lp, p, fd, sizes, path))
            types.append(declared)
            key.append(skey)
            continue
        if pp.declared is None and is_structure(x):
            struct, leaves, paths = py_flatten(x, p, fd.name)
            leaf_types = []
            for leaf, path in zip(leaves, paths):
                arr = to_array(leaf, p, fd.name, path=path)
                leaf_types.append(TensorType(_element_type(arr, p, fd, path), tuple(int(s) for s in arr.shape)))
                arrays.append(arr)
            t = unflatten_like(struct, leaf_types)
            types.append(t)
            key.append(tree_key(t))
            continue
        if pp.declared is None:
            arr = to_array(x, p, fd.name)
            dt = _element_type(arr, p, fd)
            types.append(TensorType(dt, tuple(int(s) for s in arr.shape)))
            key.append((dt, tuple(arr.shape)))
            arrays.append(arr)
            continue
        arrays.append(_checked_leaf(x, pp, p, fd, sizes))
        types.append(pp.declared)
        key.append(pp.key)
    return Signature(tuple(key), types), arrays


def _checked_leaf(x, pp: _Param, p: A.Param, fd: A.FuncDef, sizes: dict, path: str = ""):
    """x as an array of the declared type pp, or a DgTypeError naming the parameter and path."""
    declared = pp.declared
    where = f"argument '{p.name}{path}' of {fd.name}()"
    arr = x if type(x) is np.ndarray else to_array(x, p, fd.name, declared.dtype, path)
    if arr.dtype != pp.np_dtype:
        dt = _element_type(arr, p, fd, path)
        raise DgTypeError(f"{where} must be {declared}, got {_describe(arr)} "
                          f"(element type {dt}, expected {declared.dtype})", p.loc)
    shape = arr.shape
    if len(shape) != declared.rank:
        raise DgTypeError(f"{where} must be {declared}, got {_describe(arr)} "
                          f"(rank {arr.ndim}, expected {declared.rank})", p.loc)
    for axis, d in pp.static:
        if shape[axis] != d:
            raise DgTypeError(f"{where} must be {declared}, got {_describe(arr)} "
                              f"(axis {axis} has size {shape[axis]}, expected {d})", p.loc)
    for axis, name in pp.named:
        s = shape[axis]
        seen = sizes.get(name)
        if seen is None:
            sizes[name] = (s, axis, p.name + path)
        elif seen[0] != s:
            raise DgTypeError(
                f"size '{name}' is {seen[0]} in axis {seen[1]} of '{seen[2]}' but {s} in axis "
                f"{axis} of '{p.name}{path}' ({fd.name}() declares them equal)", p.loc)
    return arr


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
        key.append(tree_key(t))
    return Signature(tuple(key), types)


def to_python(out, proto):
    """Results as NumPy arrays (0-d as NumPy scalars), tuples as tuples, records as dicts."""
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
    if isinstance(proto, PackedList):
        return unpacked([next(it) for _ in proto], proto)
    items = [_nest(p, it) if isinstance(p, tuple) else _one(next(it), p) for p in proto]
    if isinstance(proto, Record):
        return dict(zip(proto.keys, items))
    return tuple(items)


def shown_type(t) -> str:
    """A parameter's type as dg writes it: f32[3], (f32[3], i64), {"b": f32[3], "w": f32[3, 3]}."""
    if isinstance(t, Record):
        return "{" + ", ".join(f'"{k}": {shown_type(v)}' for k, v in t.items()) + "}"
    if isinstance(t, PackedList):
        return f"list[{shown_type(t.item)}]"
    if isinstance(t, tuple):
        return "(" + ", ".join(shown_type(v) for v in t) + ("," if len(t) == 1 else "") + ")"
    return str(t)


def leaf_names(fd: A.FuncDef, sig: Signature) -> list:
    """The name of each leaf of a signature's arguments: `x`, or `p["w"]` in a structure."""
    return [p.name + path for p, t in zip(fd.params, sig.param_types)
            for path in (leaf_paths(t) if t is not None else [""])]


def leaf_owner(sig: Signature, index: int) -> tuple:
    """(parameter index, path) of the index-th leaf of a signature's arguments."""
    for i, t in enumerate(sig.param_types):
        paths = leaf_paths(t) if t is not None else [""]
        if index < len(paths):
            return i, paths[index]
        index -= len(paths)
    return len(sig.param_types) - 1, ""


def _one(x, proto=None):
    a = np.asarray(x)
    if a.dtype == np.int64 and getattr(proto, "dtype", None) == "u64":  # (compiled code holds keys as i64)
        a = a.view(np.uint64)
    if a.ndim == 0:
        return a[()]
    if not a.flags.writeable:
        return a.copy()
    return a
