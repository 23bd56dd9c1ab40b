"""A failed allocation in compiled CPU code ends the call with a located error, not a crash.

Expects: a module lowered to the LLVM dialect (MLIR's memref lowering calls
`malloc`), with C entry points `_mlir_ciface_F`. Guarantees: `guard(module)`
numbers every `malloc` call (the number is stored before the call) and
routes it through `dg.rt_malloc`, which jumps (`longjmp`) back to the entry
guard with that number when `malloc` returns no memory for a size that is
not 0; and adds for each entry point `dg.guarded.F(argv) -> i32`,
which calls `_mlir_ciface_F` with the pointers in `argv` under `setjmp`. It
returns 0, or the number of the failed allocation site plus one; `guard`
puts the sites' `.dg` places into the module (`dg.alloc_sites`), so that the executor can raise
a `DgRuntimeError` at the line of the value that did not fit. The jump
target is one per module, saved and restored around each guarded call (a
call made from a callback inside another nests); the executor runs one call
of a program at a time. Memory the call had allocated before the failure is
not freed. Parallel loop bodies allocate nothing (`lowering.parallel`), so
the jump never leaves another thread.
"""
from __future__ import annotations

from dg.core.abi import GUARDED, LONGJMP, SETJMP
from dg.core.attrs import set_table
from dg.core.locations import loc_of, loc_row
from dg.core.mlir import append_parsed, create, defining_op, function_bodies, ir, operations_under, static_elements
from dg.dialects.helpers import MAX_ELEMENTS

from .parallel import PREFIX as PARALLEL_LOOPS

# Names with a dot, which no dg function can have.
MALLOC = "dg.rt_malloc"
_JUMP = "dg.jump_target"
_SITE = "dg.alloc_site"  # the number of the allocation being made

# dg.rt_malloc is not inlined: LLVM takes a malloc whose result is only compared with NULL (the
# checks of check_counts) as succeeding, and would drop it.
# jmp_buf is 200 bytes on x86-64 glibc and 312 on AArch64: 512 bytes, 16-aligned, hold either.
_RUNTIME = f"""
llvm.mlir.global internal @{_JUMP}() {{addr_space = 0 : i32}} : !llvm.ptr {{
  %z = llvm.mlir.zero : !llvm.ptr
  llvm.return %z : !llvm.ptr
}}
llvm.func @{SETJMP}(!llvm.ptr) -> i32 attributes {{passthrough = ["returns_twice"]}}
llvm.func @{LONGJMP}(!llvm.ptr, i32) attributes {{passthrough = ["noreturn"]}}
llvm.mlir.global internal @{_SITE}(0 : i32) {{addr_space = 0 : i32}} : i32
llvm.func internal @{MALLOC}(%n: i64) -> !llvm.ptr attributes {{passthrough = ["noinline"]}} {{
  %p = llvm.call @malloc(%n) : (i64) -> !llvm.ptr
  %z = llvm.mlir.zero : !llvm.ptr
  %none = llvm.icmp "eq" %p, %z : !llvm.ptr
  %c0 = llvm.mlir.constant(0 : i64) : i64
  %some = llvm.icmp "ne" %n, %c0 : i64
  %failed = llvm.and %none, %some : i1
  llvm.cond_br %failed, ^fail, ^ok
^ok:
  llvm.return %p : !llvm.ptr
^fail:
  %g = llvm.mlir.addressof @{_JUMP} : !llvm.ptr
  %buf = llvm.load %g : !llvm.ptr -> !llvm.ptr
  %s = llvm.mlir.addressof @{_SITE} : !llvm.ptr
  %site = llvm.load %s : !llvm.ptr -> i32
  %one = llvm.mlir.constant(1 : i32) : i32
  %code = llvm.add %site, %one : i32
  llvm.call @{LONGJMP}(%buf, %code) : (!llvm.ptr, i32) -> ()
  llvm.unreachable
}}
"""


def _guarded(name: str, nargs: int) -> str:
    loads = []
    for i in range(nargs):
        loads += [f"  %p{i} = llvm.getelementptr %argv[{i}] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr",
                  f"  %a{i} = llvm.load %p{i} : !llvm.ptr -> !llvm.ptr"]
    args = ", ".join(f"%a{i}" for i in range(nargs))
    types = ", ".join(["!llvm.ptr"] * nargs)
    return "\n".join([
        f"llvm.func @{GUARDED}{name}(%argv: !llvm.ptr) -> i32 {{",
        "  %one = llvm.mlir.constant(1 : i64) : i64",
        "  %buf = llvm.alloca %one x !llvm.array<64 x i64> {alignment = 16 : i64} : (i64) -> !llvm.ptr",
        f"  %g = llvm.mlir.addressof @{_JUMP} : !llvm.ptr",
        "  %outer = llvm.load %g : !llvm.ptr -> !llvm.ptr",
        "  llvm.store %buf, %g : !llvm.ptr, !llvm.ptr",
        f"  %r = llvm.call @{SETJMP}(%buf) : (!llvm.ptr) -> i32",
        "  %c0 = llvm.mlir.constant(0 : i32) : i32",
        '  %first = llvm.icmp "eq" %r, %c0 : i32',
        "  llvm.cond_br %first, ^call, ^out(%r : i32)",
        "^call:",
        *loads,
        f"  llvm.call @_mlir_ciface_{name}({args}) : ({types}) -> ()",
        "  llvm.br ^out(%c0 : i32)",
        "^out(%res: i32):",
        "  llvm.store %outer, %g : !llvm.ptr, !llvm.ptr",
        "  llvm.return %res : i32",
        "}"])


def check_counts(m) -> None:
    """Before the lowering to LLVM (which multiplies an allocation's sizes into a byte count that
    can wrap around and allocate too little): a `memref.alloc` whose elements may number more
    than MAX_ELEMENTS gets sizes, when they do, whose product is 2**59 elements, more bytes than
    any address space has (with no branch: selects of its sizes). Its `malloc` fails, and the
    guard reports it at the allocation's site. The allocations of a function with the same
    static part and the same size values share the test and the selected sizes (the activations
    of a model, all of batch by sequence by width; the gradients of a recursive function's
    branches), made once, where the last of the sizes is (`_after`): a test is pure. One whose
    static sizes make too many elements gets an unconditional `malloc` of 2**62 bytes in front
    of it."""
    i64 = ir.IntegerType.get_signless(64)
    dynamic = ir.ShapedType.get_dynamic_size()
    huge_ones = False
    for body in function_bodies(m):
        if ir.StringAttr(body.owner.attributes["sym_name"]).value.startswith(PARALLEL_LOOPS):  # (no allocation)
            continue
        made: dict = {}  # (static part, size values) -> the selected sizes
        for op in [op for op in operations_under(body) if op.name == "memref.alloc"]:
            t = ir.MemRefType(op.results[0].type)
            static = static_elements(t)
            sizes = list(op.operands)[:t.shape.count(dynamic)]
            if static > MAX_ELEMENTS:
                huge_ones = True
                with op.location, ir.InsertionPoint(op):
                    huge = create("llvm.mlir.constant", [i64], value=ir.IntegerAttr.get(i64, 1 << 62))
                    create("llvm.call", [ir.Type.parse("!llvm.ptr")], [huge.result],
                           callee=ir.FlatSymbolRefAttr.get("malloc"), operandSegmentSizes=ir.DenseI32ArrayAttr.get([1, 0]),
                           op_bundle_sizes=ir.DenseI32ArrayAttr.get([]))
            elif sizes and static > 0:  # (a static 0 makes no elements)
                key = (static, *sizes)
                if key not in made:
                    with op.location, _after(sizes):
                        made[key] = _capped(static, sizes)
                for k, s in enumerate(made[key]):
                    op.operands[k] = s
    if huge_ones:
        append_parsed(m, "llvm.func @malloc(i64) -> !llvm.ptr")


def _after(values) -> "ir.InsertionPoint":
    """Where every one of the values is defined, and which comes before every op that all of
    them dominate: in the innermost block that defines one (they are all defined in it or in the
    blocks around it), after the last of those it defines."""
    def place(v):
        op = defining_op(v)
        return (op.block, op) if op is not None else (v.owner, None)

    def depth(block) -> int:
        n, owner = 0, block.owner.operation
        while owner.name != "func.func":
            block, n = owner.block, n + 1
            owner = block.owner.operation
        return n

    places = [place(v) for v in values]
    block = max((b for b, _ in places), key=depth)
    ops = [op for b, op in places if b == block and op is not None]
    if not ops:
        return ir.InsertionPoint.at_block_begin(block)
    last = ops[0]
    for op in ops[1:]:
        if last.is_before_in_block(op):
            last = op
    return ir.InsertionPoint.after(last)


def _capped(static: int, sizes: list) -> list:
    """The sizes, or when the elements they make with `static` number more than MAX_ELEMENTS,
    sizes whose product with it is 2**59, at the insertion point. One size is compared as it is;
    several, their product in f64 (which does not wrap around)."""
    f64, i64, i1 = ir.F64Type.get(), ir.IntegerType.get_signless(64), ir.IntegerType.get_signless(1)
    index = ir.IndexType.get()
    if len(sizes) == 1:
        most = create("arith.constant", [index], value=ir.IntegerAttr.get(index, MAX_ELEMENTS // static)).result
        too = create("arith.cmpi", [i1], [sizes[0], most], predicate=ir.IntegerAttr.get(i64, 4)).result  # sgt
    else:
        count = None if static == 1 else create("arith.constant", [f64], value=ir.FloatAttr.get(f64, float(static))).result
        for s in sizes:
            f = create("arith.sitofp", [f64], [create("arith.index_cast", [i64], [s]).result]).result
            count = f if count is None else create("arith.mulf", [f64], [count, f]).result
        most = create("arith.constant", [f64], value=ir.FloatAttr.get(f64, float(MAX_ELEMENTS))).result
        too = create("arith.cmpf", [i1], [count, most], predicate=ir.IntegerAttr.get(i64, 2)).result  # ogt
    out = []
    for k, s in enumerate(sizes):
        c = create("arith.constant", [index], value=ir.IntegerAttr.get(index, (1 << 59) // static if k == 0 else 1))
        out.append(create("arith.select", [index], [too, c.result, s]).result)
    return out


def guard(m) -> None:
    """Guard the module's allocations and entry points (see the module's doc); the allocation
    sites' places go into the table `dg.alloc_sites`, in the order of their numbers."""
    sites: list = []
    entries = []
    i32, ptr = ir.IntegerType.get_signless(32), ir.Type.parse("!llvm.ptr")
    for op in m.body.operations:
        op = op.operation
        if op.name != "llvm.func":
            continue
        name = ir.StringAttr(op.attributes["sym_name"]).value
        if not len(op.regions[0].blocks) or name.startswith(PARALLEL_LOOPS):  # (a parallel loop allocates nothing)
            continue
        if name.startswith("_mlir_ciface_"):
            entries.append((name[len("_mlir_ciface_"):], len(op.regions[0].blocks[0].arguments)))
        for block in op.regions[0].blocks:
            for call in list(operations_under(block)):
                if call.name != "llvm.call" or "callee" not in call.attributes or \
                        ir.FlatSymbolRefAttr(call.attributes["callee"]).value != "malloc":
                    continue
                with call.location, ir.InsertionPoint(call):  # the site's number, then the call
                    site = create("llvm.mlir.constant", [i32], value=ir.IntegerAttr.get(i32, len(sites)))
                    at = create("llvm.mlir.addressof", [ptr], global_name=ir.FlatSymbolRefAttr.get(_SITE))
                    create("llvm.store", operands=[site.result, at.result])
                call.attributes["callee"] = ir.FlatSymbolRefAttr.get(MALLOC)
                sites.append(loc_row(loc_of(call.location)))
    declared = ["llvm.func @malloc(i64) -> !llvm.ptr"] + [
        f"llvm.func @_mlir_ciface_{n}({', '.join(['!llvm.ptr'] * k)})" for n, k in entries]
    append_parsed(m, "\n".join([*declared, _RUNTIME, *(_guarded(n, k) for n, k in entries)]))
    set_table(m, "dg.alloc_sites", sites)

