"""Quick start (lowering/codegen/tiers.py, optimizer.py): a large program's first calls run code compiled without
optimization while a worker process optimizes it; the optimized code takes over between calls
and is what the disk cache keeps.

Here every program counts as large (tiers.QUICK_START_LINES and lower.LARGE_PROGRAM_LINES set to 0), so
that small programs take the quick path and are optimized at -O2.
"""
import threading

import numpy as np
import pytest

import dg
from dg.lowering import blas, parallel
from dg.lowering.codegen import cache, lower, objects, optimizer, tiers
from dg.lowering.codegen.units import LlvmUnit
from dg.runtime import cpu

SRC = """
def f(x: f32[N], w: f32[N]) -> f32:
    y = x
    for i in range(3):
        y = tanh(y * w + 0.1) + y * 0.5
    return sum(y * y)

def g(x: f32[N], w: f32[N]) -> f32[N]:
    return grad(f, wrt=1)(x, w)

def pick(x: f32[N], i: i64) -> f32:
    return x[i] * 2.0
"""


@pytest.fixture
def large(monkeypatch, tmp_path):
    monkeypatch.setattr(lower, "LARGE_PROGRAM_LINES", 0)
    monkeypatch.setattr(tiers, "QUICK_START_LINES", 0)
    monkeypatch.setenv("DG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("DG_QUICK_START", raising=False)
    return tmp_path


def _args():
    rng = np.random.default_rng(0)
    return rng.standard_normal(1000).astype(np.float32), rng.standard_normal(1000).astype(np.float32)


def test_quick_code_runs_until_the_optimized_code_takes_over(large):
    x, w = _args()
    want = dg.loads(SRC, mode="interp", filename="quick.dg").g(x, w)
    m = dg.loads(SRC, mode="compiled", filename="quick.dg")
    first = m.g(x, w)
    program = m.g._last.runner
    assert program.opt_level == 0 and program.optimized is not None
    np.testing.assert_allclose(first, want, rtol=1e-4, atol=1e-5)
    assert program.optimized.wait(300)
    again = m.g(x, w)  # (between two calls, the optimized code is loaded)
    assert program.opt_level == 2 and program.optimized is None
    np.testing.assert_allclose(again, want, rtol=1e-4, atol=1e-5)
    # the worker put the optimized code into the disk cache: a new module loads it
    m2 = dg.loads(SRC, mode="compiled", filename="quick.dg")
    np.testing.assert_allclose(m2.g(x, w), want, rtol=1e-4, atol=1e-5)
    assert m2.g._last.runner.from_cache and m2.g._last.runner.opt_level == 2


def test_the_quick_code_is_cached_at_once_and_a_later_process_optimizes_it(large, monkeypatch):
    """A script that ends before its worker has optimized: the next run loads the quick code from
    the disk cache (no compile) and has it optimized; the run after that loads optimized code."""
    x, w = _args()
    want = dg.loads(SRC, mode="interp", filename="quick.dg").g(x, w)
    submit = optimizer._submit
    monkeypatch.setattr(optimizer, "_submit", lambda job: None)  # (the worker never starts: the process ends)
    m1 = dg.loads(SRC, mode="compiled", filename="quick.dg")
    m1.g(x, w)
    assert m1.g._last.runner.opt_level == 0 and not m1.g._last.runner.from_cache
    monkeypatch.setattr(optimizer, "_submit", submit)
    compiles = []
    monkeypatch.setattr(lower, "to_llvm", lambda *a: compiles.append(a))
    m2 = dg.loads(SRC, mode="compiled", filename="quick.dg")
    np.testing.assert_allclose(m2.g(x, w), want, rtol=1e-4, atol=1e-5)
    program = m2.g._last.runner
    assert program.from_cache and program.opt_level == 0 and program.optimized is not None
    assert program.optimized.wait(300)
    np.testing.assert_allclose(m2.g(x, w), want, rtol=1e-4, atol=1e-5)
    assert program.opt_level == 2
    m3 = dg.loads(SRC, mode="compiled", filename="quick.dg")
    np.testing.assert_allclose(m3.g(x, w), want, rtol=1e-4, atol=1e-5)
    assert m3.g._last.runner.from_cache and m3.g._last.runner.opt_level == 2
    assert m3.g._last.runner.optimized is None and compiles == []
    assert len(list((large / "cache").glob("*.o"))) == len(list((large / "cache").glob("*.json")))
    assert not [p for p in (large / "cache").glob("*.o") if p.read_bytes().startswith(b"; ModuleID")]


def test_quick_code_fails_where_optimized_code_fails(large):
    """The same located error from quick code, from optimized code, and from the interpreter."""
    x, _ = _args()
    m = dg.loads(SRC, mode="compiled", filename="quick.dg")
    messages = []
    for step in range(2):
        with pytest.raises(dg.DgRuntimeError) as e:
            m.pick(x, 5000)
        messages.append(str(e.value))
        if step == 0:
            assert m.pick._last.runner.opt_level == 0
            assert m.pick._last.runner.optimized.wait(300)
    assert m.pick._last.runner.opt_level == 2
    with pytest.raises(dg.DgRuntimeError) as e:
        dg.loads(SRC, mode="interp", filename="quick.dg").pick(x, 5000)
    assert messages[0] == messages[1]
    assert "quick.dg:12:12" in messages[0] and "out of bounds" in messages[0], messages[0]
    assert "out of bounds" in str(e.value)
    assert m.pick(x, 3) == pytest.approx(2 * x[3])


def test_without_a_worker_the_quick_code_stays(large, monkeypatch):
    def no_process(*args, **kwargs):
        raise OSError("no processes here")

    monkeypatch.setattr(optimizer.subprocess, "Popen", no_process)
    x, w = _args()
    m = dg.loads(SRC, mode="compiled", filename="quick.dg")
    first = m.g(x, w)
    program = m.g._last.runner
    assert program.optimized is None or program.optimized.wait(60)
    np.testing.assert_allclose(m.g(x, w), first, rtol=1e-6)
    assert program.opt_level == 0 and program.optimized is None


def test_quick_start_off(large, monkeypatch):
    monkeypatch.setenv("DG_QUICK_START", "0")
    x, w = _args()
    m = dg.loads(SRC, mode="compiled", filename="quick.dg")
    m.g(x, w)
    assert m.g._last.runner.opt_level == 2 and m.g._last.runner.optimized is None


def test_a_small_program_is_optimized_at_once(monkeypatch, tmp_path):
    """Below tiers.QUICK_START_LINES of LLVM IR (`pick`), LLVM optimizes before the first call; above
    it (`g`, a loop's gradient), the first call runs quick code."""
    monkeypatch.setenv("DG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("DG_QUICK_START", raising=False)
    x, w = _args()
    m = dg.loads(SRC, mode="compiled", filename="quick.dg")
    m.pick(x, np.int64(3))
    assert m.pick._last.runner.opt_level == 3 and m.pick._last.runner.optimized is None
    m.g(x, w)
    assert m.g._last.runner.opt_level == 0  # (the optimized code takes over at a later call)
    optimizer.wait_all()


def test_each_level_makes_code_that_loads():
    """object_code at every level: LLVM IR text to object code the JIT links and runs."""
    text = ("define i64 @twice(i64 %x) {\n  %y = add i64 %x, %x\n  ret i64 %y\n}\n")
    import ctypes

    import llvmlite.binding as llvm

    for level in range(4):
        blob = objects.object_code(text, level)
        target = llvm.Target.from_default_triple().create_target_machine(opt=3, reloc="pic")
        jit = llvm.create_mcjit_compiler(llvm.parse_assembly(""), target, use_lmm=True)
        jit.add_object_file(llvm.ObjectFileRef.from_data(blob))
        jit.finalize_object()
        twice = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(jit.get_function_address("twice"))
        assert twice(21) == 42


def test_code_reaches_functions_and_globals_by_offsets_from_itself():
    """The small code model (objects.object_code): a call of a function the JIT resolves
    goes through its table entry, read relative to the instruction (no stub: codegen.object_room),
    and a global is addressed relative to the instruction, not through a 64-bit address in a
    register first (the large code model's, on which LLVM's fast instruction selection gives up)."""
    import llvmlite.binding as llvm

    text = ("@g = internal global i64 0\ndeclare void @free(ptr)\n"
            "define void @f(ptr %p, i64 %x) {\n  store i64 %x, ptr @g\n  call void @free(ptr %p)\n  ret void\n}\n")
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    for level in (0, 2):
        mod = llvm.parse_assembly(text)
        objects._with_library_calls(mod, llvm.get_global_context())
        objects._calls_through_got(mod)
        asm = objects._target_machine(level).emit_assembly(mod)
        assert "*free@GOTPCREL(%rip)" in asm and "g(%rip)" in asm, asm
        assert "movabs" not in asm and "@PLT" not in asm, asm


def test_a_large_module_is_compiled_in_pieces_that_link_into_the_same_program(large, monkeypatch):
    """Quick code of a module with enough lines comes in one piece per core, made at once
    (objects.split_module): every function is defined in exactly one piece, the others
    declare what they use of it, and the linked pieces compute what the interpreter does."""
    monkeypatch.setattr(objects, "SPLIT_LINES", 20)
    monkeypatch.setattr(tiers, "_cores", lambda: 3)
    x, w = _args()
    want = dg.loads(SRC, mode="interp", filename="quick.dg").g(x, w)
    m = dg.loads(SRC, mode="compiled", filename="quick.dg")
    calls = []
    split = objects.split_module

    def spy(text, parts):
        calls.append(split(text, parts))
        return calls[-1]

    monkeypatch.setattr(objects, "split_module", spy)
    np.testing.assert_allclose(m.g(x, w), want, rtol=1e-4, atol=1e-5)
    pieces = calls[0]
    assert len(pieces) == 3
    defined = [line for p in pieces for line in p.splitlines() if line.startswith("define ")]
    names = [objects._defined(line) for line in defined]
    own = [n for n in names if not parallel.inlined_everywhere(n)]  # (those are in each piece that calls them)
    assert len(own) == len(set(own)) > 3
    globals_ = [[line for line in p.splitlines() if line.startswith("@")] for p in pieces]
    assert globals_[0] and all(" = external " in line for g in globals_[1:] for line in g)
    np.testing.assert_allclose(m.g(x, w), want, rtol=1e-4, atol=1e-5)  # (the quick call, once made)
    optimizer.wait_all()


def test_split_module_copies_a_function_always_inlined_into_each_piece_that_calls_it():
    """A launch (`alwaysinline`) called from functions in two pieces is defined, internal, in
    both, where LLVM inlines it; what it uses of another piece is declared there."""
    text = "\n".join([
        "define internal void @__dg_par_0(ptr %p) {", "  store i64 3, ptr %p", "  ret void", "}",
        "define internal void @__dg_par_0_launch(ptr %p) #0 {", "  call void @__dg_par_0(ptr %p)", "  ret void", "}",
        "define void @one(ptr %p) {", *["  store i64 1, ptr %p"] * 30, "  call void @__dg_par_0_launch(ptr %p)",
        "  ret void", "}",
        "define void @two(ptr %p) {", *["  store i64 2, ptr %p"] * 30, "  call void @__dg_par_0_launch(ptr %p)",
        "  ret void", "}",
        "attributes #0 = { alwaysinline }"])
    import llvmlite.binding as llvm

    old, objects.SPLIT_LINES = objects.SPLIT_LINES, 10
    try:
        pieces = objects.split_module(text, 2)
    finally:
        objects.SPLIT_LINES = old
    assert len(pieces) == 2
    for piece in pieces:
        assert "define internal void @__dg_par_0_launch(ptr %p) #0 {" in piece, piece
        llvm.parse_assembly(piece).verify()
    defined = [objects._defined(line) for p in pieces for line in p.splitlines() if line.startswith("define ")]
    assert sorted(defined) == ["__dg_par_0", "__dg_par_0_launch", "__dg_par_0_launch", "one", "two"]
    assert sum("declare void @__dg_par_0(ptr %p)" in p for p in pieces) == 1  # (in the piece without it)


def test_split_module_keeps_a_loop_function_with_its_entry():
    text = "\n".join([
        "@g = internal global [2 x i64] zeroinitializer",
        "define internal void @__dg_par_0_loop(ptr %p) #0 {", *["  store i64 1, ptr %p"] * 30, "  ret void", "}",
        "define internal void @__dg_par_0(ptr %p) {", "  call void @__dg_par_0_loop(ptr %p)", "  ret void", "}",
        "define void @big(ptr %p) {", *["  store i64 2, ptr %p"] * 40, "  call void @__dg_par_0(ptr @g)", "  ret void", "}",
        "attributes #0 = { alwaysinline }"])
    objects.object_code(text, 0)
    import llvmlite.binding as llvm

    old, objects.SPLIT_LINES = objects.SPLIT_LINES, 10
    try:
        first, second = objects.split_module(text, 2)
    finally:
        objects.SPLIT_LINES = old
    assert "define void @big" in first and "declare void @__dg_par_0(ptr %p)" in first
    assert "define void @__dg_par_0(ptr %p)" in second and "define internal void @__dg_par_0_loop" in second
    assert "@g = global [2 x i64] zeroinitializer" in first and "@g = external global [2 x i64]" in second
    for piece in (first, second):
        llvm.parse_assembly(piece).verify()
    assert "__dg_par_0_loop" not in first  # (it is inlined where it is used only)
    # a module with a global line of another form, or a quoted name, stays whole
    objects.SPLIT_LINES = 10
    try:
        for odd in (text.replace("internal global", "internal thread_local global"),
                    text.replace("@big", '@"big one"')):
            assert objects.split_module(odd, 2) == [odd]
    finally:
        objects.SPLIT_LINES = old


def test_quick_calls_run_the_quick_code_until_the_optimized_code_arrives(large, monkeypatch):
    """Repeated calls on quick-start code take the quick call (runtime.fastcall); once the worker
    is done, one call goes the general path, which loads the optimized code, and the quick call
    made then runs that code."""
    general = [0]
    call = cpu.CpuProgram.call

    def counted(self, symbol, arrays):
        general[0] += 1
        return call(self, symbol, arrays)

    monkeypatch.setattr(cpu.CpuProgram, "call", counted)
    gate = threading.Event()  # the worker starts once the quick code's calls are measured
    run = optimizer.Optimizing._run

    def held(job):
        gate.wait(300)
        run(job)

    monkeypatch.setattr(optimizer.Optimizing, "_run", held)
    x, w = _args()
    want = dg.loads(SRC, mode="interp", filename="quick.dg").g(x, w)
    m = dg.loads(SRC, mode="compiled", filename="quick.dg")
    try:
        m.g(x, w)
        program = m.g._last.runner
        assert program.opt_level == 0 and program.optimized is not None
        m.g(x, w)
        quick = m.g._quick
        assert quick is not None and quick.program is program, "quick code gets a quick call"
        before = general[0]
        for _ in range(3):
            np.testing.assert_allclose(m.g(x, w), want, rtol=1e-4, atol=1e-5)
        assert general[0] == before and program.opt_level == 0
    finally:
        gate.set()
    assert program.optimized.wait(300)
    before = general[0]
    np.testing.assert_allclose(m.g(x, w), want, rtol=1e-4, atol=1e-5)  # the quick call stops; the general path swaps
    assert general[0] == before + 1 and program.opt_level == 2 and program.optimized is None
    assert m.g._quick is not quick and m.g._quick.program is program and not m.g._quick.stale.value
    for _ in range(3):
        np.testing.assert_allclose(m.g(x, w), want, rtol=1e-4, atol=1e-5)
    assert general[0] == before + 1, "the optimized code's quick call takes the calls"


def test_the_blas_runs_on_one_thread_while_a_worker_optimizes(large, monkeypatch):
    """The quick code's products run on one BLAS thread while the worker runs (tiers.blas_on_one_thread),
    and on as many as before once it is done."""
    counts = blas.thread_count()
    if counts is None:
        pytest.skip("no BLAS with a settable thread count here")
    get, put = counts
    before = get()
    seen = []
    popen = optimizer.subprocess.Popen

    def watched(*args, **kwargs):
        seen.append(get())
        return popen(*args, **kwargs)

    monkeypatch.setattr(optimizer.subprocess, "Popen", watched)
    # Only this test's worker: the jobs earlier tests left queued wait aside, the one running ends.
    monkeypatch.setattr(optimizer, "_JOBS", [])
    for job in list(optimizer._RUNNING):
        job.wait(300)
    put(2)
    try:
        x, w = _args()
        m = dg.loads(SRC, mode="compiled", filename="quick.dg")
        m.g(x, w)
        assert m.g._last.runner.optimized.wait(300)
        assert seen == [1] and get() == 2
    finally:
        put(before)


@pytest.mark.parametrize("limit", [{"WORKER_MEMORY": 64 << 20}, {"WORKER_CPU_S": 0}])
def test_a_worker_past_its_limits_leaves_the_quick_code_running(large, monkeypatch, limit):
    """A worker capped below what it takes (64 MB of address space does not hold LLVM; no CPU
    second at all) is stopped, and the quick code goes on giving the same results."""
    for name, value in limit.items():
        monkeypatch.setattr(optimizer, name, value)
    x, w = _args()
    m = dg.loads(SRC, mode="compiled", filename="quick.dg")
    first = m.g(x, w)
    program = m.g._last.runner
    assert program.optimized.wait(300) and program.optimized.blob is None
    np.testing.assert_allclose(m.g(x, w), first, rtol=1e-6)
    assert program.opt_level == 0 and program.optimized is None


def test_the_worker_stores_where_the_cache_was_when_the_code_was_asked_for(tmp_path, monkeypatch):
    """A job the optimizer starts later (the queue serves the newest first) stores its code in
    the disk cache of the moment it was asked for, not in the one its process has when the
    worker starts: a test that turned the cache off to compile a patched lowering left its job
    queued, and the worker, started after the test, put the patched code into the default
    cache, where later processes loaded it."""
    unit = LlvmUnit("define i64 @dg_probe() {\n  ret i64 7\n}\n", 2, {"signatures": {}})
    asked, later = tmp_path / "asked", tmp_path / "later"
    monkeypatch.setenv("DG_CACHE_DIR", str(asked))
    with optimizer._READY:  # (the server cannot take the job before the settings change)
        job = optimizer.Optimizing(unit, "probe-key", drop=None)
        monkeypatch.setenv("DG_CACHE_DIR", str(later))
    assert job.wait(120) and job.blob
    with cache.stored_in(asked):
        assert cache.load("probe-key") is not None
    with cache.stored_in(later):
        assert cache.load("probe-key") is None
    monkeypatch.setenv("DG_CACHE", "0")
    with optimizer._READY:  # the cache off when asked: stored nowhere, whatever comes after
        job = optimizer.Optimizing(unit, "probe-key-2", drop=None)
        monkeypatch.delenv("DG_CACHE")
    assert job.wait(120) and job.blob
    with cache.stored_in(later):
        assert cache.load("probe-key-2") is None
    with cache.stored_in(asked):
        assert cache.load("probe-key-2") is None
