"""Large loops of independent iterations run on several threads (compiled CPU code).

Expects: a module after bufferization, its linalg ops still whole. Guarantees:
`outline_parallel_loops(module)` lowers the linalg ops to loops (MLIR's
`convert-linalg-to-parallel-loops`: an `scf.parallel` over a linalg op's
parallel axes). Each outermost `scf.parallel` whose body calls nothing and
records no failed check is moved into a function of its own,
`@__dg_par_K_loop`, which runs its first axis' iterations [lo, hi); the
values the body uses from outside travel in a context (each at its offset
in 8-byte words; a row-major memref as its aligned pointer and dynamic sizes, another
memref as its whole descriptor), which `@__dg_par_K(ctx, lo, hi)`
unpacks for it (constants, the first axis' lower bound and step among them where they are,
are made again inside; LLVM inlines the loop function there). A memref on memory the
caller allocated, which no other memref of the loop can view, also comes as its
aligned pointer, marked `noalias` for LLVM (after the lowering to LLVM:
`mark_loop_functions`), as it would know inside the caller. In the loop's
place, a call of `@__dg_par_K_launch` on the loop's operands packs the context
into the module's context global (`@dg.par_context`, as large as
the largest context: a call of a compiled program runs alone, and a
launch ends before the next begins; on the stack, it would make each
frame of a recursive function larger) and hands `@__dg_par_K` to
the runtime's thread pool (`core.abi.PARALLEL_FOR`, `runtime.threads`) with the
number of first-axis iterations and an estimate of the work: the
iterations of the loop and of the loops inside it whose bounds are known
before it starts (or bounded by such a value), times the operations of
its body (a load or store counting as several); the launch counts at run time
only the iterations of loops whose bounds are not constants. The pool decides at run
time how many threads to use; a small loop runs on the calling thread. A loop
whose bounds are constants and whose work is too small to share is left
in place. Other `scf.parallel` loops stay sequential
(`convert-scf-to-cf` lowers them). Loops that are the same once outlined
(their loop functions print alike under one name) share their three
functions: a transformer's element-wise loops repeat in every layer and in
its gradient, and LLVM's time goes mostly to optimizing and compiling loops.
"""
from __future__ import annotations

from typing import NamedTuple

from dg.core.abi import GRAIN, PARALLEL_FOR, STATE
from dg.core.mlir import (
    constant_value,
    create,
    defining_op,
    downcast,
    ir,
    operations_under,
    row_major,
    run_pipeline,
    symbols,
)

RUNTIME_DECL = f"llvm.func @{PARALLEL_FOR}(!llvm.ptr, !llvm.ptr, i64, i64)"
CONTEXT = "dg.par_context"  # the global the launches pack their contexts into
# Operations a body running on another thread must not contain: calls (into Python, into dg
# functions that check and count stack), MLIR's `memrefCopy` (a call into Python) and heap
# allocations (a failed one jumps back to the calling thread's entry: lowering.alloc_guard).
_SERIAL_OPS = {"func.call", "func.call_indirect", "llvm.call", "memref.copy", "memref.alloc", "memref.realloc"}
_VIEWS = {"memref.subview", "memref.cast", "memref.reinterpret_cast", "memref.expand_shape",
          "memref.collapse_shape", "memref.transpose", "memref.view"}
_SCALARS = {"f16", "bf16", "f32", "f64", "i1", "i8", "i16", "i32", "i64"}
# A load or store counts as this many operations in the work estimate: a loop of few arithmetic
# operations is bound by memory traffic, which costs more per element than what LLVM vectorizes.
_MEMORY_COST = 8
NOALIAS = "dg.noalias"  # a loop function's pointer arguments that alias no other (mark_loop_functions)
# The outlined functions' names begin so (a loop's three: PREFIX K, PREFIX K_loop, PREFIX K_launch);
# none of them allocates.
PREFIX = "__dg_par_"


def _descriptor(t: "ir.MemRefType") -> str:
    """The LLVM struct a ranked memref of this type becomes (finalize-memref-to-llvm)."""
    return _descriptor_of_rank(t.rank)


def _descriptor_of_rank(r: int) -> str:
    return "!llvm.struct<(ptr, ptr, i64)>" if r == 0 else \
        f"!llvm.struct<(ptr, ptr, i64, array<{r} x i64>, array<{r} x i64>)>"


def _words(t: "ir.Type") -> int:
    """The 8-byte words a value of type `t` takes as a function argument after func-to-llvm, and
    at most in the context struct: a memref's descriptor fields, else one."""
    t = downcast(t)
    return 3 + 2 * t.rank if isinstance(t, ir.MemRefType) else 1


def _field(t: "ir.Type") -> str | None:
    """The context struct's field for a value of MLIR type `t`, or None if it cannot travel."""
    t = downcast(t)
    if isinstance(t, ir.MemRefType):
        return _descriptor(t)
    if isinstance(t, ir.IndexType):
        return "i64"
    s = str(t)
    return s if s in _SCALARS else None


def _nest(loop) -> list:
    """The loop and every operation under it."""
    out = [loop]
    for region in loop.regions:
        for block in region.blocks:
            out += operations_under(block)
    return out


def _defined_inside(nest: list) -> set:
    """The values the loop's region defines (results of ops in it, block arguments)."""
    inside: set = set()
    for op in nest:
        if op != nest[0]:
            inside.update(op.results)
        for region in op.regions:
            for block in region.blocks:
                inside.update(block.arguments)
    return inside


def _parallelizable(nest: list) -> bool:
    """Whether the loop may run on other threads: it reduces nothing into results of its own,
    and calls, allocates and records nothing (_SERIAL_OPS)."""
    return not len(nest[0].results) and not any(op.name in _SERIAL_OPS or (op.name == "memref.get_global" and
                                              ir.FlatSymbolRefAttr(op.attributes["name"]).value == STATE)
                   for op in nest)


def outermost(m, name: str) -> list:
    """The `name` ops of the module's functions that no loop contains. (A parallel loop inside a
    loop would be launched on each of its iterations: a reduction along the first axis launches
    a loop over a row each time, and deciding whether to share it took as long as the row.)"""
    found = []

    def visit(block):
        for op in block.operations:
            op = op.operation
            if op.name == name:
                found.append(op)
                continue
            if op.name in ("scf.for", "scf.while", "scf.parallel"):
                continue
            for region in op.regions:
                for b in region.blocks:
                    visit(b)

    for op in m.body.operations:
        op = op.operation
        if op.name == "func.func" and len(op.regions[0].blocks):
            visit(op.regions[0].blocks[0])
    return found


def _used_from_outside(nest: list, inside: set, dims: int) -> list:
    """The values from outside the loop that it or its body uses, in order of first use (not the
    first axis' bounds: the body gets those as they are split)."""
    seen, order = set(), []
    first = {0, dims, 2 * dims}
    for op in nest:
        for i, v in enumerate(op.operands):
            if op == nest[0] and i in first:
                continue
            if v not in inside and v not in seen:
                seen.add(v)
                order.append(v)
    return order


def _is_constant(v) -> bool:
    owner = defining_op(v)
    return owner is not None and owner.name in ("arith.constant", "llvm.mlir.constant")


def _inner_bounds(nest: list, inside: set) -> list:
    """(lower, upper, step) values of the loops in the body whose bounds are set before the loop,
    or are known to be at most such values."""
    out, made = [], {}

    def bound(b, upper=False):
        """b, or a value before the loop that stands for it in the estimate: a constant made again,
        for an upper bound the operand of a min that is set before the loop; None if none."""
        if b not in inside:
            return b
        owner = defining_op(b)
        if _is_constant(b):
            if b not in made:
                made[b] = owner.clone(ip=ir.InsertionPoint(nest[0])).results[0]
            return made[b]
        if upper and owner is not None and owner.name in ("arith.minsi", "arith.minui"):
            return next((v for v in (bound(o, True) for o in owner.operands) if v is not None), None)
        return None

    for op in nest[1:]:
        if op.name == "scf.for":
            triples = [tuple(list(op.operands)[:3])]
        elif op.name == "scf.parallel":
            operands = list(op.operands)
            d = len(op.regions[0].blocks[0].arguments)
            triples = [(operands[i], operands[d + i], operands[2 * d + i]) for i in range(d)]
        else:
            continue
        for t in triples:
            t = (bound(t[0]), bound(t[1], True), bound(t[2]))
            if all(b is not None for b in t):
                out.append(t)
    return out


def _trips(lb: str, ub: str, st: str, out: str, unit: bool, from_zero: bool = False, count: bool = False) -> list:
    """IR for `out` (f64): the iterations of a loop from lb to ub by st (none when ub <= lb); no
    division for a `unit` step, no subtraction `from_zero` (lb a constant 0); with `count`, also
    `{out}_i` (i64). The float is clamped at zero, not the integer it is made from: LLVM makes a
    conversion of an integer it knows not negative unsigned, which its fast instruction selection
    (the quick level's) gives up on, and hands the rest of the caller's block (the launch is
    inlined) to the slower one; a compare and a select it takes."""
    span = ub if from_zero else f"{out}_d"
    trips = span if unit else f"{out}_c"
    return [*([] if from_zero else [f"{out}_d = arith.subi {ub}, {lb} : index"]),
            *([] if unit else [f"{out}_c = arith.ceildivsi {span}, {st} : index"]),
            f"{out}_r = arith.index_cast {trips} : index to i64",
            f"{out}_f = arith.sitofp {out}_r : i64 to f64",
            f"{out}_p = arith.cmpf ogt, {out}_f, %fzero : f64",
            f"{out} = arith.select {out}_p, {out}_f, %fzero : f64",
            *([f"{out}_i = arith.maxsi {out}_r, %zero : i64"] if count else [])]


def _known_trips(bounds: tuple) -> int | None:
    """The iterations of a loop whose bounds (lower, upper, step) are constants, else None."""
    lb, ub, st = (constant_value(b) for b in bounds)
    if None in (lb, ub, st):
        return None
    return max(0, -(-(ub - lb) // st)) if st > 0 else 0


def _root(v):
    """Where the memory a memref value views comes from: its allocation op, "argument" (a
    function's), "global", or None when not known here (a loop's or a branch's result)."""
    owner = defining_op(v)
    while owner is not None and owner.name in _VIEWS:
        v = owner.operands[0]
        owner = defining_op(v)
    if owner is None:
        block = v.owner  # v is a block's argument
        parent = getattr(block.owner, "operation", block.owner) if isinstance(block, ir.Block) else None
        return "argument" if parent is not None and parent.name == "func.func" else None
    if owner.name in ("memref.alloc", "memref.alloca"):
        return owner
    return "global" if owner.name == "memref.get_global" else None


def _is_descriptor(field: str) -> bool:
    """Whether a context field (_field) is a memref's descriptor, not a scalar."""
    return field.startswith("!llvm.struct")


def _noalias(passed: list, fields: list) -> list:
    """Which passed memrefs view memory allocated here that no other passed memref can view:
    LLVM may take those as not aliasing the others (and vectorize without checks at run time)."""
    roots = [_root(v) if _is_descriptor(f) else "scalar" for v, f in zip(passed, fields)]
    if any(r is None for r in roots):
        return [False] * len(roots)
    return [not isinstance(r, str) and sum(1 for o in roots if not isinstance(o, str) and o == r) == 1
            for r in roots]


def _loop_text(name: str, plan: "_Plan") -> str:
    """`{name}_loop`: the iterations [lo, hi) of the first axis, on the passed values, then the
    axis' lower bound, upper bound and step, then again the aligned pointer of each memref that
    aliases no other (LLVM's `noalias` marks a pointer argument only). A memref comes as its
    descriptor, as the pool's entry loaded it: as a memref, each of the descriptor's fields would
    be an argument of its own. The loop is cloned in later, before the `return`, on the casts of
    the descriptors to memrefs."""
    k = len(plan.fields)
    params = ["%lo: index", "%hi: index"]
    params += [f"%a{i}: {f if _is_descriptor(f) else t}" for i, (f, t) in enumerate(zip(plan.fields, plan.types))]
    params += ["%lb: index", "%ub: index", "%st: index"]
    free = [i for i in range(k) if plan.noalias[i]]
    params += [f"%q{i}: !llvm.ptr" for i in free]
    flat = ", ".join(str(2 + k + 3 + j) for j in range(len(free)))  # (func-to-llvm keeps one argument each)
    attrs = f" attributes {{{NOALIAS} = array<i64: {flat}>}}" if free else ""
    body = ["%x = arith.muli %lo, %st : index", "%nlb = arith.addi %lb, %x : index",
            "%y = arith.muli %hi, %st : index", "%z = arith.addi %lb, %y : index",
            "%nub = arith.minsi %z, %ub : index"]
    for i, (f, t) in enumerate(zip(plan.fields, plan.types)):
        if not _is_descriptor(f):
            continue
        d = f"%a{i}"
        if plan.noalias[i]:
            body.append(f"%e{i} = llvm.insertvalue %q{i}, %a{i}[1] : {f}")
            d = f"%e{i}"
        body.append(f"%m{i} = builtin.unrealized_conversion_cast {d} : {f} to {t}")
    return (f"func.func private @{name}_loop({', '.join(params)}){attrs} {{\n  "
            + "\n  ".join(body) + "\n  return\n}\n")


def _compact(t: "ir.Type") -> list | None:
    """For a row-major memref type (the identity layout: offset 0, strides the products of the
    sizes after), its sizes, None for a dynamic one: in a launch's context it is its aligned
    pointer and those sizes, a word each, and the pool's entry makes the rest of its descriptor
    again (the allocated pointer, which the loop does not free, as the aligned one). Else None:
    the whole descriptor travels. (A launch is inlined where it is called, and a matrix's
    descriptor was seven stores there.)"""
    t = downcast(t)
    if not isinstance(t, ir.MemRefType) or not row_major(t):
        return None
    return [None if d == ir.ShapedType.get_dynamic_size() else d for d in t.shape]


def _maker(sizes: list, packs: bool = False) -> str:
    """The name of the function that makes a row-major memref's descriptor of these sizes (None
    for a dynamic one) from its words in the context, or (`packs`) writes them (_maker_texts)."""
    return f"{PREFIX}{'pack' if packs else 'descriptor'}_" + ("_".join("d" if n is None else str(n) for n in sizes)
                                                              or "scalar")


def _maker_texts(sizes: list) -> str:
    """`_maker(sizes, packs=True)(at, descriptor)`: the words of a row-major memref of these sizes
    in a context, from `at` on: its aligned pointer, then its dynamic sizes; `_maker(sizes)(at)`:
    its descriptor from those words, the aligned pointer also the allocated one (the loop frees
    nothing), the offset 0 and the strides row-major. Two functions for each such type, which
    LLVM inlines into the launches and the pools' entries: written out in each of them, the
    words and descriptors took a fifth more of the IR that goes to LLVM for a transformer's
    gradient."""
    r = len(sizes)
    f = _descriptor_of_rank(r)
    dynamic = [j for j, n in enumerate(sizes) if n is None]
    pack = [f"%p = llvm.extractvalue %d[1] : {f}", "llvm.store %p, %at : !llvm.ptr, !llvm.ptr"]
    body = ["%p = llvm.load %at : !llvm.ptr -> !llvm.ptr", f"%u = llvm.mlir.poison : {f}",
            f"%s0 = llvm.insertvalue %p, %u[0] : {f}", f"%s1 = llvm.insertvalue %p, %s0[1] : {f}",
            "%z = llvm.mlir.constant(0 : i64) : i64", f"%s2 = llvm.insertvalue %z, %s1[2] : {f}"]
    for at, j in enumerate(dynamic, 1):
        pack += [f"%n{j} = llvm.extractvalue %d[3, {j}] : {f}",
                 f"%w{j} = llvm.getelementptr %at[{at}] : (!llvm.ptr) -> !llvm.ptr, i64",
                 f"llvm.store %n{j}, %w{j} : i64, !llvm.ptr"]
        body += [f"%w{j} = llvm.getelementptr %at[{at}] : (!llvm.ptr) -> !llvm.ptr, i64",
                 f"%n{j} = llvm.load %w{j} : !llvm.ptr -> i64"]
    for j, n in enumerate(sizes):
        if n is not None:
            body.append(f"%n{j} = llvm.mlir.constant({n} : i64) : i64")
    stride, strides, known = "%one", {}, 1  # (known: the stride while it is a constant)
    body.append("%one = llvm.mlir.constant(1 : i64) : i64")
    for j in reversed(range(r)):
        strides[j] = stride
        if known is not None and sizes[j] is not None:
            known *= sizes[j]  # (wrapped as i64 arithmetic would: the checks before the loop fail on such sizes)
            body.append(f"%t{j} = llvm.mlir.constant({(known + 2**63) % 2**64 - 2**63} : i64) : i64")
        else:
            known = None
            body.append(f"%t{j} = llvm.mul {stride}, %n{j} : i64")
        stride = f"%t{j}"
    last = "%s2"
    for j in range(r):
        body += [f"%a{j} = llvm.insertvalue %n{j}, {last}[3, {j}] : {f}",
                 f"%b{j} = llvm.insertvalue {strides[j]}, %a{j}[4, {j}] : {f}"]
        last = f"%b{j}"
    return (f"func.func private @{_maker(sizes, True)}(%at: !llvm.ptr, %d: {f}) {{\n  " + "\n  ".join(pack)
            + "\n  return\n}\n"
            f"func.func private @{_maker(sizes)}(%at: !llvm.ptr) -> {f} {{\n  " + "\n  ".join(body)
            + f"\n  return {last} : {f}\n}}\n")


def _pool_texts(name: str, plan: "_Plan") -> tuple[str, int, dict]:
    """IR of `{name}` (what the pool calls: the values from the context, then `{name}_loop`,
    which LLVM inlines into it) and `{name}_launch`, which the loop's place calls: it packs the
    context into the module's context global, estimates the work and calls the pool (which runs
    a loop too small to share on the calling thread). The first axis' lower bound and step,
    where they are constants (`plan.first`), `{name}` makes again rather than reads from the
    context. With the text, the context's size in words and the descriptor makers it calls
    (name -> sizes: _maker)."""
    fields, types, units, first = plan.fields, plan.types, plan.units, plan.first
    k = len(fields)
    inner = len(units) - 1  # units: which loops step by a constant 1 (the first axis', then the inner ones)
    fields, types = fields + ["i64"] * 3, types + ["index"] * 3
    fixed = {i: c for i, c in ((k, first[0]), (k + 2, first[1])) if c is not None}
    # Each field at its offset in 8-byte words (the addresses need no struct type, whose text,
    # spelled out in every field's address, made most of what the pass parsed): a scalar one word,
    # a row-major memref its aligned pointer and its dynamic sizes (_compact), another memref
    # its whole descriptor.
    parsed = [ir.Type.parse(t) for t in types]
    compact = [_compact(t) for t in parsed]
    widths = [0 if i in fixed else _words(t) if c is None else 1 + c.count(None)
              for i, (t, c) in enumerate(zip(parsed, compact))]
    offsets = [0]
    for w in widths:
        offsets.append(offsets[-1] + w)
    as_passed = [f if _is_descriptor(f) else t for f, t in zip(fields, types)]  # a memref as its descriptor

    unpack, values, aligned = [], [], {}
    for i, (f, t) in enumerate(zip(fields, types)):
        if i in fixed:
            unpack.append(f"%v{i} = arith.constant {fixed[i]} : index")
            values.append(f"%v{i}")
        elif compact[i] is not None:  # the aligned pointer, the dynamic sizes: _maker_texts
            unpack += [f"%pm{i} = llvm.getelementptr %ctx[{offsets[i]}] : (!llvm.ptr) -> !llvm.ptr, i64",
                       f"%m{i} = func.call @{_maker(compact[i])}(%pm{i}) : (!llvm.ptr) -> {f}"]
            if plan.noalias[i]:
                unpack.append(f"%b{i} = llvm.extractvalue %m{i}[1] : {f}")
                aligned[i] = f"%b{i}"
            values.append(f"%m{i}")
        else:
            unpack += [f"%p{i} = llvm.getelementptr %ctx[{offsets[i]}] : (!llvm.ptr) -> !llvm.ptr, i64",
                       f"%f{i} = llvm.load %p{i} : !llvm.ptr -> {f}"]
            if t == "index":
                unpack.append(f"%v{i} = arith.index_cast %f{i} : i64 to index")
            values.append(unpack[-1].split(" = ")[0])
    free = [i for i in range(k) if plan.noalias[i]]
    unpack += [f"%q{i} = llvm.extractvalue %f{i}[1] : {fields[i]}" for i in free if i not in aligned]
    signature = f"({', '.join(['index', 'index'] + as_passed + ['!llvm.ptr'] * len(free))})"
    unpack += ["%lo_i = arith.index_cast %lo : i64 to index",
               "%hi_i = arith.index_cast %hi : i64 to index",
               f"func.call @{name}_loop(%lo_i, %hi_i, {', '.join(values + [aligned.get(i, f'%q{i}') for i in free])}) : "
               f"{signature} -> ()",
               "return"]

    launch_params = [f"%a{i}: {t}" for i, t in enumerate(as_passed)] + [f"%b{i}: index" for i in range(3 * inner)]
    launch = [f"%ctx = llvm.mlir.addressof @{CONTEXT} : !llvm.ptr", "%zero = arith.constant 0 : i64",
              "%fzero = arith.constant 0.0 : f64"]
    launch += _trips(f"%a{k}", f"%a{k + 1}", f"%a{k + 2}", "%n", units[0], fixed.get(k) == 0, count=True)
    launch.append(f"%w = arith.constant {float(plan.ops):.6e} : f64")  # (an exponent, never a bare 1e+20)
    work = "%w"
    for i in range(inner):
        launch += _trips(f"%b{3 * i}", f"%b{3 * i + 1}", f"%b{3 * i + 2}", f"%t{i}", units[i + 1])
        launch.append(f"%w{i} = arith.mulf {work}, %t{i} : f64")
        work = f"%w{i}"
    for i, (f, t) in enumerate(zip(fields, types)):
        if i in fixed:
            continue
        launch.append(f"%p{i} = llvm.getelementptr %ctx[{offsets[i]}] : (!llvm.ptr) -> !llvm.ptr, i64")
        if compact[i] is not None:
            launch.append(f"func.call @{_maker(compact[i], True)}(%p{i}, %a{i}) : (!llvm.ptr, {f}) -> ()")
            continue
        v = f"%a{i}"
        if t == "index":
            launch.append(f"%d{i} = arith.index_cast %a{i} : index to i64")
            v = f"%d{i}"
        launch.append(f"llvm.store {v}, %p{i} : {f}, !llvm.ptr")
    launch += [f"%wn = arith.mulf {work}, %n : f64",
               "%cap = arith.constant 4.0e18 : f64",  # below 2**63, whatever the sizes
               "%small = arith.cmpf olt, %wn, %cap : f64",  # (a select, not minimumf: see _trips)
               "%wc = arith.select %small, %wn, %cap : f64",
               "%work = arith.fptosi %wc : f64 to i64",
               f"%fn = func.constant @{name} : (!llvm.ptr, i64, i64) -> ()",
               "%fp = builtin.unrealized_conversion_cast %fn : (!llvm.ptr, i64, i64) -> () to !llvm.ptr",
               f"llvm.call @{PARALLEL_FOR}(%fp, %ctx, %n_i, %work) : (!llvm.ptr, !llvm.ptr, i64, i64) -> ()",
               "return"]
    makers = {_maker(c): c for c in compact if c is not None}
    return (f"func.func private @{name}_loop{signature}\n"  # (declared for the text to parse: it is there)
            f"func.func private @{name}(%ctx: !llvm.ptr, %lo: i64, %hi: i64) {{\n  " + "\n  ".join(unpack) + "\n}\n"
            f"func.func private @{name}_launch({', '.join(launch_params)}) {{\n  " + "\n  ".join(launch) + "\n}\n",
            offsets[-1], makers)


class _Plan(NamedTuple):
    """What outlining one scf.parallel takes (see the module's doc)."""
    passed: list  # the values it uses from outside that travel in the context
    constants: list  # the constants it uses from outside, made again inside
    fields: list  # each passed value's field in the context (_field)
    types: list  # each passed value's type, as text
    noalias: list  # whether each passed value aliases nothing else (_noalias)
    inner: list  # the bounds of the inner loops whose iterations its launch counts at run time
    units: list  # whether the first axis steps by a constant 1, then each loop of `inner`
    first: tuple  # the first axis' lower bound and step where they are constants, else None
    ops: int  # the work estimate's constant factor


def _plan(loop, nest: list, bounds: list) -> _Plan | None:
    """The loop's _Plan, or None if a value it uses cannot travel. `nest` and `bounds` as
    shared_loops gives them; an inner loop of constant bounds is counted in the estimate's
    constant factor."""
    dims = len(loop.regions[0].blocks[0].arguments)
    outside = _used_from_outside(nest, _defined_inside(nest), dims)
    constants = [v for v in outside if _is_constant(v)]
    passed = [v for v in outside if not _is_constant(v)]
    fields = [_field(v.type) for v in passed]
    if any(f is None for f in fields):
        return None
    ops, inner = _cost(nest), []
    for t in bounds[1:]:
        trips = _known_trips(t)
        if trips is None:
            inner.append(t)
        else:
            ops *= trips
    units = [constant_value(b[2]) == 1 for b in [bounds[0]] + inner]
    first = (constant_value(bounds[0][0]), constant_value(bounds[0][2]))
    return _Plan(passed, constants, fields, [str(v.type) for v in passed], _noalias(passed, fields), inner, units,
                 first, ops)


def _clone_loop(loop, bounds: list, name: str, plan: _Plan, func, made: dict) -> str:
    """Clone one scf.parallel into its loop function `func` (parsed from _loop_text); the name of
    the functions its place is to launch. `made`: the loop functions so far, by their text under
    a common name (and what else the launch depends on); a loop the same as an earlier one (a
    layer's element-wise ops repeat in every layer and in its gradient) launches the earlier
    one's functions, and its own stays out of the module: LLVM compiles the functions once."""
    dims = len(loop.regions[0].blocks[0].arguments)
    block = func.regions[0].blocks[0]
    args = list(block.arguments)
    ops = [op.operation for op in block.operations]
    casts = iter(op.results[0] for op in ops if op.name == "builtin.unrealized_conversion_cast")
    value = {v: next(casts) if _is_descriptor(f) else a for v, f, a in zip(plan.passed, plan.fields, args[2:])}
    start = ir.InsertionPoint.at_block_begin(block)
    for c in plan.constants:
        value[c] = defining_op(c).clone(ip=start).results[0]
    clone = loop.clone(ip=ir.InsertionPoint(ops[-1]))
    for op in _nest(clone):
        for i, v in enumerate(op.operands):
            if v in value:
                op.operands[i] = value[v]
    step = bounds[0][2]  # a constant step stays one, so that LLVM can vectorize the loop
    clone.operands[0] = ops[1].results[0]  # %nlb
    clone.operands[dims] = ops[4].results[0]  # %nub
    k = len(plan.passed)
    clone.operands[2 * dims] = defining_op(step).clone(ip=start).results[0] if _is_constant(step) else args[2 + k + 2]
    key = (func.get_asm(use_local_scope=True, assume_verified=True).replace(f"@{name}_loop(", "@_(", 1),
           plan.first, tuple(plan.units), plan.ops)
    return made.setdefault(key, name)


def inlined_everywhere(name: str) -> bool:
    """Whether a function this pass makes is one that LLVM inlines wherever it is called
    (`mark_loop_functions`): a loop function, a launch, a context's packing or unpacking."""
    return name.startswith(PREFIX) and (name.endswith(("_loop", "_launch")) or
                                        name.startswith((f"{PREFIX}descriptor_", f"{PREFIX}pack_")))


def mark_loop_functions(m) -> None:
    """After lowering to LLVM: the pointer arguments `outline_parallel_loops` found not to alias
    the others get LLVM's `noalias` (MLIR's func-to-llvm drops it from a memref argument), and
    the loop functions, launches and contexts' packing and unpacking `alwaysinline`
    (`inlined_everywhere`). The pool's entry is a loop's one caller, and
    inlined there the loop keeps what `noalias` says as scoped alias metadata. A launch is one
    function in the module, shared by the loops alike (MLIR lowers it once), and inlined where it
    is called: the call passes descriptors, and LLVM's fast instruction selection gives up on a
    call of aggregates and hands the caller's blocks to the slower selection (an eighth of the
    2-layer GPT gradient's machine code time more, with the launches called)."""
    inline = ir.ArrayAttr.get([ir.StringAttr.get("alwaysinline")])
    for op in m.body.operations:
        op = op.operation
        name = ir.StringAttr(op.attributes["sym_name"]).value if op.name == "llvm.func" else ""
        if inlined_everywhere(name):
            op.attributes["passthrough"] = inline
        if op.name == "llvm.func" and NOALIAS in op.attributes:
            marked = set(ir.DenseI64ArrayAttr(op.attributes[NOALIAS]))
            n = len(op.regions[0].blocks[0].arguments)
            none, alias = ir.DictAttr.get({}), ir.DictAttr.get({"llvm.noalias": ir.UnitAttr.get()})
            op.attributes["arg_attrs"] = ir.ArrayAttr.get([alias if i in marked else none for i in range(n)])
            del op.attributes[NOALIAS]


def _cost(nest: list) -> int:
    """The operations of a loop's body, a load or store counting as _MEMORY_COST."""
    return sum(_MEMORY_COST if op.name in ("memref.load", "memref.store") else 1 for op in nest)


def shared_loops(m) -> list:
    """(loop, the operations under it, its bounds) of the loops the pool shares: the outermost
    parallel loops that may run on other threads (_parallelizable) and are not known before run
    time to be too small to share. The bounds: (lower, upper, step) of each of its axes, the first
    first, then of the loops inside it whose bounds are known before it (_inner_bounds)."""
    out = []
    for loop in outermost(m, "scf.parallel"):
        nest = _nest(loop)
        if not _parallelizable(nest):
            continue
        dims, ops = len(loop.regions[0].blocks[0].arguments), list(loop.operands)
        bounds = [(ops[i], ops[dims + i], ops[2 * dims + i]) for i in range(dims)]
        bounds += _inner_bounds(nest, _defined_inside(nest))
        trips = [_known_trips(t) for t in bounds]
        if None not in trips:  # sizes known now: a loop too small to share stays put
            work = _cost(nest)
            for n in trips:
                work *= n
            if work < 2 * GRAIN:
                continue
        out.append((loop, nest, bounds))
    return out


def outline_parallel_loops(m) -> int:
    """Lower linalg ops to loops and outline the outermost parallel ones; how many were."""
    run_pipeline(m, "builtin.module(func.func(convert-linalg-to-parallel-loops))")
    taken = symbols(m)
    planned = []
    for loop, nest, bounds in shared_loops(m):
        name = f"{PREFIX}{len(planned)}"
        while name in taken:
            name += "_"
        plan = _plan(loop, nest, bounds)
        if plan is not None:
            planned.append((loop, bounds, name, plan))
    if not planned:
        return 0
    # The loop functions, parsed at once (a parse per loop took most of the time); a loop's
    # pool entry and launch only for a loop unlike those before it.
    helper = ir.Module.parse("".join(_loop_text(name, plan) for _, _, name, plan in planned), m.context)
    made: dict = {}
    launched, distinct = [], []
    for (loop, bounds, name, plan), func in zip(planned, [op.operation for op in helper.body.operations]):
        same = _clone_loop(loop, bounds, name, plan, func, made)
        launched.append(same)
        if same == name:
            func.detach_from_parent()
            m.body.append(func)
            distinct.append((name, plan))
    texts = [_pool_texts(name, plan) for name, plan in distinct]
    array = f"!llvm.array<{max(words for _, words, _ in texts)} x i64>"  # the largest context
    context = (f"llvm.mlir.global internal @{CONTEXT}() {{addr_space = 0 : i32}} : {array} {{\n"
               f"  %0 = llvm.mlir.zero : {array}\n  llvm.return %0 : {array}\n}}\n")
    makers = {n: c for _, _, used in texts for n, c in used.items()}  # (each shape's pair once)
    pool = ir.Module.parse(RUNTIME_DECL + "\n" + context + "".join(_maker_texts(c) for c in makers.values())
                           + "".join(text for text, _, _ in texts), m.context)
    have = symbols(m)
    launches = {}
    for op in list(pool.body.operations):
        op = op.operation
        name = ir.StringAttr(op.attributes["sym_name"]).value
        if name not in have:
            op.detach_from_parent()
            m.body.append(op)
        if name.endswith("_launch"):
            launches[name] = [a.type for a in op.regions[0].blocks[0].arguments]
    # In each loop's place, a call of its launch on the loop's operands, memrefs as descriptors.
    for (loop, bounds, _, plan), same in zip(planned, launched):
        types = launches[f"{same}_launch"]
        with loop.location, ir.InsertionPoint(loop):
            operands = [v if v.type == t else create("builtin.unrealized_conversion_cast", [t], [v]).result
                        for v, t in zip(plan.passed, types)]
            create("func.call", operands=operands + list(bounds[0]) + [b for t in plan.inner for b in t],
                   callee=ir.FlatSymbolRefAttr.get(f"{same}_launch"))
        loop.erase()
    return len(planned)
