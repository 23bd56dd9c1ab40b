"""`DG_PERF_MAP=1`: compiled code's functions named for Linux `perf`.

Expects: object code (ELF, 64-bit, little-endian, as codegen.objects makes it) just linked into a
JIT (runtime.linking.Loaded). Guarantees: `write(jit, pieces)` appends a line
`START SIZE NAME` (hexadecimal) for each function of each piece to `/tmp/perf-<pid>.map`, the
file `perf report` reads to name the addresses of code it did not load from a file: a profile
of a training step then shows `dg.fn.loss__vjp_0` and the parallel loops' bodies where it
showed bare addresses. A function's address is its offset in its section from where the JIT
put a function of that section it can name (one not internal); a section with none is left out.
"""
from __future__ import annotations

import os
import struct

_FUNC = 2  # STT_FUNC
_SYMTAB = 2  # SHT_SYMTAB


def path() -> str:
    return f"/tmp/perf-{os.getpid()}.map"


def write(jit, pieces: list) -> None:
    """Append each piece's functions, at the addresses the JIT gave them, to the map."""
    lines = []
    for piece in pieces:
        functions = _functions(piece)
        bases = {}
        for section, offset, _, name in functions:
            if section not in bases:
                at = jit.get_function_address(name)
                if at:
                    bases[section] = at - offset
        lines += [f"{bases[s] + off:x} {size:x} {name}\n" for s, off, size, name in functions if s in bases and size]
    with open(path(), "a") as f:
        f.writelines(lines)


def _functions(obj: bytes) -> list:
    """[(section index, offset, size, name)] of the functions an ELF64 object defines."""
    if obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:
        return []
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * shentsize) for i in range(shnum)]
    out = []
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind != _SYMTAB or not entsize:
            continue
        strings = sections[link][4]
        for k in range(size // entsize):
            name_at, info, _, shndx, value, length = struct.unpack_from("<IBBHQQ", obj, offset + k * entsize)
            if info & 0xF == _FUNC and 0 < shndx < shnum:
                end = obj.index(b"\0", strings + name_at)
                out.append((shndx, value, length, obj[strings + name_at:end].decode()))
    return out
