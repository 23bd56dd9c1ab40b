"""The one ordered pipeline: every stage of dg, every pass in the order it runs.

    dg ─batch─▶ batch ─autodiff─▶ grad ─canonicalize, cse─▶ opt
                    ├─ CPU: to-linalg, convolutions-as-matmuls, tiled-max-pool-grads ─▶ linalg
                    │                      ─only-entry … bufferize─▶ bufferized
                    │                      ─link-names … to-llvm, guard-allocations─▶ llvm
                    └─ GPU: to-linalg{target=cuda}, tiled-max-pool-grads, only-entry … bufferize,
                              split-leading-reductions, cublas-matmuls, gpu-matmuls, to-parallel-loops,
                              flatten-parallel-loops, to-kernels
                                                   ─▶ gpu ─(NVVM, llvmlite)─▶ ptx
                                                          └─ wait-for-kernels, launches-to-calls …
                                                             to-llvm, cuda-runtime─▶ cuda (host)

A stage is a point of the pipeline whose IR `.ir(stage)` and `dg ir --stage` show: its parent
stage's IR after its passes (`STAGES`). The executors run the same list: the interpreter the
`grad` stage, the CPU executor up to `llvm` (then LLVM's code generation), the CUDA executor
PTX from `gpu` and its host code from `cuda`.
Every pass is named once, in `PASSES`, and `dg opt --passes NAME,…` runs any of them on textual
IR, MLIR's own passes (`canonicalize`, `cse`, …) by their names; a pass takes a parsed module
(and the options its name carries, `only-entry{entry=f}`) and gives the module back, changed in
place or new. Tables the executor needs besides the code (the run-time checks' messages and
places, the host calls, the allocation sites) travel in the module as `dg.*` attributes.
"""
from __future__ import annotations

import contextlib
import inspect
import time

from dg.core.errors import DgError
from dg.core.mlir import ir, is_private, pass_manager, run_pipeline
from dg.dialects import verify
from dg.dialects.dialect import asm, parse

from . import (
    alloc_guard,
    blas,
    call_copies,
    collectives,
    convolutions,
    copies,
    cpu,
    cuda_host,
    deallocs,
    fills,
    fold_sizes,
    fusion_bound,
    gemm_updates,
    gpu,
    gpu_loops,
    gpu_matmul,
    in_place,
    inlining,
    instrument,
    parallel,
    pool_grads,
    reductions,
    repeats,
    reshapes,
    stand_ins,
    stoppable,
    sums,
    to_linalg,
    transforms,
)
from .inlining import MAX_ANALYZED_NESTING, SIMPLIFY, scf_nesting  # (inline-and-simplify's; bufferization's depth)

FUSE = "builtin.module(func.func(linalg-fuse-elementwise-ops))"
BUFFERIZE = (
    "builtin.module("
    "one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map "
    "unknown-type-conversion=identity-layout-map "
    "buffer-alignment=0 allow-return-allocs-from-loops})"
)
# Deeper than MAX_ANALYZED_NESTING (see inlining), writes copy their buffer first: no analysis.
BUFFERIZE_DEEP = BUFFERIZE.replace("allow-return-allocs-from-loops}", "allow-return-allocs-from-loops copy-before-write}")
# MLIR's buffer-deallocation-pipeline, in two: deallocs.split_deallocs between.
OWNERSHIP = ("builtin.module(expand-realloc{emit-deallocs=false}, canonicalize, ownership-based-buffer-deallocation{private-function-dynamic-ownership=true},"
             "canonicalize)")
DEALLOCATE = ("builtin.module(buffer-deallocation-simplification, bufferization-lower-deallocations, cse, canonicalize,"
              "convert-bufferization-to-memref)")


def _bufferize(m):
    """Sums of zeros dropped and matrix products added to a value accumulated into it
    (sums.simplify_sums); MLIR's fusion of element-wise ops (FUSE), the stand-ins of failed checks made views
    (stand_ins.stand_ins_as_views); MLIR's BUFFERIZE, or BUFFERIZE_DEEP where scf ops nest
    deeper than MAX_ANALYZED_NESTING, the tensors that callable functions take read-only
    (_arguments_read_only); element-wise ops written over the inputs that die there
    (in_place.outputs_in_place); the copies made only for calls that do not write them dropped
    (call_copies.drop_call_copies); then the deallocations (OWNERSHIP), those that dg knows apart
    split (deallocs.split_deallocs), and simplified (DEALLOCATE)."""
    sums.simplify_sums(m)
    run_pipeline(m, FUSE)
    stand_ins.stand_ins_as_views(m)
    _arguments_read_only(m)
    deep = scf_nesting(m.body) > MAX_ANALYZED_NESTING
    run_pipeline(m, BUFFERIZE_DEEP if deep else BUFFERIZE)
    in_place.outputs_in_place(m)
    call_copies.drop_call_copies(m)
    run_pipeline(m, OWNERSHIP)
    deallocs.split_deallocs(m)
    run_pipeline(m, DEALLOCATE)


def _arguments_read_only(m) -> None:
    """The arguments of the functions that callers outside the module call (those not private)
    are `bufferization.writable = false`: they are the caller's arrays, which an op that writes
    in place (an element stored, `y[i] = s`) must copy first. (A private function's arguments are
    the module's own buffers: bufferization knows where they are written, and copies at its
    callers where they must not be.)"""
    with m.context:
        read_only = ir.BoolAttr.get(False)
        for op in m.body.operations:
            op = op.operation
            if op.name != "func.func" or not op.regions[0].blocks or is_private(op):
                continue
            n = len(op.regions[0].blocks[0].arguments)
            given = [ir.DictAttr(d) for d in op.attributes["arg_attrs"]] if "arg_attrs" in op.attributes else [[]] * n
            op.attributes["arg_attrs"] = ir.ArrayAttr.get(
                [ir.DictAttr.get({**{a.name: a.attr for a in d}, "bufferization.writable": read_only}) for d in given])


def _mlir(pipeline: str, threads: bool = False):
    def run(m):
        run_pipeline(m, pipeline, threads)
    run.__doc__ = f"MLIR's `{pipeline}`" + (", on several threads." if threads else ".")
    return run


def _share_argument_dims(m):
    """fold_sizes.share_argument_dims, then inline-and-simplify again where it shared any."""
    if fold_sizes.share_argument_dims(m):
        run_pipeline(m, SIMPLIFY)


# Every dg pass, in pipeline order: name -> function(module, **options) -> module or None (in place).
PASSES = {
    "verify": verify.verify_module,
    "batch": transforms.run_batch,
    "autodiff": transforms.run_autodiff,
    "to-linalg": to_linalg.run,
    # The strategies of ops whose plain form to-linalg marks (the CPU's; the GPU's stage runs the
    # second too)
    "convolutions-as-matmuls": convolutions.convolutions_as_matmuls,
    "tiled-max-pool-grads": pool_grads.tiled_max_pool_grads,
    "only-entry": cpu.only_entry,
    "inline-and-simplify": inlining.inline_and_simplify,
    "share-argument-dims": _share_argument_dims,
    "fold-full-slices": fold_sizes.fold_full_slices,
    "merge-repeats": repeats.merge_repeats,
    "bound-fusion": fusion_bound.bound_fusion,
    "bufferize": _bufferize,
    # CPU
    "stoppable-loops": stoppable.stoppable_loops,
    "mpi-collectives": collectives.mpi_collectives,
    "check-numerics": instrument.check_numerics,  # (applied by the runtime when asked, not by a stage)
    "shadow-taps": instrument.shadow_taps,  # (likewise, for shadow mode)
    "link-names": cpu.link_names,
    "define-runtime-functions": cpu.define_runtime_functions,
    "blas-matmuls": blas.route_matmuls,
    "fuse-gemm-updates": gemm_updates.fuse_gemm_updates,
    "reshapes-as-views": reshapes.reshapes_as_views,
    "strided-copies-as-loops": copies.strided_copies_as_loops,
    "reassociate-reductions": reductions.reassociate,
    "split-leading-reductions": reductions.split_leading_reductions,
    "zero-fills-as-memset": fills.zero_fills_as_memset,
    "outline-parallel-loops": parallel.outline_parallel_loops,
    "internal-linkage": cpu.internal_linkage,
    "check-allocation-sizes": alloc_guard.check_counts,
    "host-data-layout": cpu.host_data_layout,
    "to-llvm": cpu.to_llvm,
    "mark-loop-functions": parallel.mark_loop_functions,
    "volatile-stop-flag": stoppable.volatile_stop_flag,
    "guard-allocations": alloc_guard.guard,
    "function-attributes": cpu.function_attributes,
    # GPU
    "cublas-matmuls": gpu_matmul.route_to_cublas,
    "gpu-matmuls": gpu_matmul.route_matmuls,
    "to-parallel-loops": _mlir(gpu.TO_PARALLEL_LOOPS),
    "flatten-parallel-loops": gpu_loops.flatten_parallel_loops,
    "to-kernels": _mlir(gpu.TO_KERNELS),
    # CUDA host code (from the `gpu` stage, once its kernels are PTX)
    "wait-for-kernels": cuda_host.wait_for_kernels,
    "launches-to-calls": cuda_host.launches_to_calls,
    "cuda-runtime": cuda_host.cuda_runtime,
}

# From a target's linalg-level IR to buffers: what the CPU and the GPU share.
BUFFERIZED = ["only-entry", "inline-and-simplify", "share-argument-dims", "fold-full-slices", "merge-repeats", "bound-fusion", "bufferize"]

# stage -> (the stage it starts from, its passes)
STAGES = {
    "dg": (None, ["verify"]),
    "batch": ("dg", ["batch"]),
    "grad": ("batch", ["autodiff"]),
    "opt": ("grad", ["canonicalize", "cse"]),
    "linalg": ("grad", ["to-linalg", "convolutions-as-matmuls", "tiled-max-pool-grads"]),
    "bufferized": ("linalg", BUFFERIZED),
    "llvm": ("bufferized", ["stoppable-loops", "mpi-collectives", "link-names", "define-runtime-functions", "blas-matmuls", "fuse-gemm-updates",
                            "reshapes-as-views", "strided-copies-as-loops", "reassociate-reductions", "split-leading-reductions",
                            "zero-fills-as-memset", "outline-parallel-loops", "internal-linkage", "check-allocation-sizes",
                            "host-data-layout", "to-llvm", "mark-loop-functions", "volatile-stop-flag", "guard-allocations",
                            "function-attributes"]),
    # (Reductions along leading axes in parts, one thread's each: a float32 sum of millions of
    # elements would round as one running sum on the host.)
    "gpu": ("grad", ["to-linalg{target=cuda}", "tiled-max-pool-grads", *BUFFERIZED, f"split-leading-reductions{{chunks={gpu.REDUCTION_PARTS}}}",
                     "cublas-matmuls", "gpu-matmuls", "to-parallel-loops", "flatten-parallel-loops",
                     "to-kernels"]),
    # The host side of the `gpu` stage for the CUDA executor: launches through the driver, then
    # the CPU's lowering of what stays on the host.
    "cuda": ("gpu", ["wait-for-kernels", "launches-to-calls", "stoppable-loops", "link-names",
                     "define-runtime-functions", "strided-copies-as-loops", "internal-linkage",
                     "check-allocation-sizes", "host-data-layout", "to-llvm", "guard-allocations",
                     "cuda-runtime", "function-attributes"]),
}
SHOWN = ("dg", "batch", "grad", "opt", "linalg", "bufferized", "llvm", "gpu", "ptx")  # what .ir() can show


def passes_to(stage: str) -> list[str]:
    """The passes from the first stage to `stage`, in order."""
    parent, passes = STAGES[stage]
    return (passes_to(parent) if parent else []) + passes


def identity(target: str = "cpu") -> str:
    """What compiled code depends on besides its IR and dg's sources: the passes and their
    MLIR pipelines, the BLAS found (part of the disk cache's key); for "cuda", the GPU's too."""
    common = [SIMPLIFY, f"inline-limit={inlining.INLINE_LIMIT}", FUSE, BUFFERIZE, BUFFERIZE_DEEP, OWNERSHIP, DEALLOCATE, cpu.TO_LLVM_FLOATS, cpu.TO_LLVM, cpu.FUNCTION_ATTRIBUTES]
    if target == "cuda":
        return "\0".join(passes_to("cuda") + common + [gpu.TO_PARALLEL_LOOPS, gpu.TO_KERNELS, gpu.KERNELS_TO_NVVM])
    return "\0".join(passes_to("llvm") + common + [blas.identity()])


def split_top_level(text: str) -> list[str]:
    """Split at commas that are not inside (), [] or {}."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        depth += ch in "([{"
        depth -= ch in ")]}"
        cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def _options(spec: str) -> tuple[str, dict]:
    """`name{key=value key2=value2}` -> (name, {key: value})."""
    name, _, rest = spec.partition("{")
    options = dict(o.split("=", 1) for o in rest.rstrip("}").split() if "=" in o)
    return name.strip(), options


_TIMERS: list = []  # the dicts pass_times() gives out, open now


@contextlib.contextmanager
def pass_times():
    """A dict that collects, while the block runs, the seconds each pass takes (name -> seconds,
    added up over the modules compiled; a run of MLIR's own passes under their names joined by
    commas), those the translation to LLVM IR text takes ("LLVM IR") and those LLVM's code
    generation takes ("LLVM"): benchmarks/compile.py reads it."""
    times: dict = {}
    _TIMERS.append(times)
    try:
        yield times
    finally:
        _TIMERS.remove(times)


def note_time(name: str, seconds: float) -> None:
    for times in _TIMERS:
        times[name] = times.get(name, 0.0) + seconds


def run_passes(module: "ir.Module", names, **options) -> "ir.Module":
    """Run dg's passes and MLIR's (consecutive MLIR passes in one pass manager) on a module, the
    passes a list of names or one comma-separated text; `options` (those not None) go to the dg
    passes that take them (`entry` to only-entry, `source` to verify)."""
    if isinstance(names, str):
        names = split_top_level(names)
    pending: list[str] = []

    def flush(m):
        if pending:
            text = f"builtin.module({','.join(pending)})"
            pending.clear()
            with m.context:
                try:
                    pm = pass_manager(text)
                except Exception as e:
                    raise DgError(f"unknown pass in '{text}': {e}") from e
                t0 = time.perf_counter()
                try:
                    pm.run(m.operation)
                except Exception as e:
                    raise RuntimeError(f"the pass pipeline '{text}' failed: {e}") from e
                note_time(text[len("builtin.module("):-1], time.perf_counter() - t0)
        return m

    for spec in names:
        name, given = _options(spec)
        fn = PASSES.get(name)
        if fn is None:
            pending.append(spec)
            continue
        module = flush(module)
        takes = inspect.signature(fn).parameters
        wanted = dict(given, **{k: v for k, v in options.items() if v is not None and k in takes})
        t0 = time.perf_counter()
        with module.context:
            try:
                out = fn(module, **wanted)
            except DgError:
                raise
            except Exception as e:
                raise RuntimeError(f"the pass '{name}' failed: {e}") from e
        note_time(name, time.perf_counter() - t0)
        if isinstance(out, ir.Module):
            module = out
    return flush(module)


# The passes that leave the module they are given as it is (they make a new one).
NEW_MODULE = ("autodiff", "to-linalg")


def run_stage(module: "ir.Module", stage: str, start: str | None = "dg", **options) -> "ir.Module":
    """The module at `stage`, from `module` at `start` (a stage on the way to it, None for the
    emitted IR), which stays as it is."""
    names = passes_to(stage)
    done = passes_to(start) if start else []
    if names[:len(done)] != done:
        raise ValueError(f"stage '{start}' does not lead to '{stage}'")
    names = names[len(done):]
    if start and names and _options(names[0])[0] not in NEW_MODULE:
        module = parse(asm(module))
    return run_passes(module, names, **options)
