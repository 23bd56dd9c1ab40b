"""Matmul on the GPU: a kernel that tiles through shared memory, not a triple loop.

Expects: a bufferized module on its way to the GPU (`lowering/gpu.py`).
Guarantees: `route_matmuls(module)` replaces each f32/f64 `linalg.matmul`
with a call to a helper (written here in MLIR) whose `gpu.launch` computes
C (+)= A @ B for operands of any strides:
- a block of 16 x 16 threads computes a 64 x 64 tile of C, each thread a
  4 x 4 micro-tile of rows `ty + 16 i` and columns `tx + 16 j`;
- the K dimension goes in steps of 16: the block stages a 64 x 16 tile of A
  and a 16 x 64 tile of B in workgroup (shared) memory, consecutive threads
  reading consecutive columns (coalesced when the operand is row-major),
  synchronizes (`gpu.barrier`), and accumulates from shared memory;
- edges are guarded: loads are clamped into range and zeroed, stores
  skipped; an empty product launches nothing.
Transposed operands are passed as views (the copy that bufferization made
is dropped, as for BLAS on the CPU), and a zero fill right before the
matmul is folded into the kernel, which then stores instead of adding.

Before it, `route_to_cublas(module)` (the `cublas-matmuls` pass) makes each
product a call of lowering.blas's helper on cuBLAS (row-major operands read
as cuBLAS's column-major transposes, through the CUDA executor's table,
`lowering.cuda_host`); the helper's fallback, for a table without cuBLAS or
a layout cuBLAS cannot take, is the `linalg.matmul` that `route_matmuls`
then makes the tiled kernel.
"""
from __future__ import annotations

from . import blas, cuda_host
from .blas import _ELTS, _memref, replace_matmuls

TILE = 64  # rows and columns of C per block
KT = 16  # the K step
THREADS = 16  # threads per block along x and along y
MICRO = TILE // THREADS  # outputs per thread along each axis


def helper_name(elt: str, overwrite: bool) -> str:
    return f"dg_gpu_matmul_{elt}" + ("_new" if overwrite else "")


def helper_text(elt: str, overwrite: bool) -> str:
    m = _memref(elt)
    ws = "#gpu.address_space<workgroup>"
    idx = range(MICRO)
    acc = [f"%s{i}{j}" for i in idx for j in idx]
    L = [
        "%c0 = arith.constant 0 : index",
        "%c1 = arith.constant 1 : index",
        f"%cT = arith.constant {THREADS} : index",
        f"%cTile = arith.constant {TILE} : index",
        f"%cK = arith.constant {KT} : index",
        f"%zero = arith.constant 0.0 : {elt}",
        f"%m = memref.dim %a, %c0 : {m}",
        f"%k = memref.dim %a, %c1 : {m}",
        f"%n = memref.dim %b, %c1 : {m}",
        "%mp = arith.cmpi sgt, %m, %c0 : index",
        "%np = arith.cmpi sgt, %n, %c0 : index",
        "%go = arith.andi %mp, %np : i1",
        "scf.if %go {",
        "%gx = arith.ceildivsi %n, %cTile : index",
        "%gy = arith.ceildivsi %m, %cTile : index",
        "%kt = arith.ceildivsi %k, %cK : index",
        "%m1 = arith.subi %m, %c1 : index",
        "%n1 = arith.subi %n, %c1 : index",
        "%k1 = arith.subi %k, %c1 : index",
        "gpu.launch blocks(%bx, %by, %bz) in (%sgx = %gx, %sgy = %gy, %sgz = %c1) "
        "threads(%tx, %ty, %tz) in (%stx = %cT, %sty = %cT, %stz = %c1) "
        f"workgroup(%as : memref<{TILE}x{KT}x{elt}, {ws}>, %bs : memref<{KT}x{TILE}x{elt}, {ws}>) {{",
        "%row0 = arith.muli %by, %cTile : index",
        "%col0 = arith.muli %bx, %cTile : index",
    ]
    for q in idx:  # this thread's rows (ty + 16 q) and columns (tx + 16 q) within the tile
        L += [f"%o{q} = arith.constant {THREADS * q} : index",
              f"%lr{q} = arith.addi %ty, %o{q} : index", f"%lc{q} = arith.addi %tx, %o{q} : index",
              f"%gr{q} = arith.addi %row0, %lr{q} : index", f"%gc{q} = arith.addi %col0, %lc{q} : index",
              f"%rin{q} = arith.cmpi slt, %gr{q}, %m : index", f"%cin{q} = arith.cmpi slt, %gc{q}, %n : index",
              f"%grc{q} = arith.minsi %gr{q}, %m1 : index", f"%gcc{q} = arith.minsi %gc{q}, %n1 : index"]
    ty = ", ".join([elt] * len(acc))
    L += [f"%acc:{len(acc)} = scf.for %t = %c0 to %kt step %c1 iter_args("
          + ", ".join(f"{a} = %zero" for a in acc) + f") -> ({ty}) {{",
          "%k0 = arith.muli %t, %cK : index",
          "%ka = arith.addi %k0, %tx : index", "%kain = arith.cmpi slt, %ka, %k : index",
          "%kac = arith.minsi %ka, %k1 : index",
          "%kb = arith.addi %k0, %ty : index", "%kbin = arith.cmpi slt, %kb, %k : index",
          "%kbc = arith.minsi %kb, %k1 : index"]
    for q in idx:  # stage the tiles: as[ty + 16q][tx] = A[.., k0 + tx], bs[ty][tx + 16q] = B[k0 + ty, ..]
        L += [f"%va{q} = memref.load %a[%grc{q}, %kac] : {m}",
              f"%oka{q} = arith.andi %rin{q}, %kain : i1",
              f"%wa{q} = arith.select %oka{q}, %va{q}, %zero : {elt}",
              f"memref.store %wa{q}, %as[%lr{q}, %tx] : memref<{TILE}x{KT}x{elt}, {ws}>",
              f"%vb{q} = memref.load %b[%kbc, %gcc{q}] : {m}",
              f"%okb{q} = arith.andi %kbin, %cin{q} : i1",
              f"%wb{q} = arith.select %okb{q}, %vb{q}, %zero : {elt}",
              f"memref.store %wb{q}, %bs[%ty, %lc{q}] : memref<{KT}x{TILE}x{elt}, {ws}>"]
    inner = [f"%u{i}{j}" for i in idx for j in idx]
    L += ["gpu.barrier",
          f"%in:{len(acc)} = scf.for %kk = %c0 to %cK step %c1 iter_args("
          + ", ".join(f"{u} = {a}" for u, a in zip(inner, acc)) + f") -> ({ty}) {{"]
    for i in idx:
        L.append(f"%x{i} = memref.load %as[%lr{i}, %kk] : memref<{TILE}x{KT}x{elt}, {ws}>")
    for j in idx:
        L.append(f"%y{j} = memref.load %bs[%kk, %lc{j}] : memref<{KT}x{TILE}x{elt}, {ws}>")
    for i in idx:
        for j in idx:
            L.append(f"%v{i}{j} = math.fma %x{i}, %y{j}, %u{i}{j} : {elt}")
    L += ["scf.yield " + ", ".join(f"%v{i}{j}" for i in idx for j in idx) + f" : {ty}", "}",
          "gpu.barrier",
          "scf.yield " + ", ".join(f"%in#{e}" for e in range(len(acc))) + f" : {ty}", "}"]
    for i in idx:
        for j in idx:
            e = i * MICRO + j
            L += [f"%ok{i}{j} = arith.andi %rin{i}, %cin{j} : i1", f"scf.if %ok{i}{j} {{"]
            if overwrite:
                L.append(f"memref.store %acc#{e}, %c[%gr{i}, %gc{j}] : {m}")
            else:
                L += [f"%old{i}{j} = memref.load %c[%gr{i}, %gc{j}] : {m}",
                      f"%sum{i}{j} = arith.addf %old{i}{j}, %acc#{e} : {elt}",
                      f"memref.store %sum{i}{j}, %c[%gr{i}, %gc{j}] : {m}"]
            L.append("}")
    L += ["gpu.terminator", "}", "}", "return"]
    body = "\n  ".join(L)
    return f"func.func private @{helper_name(elt, overwrite)}(%a: {m}, %b: {m}, %c: {m}) {{\n  {body}\n}}\n"


def route_matmuls(module) -> int:
    """Replace the f32/f64 `linalg.matmul`s of a bufferized module by the tiled kernel; how many."""
    return replace_matmuls(module, {(elt, o): (helper_name(elt, o), helper_text(elt, o), "")
                                    for elt in _ELTS for o in (False, True)})


def cublas_helper_name(elt: str, overwrite: bool) -> str:
    return f"dg_cublas_gemm_{elt}" + ("_new" if overwrite else "")


def cublas_helper_text(elt: str, overwrite: bool) -> tuple[str, str]:
    """(`@dg_cublas_gemm_<elt>(A, B, C)`, its declarations): lowering.blas's helper (the operands'
    layouts read at run time, transposed operands as views, sizes that fit 32 bits) calling
    cuBLAS through the executor's table (`lowering.cuda_host.GEMM`), when the table has it; else,
    and for layouts cuBLAS cannot take, the `linalg.matmul` that `route_matmuls` then makes the
    tiled kernel."""
    t = _ELTS[elt]
    fn, decl = blas.helper_text(elt, "i32", overwrite)
    fn = fn.replace(f"@{blas.helper_name(elt, overwrite)}(", f"@{cublas_helper_name(elt, overwrite)}(")
    fn = fn.replace(f"@dg_blas_{t}gemm(", f"@{cuda_host.GEMM}{t}(")
    decl = decl.replace(f"@dg_blas_{t}gemm(", f"@{cuda_host.GEMM}{t}(")
    slot = cuda_host.SGEMM if t == "s" else cuda_host.DGEMM
    have = "\n  ".join([
        f"%tbl = memref.get_global @{cuda_host.TABLE} : {cuda_host.TABLE_TYPE}",
        f"%slot = arith.constant {slot} : index",
        f"%fp = memref.load %tbl[%slot] : {cuda_host.TABLE_TYPE}",
        "%nofp = arith.constant 0 : i64",
        "%have = arith.cmpi ne, %fp, %nofp : i64",
        "%use = arith.andi %blas, %have : i1",
        "scf.if %use {"])
    assert "scf.if %blas {" in fn
    fn = fn.replace("scf.if %blas {", have, 1)
    table = f"memref.global @{cuda_host.TABLE} : {cuda_host.TABLE_TYPE} = dense<0>\n"
    return fn, table + decl


def route_to_cublas(module) -> int:
    """Replace the f32/f64 `linalg.matmul`s (and batched ones) of a bufferized module by calls to
    the cuBLAS helper; how many."""
    texts = {}
    for elt in _ELTS:
        for overwrite in (False, True):
            fn, decl = cublas_helper_text(elt, overwrite)
            texts[elt, overwrite] = (cublas_helper_name(elt, overwrite), fn, decl)
    return replace_matmuls(module, texts)
