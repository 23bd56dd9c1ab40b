"""Saving parameters: `dg.save(path, tree)` and `dg.load_params(path)` (LANGUAGE.md §4).

A tree is an array, a scalar, or dicts (str keys), tuples and lists of trees, nested. `save`
writes it to `path` (exactly that name) as a NumPy `.npz` archive, readable by `np.load`:

- each leaf is one entry named by its key path, the keys and indices from the root joined by
  `/` (`params/w1`, `layers/0/b`; a `/` or `%` in a dict key is written `%2F`, `%25`); a tree
  that is one leaf is the entry `value`;
- the entry `__dg_tree__` (JSON text as uint8 bytes) records the tree's shape: which nodes are
  dicts (their keys in order), tuples or lists, and each leaf's entry, dtype and shape;
- a dtype NumPy cannot store (bfloat16 and the other `ml_dtypes` types) is stored as the
  unsigned integers of its bits (`uint16` for bfloat16), its name in `__dg_tree__`.

`load_params` gives back the same structure: dicts (keys in their order), tuples and lists as
saved, every leaf a NumPy array of its saved dtype and shape (a scalar comes back as a 0-d
array). An `.npz` without `__dg_tree__` (written by `np.savez`) loads as a dict of its entries.
A file that is missing, not an `.npz`, corrupt, missing a leaf, or whose entries do not match
its `__dg_tree__` is a `DgError` located at the caller's line; so is a tree `save` cannot
store. `save` writes a temporary file beside `path` and renames it, so that a failed save
leaves an existing file as it was.
"""
from __future__ import annotations

import json
import os
import tempfile
import zipfile

import numpy as np

from .core.tracebacks import error_at_caller, user_facing

try:  # bf16 and the other ml_dtypes types (a dependency of dg; optional here as in core.types)
    import ml_dtypes
except ImportError:  # pragma: no cover
    ml_dtypes = None

__all__ = ["save", "load_params"]

TREE = "__dg_tree__"
FORMAT = "dg.params"
VERSION = 1
_ROOT = "value"
_NATIVE = "biufc"  # NumPy kinds an .npz stores as they are
_CORRUPT = (OSError, EOFError, ValueError, zipfile.BadZipFile, zipfile.LargeZipFile, KeyError, UnicodeDecodeError)


# ---------------------------------------------------------------- save
@user_facing
def save(path, tree) -> None:
    """Write `tree` (arrays and scalars in dicts with str keys, tuples and lists) to the `.npz`
    file `path`; `load_params(path)` reads it back."""
    entries: dict = {}
    shape = _describe(tree, [], entries)
    text = json.dumps({"format": FORMAT, "version": VERSION, "tree": shape}, separators=(",", ":"))
    entries[TREE] = np.frombuffer(text.encode(), np.uint8)
    _write(os.fspath(path), entries)


def _escape(key: str) -> str:
    return key.replace("%", "%25").replace("/", "%2F")


def _describe(x, keys: list, entries: dict):
    """The JSON description of tree `x` at key path `keys`; its leaves are added to `entries`."""
    if isinstance(x, dict):
        for k in x:
            if not isinstance(k, str):
                raise error_at_caller(f"save: dict keys must be strings, got {k!r} at {_where(keys)}")
        return {"dict": [[k, _describe(v, keys + [_escape(k)], entries)] for k, v in x.items()]}
    if isinstance(x, (tuple, list)):
        kind = "tuple" if isinstance(x, tuple) else "list"
        return {kind: [_describe(v, keys + [str(i)], entries) for i, v in enumerate(x)]}
    a = _leaf_array(x, keys)
    name = "/".join(keys) or _ROOT
    if name == TREE:
        raise error_at_caller(f"save: the key path {name!r} is reserved for the tree's description")
    stored, dtype = _storable(a, keys)
    entries[name] = stored
    return {"leaf": name, "dtype": dtype, "shape": list(a.shape)}


def _leaf_array(x, keys: list) -> np.ndarray:
    if x is None or isinstance(x, (str, bytes)):
        raise error_at_caller(f"save: a leaf must be an array or a number, got {type(x).__name__} at {_where(keys)}")
    try:
        return np.asarray(x)
    except Exception as e:  # an object NumPy cannot make an array of
        raise error_at_caller(f"save: cannot store {type(x).__name__} at {_where(keys)}: {e}") from None


def _storable(a: np.ndarray, keys: list) -> tuple:
    """(the array as the .npz stores it, the name of its dtype)."""
    if a.dtype.kind in _NATIVE:
        return a, a.dtype.name
    if _extension_dtype(a.dtype.name) == a.dtype:
        return a.view(f"u{a.dtype.itemsize}"), a.dtype.name
    raise error_at_caller(f"save: cannot store an array of {a.dtype} at {_where(keys)} (numbers and booleans only)")


def _extension_dtype(name: str):
    """The ml_dtypes dtype called `name` (bfloat16, float8_e4m3fn, ...), or None."""
    t = getattr(ml_dtypes, name, None) if ml_dtypes is not None and name.isidentifier() else None
    try:
        return np.dtype(t) if t is not None else None
    except TypeError:
        return None


def _where(keys: list) -> str:
    return repr("/".join(keys)) if keys else "the root"


def _write(path: str, entries: dict) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".dg-save-", suffix=".npz")
    except OSError as e:
        raise error_at_caller(f"save: cannot write {path}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **entries)
        os.replace(tmp, path)
    except OSError as e:
        raise error_at_caller(f"save: cannot write {path}: {e.strerror or e}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


# ---------------------------------------------------------------- load
@user_facing
def load_params(path):
    """The tree `save` wrote to `path`: its dicts, tuples and lists, NumPy arrays at its leaves."""
    path = os.fspath(path)
    try:
        archive = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise error_at_caller(f"load_params: no file {path}") from None
    except _CORRUPT as e:
        raise error_at_caller(f"load_params: {path} is not an .npz file of parameters ({_reason(e)})") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise error_at_caller(f"load_params: {path} is not an .npz file (it holds one array: np.load reads it)")
    with archive:
        try:
            names = set(archive.files)
            if TREE not in names:
                return {n: archive[n] for n in archive.files}
            tree = _description(archive[TREE], path)
            used: set = set()
            out = _build(tree, archive, names, used, path)
        except _CORRUPT as e:
            raise error_at_caller(f"load_params: {path} is corrupt ({_reason(e)})") from None
    extra = sorted(names - used - {TREE})
    if extra:
        raise error_at_caller(f"load_params: {path} has entries its structure does not name: {', '.join(extra)}")
    return out


def _reason(e: Exception) -> str:
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def _description(raw: np.ndarray, path: str):
    try:
        d = json.loads(raw.tobytes().decode())
    except (UnicodeDecodeError, ValueError) as e:
        raise error_at_caller(f"load_params: {path}: its {TREE} entry is not a tree description ({_reason(e)})") from None
    if not isinstance(d, dict) or d.get("format") != FORMAT or "tree" not in d:
        raise error_at_caller(f"load_params: {path}: its {TREE} entry is not a tree description")
    if d.get("version") != VERSION:
        raise error_at_caller(f"load_params: {path} was written by another version of dg.save (format {d.get('version')!r}, "
                     f"this dg reads {VERSION})")
    return d["tree"]


def _build(node, archive, names: set, used: set, path: str):
    """The tree that description `node` describes, its leaves read from `archive`."""
    if isinstance(node, dict) and len(node) == 1:
        (kind, body), = node.items()
        if kind == "dict" and isinstance(body, list) and all(
                isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in body):
            return {k: _build(v, archive, names, used, path) for k, v in body}
        if kind in ("tuple", "list") and isinstance(body, list):
            items = [_build(v, archive, names, used, path) for v in body]
            return tuple(items) if kind == "tuple" else items
    if isinstance(node, dict) and "leaf" in node:
        return _read_leaf(node, archive, names, used, path)
    raise error_at_caller(f"load_params: {path}: its structure has a node that is not a dict, tuple, list or leaf: "
                 f"{json.dumps(node)[:80]}")


def _read_leaf(node: dict, archive, names: set, used: set, path: str) -> np.ndarray:
    name, dtype, shape = node.get("leaf"), node.get("dtype"), node.get("shape")
    if not isinstance(name, str) or not isinstance(dtype, str) or not isinstance(shape, list):
        raise error_at_caller(f"load_params: {path}: its structure has a malformed leaf: {json.dumps(node)[:80]}")
    if name not in names:
        raise error_at_caller(f"load_params: {path} has no entry {name!r}, a leaf of its structure")
    a = archive[name]
    used.add(name)
    want = _extension_dtype(dtype)
    if want is not None and a.dtype == np.dtype(f"u{want.itemsize}"):
        a = a.view(want)
    if a.dtype.name != dtype or list(a.shape) != shape:
        raise error_at_caller(f"load_params: {path}: entry {name!r} is {a.dtype.name}{list(a.shape)}, "
                     f"its structure says {dtype}{shape}")
    return a
