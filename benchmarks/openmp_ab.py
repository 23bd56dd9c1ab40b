"""dg's thread pool (runtime/threads.py) against MLIR's OpenMP lowering, in one process.

The OpenMP variant replaces the `outline-parallel-loops` pass: the loops the pool would share (the
outermost parallel loops that call and allocate nothing and are not known to be small) go through
MLIR's `convert-scf-to-openmp` and `convert-openmp-to-llvm`, which call the `__kmpc_*` entry points
of libiomp5 (the `intel-openmp` wheel: `pip install intel-openmp`); every other parallel loop
becomes a nest of `scf.for` first. Both variants compile the CPU benchmark's workloads, give the
same results, and are timed in turns (benchmarks/cpu.py's `medians`).

    python benchmarks/openmp_ab.py [--repeats 9]        (KMP_BLOCKTIME=0: OpenMP's workers sleep at once)
"""
import argparse
import ctypes
import os
import sys
from pathlib import Path

import numpy as np

os.environ["DG_CACHE"] = "0"  # the two variants' code must not meet in the disk cache
sys.path.insert(0, str(Path(__file__).resolve().parent))
import cpu as bench  # noqa: E402  (benchmarks/cpu.py)

import dg  # noqa: E402
from dg.core.mlir import ir, operations_under, passmanager  # noqa: E402
from dg.lowering import cpu, parallel, pipeline  # noqa: E402


def _to_fors(par) -> None:
    """An scf.parallel as a nest of scf.for (convert-scf-to-openmp would make it a parallel region)."""
    body, ops = par.regions[0].blocks[0], list(par.operands)
    n = len(body.arguments)
    ip, ivs, innermost = ir.InsertionPoint(par), [], None
    with par.location:
        for d in range(n):
            f = ir.Operation.create("scf.for", results=[], operands=[ops[d], ops[n + d], ops[2 * n + d]], regions=1, ip=ip)
            block = f.regions[0].blocks.append(ir.IndexType.get())
            ivs.append(block.arguments[0])
            innermost = ir.Operation.create("scf.yield", results=[], operands=[], ip=ir.InsertionPoint(block))
            ip = ir.InsertionPoint(innermost)
    for arg, iv in zip(body.arguments, ivs):
        arg.replace_all_uses_with(iv)
    for op in list(body.operations)[:-1]:
        op.operation.move_before(innermost)
    par.erase()


def to_openmp(m) -> None:
    passmanager.PassManager.parse("builtin.module(func.func(convert-linalg-to-parallel-loops))").run(m.operation)
    shared = [loop for loop, _, _ in parallel.shared_loops(m)]
    for op in reversed([o for o in operations_under(m.body) if o.name == "scf.parallel" and not any(o == s for s in shared)]):
        _to_fors(op)
    passmanager.PassManager.parse("builtin.module(convert-scf-to-openmp)").run(m.operation)


def use_openmp(lib: str) -> None:
    """From here on, compiles share loops through OpenMP."""
    import llvmlite.binding as llvm

    ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
    llvm.load_library_permanently(lib)
    memref = "expand-strided-metadata, lower-affine,finalize-memref-to-llvm,"
    to_llvm = cpu.TO_LLVM.replace("convert-scf-to-cf, " + memref, memref.replace(",f", ", f") + " convert-scf-to-cf,"
                                  " convert-openmp-to-llvm,")
    assert to_llvm != cpu.TO_LLVM
    pipeline.PASSES.update({"outline-parallel-loops": to_openmp, "mark-loop-functions": lambda m: None,
                            "to-llvm": pipeline._mlir(to_llvm)})  # (the JIT finds libiomp5's symbols: loaded above)


def workloads(m, rng) -> dict:
    params, x = bench.mlp_params(rng), rng.standard_normal((128, 784)).astype(np.float32)
    y, lr = rng.integers(0, 10, 128).astype(np.int64), np.float32(0.01)
    a, b = (rng.standard_normal(4 << 20).astype(np.float32) for _ in range(2))
    big = rng.standard_normal((4096, 1024)).astype(np.float32)
    xs, h0 = rng.standard_normal((50, 32, 32)).astype(np.float32), np.zeros((32, 128), np.float32)
    wx, wh = (rng.standard_normal((32, 128)) / 6).astype(np.float32), (rng.standard_normal((128, 128)) / 11).astype(np.float32)
    return {"chain": lambda: m.chain(a, b), "total": lambda: m.total(a), "colsum": lambda: m.colsum(big),
            "mlp_step": lambda: m.mlp_step(*params, x, y, lr), "rnn_grad": lambda: m.rnn_grad(xs, h0, wx, wh)}


def _flat(v) -> list:
    return [x for e in v for x in _flat(e)] if isinstance(v, tuple) else [v]


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=9)
    args = p.parse_args(argv)
    lib = next((str(f) for f in Path(sys.prefix).rglob("libiomp5.so")), None)
    if lib is None:
        sys.exit("needs libiomp5: pip install intel-openmp")
    variants = {"pool": dg.loads(bench.SRC, mode="compiled", filename="pool.dg")}
    fns = {f"pool/{k}": f for k, f in workloads(variants["pool"], np.random.default_rng(0)).items()}
    for f in fns.values():
        f()  # compiled with the pool
    use_openmp(lib)
    variants["openmp"] = dg.loads(bench.SRC, mode="compiled", filename="openmp.dg")
    for k, f in workloads(variants["openmp"], np.random.default_rng(0)).items():
        for got, want in zip(_flat(f()), _flat(fns[f"pool/{k}"]())):
            np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-4)
        fns[f"openmp/{k}"] = f
    t = bench.medians(fns, args.repeats)
    print(f"KMP_BLOCKTIME={os.environ.get('KMP_BLOCKTIME', 'default')}, {os.cpu_count()} CPUs")
    print(f"{'workload':10s} {'pool ms':>9s} {'OpenMP ms':>10s} {'OpenMP / pool':>14s}")
    rows = {}
    for k in ("chain", "total", "colsum", "mlp_step", "rnn_grad"):
        rows[k] = (t[f"pool/{k}"] * 1e3, t[f"openmp/{k}"] * 1e3)
        print(f"{k:10s} {rows[k][0]:9.3f} {rows[k][1]:10.3f} {rows[k][1] / rows[k][0]:14.2f}")
    return rows


if __name__ == "__main__":
    main()
