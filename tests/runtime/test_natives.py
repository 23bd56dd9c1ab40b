"""The runtime's native helpers (runtime/ll/*.ll, runtime/natives.py): each file, with the
constants its Python side puts in, is LLVM IR that llvmlite parses and verifies; the constants
of a file and of its module match one for one; and what the quick call reads of NumPy's objects
is where NumPy keeps it. What each helper does is tested where it is used: the quick call in
test_quick_call.py, Ctrl-C in test_interrupt.py, the thread pool in
tests/lowering/test_parallel.py (test_pool_runs_each_iteration_once)."""
import ctypes
import re
import threading

import llvmlite.binding as llvm
import numpy as np
import pytest

from dg.core.abi import GRAIN, INTERRUPT, PARALLEL_FOR
from dg.runtime import fastcall, interrupt, natives

HELPERS = {
    "quick_call": fastcall._constants,
    "interrupt": interrupt._constants,
    "thread_pool": lambda: {"GRAIN": GRAIN, "PARALLEL_FOR": PARALLEL_FOR},
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
              "thread_pool": {"dg_pool_start", PARALLEL_FOR}}[name]
    assert wanted <= defined
    if name == "interrupt":
        assert INTERRUPT in {g.name for g in module.global_variables}


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
