"""The on-disk cache of compiled CPU code: a new process does not recompile.

Expects: a key text (the dg IR of one specialization). Guarantees: `key`
mixes that text with everything else the machine code depends on (the
sources of dg's lowering and runtime, the MLIR and LLVM versions, the
pipeline, and the host CPU, since code is compiled for it); `load` returns
what `store` put under that key, or None when the entry is missing,
unreadable or fails its checksum (a damaged entry is recompiled, never
loaded). Entries are written to a temporary file and renamed into place,
so processes sharing the folder never see half an entry.

The folder is `DG_CACHE_DIR`, else `$XDG_CACHE_HOME/dg/compiled`, else
`~/.cache/dg/compiled`; `DG_CACHE=0` turns the cache off.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path

from dg.core import mlir

FORMAT = 1


def folder() -> Path | None:
    if os.environ.get("DG_CACHE", "1") == "0":
        return None
    d = os.environ.get("DG_CACHE_DIR")
    if d:
        return Path(d)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dg" / "compiled"


@functools.lru_cache(maxsize=None)
def _fingerprint(extra: str) -> str:
    """What compiled code depends on besides the dg IR: dg's own lowering code, versions, the host."""
    import llvmlite.binding as llvm


    h = hashlib.sha256(f"{FORMAT}\0{extra}\0{mlir.VERSION}\0{llvm.llvm_version_info}".encode())
    h.update(llvm.get_host_cpu_name().encode())
    h.update(llvm.get_host_cpu_features().flatten().encode())
    root = Path(__file__).resolve().parent.parent
    for sub in ("core", "dialects", "lowering", "runtime", "dsl"):
        for p in sorted((root / sub).glob("*.py")):
            h.update(p.name.encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def key(text: str, extra: str = "") -> str:
    return hashlib.sha256((_fingerprint(extra) + "\0" + text).encode()).hexdigest()[:40]


def load(k: str) -> tuple[dict, bytes] | None:
    d = folder()
    if d is None:
        return None
    try:
        meta = json.loads((d / f"{k}.json").read_text())
        blob = (d / f"{k}.o").read_bytes()
    except (OSError, ValueError):
        return None
    if meta.get("sha256") != hashlib.sha256(blob).hexdigest():
        return None
    return meta, blob


def _write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def store(k: str, meta: dict, blob: bytes) -> None:
    """Best effort: a read-only or full disk means no cache, not a failure."""
    d = folder()
    if d is None:
        return
    try:
        d.mkdir(parents=True, exist_ok=True)
        _write(d / f"{k}.o", blob)  # the object first: the json names its checksum
        _write(d / f"{k}.json", json.dumps(dict(meta, sha256=hashlib.sha256(blob).hexdigest())).encode())
    except OSError:
        pass
