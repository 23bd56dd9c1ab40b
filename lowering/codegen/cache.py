"""The on-disk cache of compiled code: a new process does not recompile.

Expects: a key text (the dg IR of one specialization). Guarantees: `key`
mixes that text with everything else the machine code depends on (the
sources of dg's lowering and runtime, the MLIR and LLVM versions, the
pipeline, and the host CPU, since code is compiled for it);
`get_or_build(key, build)` is what is stored under the key, else what
`build()` makes, stored there; `load` returns
what `store` put under that key, or None, and the code is compiled again,
when the entry is missing, damaged, not a regular file (a FIFO or a link
put in its place is not opened), or not sealed for that key: each entry
carries an HMAC of its whole key, its metadata and its object code, made
with a secret that only this user can read (`secret` in the folder, mode
0600). An entry moved under another key, or object code replaced with a
fitting checksum, is refused. Entries are written to a temporary file and
renamed into place, so processes sharing the folder never see half an
entry.

The folder is `DG_CACHE_DIR`, else `$XDG_CACHE_HOME/dg/compiled`, else
`~/.cache/dg/compiled`; `DG_CACHE=0` turns the cache off.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import json
import logging
import os
import stat
import tempfile
from pathlib import Path
from typing import Callable

from dg.core import mlir
from dg.core.config import config

FORMAT = 2
MAX_META = 1 << 26  # bytes; anything larger is not an entry of ours
MAX_OBJECT = 1 << 31
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


_FOLDER: list = []  # a folder `stored_in` sets, whatever the settings say


@contextlib.contextmanager
def stored_in(d: Path):
    """Inside, the disk cache is folder `d`, whatever the settings say now (the optimizer's
    worker stores its code where the process that asked for it had its cache when it asked)."""
    _FOLDER.append(d)
    try:
        yield
    finally:
        _FOLDER.pop()


def folder() -> Path | None:
    if _FOLDER:
        return _FOLDER[-1]
    if not config.cache:
        return None
    d = config.cache_dir
    if d is not None:
        return d
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dg" / "compiled"


@functools.lru_cache(maxsize=None)
def _fingerprint(extra: str) -> str:
    """What compiled code depends on besides the dg IR: `extra` (the pipeline, the entry), and
    what every entry shares (_shared_fingerprint)."""
    return hashlib.sha256(f"{_shared_fingerprint()}\0{extra}".encode()).hexdigest()


@functools.lru_cache(maxsize=None)
def _shared_fingerprint() -> str:
    """dg's own lowering code, the versions, the host: read once per process (each new entry
    has an `extra` of its own, and had read dg's 90 source files again)."""
    import llvmlite.binding as llvm

    h = hashlib.sha256(f"{FORMAT}\0{mlir.VERSION}\0{llvm.llvm_version_info}".encode())
    h.update(llvm.get_host_cpu_name().encode())
    h.update(llvm.get_host_cpu_features().flatten().encode())
    root = Path(__file__).resolve().parents[2]
    for sub in ("core", "dialects", "lowering", "runtime", "dsl"):
        for p in sorted([*(root / sub).rglob("*.py"), *(root / sub).rglob("*.ll")]):
            h.update(p.relative_to(root).as_posix().encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def key(text: str, extra: str = "") -> str:
    """The entry's whole key: a digest of everything the code depends on (its file names use
    the first 40 digits; the entry carries all 64 and is refused under any other key)."""
    return hashlib.sha256((_fingerprint(extra) + "\0" + text).encode()).hexdigest()


def derived_key(k: str, what: str) -> str:
    """The key of something kept beside the entry under `k` (its `what`)."""
    return hashlib.sha256(f"{k}\0{what}".encode()).hexdigest()


def _name(k: str) -> str:
    return k[:40]


def _secret(d: Path, create: bool) -> bytes | None:
    """The folder's secret, which the entries' seals are made with: a file only this user may
    read or write (as ssh wants of its keys), else None. Someone who may write the folder but is
    not this user cannot forge a seal: they can neither read this secret nor put their own in
    its place unnoticed."""
    p = d / "secret"
    if create and not p.exists():
        try:
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(os.urandom(32))
        except FileExistsError:
            pass  # another process made it first
    data = _read(p, limit=32, private=True)
    return data if data is not None and len(data) == 32 else None


def _seal(secret: bytes, k: str, meta: dict, blob: bytes) -> str:
    """Binds the entry to its key and to the object code and metadata it holds."""
    body = json.dumps(meta, sort_keys=True).encode()
    return hmac.new(secret, b"\0".join([k.encode(), hashlib.sha256(body).digest(),
                                         hashlib.sha256(blob).digest()]), "sha256").hexdigest()


def _read(path: Path, limit: int, private: bool = False) -> bytes | None:
    """A regular file's bytes, or None: never through a link, never blocking on a FIFO or a
    device put in the entry's place; with `private`, only a file of this user's that no one
    else may read or write."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        if private and (st.st_uid != os.getuid() or st.st_mode & 0o077):
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(limit + 1)
    except OSError:
        return None
    finally:
        os.close(fd)


def load(k: str) -> tuple[dict, bytes] | None:
    """The entry stored under `k`, or None where it is missing, damaged, not a regular file, or
    sealed under another key or with another secret."""
    d = folder()
    secret = _secret(d, create=False) if d is not None else None
    if secret is None:
        return None
    raw, blob = _read(d / f"{_name(k)}.json", MAX_META), _read(d / f"{_name(k)}.o", MAX_OBJECT)
    if raw is None or blob is None:
        return None
    try:
        entry = json.loads(raw)
        meta, seal = entry["meta"], entry["seal"]
    except (ValueError, TypeError, KeyError):
        return None
    if not hmac.compare_digest(str(seal), _seal(secret, k, meta, blob)):
        return None
    return meta, blob


def get_or_build(k: str, build: Callable[[], tuple[dict, bytes]]) -> tuple[dict, bytes, bool]:
    """(metadata, object code, whether they came from the cache): the entry under `k`, else what
    `build()` gives, stored under `k` (best effort, as `store`)."""
    hit = load(k)
    if hit is not None:
        return (*hit, True)
    meta, blob = build()
    store(k, meta, blob)
    return meta, blob, False


def _write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def remove(k: str) -> None:
    """The entry under `k` gone, if there is one (best effort, as `store`)."""
    d = folder()
    if d is None:
        return
    for suffix in (".json", ".o"):  # (the seal first: a half-removed entry is refused)
        try:
            os.unlink(d / f"{_name(k)}{suffix}")
        except OSError:
            pass


def store(k: str, meta: dict, blob: bytes) -> None:
    """Best effort: a read-only or full disk means no cache, not a failure (a warning through the
    `dg` logger, once per folder)."""
    d = folder()
    if d is None:
        return
    try:
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        secret = _secret(d, create=True)
        if secret is None:
            return
        _write(d / f"{_name(k)}.o", blob)  # the object first: the json holds its seal
        _write(d / f"{_name(k)}.json", json.dumps({"meta": meta, "seal": _seal(secret, k, meta, blob)}).encode())
    except OSError as e:
        if str(d) not in _WARNED:  # (once per folder and process)
            _WARNED.add(str(d))
            logging.getLogger("dg").warning("dg: the disk cache %s cannot be written (%s): compiled code is not "
                                            "kept for later processes", d, e.strerror or e)


_WARNED: set = set()
