"""The collectives compiled code calls: MPI itself, without coming back to Python.

Expects: compiled code that calls `core.abi.MPI_RANK`, `MPI_SIZE`, `MPI_ALLREDUCE` and
`MPI_BCAST` (the `mpi-collectives` pass writes the calls). Guarantees: `symbols()` gives their
addresses, made once per process with llvmlite. Under MPI (`core.mpi.world()` is mpi4py's),
they call MPI_Allreduce (in place) and MPI_Bcast of the very library mpi4py loaded, on its
COMM_WORLD, with the handles mpi4py reports (ints in MPICH, pointers in Open MPI: the code is
written for the size of a handle), in chunks that fit MPI's int counts. In a world of one,
rank 0 of 1, and the buffer is left as it is. The code depends on the process (its rank, the
handles), so it is made here at run time and never cached.
"""
from __future__ import annotations

import ctypes
import threading

from dg.core.abi import MPI_ALLREDUCE, MPI_BCAST, MPI_RANK, MPI_SIZE
from dg.core.mpi import DTYPES, OPS, world

CHUNK = 1 << 30  # elements per MPI call (its counts are ints)
ITEM = {"f32": 4, "f64": 8, "i32": 4, "i64": 8}


def _ir(w) -> str:
    rank, size = w.rank, w.size
    head = (f'define i64 @"{MPI_RANK}"() {{\n  ret i64 {rank}\n}}\n'
            f'define i64 @"{MPI_SIZE}"() {{\n  ret i64 {size}\n}}\n'
            f"@item = private constant [{len(DTYPES)} x i64] [{', '.join(f'i64 {ITEM[t]}' for t in DTYPES)}]\n")
    if w.native is None:  # a world of one: a reduction that reads its source copies it
        return head + (f'declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)\n'
                       f'define void @"{MPI_ALLREDUCE}"(i64 %s, i64 %a, i64 %n, i32 %t, i32 %o) {{\n'
                       f'  %inplace = icmp eq i64 %s, 0\n  br i1 %inplace, label %done, label %copy\n'
                       f'copy:\n  %ip = getelementptr [{len(DTYPES)} x i64], ptr @item, i32 0, i32 %t\n'
                       f'  %item = load i64, ptr %ip\n  %bytes = mul i64 %n, %item\n'
                       f'  %sp = inttoptr i64 %s to ptr\n  %dp = inttoptr i64 %a to ptr\n'
                       f'  call void @llvm.memcpy.p0.p0.i64(ptr %dp, ptr %sp, i64 %bytes, i1 false)\n  br label %done\n'
                       f'done:\n  ret void\n}}\n'
                       f'define void @"{MPI_BCAST}"(i64 %a, i64 %n, i32 %t, i64 %r) {{\n  ret void\n}}\n')
    _, handles, handle_bytes = w.native
    h = "i32" if handle_bytes == 4 else "i64"
    types = ", ".join(f"{h} {handles['type_' + t]}" for t in DTYPES)
    ops = ", ".join(f"{h} {handles['op_' + o]}" for o in OPS)
    comm = handles["comm"]
    allreduce = _chunked(MPI_ALLREDUCE, "i64 %send, ", "i32 %op", h,
                         [f"%opp = getelementptr [{len(OPS)} x {h}], ptr @ops, i32 0, i32 %op", f"%o = load {h}, ptr %opp",
                          f"%in_place = inttoptr i64 {handles['in_place']} to ptr",
                          "%inplace = icmp eq i64 %send, 0"],
                         ["%sa = add i64 %send, %off", "%sp = inttoptr i64 %sa to ptr",
                          "%s = select i1 %inplace, ptr %in_place, ptr %sp"],
                         f"call i32 @MPI_Allreduce(ptr %s, ptr %p, i32 %n32, {h} %t, {h} %o, {h} {comm})")
    bcast = _chunked(MPI_BCAST, "", "i64 %root", h, ["%root32 = trunc i64 %root to i32"], [],
                     f"call i32 @MPI_Bcast(ptr %p, i32 %n32, {h} %t, i32 %root32, {h} {comm})")
    return head + f"""
declare i32 @MPI_Allreduce(ptr, ptr, i32, {h}, {h}, {h})
declare i32 @MPI_Bcast(ptr, i32, {h}, i32, {h})
@types = private constant [{len(DTYPES)} x {h}] [{types}]
@ops = private constant [{len(OPS)} x {h}] [{ops}]
{allreduce}
{bcast}
"""


def _chunked(name: str, first_params: str, last_param: str, h: str, setup: list, per_chunk: list, call: str) -> str:
    """`name`(first_params, address, count, type code, last_param): `call` on %p (the chunk's
    address; %off its byte offset), %n32 and the type handle %t, over the buffer in chunks of at
    most CHUNK elements (MPI's counts are ints)."""
    lines = "\n  ".join(setup)
    chunk = "".join(f"  {line}\n" for line in per_chunk)
    return f"""
define void @"{name}"({first_params}i64 %addr, i64 %count, i32 %type, {last_param}) {{
entry:
  %tp = getelementptr [{len(DTYPES)} x {h}], ptr @types, i32 0, i32 %type
  %t = load {h}, ptr %tp
  %ip = getelementptr [{len(DTYPES)} x i64], ptr @item, i32 0, i32 %type
  %item = load i64, ptr %ip
  {lines}
  br label %loop
loop:
  %done = phi i64 [0, %entry], [%next, %body]
  %left = sub i64 %count, %done
  %more = icmp sgt i64 %left, 0
  br i1 %more, label %body, label %exit
body:
  %big = icmp sgt i64 %left, {CHUNK}
  %n = select i1 %big, i64 {CHUNK}, i64 %left
  %off = mul i64 %done, %item
  %a = add i64 %addr, %off
  %p = inttoptr i64 %a to ptr
  %n32 = trunc i64 %n to i32
{chunk}  %r = {call}
  %next = add i64 %done, %n
  br label %loop
exit:
  ret void
}}
"""


class _Made:
    lock = threading.Lock()
    engine = None
    symbols: dict = {}


def symbols() -> dict:
    """name -> address of the collectives, for compiled code to link with."""
    if _Made.engine is None:
        with _Made.lock:
            if _Made.engine is None:
                _make()
    return _Made.symbols


def _make() -> None:
    import llvmlite.binding as llvm

    w = world()
    if w.native is not None:
        lib = ctypes.CDLL(w.native[0])
        for name in ("MPI_Allreduce", "MPI_Bcast"):
            llvm.add_symbol(name, ctypes.cast(getattr(lib, name), ctypes.c_void_p).value)
    target = llvm.Target.from_default_triple().create_target_machine()
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(_ir(w)), target)
    engine.finalize_object()
    _Made.symbols = {n: engine.get_function_address(n) for n in (MPI_RANK, MPI_SIZE, MPI_ALLREDUCE, MPI_BCAST)}
    _Made.engine = engine
