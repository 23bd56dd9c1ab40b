"""Whether the JIT's memory manager can place an object's sections, read off the object.

Expects: x86-64 ELF object code (objects.object_code) about to be linked by llvmlite's
memory manager (runtime.linking).
Guarantees: `refuse_unplaceable(blob, first)` raises a DgError for an object whose sections the
memory manager could not place, where linking it would abort the process; it returns at once
for every other object, and for objects of other machines.

The manager (llvmlite's LlvmliteMemoryManager) reserves one block for an object before the
linker (LLVM's RuntimeDyld) allocates its sections from it, and aborts the process when an
allocation does not fit. The linker asks for the room it computes, which counts a table
(GOT) entry for each relocation that reads one, but not the entry that each stub of a call to
a function outside the object takes (x86-64's R_X86_64_PLT32). objects.py makes every such
call through the table, so that no stub is made; this check is what stands between any object
that still has stubs and the abort.
"""
from __future__ import annotations

import numpy as np

from dg.core.errors import DgError

_SECTION = np.dtype([("name", "<u4"), ("type", "<u4"), ("flags", "<u8"), ("addr", "<u8"), ("offset", "<u8"),
                     ("size", "<u8"), ("link", "<u4"), ("info", "<u4"), ("align", "<u8"), ("entsize", "<u8")])
_SYMBOL = np.dtype([("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"), ("value", "<u8"),
                    ("size", "<u8")])
_RELA = np.dtype([("offset", "<u8"), ("info", "<u8"), ("addend", "<i8")])

_X86_64 = 62
_SHT_SYMTAB, _SHT_RELA, _SHT_NOBITS = 2, 4, 8
_SHF_WRITE, _SHF_ALLOC, _SHF_EXECINSTR = 1, 2, 4
_PLT32 = 4
_GOT_READS = (9, 27, 41, 42)  # GOTPCREL, GOT64, GOTPCRELX, REX_GOTPCRELX
_ENTRY = 8  # a table entry's bytes, and the least alignment the manager gives a block
_PAGE = 4096


def refuse_unplaceable(blob: bytes, first: bool) -> None:
    """Raise a DgError if llvmlite's memory manager could not place this object's writable data
    and table (its stubs' entries included); `first`: the JIT links no object before it (the
    manager then reserves whole pages, else it may reuse what is left of an earlier block)."""
    if len(blob) < 64 or blob[:4] != b"\x7fELF" or blob[4] != 2 or int.from_bytes(blob[18:20], "little") != _X86_64:
        return
    shoff = int.from_bytes(blob[40:48], "little")
    count = int.from_bytes(blob[60:62], "little")
    sections = np.frombuffer(blob, _SECTION, count, shoff)
    stubs, table = 0, 0
    for rela in sections[sections["type"] == _SHT_RELA]:
        symtab = sections[rela["link"]]
        symbols = np.frombuffer(blob, _SYMBOL, int(symtab["size"]) // _SYMBOL.itemsize, int(symtab["offset"]))
        relocs = np.frombuffer(blob, _RELA, int(rela["size"]) // _RELA.itemsize, int(rela["offset"]))
        kind, target = relocs["info"] & 0xFFFFFFFF, relocs["info"] >> 32
        table += int(np.isin(kind, _GOT_READS).sum())
        called = target[kind == _PLT32]
        stubs += int(np.unique(called[symbols["shndx"][called] == 0]).size)  # (calls of undefined symbols)
    if not stubs:
        return
    data = sections[((sections["flags"] & (_SHF_ALLOC | _SHF_WRITE | _SHF_EXECINSTR)) == (_SHF_ALLOC | _SHF_WRITE))
                    & (sections["size"] > 0)]
    sizes = [int(s) for s in data["size"]]
    aligns = [max(int(a), 1) for a in data["align"]]
    align = max([_ENTRY] + aligns)
    counted = sum(_up(s, align) for s in sizes) + _up(table * _ENTRY, align)
    room = _up(counted, align) + align
    if first:
        room = _up(room, _PAGE)
    needed = sum(_up(s, a) + a for s, a in zip(sizes, aligns)) + (table + stubs) * _ENTRY + _ENTRY
    if needed > room:
        raise DgError(f"the compiled code cannot be loaded: its {stubs} calls of outside functions through stubs "
                      f"need {needed} bytes of writable data where the JIT's memory manager reserves {room} "
                      f"(an internal error of dg's code generation: please report it)")


def _up(n: int, align: int) -> int:
    return -(-n // align) * align
