"""Large loops of compiled CPU code run on several threads (lowering/parallel.py, runtime/threads.py).

The pool's size is fixed when a process first compiles, so each check runs in a child process
with DG_NUM_THREADS set: 3 threads, more than CI's two cores, so that the split is exercised on
any machine. Results are compared with the interpreter's and with the same program run on one
thread; the pool's count of split loops shows that the work was shared.
"""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dg
from dg.core.mlir import ir  # noqa: F401  (the bindings must import before the child runs)


def _run(script: str, threads: int, tmp_path, **env) -> str:
    full = {**os.environ, "DG_NUM_THREADS": str(threads), "DG_CACHE_DIR": str(tmp_path / "cache"), **env}
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=full, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


POOL = """
import ctypes, os, threading
from dg.runtime import threads
fn_t = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
pf = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(
    threads.symbols()["dg.parallel_for"])
assert threads.workers() == 2, threads.workers()

def parts(n, work):
    seen = []
    body = fn_t(lambda ctx, lo, hi: seen.append((lo, hi, threading.get_ident())))
    pf(body, None, n, work)
    covered = sorted(i for lo, hi, _ in seen for i in range(lo, hi))
    assert covered == list(range(n)), (n, work, seen)
    return seen

big = 1 << 40
for n in (0, 1, 2, 3, 7, 100, 1001):
    p = parts(n, big)
    assert len(p) == min(3, max(n, 1)), (n, p)
    assert len({t for _, _, t in p}) == len(p)  # each part on a thread of its own
assert len(parts(1000, threads.GRAIN)) == 1  # too little work to wake a worker
assert len(parts(1000, 2 * threads.GRAIN)) == 2
before = threads.splits()
for i in range(300):  # workers must not miss a loop or run one twice
    parts(64, big)
assert threads.splits() == before + 300

errors = []
def caller():  # two Python threads at once: one shares the pool, the other runs alone
    try:
        for i in range(200):
            parts(50, big)
    except AssertionError as e:
        errors.append(e)
ts = [threading.Thread(target=caller) for _ in range(2)]
[t.start() for t in ts]
[t.join() for t in ts]
assert not errors, errors

pid = os.fork()
if pid == 0:  # a forked child gets workers of its own
    try:
        assert len(parts(100, big)) == 3
        os._exit(0)
    except BaseException:
        os._exit(1)
_, status = os.waitpid(pid, 0)
assert status == 0

pid = ctypes.CDLL(None).fork()  # not through Python: no at-fork hook starts a pool
if pid == 0:
    try:
        assert len(parts(100, big)) == 1  # the parent's workers are not here: the loop runs alone
        os._exit(0)
    except BaseException:
        os._exit(1)
guard = threading.Timer(120, os.kill, (pid, 9))  # (a guard against a hang, not a time limit)
guard.start()
_, status = os.waitpid(pid, 0)
guard.cancel()
assert status != 9, "the child forked from C hangs"
assert status == 0
print("pool ok")
"""


@pytest.mark.slow
def test_pool_runs_each_iteration_once(tmp_path):
    assert "pool ok" in _run(POOL, 3, tmp_path)


PROGRAMS = """
import numpy as np, dg
from dg.runtime import threads

SRC = '''
def chain(a: f32[N], b: f32[N]) -> f32[N]:
    return tanh(exp(a) * b + 1.0) / (1.0 + a * a)

def rows(x: f32[N, M]) -> f32[N]:
    return sum(x * x, axis=1)

def cols(x: f32[N, M]) -> f32[M]:
    return max(x, axis=0)

def views(a: f32[N], b: f32[M]) -> f32[P, Q]:
    return transpose(a[:, None] * b[None, :])[1:, ::2]

def mm(a: f32[N, K], b: f32[K, M]) -> f32[N, M]:
    return a @ b

def ints(n: i64) -> i64[N]:
    return (arange(n) % 7) * arange(n)

def bmm(a: f32[B, N, K], b: f32[B, K, M]) -> f32[B, N, M]:
    return softmax(a @ b, axis=-1)

def scaled(x: f32[N, M], s: f32, k: i64) -> f32[N, M]:
    for i in range(k):
        x = x * s + 1.0
    return x

def loss(x: f32[N, M], w: f32[M]) -> f32:
    return sum(tanh(x * w))

def step(x: f32[N, M], w: f32[M]):
    return value_and_grad(loss, wrt=1)(x, w)

def branchy(x: f32[N, M], s: f32) -> f32[N, M]:
    if s > 0.0:
        return exp(x) * s
    return x * x

def colsum(x: f32[N, M]) -> f32[M]:
    return sum(x * 2.0, axis=0)

def reduce_all(x: f32[N, M], n: i64):
    a = arange(n) % 1000
    return sum(x), min(x), prod(1.0 + f64(x) * 1e-6), sum(a), max(a * 3 - n)

def rec(x: f32[N], k: i64) -> f32[N]:
    if k <= 0:
        return x
    return rec(tanh(x) + 1.0, k - 1) * 0.5
'''
comp = dg.loads(SRC, mode="compiled", filename="par.dg")
interp = dg.loads(SRC, mode="interp", filename="par.dg")
rng = np.random.default_rng(0)
a = rng.standard_normal(1 << 20).astype(np.float32)
b = rng.standard_normal(1 << 20).astype(np.float32)
x = rng.standard_normal((700, 900)).astype(np.float32)
cases = [("chain", (a, b)), ("rows", (x,)), ("views", (a[:900], b[:700])),
         ("mm", (x[:300, :400], x[300:700, 500:])), ("ints", (np.int64(600000),)),
         ("scaled", (x, np.float32(0.5), np.int64(3))), ("step", (x, x[0])),
         ("branchy", (x, np.float32(2.0))), ("colsum", (x[:699],)), ("reduce_all", (x[:699], np.int64(4099999))), ("rec", (a, np.int64(3))),
         ("bmm", (a[:4 * 100 * 200].reshape(4, 100, 200), b[:4 * 200 * 300].reshape(4, 200, 300)))]
before = threads.splits()
for name, args in cases:
    got, want = getattr(comp, name)(*args), getattr(interp, name)(*args)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-4 * max(1.0, float(np.abs(w).max())), err_msg=name)
    np.save(f"{name}.npy", np.concatenate([np.ravel(g).astype(np.float64) for g in (got if isinstance(got, tuple) else (got,))]))
print("split", threads.splits() - before)
before = threads.splits()
comp.colsum(x); comp.reduce_all(x, np.int64(4099999))
print("reductions", threads.splits() - before)
small = threads.splits()
comp.chain(a[:1000], b[:1000]); comp.rows(x[:10]); comp.step(x[:4], x[0]); comp.colsum(x[:300, :10])
comp.reduce_all(x[:100, :10], np.int64(1000))
print("small", threads.splits() - small)
"""


@pytest.mark.slow
def test_compiled_loops_split_over_threads(tmp_path):
    """Element-wise ops, row and column reductions, strided views, matmul loops (without BLAS,
    batched too), integers, loops and a gradient: the same results on three threads as in the interpreter and
    as on one thread, with the large loops split and the small ones not."""
    (tmp_path / "one").mkdir()
    (tmp_path / "three").mkdir()
    # (quick start off: both runs use the same code, optimized, the second from the disk cache)
    three = _run(f"import os; os.chdir({str(tmp_path / 'three')!r})\n" + PROGRAMS, 3, tmp_path, DG_BLAS="0",
                 DG_QUICK_START="0")
    one = _run(f"import os; os.chdir({str(tmp_path / 'one')!r})\n" + PROGRAMS, 1, tmp_path, DG_BLAS="0",
               DG_QUICK_START="0")
    split = int(three.split("split ")[1].split()[0])
    assert split >= 10, three
    assert "split 0" in one and "small 0" in one
    assert "small 0" in three, three
    assert int(three.split("reductions ")[1].split()[0]) >= 5, three  # along the first axis, to a scalar
    for f in sorted(os.listdir(tmp_path / "three")):
        # the same code on other bounds: a vector loop's remainder may round differently
        np.testing.assert_allclose(np.load(tmp_path / "three" / f), np.load(tmp_path / "one" / f),
                                   rtol=1e-6, atol=1e-30, err_msg=f)


def _generic(src: str, src_t: str, dst: str, dst_t: str, op: str = "math.exp") -> str:
    e = f"%e = {op} %x : f32" if op.startswith("math.") else f"%e = {op} %x, %x : f32"
    return (f"linalg.generic {{indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], "
            f"iterator_types = [\"parallel\"]}} ins({src} : {src_t}) outs({dst} : {dst_t}) {{\n"
            f"^bb0(%x: f32, %y: f32):\n  {e}\n  linalg.yield %e : f32\n}}\n")


NOALIAS_CASES = {
    # the output is fresh memory, the input an argument: the output aliases nothing
    "fresh": ("func.func @f(%b: memref<?xf32>) -> memref<?xf32> {\n"
              "%c0 = arith.constant 0 : index\n%n = memref.dim %b, %c0 : memref<?xf32>\n"
              "%a = memref.alloc(%n) : memref<?xf32>\n"
              + _generic("%b", "memref<?xf32>", "%a", "memref<?xf32>") + "return %a : memref<?xf32>\n}", 1),
    # two views of one allocation: neither may be taken as not aliasing the other
    "views": ("func.func @f(%n: index) -> memref<?xf32> {\n"
              "%c1 = arith.constant 1 : index\n%m = arith.subi %n, %c1 : index\n"
              "%a = memref.alloc(%n) : memref<?xf32>\n"
              "%v = memref.subview %a[1] [%m] [1] : memref<?xf32> to memref<?xf32, strided<[1], offset: 1>>\n"
              "%w = memref.subview %a[0] [%m] [1] : memref<?xf32> to memref<?xf32, strided<[1]>>\n"
              + _generic("%w", "memref<?xf32, strided<[1]>>", "%v", "memref<?xf32, strided<[1], offset: 1>>")
              + "return %a : memref<?xf32>\n}", 0),
    # an input that is one allocation or the other, chosen at run time: nothing is known
    "branch": ("func.func @f(%b: memref<?xf32>, %c: i1) -> memref<?xf32> {\n"
               "%c0 = arith.constant 0 : index\n%n = memref.dim %b, %c0 : memref<?xf32>\n"
               "%a = memref.alloc(%n) : memref<?xf32>\n"
               "%s = scf.if %c -> memref<?xf32> {\n  scf.yield %a : memref<?xf32>\n} else {\n"
               "  scf.yield %b : memref<?xf32>\n}\n"
               + _generic("%s", "memref<?xf32>", "%a", "memref<?xf32>") + "return %a : memref<?xf32>\n}", 0),
}


@pytest.mark.parametrize("case", sorted(NOALIAS_CASES))
def test_noalias_only_where_nothing_else_views_the_memory(case):
    from dg.dialects.dialect import shared_context
    from dg.lowering import parallel

    text, marked = NOALIAS_CASES[case]
    with shared_context():
        m = ir.Module.parse(text)
        assert parallel.outline_parallel_loops(m) == 1
        loops = [op.operation for op in m.body.operations
                 if ir.StringAttr(op.operation.attributes["sym_name"]).value.endswith("_loop")]
        assert len(loops) == 1
        attrs = loops[0].attributes
        got = len(ir.DenseI64ArrayAttr(attrs[parallel.NOALIAS])) if parallel.NOALIAS in attrs else 0
        assert got == marked, str(m)


def _outlined(text: str):
    from dg.dialects.dialect import shared_context
    from dg.lowering import parallel

    with shared_context():
        m = ir.Module.parse(text)
        assert parallel.outline_parallel_loops(m) == 1
    return m, {ir.StringAttr(op.operation.attributes["sym_name"]).value: op.operation for op in m.body.operations}


def test_the_launch_takes_the_loops_place():
    """One loop function, the pool's entry and the launch; in the caller, in the loop's place, a
    call of the launch on the loop's operands (memrefs as their descriptors), which packs the
    context into the module's context global and calls the pool (which runs a small loop on the
    calling thread). Nothing is allocated on the stack for it."""
    from dg.core.mlir import constant_value, operations_under
    from dg.lowering import parallel

    text = ("func.func @f(%b: memref<?xf32>, %c: i1) -> memref<?xf32> {\n"
            "%c0 = arith.constant 0 : index\n%n = memref.dim %b, %c0 : memref<?xf32>\n"
            "%a = memref.alloc(%n) : memref<?xf32>\n"
            "scf.if %c {\n" + _generic("%b", "memref<?xf32>", "%a", "memref<?xf32>") + "}\n"
            "return %a : memref<?xf32>\n}")
    m, funcs = _outlined(text)
    assert sorted(funcs) == ["__dg_par_0", "__dg_par_0_launch", "__dg_par_0_loop", "__dg_par_descriptor_d",
                             "__dg_par_pack_d", parallel.CONTEXT, "dg.parallel_for", "f"], str(m)
    f, launch = funcs["f"], funcs["__dg_par_0_launch"]
    (branch,) = [op for op in operations_under(f.regions[0].blocks[0]) if op.name == "scf.if"]
    inside = [op.name for op in operations_under(branch.regions[0].blocks[0])]
    assert "scf.parallel" not in inside and inside.count("builtin.unrealized_conversion_cast") == 2, str(f)
    (call,) = [op for op in operations_under(branch.regions[0].blocks[0]) if op.name == "func.call"]
    assert ir.FlatSymbolRefAttr(call.attributes["callee"]).value == "__dg_par_0_launch"
    body = list(operations_under(launch.regions[0].blocks[0]))
    assert not any(op.name == "llvm.alloca" for g in (f, launch) for op in operations_under(g.regions[0].blocks[0]))
    # 2 memrefs (each its aligned pointer and its size, which a function LLVM inlines writes:
    # _compact), ub (lb, step: constants)
    packed = [ir.FlatSymbolRefAttr(op.attributes["callee"]).value for op in body if op.name == "func.call"]
    assert packed == ["__dg_par_pack_d"] * 2 and [op.name for op in body].count("llvm.store") == 1, str(launch)
    assert [op.name for op in body].count("arith.sitofp") == 1, str(launch)  # the iterations, ub - 0 (a 1-d loop)
    # The float is made from the iterations before they are clamped at zero, and the work capped
    # with a select: LLVM's fast instruction selection takes neither an unsigned conversion (what
    # LLVM makes of a conversion of a clamped integer) nor the minimum intrinsic.
    (convert,) = [op for op in body if op.name == "arith.sitofp"]
    source = convert.operands[0].owner
    while getattr(source, "name", None) == "arith.index_cast":
        source = source.operands[0].owner
    assert getattr(source, "name", None) != "arith.maxsi" and "arith.minimumf" not in str(launch), str(launch)
    entry = list(operations_under(funcs["__dg_par_0"].regions[0].blocks[0]))
    assert [op.name for op in entry].count("llvm.load") == 1, str(funcs["__dg_par_0"])
    made = [ir.FlatSymbolRefAttr(op.attributes["callee"]).value for op in entry if op.name == "func.call"]
    assert made == ["__dg_par_descriptor_d"] * 2 + ["__dg_par_0_loop"], made
    assert sorted(constant_value(op.result) for op in entry if op.name == "arith.constant") == [0, 1]
    (address,) = [op for op in body if op.name == "llvm.mlir.addressof"]
    assert ir.FlatSymbolRefAttr(address.attributes["global_name"]).value == parallel.CONTEXT
    (call,) = [op for op in body if op.name == "llvm.call"]
    assert call.operands[1] == address.result
    assert not any(op.name == "scf.parallel" for op in operations_under(funcs["__dg_par_0"].regions[0].blocks[0]))
    assert any(op.name == "scf.parallel" for op in operations_under(funcs["__dg_par_0_loop"].regions[0].blocks[0]))
    assert m.operation.verify()


def test_the_pool_entry_passes_descriptors_whole():
    """Lowered to LLVM, the loop function takes each memref as one descriptor argument (not one
    argument a field: a 3-d memref has 9) and, again, the aligned pointer of the one that aliases
    nothing else, marked `noalias`; the pool's entry has the descriptors of these row-major
    memrefs made from their words in the context (a function LLVM inlines) and reads only that
    pointer out of them."""
    from dg.core.mlir import operations_under
    from dg.dialects.dialect import shared_context
    from dg.lowering import cpu, parallel

    t = "memref<?x?x?xf32>"
    text = (f"func.func @f(%b: {t}) -> {t} {{\n"
            "%c0 = arith.constant 0 : index\n%c1 = arith.constant 1 : index\n%c2 = arith.constant 2 : index\n"
            f"%n = memref.dim %b, %c0 : {t}\n%p = memref.dim %b, %c1 : {t}\n%q = memref.dim %b, %c2 : {t}\n"
            f"%a = memref.alloc(%n, %p, %q) : {t}\n"
            "linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, "
            "affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = [\"parallel\", \"parallel\", \"parallel\"]} "
            f"ins(%b : {t}) outs(%a : {t}) {{\n"
            "^bb0(%x: f32, %y: f32):\n  %e = math.exp %x : f32\n  linalg.yield %e : f32\n}\n"
            f"return %a : {t}\n}}")
    m, _ = _outlined(text)
    with shared_context():
        cpu.to_llvm(m)
        parallel.mark_loop_functions(m)
    funcs = {ir.StringAttr(op.operation.attributes["sym_name"]).value: op.operation for op in m.body.operations}
    loop = funcs["__dg_par_0_loop"]
    descriptor = "!llvm.struct<(ptr, ptr, i64, array<3 x i64>, array<3 x i64>)>"
    types = [str(a.type) for a in loop.regions[0].blocks[0].arguments]
    # lo, hi; the other axes' upper bounds, b, a; the first axis' lower and upper bounds and step; a's pointer
    assert types == ["i64"] * 4 + [descriptor] * 2 + ["i64"] * 3 + ["!llvm.ptr"], types
    assert ["llvm.noalias" in str(a) for a in ir.ArrayAttr(loop.attributes["arg_attrs"])] == [False] * 9 + [True]
    entry = [op.name for op in operations_under(funcs["__dg_par_0"].regions[0].blocks[0])]
    assert entry.count("llvm.extractvalue") == 1, entry  # the aligned pointer of a
    assert entry.count("llvm.call") == 3 and entry.count("llvm.load") == 3, entry  # b, a, the loop; 3 upper bounds


def test_a_row_major_memref_travels_as_its_pointer_and_dynamic_sizes():
    """In the context, a row-major memref is its aligned pointer and its dynamic sizes (one word
    for a static matrix), another layout its whole descriptor; the pool's entry makes the
    descriptor again, with row-major strides, and the loop computes what it did."""
    from dg.core.mlir import operations_under
    from dg.lowering import parallel

    strided = "memref<512x?xf32, strided<[?, 1], offset: ?>>"
    text = ("func.func @f(%b: memref<512x512xf32>, %s: " + strided + ") -> memref<512x512xf32> {\n"
            "%a = memref.alloc() : memref<512x512xf32>\n"
            "linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>, "
            "affine_map<(d0, d1) -> (d0, d1)>], iterator_types = [\"parallel\", \"parallel\"]} "
            "ins(%b, %s : memref<512x512xf32>, " + strided + ") outs(%a : memref<512x512xf32>) {\n"
            "^bb0(%x: f32, %y: f32, %z: f32):\n  %e = math.exp %x : f32\n  %m = arith.mulf %e, %y : f32\n"
            "  linalg.yield %m : f32\n}\n"
            "return %a : memref<512x512xf32>\n}")
    m, funcs = _outlined(text)
    launch = [op for op in operations_under(funcs["__dg_par_0_launch"].regions[0].blocks[0])]
    stored = [str(op.operands[0].type) for op in launch if op.name == "llvm.store"]
    packed = [ir.FlatSymbolRefAttr(op.attributes["callee"]).value for op in launch if op.name == "func.call"]
    # b and a: a pointer each, written by the packing function; s: its descriptor; the first axis' upper bound
    assert packed == ["__dg_par_pack_512_512"] * 2, packed
    assert sorted(stored) == ["!llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)>", "i64"], stored
    pack = [op.name for op in operations_under(funcs["__dg_par_pack_512_512"].regions[0].blocks[0])]
    assert pack.count("llvm.store") == 1, pack
    words = str(funcs[parallel.CONTEXT].attributes["global_type"])
    assert "!llvm.array<10 x i64>" in words, words  # 1 + 1 + 7 + 1 (the largest context)
    entry = [op for op in operations_under(funcs["__dg_par_0"].regions[0].blocks[0])]
    made = [ir.FlatSymbolRefAttr(op.attributes["callee"]).value for op in entry if op.name == "func.call"]
    assert made.count("__dg_par_descriptor_512_512") == 2, made  # b's and a's descriptors, made again
    maker = [op.name for op in operations_under(funcs["__dg_par_descriptor_512_512"].regions[0].blocks[0])]
    assert maker.count("llvm.insertvalue") == 7 and "llvm.mul" not in maker, maker  # (the strides: constants)
    assert m.operation.verify()


def test_an_inner_axis_of_constant_bounds_is_in_the_work_estimates_constant():
    """A loop over rows of 64: the launch counts the rows at run time and the 64 columns in the
    constant it multiplies them by (the body's cost per element, times 64)."""
    from dg.core.mlir import operations_under
    from dg.lowering import parallel

    text = ("func.func @f(%b: memref<?x64xf32>) -> memref<?x64xf32> {\n"
            "%c0 = arith.constant 0 : index\n%n = memref.dim %b, %c0 : memref<?x64xf32>\n"
            "%a = memref.alloc(%n) : memref<?x64xf32>\n"
            "linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], "
            "iterator_types = [\"parallel\", \"parallel\"]} ins(%b : memref<?x64xf32>) outs(%a : memref<?x64xf32>) {\n"
            "^bb0(%x: f32, %y: f32):\n  %e = math.exp %x : f32\n  linalg.yield %e : f32\n}\n"
            "return %a : memref<?x64xf32>\n}")
    m, funcs = _outlined(text)
    body = list(operations_under(funcs["__dg_par_0_launch"].regions[0].blocks[0]))
    assert [op.name for op in body].count("arith.sitofp") == 1, str(funcs["__dg_par_0_launch"])
    (clone,) = [op for op in operations_under(funcs["__dg_par_0_loop"].regions[0].blocks[0]) if op.name == "scf.parallel"]
    per_element = parallel._cost(parallel._nest(clone))
    weights = [ir.FloatAttr(op.attributes["value"]).value for op in body
               if op.name == "arith.constant" and str(op.result.type) == "f64"]
    weights = [w for w in weights if 0 < w < 1e18]  # (not the cap, nor the zero the iterations are clamped at)
    assert weights == [64.0 * per_element], (weights, per_element)
    assert m.operation.verify()


def test_loop_functions_are_inlined_into_the_pools_entry():
    """After the lowering to LLVM the loop function is `alwaysinline` (its one caller is the
    pool's entry) and keeps its `noalias` arguments; the launch is `alwaysinline` too (inlined
    into its callers, whose calls would pass it descriptors)."""
    from dg.dialects.dialect import shared_context
    from dg.lowering import cpu, parallel

    m, _ = _outlined(NOALIAS_CASES["fresh"][0])
    with shared_context():
        cpu.to_llvm(m)
        parallel.mark_loop_functions(m)
    funcs = {ir.StringAttr(op.operation.attributes["sym_name"]).value: op.operation for op in m.body.operations}
    loop = funcs["__dg_par_0_loop"].attributes
    assert [str(a) for a in ir.ArrayAttr(loop["passthrough"])] == ['"alwaysinline"']
    assert sum("llvm.noalias" in str(a) for a in ir.ArrayAttr(loop["arg_attrs"])) == 1
    assert "passthrough" not in funcs["__dg_par_0"].attributes
    assert [str(a) for a in ir.ArrayAttr(funcs["__dg_par_0_launch"].attributes["passthrough"])] == ['"alwaysinline"']


def test_the_context_global_holds_the_largest_context():
    """Two loops, one context global as large as the larger context (two row-major vectors of two
    words, the pointer and the size, and the upper bound: the lower bound and the step are
    constants, which the pool's entry makes again)."""
    from dg.dialects.dialect import shared_context
    from dg.lowering import parallel

    text = ("func.func @f(%b: memref<?xf32>) -> memref<?xf32> {\n"
            "%c0 = arith.constant 0 : index\n%n = memref.dim %b, %c0 : memref<?xf32>\n"
            "%a = memref.alloc(%n) : memref<?xf32>\n%r = memref.alloc(%n) : memref<?xf32>\n"
            + _generic("%b", "memref<?xf32>", "%a", "memref<?xf32>")
            + _generic("%a", "memref<?xf32>", "%r", "memref<?xf32>") + "return %r : memref<?xf32>\n}")
    with shared_context():
        m = ir.Module.parse(text)
        assert parallel.outline_parallel_loops(m) == 2
        (g,) = [op.operation for op in m.body.operations if op.operation.name == "llvm.mlir.global"]
        assert str(ir.TypeAttr(g.attributes["global_type"]).value) == "!llvm.array<5 x i64>"
        assert m.operation.verify()


def test_the_same_loop_in_two_places_is_one_function():
    """Loops that are the same once outlined (a layer's element-wise ops repeat in every layer
    and in its gradient) call one launch, of one loop function and pool entry, which LLVM
    compiles once; a different loop keeps its own. Compiled, the program gives the
    interpreter's values."""
    from dg.core.mlir import operations_under
    from dg.dialects.dialect import shared_context
    from dg.lowering import parallel

    text = ("func.func @f(%b: memref<?xf32>) -> memref<?xf32> {\n"
            "%c0 = arith.constant 0 : index\n%n = memref.dim %b, %c0 : memref<?xf32>\n"
            "%a = memref.alloc(%n) : memref<?xf32>\n%r = memref.alloc(%n) : memref<?xf32>\n"
            "%s = memref.alloc(%n) : memref<?xf32>\n%t = memref.alloc(%n) : memref<?xf32>\n"
            + _generic("%b", "memref<?xf32>", "%a", "memref<?xf32>")  # (b may alias: not the same loop)
            + _generic("%a", "memref<?xf32>", "%r", "memref<?xf32>")
            + _generic("%r", "memref<?xf32>", "%s", "memref<?xf32>")
            + _generic("%s", "memref<?xf32>", "%t", "memref<?xf32>", op="arith.subf")
            + "return %t : memref<?xf32>\n}")
    with shared_context():
        m = ir.Module.parse(text)
        assert parallel.outline_parallel_loops(m) == 4
        names = [ir.StringAttr(op.operation.attributes["sym_name"]).value for op in m.body.operations]
        assert sorted(n for n in names if n.startswith("__dg_par")) == sorted([
            f"__dg_par_{i}{kind}" for i in (0, 1, 3) for kind in ("", "_launch", "_loop")]
            + ["__dg_par_descriptor_d", "__dg_par_pack_d"]), str(m)  # (a vector's words in a context, and back)
        (f,) = [op.operation for op in m.body.operations if op.operation.name == "func.func"
                and ir.StringAttr(op.operation.attributes["sym_name"]).value == "f"]
        launched = [ir.FlatSymbolRefAttr(op.attributes["callee"]).value
                    for op in operations_under(f.regions[0].blocks[0]) if op.name == "func.call"]
        assert launched == [f"__dg_par_{i}_launch" for i in (0, 1, 1, 3)], str(f)
        assert m.operation.verify()

    src = ("def g(x: f32[N]) -> f32[N]:\n    y = tanh(x * 0.5) + x\n    z = tanh(y * 0.5) + y\n"
           "    return z * 2.0 - tanh(z * 0.5)\n")
    x = np.linspace(-3, 3, 1 << 16, dtype=np.float32)
    got = dg.loads(src, mode="compiled", filename="same.dg").g(x)
    np.testing.assert_allclose(got, dg.loads(src, mode="interp", filename="same.dg").g(x), rtol=1e-5, atol=1e-6)


def test_a_recursive_functions_frame_holds_no_loop_context():
    """Compiled: a recursive function whose loops are shared by threads keeps no context in its
    frame (that would shorten the recursion the stack allows), and gives the interpreter's results."""
    src = ("def deep(x: f32[N], n: i64) -> f32:\n"
           "    if n <= 0:\n        return sum(x)\n"
           "    return deep(x * 0.5 + 1.0, n - 1)\n")
    comp = dg.loads(src, mode="compiled", filename="deep.dg")
    x = np.arange(1 << 16, dtype=np.float32)
    want = dg.loads(src, mode="interp", filename="deep.dg").deep(x, 40)
    np.testing.assert_allclose(comp.deep(x, 40), want, rtol=1e-5)
    text = comp.deep.ir("llvm")
    bodies = {b.split("(")[0].strip(): b.split("\n  }\n")[0] for b in text.split("llvm.func ")[1:]}
    deep = [b for name, b in bodies.items() if "@dg.fn.deep" in name]
    launches = [b for name, b in bodies.items() if name.endswith("_launch")]
    assert len(deep) == 2, text  # the entry, and the function it calls itself as
    assert all("_launch(" in b and "llvm.alloca" not in b for b in deep), text
    assert launches and all("dg.parallel_for" in b and "llvm.alloca" not in b for b in launches), text


def test_a_context_field_after_a_narrower_one():
    """A context with an f32 before i64 fields (the variance's count, then the loop's bounds):
    the packing in the caller and the unpacking in the pool's entry agree on where each field
    is (both laid out for the host: a constant address of the context global was once folded
    with another layout, which put the bounds 4 bytes off and ran no iterations)."""
    src = "def va(x: f32[?, D]):\n    return var(x, axis=-1, keepdims=True)\n"
    x = np.random.default_rng(3).standard_normal((3, 6)).astype(np.float32)
    np.testing.assert_allclose(dg.loads(src, mode="compiled", filename="va.dg").va(x), x.var(-1, keepdims=True),
                               rtol=1e-5)
