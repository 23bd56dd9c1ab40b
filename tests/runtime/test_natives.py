"""The runtime's native helpers (runtime/ll/*.ll, runtime/natives.py): each file, with the
constants its Python side puts in, is LLVM IR that llvmlite parses and verifies; the constants
of a file and of its module match one for one; and what the quick call reads of NumPy's objects
is where NumPy keeps it. What each helper does is tested where it is used: the quick call in
test_quick_call.py, Ctrl-C in test_interrupt.py, the thread pool in
tests/lowering/test_parallel.py (test_pool_runs_each_iteration_once), the collectives in
tests/dist/test_collectives.py (under mpiexec) and here (a world of one)."""
import ctypes
import re
import threading

import llvmlite.binding as llvm
import numpy as np
import pytest

from dg.core.abi import (GRAIN, INTERRUPT, MPI_ALL_TO_ALL, MPI_ALLGATHER, MPI_ALLREDUCE, MPI_BCAST, MPI_FLUSH, MPI_RANK,
                         MPI_RECV, MPI_REDUCE_SCATTER, MPI_SEND, MPI_SIZE, PARALLEL_FOR)
from dg.core.mpi import DTYPES, GROUPS, OPS, World
from dg.runtime import collectives, fastcall, interrupt, natives


class _FakeMpi(World):
    """A world of 4 whose MPI handles are `bytes` wide (what collectives_mpi.ll is made for)."""

    rank, size = 2, 4

    def __init__(self, handle_bytes: int):
        handles = {"comm": 1140850688, "in_place": -1, **{f"op_{o}": 1476395009 + k for k, o in enumerate(OPS)},
                   **{f"type_{t}": 1275069450 + k for k, t in enumerate(DTYPES)}}
        self.native = ("libmpi.so", handles, handle_bytes)

    def group(self, name: str) -> World:
        return self  # (every group the world: rank 2 of 4)

    def handle(self, name: str) -> int:
        return 1140850688 + GROUPS.index(name)


HELPERS = {
    "quick_call": fastcall._constants,
    "interrupt": interrupt._constants,
    "thread_pool": lambda: {"GRAIN": GRAIN, "PARALLEL_FOR": PARALLEL_FOR},
    "collectives_one": lambda: collectives.helper(World())[1],
    "collectives_mpi": lambda: collectives.helper(_FakeMpi(8))[1],
}


def test_every_helper_file_is_tested_here():
    assert sorted(p.stem for p in natives.FOLDER.glob("*.ll")) == sorted(HELPERS)


@pytest.mark.parametrize("name", sorted(HELPERS))
def test_each_helper_parses_and_verifies(name):
    text = natives.native_ir(name, HELPERS[name]())
    assert "${" not in text.replace("${H_*}", "").replace("${ARRAY_*}", "")
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module = llvm.parse_assembly(text)
    module.verify()
    defined = {f.name for f in module.functions if not f.is_declaration}
    wanted = {"quick_call": {"dg_quick_call", "dg_quick_claim", "dg_quick_free_capsule"},
              "interrupt": {"dg_on_sigint", "dg_arm"},
              "thread_pool": {"dg_pool_start", PARALLEL_FOR},
              "collectives_one": set(_COLLECTIVES),
              "collectives_mpi": set(_COLLECTIVES)}[name]
    assert wanted <= defined
    if name == "interrupt":
        assert INTERRUPT in {g.name for g in module.global_variables}


_COLLECTIVES = (MPI_RANK, MPI_SIZE, MPI_ALLREDUCE, MPI_BCAST, MPI_ALLGATHER, MPI_REDUCE_SCATTER, MPI_ALL_TO_ALL, MPI_SEND,
                MPI_RECV, MPI_FLUSH)


def test_a_constant_missing_or_left_over_is_refused():
    constants = fastcall._constants()
    with pytest.raises(KeyError, match=r"without a value \['H_FN'\]"):
        natives.native_ir("quick_call", {k: v for k, v in constants.items() if k != "H_FN"})
    with pytest.raises(KeyError, match=r"without a placeholder \['NOT_THERE'\]"):
        natives.native_ir("quick_call", {**constants, "NOT_THERE": 1})


def test_the_header_is_the_python_side_s():
    """The quick call's header words, as runtime/ll/quick_call.ll names them, are the indices
    fastcall.Quick writes (H_*), and the file reads none that the header does not have."""
    text = (natives.FOLDER / "quick_call.ll").read_text()
    read = set(re.findall(r"\$\{H_([A-Z_]+)\}", text))
    assert read <= set(fastcall.HEADER)
    assert [getattr(fastcall, f"H_{n}") for n in fastcall.HEADER] == list(range(fastcall.HEADER_WORDS))


def test_numpy_keeps_what_the_quick_call_reads_where_it_reads_it():
    for a in (np.arange(12, dtype=np.float32).reshape(3, 4), np.zeros((2, 3, 5)), np.ones(7, np.int64)):
        at = id(a)
        layout = fastcall.ARRAY_LAYOUT
        assert ctypes.c_void_p.from_address(at + fastcall.OB_TYPE).value == id(np.ndarray)
        assert ctypes.c_void_p.from_address(at + layout["ARRAY_DATA"]).value == a.ctypes.data
        assert ctypes.c_int32.from_address(at + layout["ARRAY_NDIM"]).value == a.ndim
        dims = ctypes.c_void_p.from_address(at + layout["ARRAY_DIMS"]).value
        assert list((ctypes.c_int64 * a.ndim).from_address(dims)) == list(a.shape)
        assert ctypes.c_void_p.from_address(at + layout["ARRAY_DESCR"]).value == id(a.dtype)
        flags = ctypes.c_int32.from_address(at + layout["ARRAY_FLAGS"]).value
        assert flags & fastcall._C_CONTIGUOUS and flags & fastcall._ALIGNED and flags & fastcall._WRITEABLE
    assert not ctypes.c_int32.from_address(id(a[::2]) + fastcall.ARRAY_LAYOUT["ARRAY_FLAGS"]).value \
        & fastcall._C_CONTIGUOUS
    s = np.float64(2.5)
    assert ctypes.c_double.from_address(id(s) + fastcall.SCALAR_VALUE).value == 2.5
    assert ctypes.c_double.from_address(id(2.75) + fastcall.SCALAR_VALUE).value == 2.75


def test_the_claim_takes_a_free_program_only():
    busy = ctypes.c_int64(0)
    me = threading.get_ident()
    assert fastcall.claim(busy, me) and busy.value == me
    assert not fastcall.claim(busy, me + 1) and busy.value == me
    busy.value = 0
    assert fastcall.claim(busy, 7) and busy.value == 7


def test_the_mpi_collectives_are_made_for_either_width_of_handle():
    for width, handle in ((4, "i32"), (8, "i64")):
        name, constants = collectives.helper(_FakeMpi(width))
        assert name == "collectives_mpi" and constants["H"] == handle
        text = natives.native_ir(name, constants)
        llvm.parse_assembly(text).verify()
        assert f"call i32 @MPI_Bcast(ptr %p, i32 %n32, {handle} %t, i32 %root32, {handle} %c)" in text
        comms = ", ".join(f"{handle} {1140850688 + k}" for k in range(len(GROUPS)))  # (a group's: its code's)
        assert f"@comms = global [{len(GROUPS)} x {handle}] [{comms}]" in text


def test_a_world_of_one_s_collectives():
    """Rank 0 of 1 in every group; an allreduce from a source copies it (of the type code's item
    size), one in place, a broadcast, an allgather, a reduce_scatter and an all_to_all leave the
    buffer as it is."""
    engine = natives.compile_native(*collectives.helper(World()))
    i64, i32 = ctypes.c_int64, ctypes.c_int32
    rank = ctypes.CFUNCTYPE(i64, i32)(engine.get_function_address(MPI_RANK))
    size = ctypes.CFUNCTYPE(i64, i32)(engine.get_function_address(MPI_SIZE))
    allreduce = ctypes.CFUNCTYPE(None, i64, i64, i64, i32, i32, i32)(engine.get_function_address(MPI_ALLREDUCE))
    bcast = ctypes.CFUNCTYPE(None, i64, i64, i32, i64, i32)(engine.get_function_address(MPI_BCAST))
    blocks = [ctypes.CFUNCTYPE(None, i64, i64, i32, i32)(engine.get_function_address(s))
              for s in (MPI_ALLGATHER, MPI_ALL_TO_ALL)]
    scatter = ctypes.CFUNCTYPE(None, i64, i64, i32, i32, i32)(engine.get_function_address(MPI_REDUCE_SCATTER))
    assert all((rank(g), size(g)) == (0, 1) for g in range(len(GROUPS)))
    src, dst = np.arange(6, dtype=np.float64), np.zeros(6)
    allreduce(src.ctypes.data, dst.ctypes.data, 5, DTYPES.index("f64"), OPS.index("sum"), 0)
    assert dst.tolist() == [0, 1, 2, 3, 4, 0]
    allreduce(0, dst.ctypes.data, 6, DTYPES.index("f64"), OPS.index("max"), 1)
    bcast(dst.ctypes.data, 6, DTYPES.index("f64"), 0, 2)
    for call in blocks:
        call(dst.ctypes.data, 6, DTYPES.index("f64"), 3)
    scatter(dst.ctypes.data, 6, DTYPES.index("f64"), OPS.index("sum"), 0)
    assert dst.tolist() == [0, 1, 2, 3, 4, 0]
