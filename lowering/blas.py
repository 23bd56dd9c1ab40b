"""Matrix products in compiled CPU code go to a BLAS: MKL when installed, else the one NumPy ships.

Expects: a module after bufferization (linalg ops on memrefs). Guarantees:
`route_matmuls(module)` replaces each f32/f64 `linalg.matmul` with a call to
a helper function written here in MLIR. At run time the helper reads the
operands' strides. Row-major or column-major operands go to the BLAS
`gemm` with the right transpose flags and leading dimensions, so
transposed views are not copied; nor are the operands a matmul's indexing
maps transpose (`linalg.matmul indexing_maps = [...]`, as the convolution
gradients write): they become transposed views (maps a gemm cannot take,
a transposed C for one, leave the matmul as loops). A transpose that bufferization made into
a copy feeding only the matmul (what the autodiff pass writes for
`dA = dC @ B^T`) becomes a transposed view first, when nothing can write its
source in between. Any other layout (an output that is not
row-major, for one) runs the original `linalg.matmul`, which is lowered to
loops later. A `linalg.batch_matmul` (what a product with equal batch axes lowers to, the
batch axes collapsed) becomes a call of `@dg_bgemm_<elt>`, a loop of the 2-D helper over
the batch on views; an operand that is a reshape of a copy transposing its source's last two
axes (`q @ transpose(k)`, the attention gradients) becomes a transposed view of the source
instead. No Python runs during the call: compiled code calls the BLAS
function through a runtime symbol (`dg_blas_sgemm` / `dg_blas_dgemm`).

`locate()` finds the BLAS, in this order: MKL's `libmkl_rt` (the optional
`mkl` wheel, the `mkl` extra, or a system MKL; its ILP64 entry points
where it has them), NumPy's bundled scipy-openblas, a system OpenBLAS/CBLAS.
On the small products of a training step MKL is about 1.5x faster than
OpenBLAS on the machines we measured (`benchmarks/cpu.py`). `DG_BLAS` picks:
`mkl`, `openblas` or `cblas` only that family, `0` none (matmuls stay
loops); unset or `1`, the first found. A BLAS that takes 32-bit sizes gets
only the products whose sizes and strides fit them; larger ones run as
loops. The BLAS's own threads follow its own settings (`MKL_NUM_THREADS`,
`OPENBLAS_NUM_THREADS`). `identity()` names the choice; it is part of the
disk cache key.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import site
import sysconfig
import threading
from dataclasses import dataclass
from pathlib import Path

from dg.core.config import BLAS_FAMILIES, config
from dg.core.mlir import append_parsed, create, defining_op, ir, one_use, user

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
_ELTS = {"f32": "s", "f64": "d"}


@dataclass(frozen=True)
class Blas:
    path: str
    int_type: str  # "i64" (ILP64) or "i32"
    addresses: tuple  # ((runtime symbol, address), ...)
    names: tuple = ()  # ((runtime symbol, the library's name of it), ...)

    @property
    def identity(self) -> str:
        return f"{Path(self.path).name}:{self.int_type}"


FAMILIES = BLAS_FAMILIES


def _mkl_libraries():
    """libmkl_rt paths: where pip puts the `mkl` wheel's libraries (this environment's, then the
    user's), then the system's."""
    dirs = [Path(sysconfig.get_path("data")) / "lib"]
    try:
        dirs.append(Path(site.getuserbase()) / "lib")
    except Exception:  # pragma: no cover - a site module without user paths
        pass
    for d in dirs:
        yield from (str(p) for p in sorted(d.glob("libmkl_rt.so*"), reverse=True))
    p = ctypes.util.find_library("mkl_rt")
    if p:
        yield p


def _candidates(family: str | None = None):
    """(family, library path, symbol patterns with {t} for s/d: ((pattern, int type), ...)),
    most preferred first; only `family`'s when given, without looking for the others (each
    `find_library` runs a program: looking for all of them took 0.1 s of a process's first
    compile)."""
    if family in (None, "mkl"):
        for p in _mkl_libraries():
            yield "mkl", p, (("cblas_{t}gemm_64", "i64"), ("cblas_{t}gemm", "i32"))
    if family in (None, "openblas"):
        try:
            import numpy

            cfg = numpy.show_config(mode="dicts")["Build Dependencies"]["blas"]
            name = str(cfg.get("name", ""))
        except Exception:  # pragma: no cover - an unusual NumPy build
            name = ""
        if "scipy-openblas" in name:
            libs = Path(numpy.__file__).resolve().parent.parent / "numpy.libs"
            ilp64 = "64" in name or "USE64BITINT" in str(cfg.get("openblas configuration", ""))
            for p in sorted(libs.glob("libscipy_openblas*.so*")):
                yield "openblas", str(p), ((("scipy_cblas_{t}gemm64_", "i64"),) if ilp64 else (("scipy_cblas_{t}gemm", "i32"),))
    for fam, lib, pattern, ity in (("openblas", "openblas64_", "cblas_{t}gemm64_", "i64"),
                                   ("openblas", "openblas", "cblas_{t}gemm", "i32"),
                                   ("cblas", "cblas", "cblas_{t}gemm", "i32")):
        if family in (None, fam):
            p = ctypes.util.find_library(lib)
            if p:
                yield fam, p, ((pattern, ity),)


def _wanted() -> tuple:
    """The families `DG_BLAS` allows, most preferred first (empty: none)."""
    return config.blas


@functools.lru_cache(maxsize=None)
def _locate(wanted: tuple) -> Blas | None:
    for family in wanted:
        for fam, path, symbols in _candidates(family):
            if fam != family:
                continue
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            for pattern, ity in symbols:
                names = tuple((f"dg_blas_{t}gemm", pattern.format(t=t)) for t in "sd")
                try:
                    addrs = tuple((ours, ctypes.cast(getattr(lib, theirs), ctypes.c_void_p).value) for ours, theirs in names)
                except AttributeError:
                    continue
                return Blas(path, ity, addrs, names)
    return None


@functools.lru_cache(maxsize=None)
def locate() -> Blas | None:
    """The BLAS compiled code calls, chosen once per process (the runtime registers its symbols
    once: a BLAS chosen later, with 32-bit sizes where the first took 64, would be called wrongly)."""
    return _locate(_wanted())


_LOOPS = threading.local()


@contextlib.contextmanager
def products_as_loops():
    """Inside, on this thread, the lowering routes no product to the BLAS (an exported library
    built with `--blas none`: runtime.export)."""
    was = getattr(_LOOPS, "on", False)
    _LOOPS.on = True
    try:
        yield
    finally:
        _LOOPS.on = was


def routed() -> Blas | None:
    """The BLAS the lowering routes products to: `locate()`'s, or None inside `products_as_loops`."""
    return None if getattr(_LOOPS, "on", False) else locate()


# The functions that get and set the number of threads of a BLAS, by family's symbols.
_THREAD_COUNTS = (("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
                  ("scipy_openblas_get_num_threads", "scipy_openblas_set_num_threads"),
                  ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
                  ("openblas_get_num_threads", "openblas_set_num_threads"),
                  ("MKL_Get_Max_Threads", "MKL_Set_Num_Threads"))


@functools.lru_cache(maxsize=None)
def thread_count() -> tuple | None:
    """(get, set): ctypes functions that read and set how many threads the BLAS of `locate`
    runs a product on; None without a BLAS, or for one with neither function."""
    b = locate()
    if b is None:
        return None
    lib = ctypes.CDLL(b.path)
    for get, put in _THREAD_COUNTS:
        try:
            get, put = getattr(lib, get), getattr(lib, put)
        except AttributeError:
            continue
        get.argtypes, get.restype = [], ctypes.c_int
        put.argtypes, put.restype = [ctypes.c_int], None
        return get, put
    return None


def identity() -> str:
    b = locate()
    return b.identity if b else "no-blas"


def _memref(elt: str) -> str:
    return f"memref<?x?x{elt}, strided<[?, ?], offset: ?>>"


def _layout(x: str, elt: str) -> list[str]:
    """IR reading operand %x's sizes and strides: %x_row / %x_col (its layout), %x_ld, %x_tr (BLAS flags)."""
    m = _memref(elt)
    lines = [
        f"%{x}_base, %{x}_off, %{x}_n:2, %{x}_s:2 = memref.extract_strided_metadata %{x} : {m} -> memref<{elt}>, index, index, index, index, index",
        f"%{x}_r1 = arith.cmpi ule, %{x}_n#0, %one : index",
        f"%{x}_c1 = arith.cmpi ule, %{x}_n#1, %one : index",
        f"%{x}_rm = arith.maxsi %{x}_n#0, %one : index",
        f"%{x}_cm = arith.maxsi %{x}_n#1, %one : index",
        f"%{x}_s1u = arith.cmpi eq, %{x}_s#1, %one : index",
        f"%{x}_s0u = arith.cmpi eq, %{x}_s#0, %one : index",
        f"%{x}_s0w = arith.cmpi sge, %{x}_s#0, %{x}_cm : index",
        f"%{x}_s1w = arith.cmpi sge, %{x}_s#1, %{x}_rm : index",
        f"%{x}_ra = arith.ori %{x}_s1u, %{x}_c1 : i1",
        f"%{x}_rb = arith.ori %{x}_s0w, %{x}_r1 : i1",
        f"%{x}_row = arith.andi %{x}_ra, %{x}_rb : i1",
        f"%{x}_ca = arith.ori %{x}_s0u, %{x}_r1 : i1",
        f"%{x}_cb = arith.ori %{x}_s1w, %{x}_c1 : i1",
        f"%{x}_col = arith.andi %{x}_ca, %{x}_cb : i1",
        f"%{x}_ok = arith.ori %{x}_row, %{x}_col : i1",
        f"%{x}_ldr = arith.select %{x}_r1, %{x}_cm, %{x}_s#0 : index",
        f"%{x}_ldc = arith.select %{x}_c1, %{x}_rm, %{x}_s#1 : index",
        f"%{x}_ld = arith.select %{x}_row, %{x}_ldr, %{x}_ldc : index",
        f"%{x}_tr = arith.select %{x}_row, %notrans, %trans : i32",
    ]
    return lines


def helper_name(elt: str, overwrite: bool, scaled: bool = False) -> str:
    return f"dg_gemm_{elt}" + ("_new" if overwrite else "") + ("_scaled" if scaled else "")


def helper_text(elt: str, int_type: str, overwrite: bool, scaled: bool = False) -> tuple[str, str]:
    """(`@dg_gemm_<elt>(A, B, C)`, the BLAS declaration it calls): C += A @ B (or C = A @ B when
    `overwrite`), by BLAS when the sizes are not empty and the layouts allow, else by loops.
    `scaled` adds a fourth argument alpha: C += alpha * A @ B."""
    t = _ELTS[elt]
    m = _memref(elt)
    size = 4 if elt == "f32" else 8
    ity = int_type
    body = [
        "%one = arith.constant 1 : index",
        "%true = arith.constant true",
        "%zero = arith.constant 0 : index",
        f"%esize = arith.constant {size} : index",
        f"%rowmajor = arith.constant {ROW_MAJOR} : i32",
        f"%notrans = arith.constant {NO_TRANS} : i32",
        f"%trans = arith.constant {TRANS} : i32",
    ] + ([] if scaled else [f"%alpha = arith.constant 1.0 : {elt}"])
    for x in "abc":
        body += _layout(x, elt)
    body += [
        "%m0 = arith.cmpi eq, %a_n#0, %zero : index",
        "%k0 = arith.cmpi eq, %a_n#1, %zero : index",
        "%n0 = arith.cmpi eq, %b_n#1, %zero : index",
        "%e1 = arith.ori %m0, %k0 : i1",
        "%empty = arith.ori %e1, %n0 : i1",
        "%full = arith.xori %empty, %true : i1",
        "%g0 = arith.andi %a_ok, %b_ok : i1",
    ] + _fits_int32(ity) + [
        "%g2 = arith.andi %g1, %c_row : i1",
        f"%{'fits' if scaled else 'blas'} = arith.andi %g2, %full : i1",
    ] + ([  # with alpha = 0 a BLAS may skip A @ B, and an inf or NaN in it would not reach C
        f"%zalpha = arith.constant 0.0 : {elt}",
        f"%anz = arith.cmpf une, %alpha, %zalpha : {elt}",
        "%blas = arith.andi %fits, %anz : i1",
    ] if scaled else []) + [
        f"%beta = arith.constant {0.0 if overwrite else 1.0} : {elt}",
        "scf.if %blas {",
    ]
    for x in "abc":
        body += [
            f"  %{x}_p = memref.extract_aligned_pointer_as_index %{x} : {m} -> index",
            f"  %{x}_ob = arith.muli %{x}_off, %esize : index",
            f"  %{x}_pa = arith.addi %{x}_p, %{x}_ob : index",
            f"  %{x}_pi = arith.index_cast %{x}_pa : index to i64",
            f"  %{x}_ptr = llvm.inttoptr %{x}_pi : i64 to !llvm.ptr",
            f"  %{x}_lda = arith.index_cast %{x}_ld : index to {ity}",
        ]
    for name, v in (("mm", "%a_n#0"), ("kk", "%a_n#1"), ("nn", "%b_n#1")):
        body.append(f"  %{name} = arith.index_cast {v} : index to {ity}")
    call_args = ("%rowmajor, %a_tr, %b_tr, %mm, %nn, %kk, %alpha, %a_ptr, %a_lda, %b_ptr, %b_lda, "
                 "%beta, %c_ptr, %c_lda")
    sig = f"i32, i32, i32, {ity}, {ity}, {ity}, {elt}, !llvm.ptr, {ity}, !llvm.ptr, {ity}, {elt}, !llvm.ptr, {ity}"
    body += [
        f"  func.call @dg_blas_{t}gemm({call_args}) : ({sig}) -> ()",
        "} else {",  # loops, which do nothing when a size is zero
    ] + ([f"  %zf = arith.constant 0.0 : {elt}", f"  linalg.fill ins(%zf : {elt}) outs(%c : {m})"] if overwrite else []) + (
        _scaled_loops(elt) if scaled else [f"  linalg.matmul ins(%a, %b : {m}, {m}) outs(%c : {m})"]) + [
        "}",
        "return",
    ]
    text = "\n  ".join(body)
    alpha = f", %alpha: {elt}" if scaled else ""
    fn = f"func.func private @{helper_name(elt, overwrite, scaled)}(%a: {m}, %b: {m}, %c: {m}{alpha}) {{\n  {text}\n}}\n"
    return fn, f"func.func private @dg_blas_{t}gemm({sig})\n"


def _fits_int32(ity: str) -> list[str]:
    """IR defining %g1: %g0, and for a BLAS taking 32-bit sizes, every size and leading
    dimension passed fits in one."""
    if ity != "i32":
        return ["%g1 = arith.andi %g0, %true : i1"]
    lines = ["%imax = arith.constant 2147483647 : index"]
    acc = "%g0"
    for i, v in enumerate(("%a_n#0", "%a_n#1", "%b_n#1", "%a_ld", "%b_ld", "%c_ld")):
        lines.append(f"%f32_{i} = arith.cmpi ule, {v}, %imax : index")
        name = "%g1" if i == 5 else f"%fa_{i}"
        lines.append(f"{name} = arith.andi {acc}, %f32_{i} : i1")
        acc = name
    return lines


def _scaled_loops(elt: str) -> list[str]:
    """C += alpha * A @ B as a linalg.generic (what the scaled helper runs when BLAS cannot)."""
    m = _memref(elt)
    return [
        "  linalg.generic {indexing_maps = [affine_map<(i, j, k) -> (i, k)>, affine_map<(i, j, k) -> (k, j)>, "
        "affine_map<(i, j, k) -> (i, j)>], iterator_types = [\"parallel\", \"parallel\", \"reduction\"]} "
        f"ins(%a, %b : {m}, {m}) outs(%c : {m}) {{",
        f"  ^bb0(%x: {elt}, %y: {elt}, %acc: {elt}):",
        f"    %xy = arith.mulf %x, %y : {elt}",
        f"    %sxy = arith.mulf %alpha, %xy : {elt}",
        f"    %sum = arith.addf %acc, %sxy : {elt}",
        f"    linalg.yield %sum : {elt}",
        "  }",
    ]


def route_matmuls(module) -> int:
    """Replace the f32/f64 `linalg.matmul`s of a bufferized module by calls to the BLAS helper; how many."""
    lib = routed()
    if lib is None:
        return 0
    texts = {}
    for elt in _ELTS:
        for overwrite in (False, True):
            fn, decl = helper_text(elt, lib.int_type, overwrite)
            texts[elt, overwrite] = (helper_name(elt, overwrite), fn, decl)
    return replace_matmuls(module, texts)


def _memref3(elt: str) -> str:
    return f"memref<?x?x?x{elt}, strided<[?, ?, ?], offset: ?>>"


def batched_helper_name(elt: str, overwrite: bool) -> str:
    return f"dg_bgemm_{elt}" + ("_new" if overwrite else "")


def batched_helper_text(elt: str, overwrite: bool, gemm: str) -> str:
    """`@dg_bgemm_<elt>(A, B, C)`: for each i of the batch, C[i] (+)= A[i] @ B[i] by the 2-D
    helper `gemm` on views (no copies)."""
    m3, m = _memref3(elt), _memref(elt)
    views = []
    for x in "abc":
        views += [
            f"    %{x}_r = memref.dim %{x}, %c1 : {m3}",
            f"    %{x}_c = memref.dim %{x}, %c2 : {m3}",
            f"    %{x}_v = memref.subview %{x}[%i, 0, 0] [1, %{x}_r, %{x}_c] [1, 1, 1] : {m3} to {m}",
        ]
    return "\n".join([
        f"func.func private @{batched_helper_name(elt, overwrite)}(%a: {m3}, %b: {m3}, %c: {m3}) {{",
        "  %c0 = arith.constant 0 : index",
        "  %c1 = arith.constant 1 : index",
        "  %c2 = arith.constant 2 : index",
        f"  %nb = memref.dim %c, %c0 : {m3}",
        "  scf.for %i = %c0 to %nb step %c1 {",
        *views,
        f"    func.call @{gemm}(%a_v, %b_v, %c_v) : ({m}, {m}, {m}) -> ()",
        "  }",
        "  return",
        "}",
    ]) + "\n"


def replace_matmuls(module, helpers: dict) -> int:
    """Replace each f32/f64 `linalg.matmul` of a bufferized module by a call
    `@name(A, B, C)`, `helpers[(elt, overwrite)] = (name, function text, declarations text)`, the
    function taking fully dynamic strided memrefs. `overwrite` is when a zero fill of C comes right
    before (the fill is dropped); transpose copies feeding only the matmul become views, and so do
    operands its indexing maps read transposed. How many."""
    found, batched, before = [], [], {}
    for op, prev in _with_previous(module.body):
        if op.name in ("linalg.matmul", "linalg.batch_matmul") and len(op.operands) == 3 and "cast" not in op.attributes:
            before[op] = prev
            elt = str(ir.MemRefType(op.operands[0].type).element_type)
            if elt not in _ELTS or not all(str(ir.MemRefType(v.type).element_type) == elt for v in op.operands):
                continue
            if op.name == "linalg.batch_matmul":
                if "indexing_maps" not in op.attributes or tuple(str(m) for m in op.attributes["indexing_maps"]) == _BATCH_MAPS:
                    batched.append((op, elt))
                continue
            flips = _transposes(op)
            if flips is not None:
                found.append((op, elt, flips))
    if not found and not batched:
        return 0
    with module.context:
        calls = [(op, elt, flips, _zero_fill(op, before[op])) for op, elt, flips in found]
        bcalls = [(op, elt, _zero_fill(op, before[op])) for op, elt in batched]
        bkeys = {(elt, fill is not None) for _, elt, fill in bcalls}
        for key in sorted({(elt, fill is not None) for _, elt, _, fill in calls} | bkeys):
            name, fn, decl = helpers[key]  # the batched helper calls the 2-D one: parsed together
            append_parsed(module, decl + fn + (batched_helper_text(*key, name) if key in bkeys else ""))
        for op, elt, fill in bcalls:
            dyn = ir.Type.parse(_memref3(elt))
            views = [_batched_transposed_view(op, i) for i in (0, 1)]
            with ir.InsertionPoint(op), op.location:
                operands = [v[0] if v else op.operands[i] for i, v in enumerate(views)] + [op.operands[2]]
                args = [v if v.type == dyn else create("memref.cast", [dyn], [v]).result for v in operands]
                create("func.call", [], args, callee=ir.FlatSymbolRefAttr.get(batched_helper_name(elt, fill is not None)))
            op.erase()
            if fill is not None:
                fill.erase()
            for v in views:  # the reshapes and transpose copies' buffers, unused now
                if v:
                    for dead in v[1:]:
                        dead.erase()
        for op, elt, flips, fill in calls:
            dyn = ir.Type.parse(_memref(elt))
            with ir.InsertionPoint(op), op.location:
                views = [None if flips[i] else _transposed_view(op, i) for i in (0, 1)]
                operands = [v[0] if v else op.operands[i] for i, v in enumerate(views)] + [op.operands[2]]
                args = [v if v.type == dyn else create("memref.cast", [dyn], [v]).result for v in operands]
                args[:2] = [_transpose(v, dyn) if flip else v for v, flip in zip(args[:2], flips)]
                create("func.call", [], args, callee=ir.FlatSymbolRefAttr.get(helpers[elt, fill is not None][0]))
            op.erase()
            if fill is not None:
                fill.erase()
            for v in views:  # the transpose copies' buffers, unused now
                if v:
                    v[1].erase()
    return len(found) + len(batched)


_TRANSPOSE_MAPS = ("affine_map<(d0, d1) -> (d1, d0)>", "affine_map<(d0, d1) -> (d0, d1)>")
# A matmul's indexing maps over (m, n, k): A's (plain or transposed), B's, C's (plain only).
_A_MAPS = {"affine_map<(d0, d1, d2) -> (d0, d2)>": False, "affine_map<(d0, d1, d2) -> (d2, d0)>": True}
_B_MAPS = {"affine_map<(d0, d1, d2) -> (d2, d1)>": False, "affine_map<(d0, d1, d2) -> (d1, d2)>": True}
_C_MAP = "affine_map<(d0, d1, d2) -> (d0, d1)>"
_BATCH_MAPS = tuple(f"affine_map<(d0, d1, d2, d3) -> ({m})>" for m in ("d0, d1, d3", "d0, d3, d2", "d0, d1, d2"))


def _transposes(mm):
    """(A transposed?, B transposed?) by the matmul's indexing maps (`linalg.matmul indexing_maps
    = [...]`, as the convolutions' gradients write), or None for maps a gemm cannot take (a
    broadcast operand, a transposed C): such a matmul stays loops."""
    if "indexing_maps" not in mm.attributes:
        return False, False
    a, b, c = (str(m) for m in mm.attributes["indexing_maps"])
    if a not in _A_MAPS or b not in _B_MAPS or c != _C_MAP:
        return None
    return _A_MAPS[a], _B_MAPS[b]


def _transpose(v, dyn):
    """A transposed view of the 2-D memref v (of the fully dynamic strided type `dyn`): the helper
    reads its strides and passes it to gemm with the transpose flag, without a copy."""
    perm = ir.AffineMapAttr(ir.Attribute.parse(_TRANSPOSE_MAPS[0]))
    return create("memref.transpose", [dyn], [v], permutation=perm).result
_PURE = ("memref.alloc", "memref.cast", "memref.dim", "memref.transpose", "memref.subview", "memref.reshape")



def ops_between(first, last):
    """The ops strictly between `first` and `last` (one block), or None when `last` does not
    come after `first`."""
    out, inside = [], False
    for o in first.block.operations:
        o = o.operation
        if o == last:
            return out if inside else None
        if o == first:
            inside = True
        elif inside:
            out.append(o)
    return None


def _untouched_between(first, last) -> bool:
    """True when no op strictly between `first` and `last` (same block) may write a buffer that
    existed before them: only arith ops, allocs, casts, dims, views, stores into buffers allocated
    in between and linalg ops whose outputs are such buffers."""
    between = ops_between(first, last)
    if between is None:
        return False
    fresh = []  # the allocations made in between (their results)
    for o in between:
        if o.name in _PURE or o.name.startswith("arith."):
            if o.name == "memref.alloc":
                fresh.append(o.results[0])
            continue
        if o.name == "memref.store" and any(o.operands[1] == f for f in fresh):  # a reshape's sizes
            continue
        outputs = getattr(o.opview, "outputs", None) if o.name.startswith("linalg.") else None
        if outputs is None or not all(any(v == f for f in fresh) for v in outputs):
            return False
    return True


def _filled_once(buf):
    """(alloc, the one linalg.generic that fills it, its deallocs) when `buf` is a fresh buffer
    used only by that generic, one other op (the product reading it) and at most one dealloc;
    else None."""
    alloc = defining_op(buf)
    if getattr(alloc, "name", None) != "memref.alloc":
        return None
    users = [user(u) for u in buf.uses]
    copies = [u for u in users if u.name == "linalg.generic"]
    deallocs = [u for u in users if u.name == "memref.dealloc"]
    if len(copies) != 1 or len(users) != len(deallocs) + 2 or len(deallocs) > 1:
        return None
    return alloc, copies[0], deallocs


def _transposed_view(mm, i: int):
    """When matmul operand i is a buffer that a transpose copy filled just before (and nothing else
    uses): (a transposed view of the copy's source, the buffer's alloc), with the copy and the
    buffer's dealloc erased (the caller erases the alloc once the matmul is gone); else None.
    The BLAS helper passes the view to gemm with a transpose flag."""
    buf = mm.operands[i]
    filled = _filled_once(buf)
    if filled is None:
        return None
    alloc, copy, deallocs = filled
    maps = copy.attributes["indexing_maps"]
    body = copy.regions[0].blocks[0]
    ops = list(body.operations)
    if (len(copy.operands) != 2 or copy.operands[1] != buf or tuple(str(m) for m in maps) != _TRANSPOSE_MAPS
            or len(ops) != 1 or ops[0].operation.operands[0] != body.arguments[0]):
        return None
    src = copy.operands[0]
    st = ir.MemRefType(src.type)
    if str(st.layout) != "affine_map<(d0, d1) -> (d0, d1)>" or copy.block != mm.block:
        return None
    if not _untouched_between(copy, mm):
        return None
    rows, cols = st.shape
    dyn = ir.ShapedType.get_dynamic_size()
    stride = "?" if cols == dyn else str(cols)
    dims = "x".join("?" if d == dyn else str(d) for d in (cols, rows))
    view_t = ir.Type.parse(f"memref<{dims}x{st.element_type}, strided<[1, {stride}]>>")
    with ir.InsertionPoint(mm), mm.location:
        view = create("memref.transpose", [view_t], [src],
                      permutation=ir.AffineMapAttr(ir.Attribute.parse(_TRANSPOSE_MAPS[0]))).result
    copy.erase()
    for d in deallocs:
        d.erase()
    return view, alloc


def _swap_last_maps(rank: int) -> tuple:
    ds = [f"d{i}" for i in range(rank)]
    dims = ", ".join(ds)
    return (f"affine_map<({dims}) -> ({', '.join(ds[:-2] + ds[-1:] + ds[-2:-1])})>", f"affine_map<({dims}) -> ({dims})>")


def _batched_transposed_view(bmm, i: int):
    """When batch_matmul operand i is a `memref.reshape` (used only there) of a buffer that a copy
    transposing the last two axes of a row-major source filled (and nothing else uses): (that
    source as a [batch, rows, cols] view with its last two axes transposed, the reshape, the
    buffer's alloc), with the copy and the buffer's dealloc erased; else None. The transpose so
    becomes a BLAS flag, not a copy."""
    v = bmm.operands[i]
    rs = defining_op(v)
    if getattr(rs, "name", None) != "memref.reshape" or not one_use(v):
        return None
    buf = rs.operands[0]
    filled = _filled_once(buf)
    if filled is None:
        return None
    alloc, copy, deallocs = filled
    st = ir.MemRefType(buf.type)
    r = st.rank
    body = copy.regions[0].blocks[0]
    ops = list(body.operations)
    if (r < 3 or len(copy.operands) != 2 or copy.operands[1] != buf
            or tuple(str(m) for m in copy.attributes["indexing_maps"]) != _swap_last_maps(r)
            or len(ops) != 1 or ops[0].operation.operands[0] != body.arguments[0]):
        return None
    src = copy.operands[0]
    srct = ir.MemRefType(src.type)
    if str(srct.layout) != _swap_last_maps(r)[1] or copy.block != bmm.block or rs.block != bmm.block:
        return None
    if not _untouched_between(copy, bmm):
        return None
    dyn = ir.ShapedType.get_dynamic_size()
    shape = list(srct.shape)
    lead = 1
    for d in shape[:-2]:
        lead = dyn if d == dyn or lead == dyn else lead * d
    p, q = shape[-2:]

    def ds(d):
        return "?" if d == dyn else str(d)

    elt = srct.element_type
    flat_t = ir.Type.parse(f"memref<{ds(lead)}x{ds(p)}x{ds(q)}x{elt}>")
    s0 = dyn if dyn in (p, q) else p * q
    view_t = ir.Type.parse(f"memref<{ds(lead)}x{ds(q)}x{ds(p)}x{elt}, strided<[{ds(s0)}, 1, {ds(q)}]>>")
    groups = ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(ir.IntegerType.get_signless(64), k) for k in g])
                               for g in (list(range(r - 2)), [r - 2], [r - 1])])
    with ir.InsertionPoint(bmm), bmm.location:
        flat = create("memref.collapse_shape", [flat_t], [src], reassociation=groups).result
        view = create("memref.transpose", [view_t], [flat], permutation=ir.AffineMapAttr(
            ir.Attribute.parse("affine_map<(d0, d1, d2) -> (d0, d2, d1)>"))).result
    copy.erase()
    for d in deallocs:
        d.erase()
    return view, rs, alloc


def _with_previous(block):
    """(op, the op right before it in its block or None) for every op under the block, depth first."""
    prev = None
    for op in block.operations:
        op = op.operation
        yield op, prev
        for region in op.regions:
            for b in region.blocks:
                yield from _with_previous(b)
        prev = op


def _zero_fill(op, prev):
    """`prev`, the op right before the matmul, if it is a `linalg.fill` of zeros into the matmul's
    output (the BLAS call then overwrites instead of accumulating), else None."""
    if prev is None or prev.name != "linalg.fill" or len(prev.operands) != 2 or prev.operands[1] != op.operands[2]:
        return None
    src = prev.operands[0].owner
    src = getattr(src, "operation", src)  # an OpView, an Operation or (a block argument) a Block
    if getattr(src, "name", None) != "arith.constant":
        return None
    try:
        return prev if ir.FloatAttr(src.attributes["value"]).value == 0.0 else None
    except ValueError:
        return None
