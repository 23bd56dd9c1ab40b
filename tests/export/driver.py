"""C programs that call an exported dg library, built with the system C compiler, for the tests.

`run_c(exported, name, args, steps=1, feed={})` writes a C program that reads `args` (NumPy
arrays and scalars, the entry's argument leaves in order) from files, calls entry `name` of the
library `steps` times (after each call but the last, result k replaces argument feed[k]), and
writes every result, or the return code and dg_last_error()'s message; it builds the program
against the library (`static=True`: its archive) with `cc`, runs it, and returns
(return code, message, results as NumPy arrays).
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from dg.core.types import np_dtype

CC = shutil.which("cc")
needs_cc = pytest.mark.skipif(CC is None or shutil.which("objcopy") is None,
                              reason="no C compiler and binutils here: exported libraries cannot be built")


def _program(lib: str, entry, args: list, steps: int, feed: dict) -> str:
    lines = ['#include <stdio.h>', '#include <stdlib.h>', '#include <string.h>', f'#include "{lib}.h"', "",
             "static void *load(const char *path, size_t n) {",
             "    void *p = malloc(n ? n : 1);",
             "    FILE *f = fopen(path, \"rb\");",
             "    if (!f || fread(p, 1, n, f) != n) { fprintf(stderr, \"cannot read %s\\n\", path); exit(99); }",
             "    fclose(f);",
             "    return p;",
             "}", "",
             "static void save(const char *path, const void *p, size_t n) {",
             "    FILE *f = fopen(path, \"wb\");",
             "    fwrite(p, 1, n, f);",
             "    fclose(f);",
             "}", "",
             "int main(void) {"]
    for k, (leaf, a) in enumerate(zip(entry.args, args)):
        if leaf.rank:
            lines.append(f"    dg_array a{k} = {{load(\"in{k}.bin\", {a.nbytes}), {a.ndim}, "
                         f"{{{', '.join(map(str, a.shape)) or '0'}}}}};")
        else:
            lines.append(f"    {leaf.ctype} a{k};")
            lines.append(f"    {{ void *p = load(\"in{k}.bin\", {a.nbytes}); memcpy(&a{k}, p, sizeof a{k}); free(p); }}")
    for k, r in enumerate(entry.results):
        lines.append(f"    dg_array r{k};" if r.rank else f"    {r.ctype} r{k};")
    call_args = [f"&a{k}" if leaf.rank else f"a{k}" for k, leaf in enumerate(entry.args)] + \
        [f"&r{k}" for k in range(len(entry.results))]
    lines.append(f"    for (int step = 0; step < {steps}; step++) {{")
    for k, r in enumerate(entry.results):
        if r.rank:
            lines.append(f"        r{k}.data = NULL;")
    lines += [f"        int rc = {lib}_{entry.name}({', '.join(call_args)});",
              "        if (rc) {",
              "            const char *m = dg_last_error();",
              "            save(\"error.txt\", m, strlen(m));",
              "            return rc;",
              "        }",
              f"        if (step == {steps - 1}) break;"]
    for res, arg in feed.items():
        r = entry.results[res]
        if r.rank:
            a = args[arg]
            lines.append(f"        memcpy(a{arg}.data, r{res}.data, {a.nbytes});")
            lines.append(f"        dg_free(&r{res});")
        else:
            lines.append(f"        a{arg} = r{res};")
    lines.append("    }")
    for k, r in enumerate(entry.results):
        item = np_dtype(r.type.dtype).itemsize
        if r.rank:
            n = " * ".join(f"r{k}.shape[{i}]" for i in range(r.rank))
            lines.append(f"    save(\"out{k}.bin\", r{k}.data, (size_t)({n}) * {item});")
            lines.append(f"    {{ FILE *f = fopen(\"out{k}.shape\", \"w\"); for (int i = 0; i < r{k}.rank; i++) "
                         f"fprintf(f, \"%lld \", (long long)r{k}.shape[i]); fclose(f); }}")
            lines.append(f"    dg_free(&r{k});")
        else:
            lines.append(f"    save(\"out{k}.bin\", &r{k}, {item});")
    lines += ["    return 0;", "}", ""]
    return "\n".join(lines)


def build_c(exported, source: str, folder: Path, static: bool = False) -> Path:
    """The C program `source` built against the exported library; its path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "main.c").write_text(source)
    lib_dir = exported.shared.parent
    lib = exported.shared.name[3:-3]
    if static:
        links = [str(exported.static), "-lm", "-lpthread"] + _blas(exported)
    else:
        links = [f"-L{lib_dir}", f"-l{lib}", f"-Wl,-rpath,{lib_dir}"]
    exe = folder / "main"
    done = subprocess.run([CC, "-O1", "-o", str(exe), str(folder / "main.c"), f"-I{lib_dir}", *links],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return exe


def _blas(exported) -> list:
    """The BLAS the header says a static archive links with (its path), or nothing."""
    for line in exported.header.read_text().splitlines():
        if "Static archive: link lib" in line:
            return [w for w in line.split(" with ", 1)[1].split() if w not in ("-lm", "-lpthread")]
    return []


def run_c(exported, name: str, args: list, folder: Path, steps: int = 1, feed: dict | None = None,
          static: bool = False, env: dict | None = None):
    """(return code, dg_last_error's message, results) of a C program calling entry `name`."""
    entry = next(e for e in exported.entries if e.name == name)
    lib = exported.header.stem
    args = [np.ascontiguousarray(np.asarray(a, dtype=np_dtype(leaf.type.dtype))) for leaf, a in zip(entry.args, args)]
    exe = build_c(exported, _program(lib, entry, args, steps, feed or {}), folder, static)
    for k, a in enumerate(args):
        (folder / f"in{k}.bin").write_bytes(a.tobytes())
    done = subprocess.run([str(exe)], cwd=folder, capture_output=True, text=True, env=env, timeout=300)
    if done.returncode:
        error = (folder / "error.txt").read_text() if (folder / "error.txt").exists() else done.stderr
        return done.returncode, error, None
    outs = []
    for k, r in enumerate(entry.results):
        dt = np_dtype(r.type.dtype)
        data = np.frombuffer((folder / f"out{k}.bin").read_bytes(), dtype=dt)
        if r.rank:
            shape = tuple(int(s) for s in (folder / f"out{k}.shape").read_text().split())
            outs.append(data.reshape(shape))
        else:
            outs.append(data.reshape(()))
    return 0, "", outs
