"""The one place dg imports MLIR's Python bindings from.

Prefers the official `mlir` package when it is installed; otherwise uses the
copy of the upstream bindings that the `torch-mlir` wheel carries.
"""
import contextlib
import sys
import types

from .config import config

try:  # pragma: no cover - depends on what is installed
    from mlir import ir, passmanager  # type: ignore
    from mlir.dialects import arith, func, irdl, scf  # type: ignore
    from mlir.dialects import gpu as gpu_dialect  # type: ignore
    from mlir.dialects import llvm as llvm_dialect  # type: ignore
    from mlir.dialects.ext import Pure  # type: ignore
    from mlir.execution_engine import ExecutionEngine  # type: ignore

    SOURCE = "mlir"
except ImportError:
    from torch_mlir import ir, passmanager  # type: ignore
    from torch_mlir.dialects import arith, func, irdl, scf  # type: ignore
    from torch_mlir.dialects import gpu as gpu_dialect  # type: ignore
    from torch_mlir.dialects import llvm as llvm_dialect  # type: ignore
    from torch_mlir.dialects.ext import Pure  # type: ignore
    from torch_mlir.execution_engine import ExecutionEngine  # type: ignore

    SOURCE = "torch_mlir"

# The bindings look for the Python module of each dialect whose ops they wrap
# (`<package>.dialects.<namespace>`) and, when there is none, try the import again for every op:
# dg's ops have no generated classes, so an empty module stands in for them (a compile made a
# hundred failed imports, 10% of its time in the passes).
_DG_OPS = f"{SOURCE}.dialects.dg"
sys.modules.setdefault(_DG_OPS, types.ModuleType(_DG_OPS))

_ADVANCE, _PRE_ORDER = ir.WalkResult.ADVANCE, ir.WalkOrder.PRE_ORDER  # (operations_under's walk)

try:
    from importlib.metadata import version as _version

    VERSION = f"{SOURCE} {_version(SOURCE.replace('_', '-'))}"
except Exception:  # pragma: no cover - a source checkout without metadata
    VERSION = SOURCE


# MLIR verifies the whole module after every pass of a pass manager unless told not to: on a
# large program that was more than half of the lowering to LLVM (the 2-layer GPT gradient:
# to-llvm 1.2 s with it, 0.5 s without). dg's pipelines run without it, and a module is verified
# once, before its translation to LLVM IR (lowering.llvm_ir);
# DG_VERIFY_PASSES=1 verifies after every pass (the test suite runs so, tests/conftest.py).
def pass_manager(pipeline: str) -> "passmanager.PassManager":
    """MLIR's pass manager for a textual pipeline, verifying after each pass only with
    DG_VERIFY_PASSES=1."""
    pm = passmanager.PassManager.parse(pipeline)
    pm.enable_verifier(config.verify_passes)
    return pm


def run_pipeline(module, pipeline: str, threads: bool = False) -> None:
    """Run a textual MLIR pipeline on a module (`pass_manager`'s); with `threads`, on MLIR's
    thread pool, the passes nested in `func.func(…)` on several functions at once (`threaded`)."""
    pm = pass_manager(pipeline)
    if not threads:
        pm.run(module.operation)
        return
    with threaded(module.context):
        pm.run(module.operation)


@contextlib.contextmanager
def threaded(context):
    """The context with MLIR's multithreading on while the block runs. It is off otherwise (the
    bindings make contexts so): with it on, every type and attribute the Python passes make
    takes a lock, and dg's own passes took up to half again as long."""
    context.enable_multithreading(True)
    try:
        yield context
    finally:
        context.enable_multithreading(False)


def attributes(op) -> dict:
    """An op's attributes: name -> attribute (the bindings iterate over names or named attributes)."""
    return {getattr(a, "name", a): op.attributes[getattr(a, "name", a)] for a in op.attributes}


def symbols(module) -> set:
    """The symbols the module's top-level operations define or declare."""
    return {ir.StringAttr(op.operation.attributes["sym_name"]).value for op in module.body.operations
            if "sym_name" in op.operation.attributes}


def append_parsed(module, text: str) -> None:
    """Parse `text` in the module's context and move its top-level operations to the end of the
    module's body, those whose symbol the module has already excepted (a text declares what it
    uses, so that it parses on its own)."""
    have = symbols(module)
    helper = ir.Module.parse(text, module.context)  # kept alive while its ops move over
    for op in list(helper.body.operations):
        attrs = op.operation.attributes
        if "sym_name" not in attrs or ir.StringAttr(attrs["sym_name"]).value not in have:
            op.operation.detach_from_parent()
            module.body.append(op)


def downcast(x):
    """An MLIR type, attribute or affine expression as its most specific Python class (the
    bindings give the general one where they cannot tell)."""
    return x.maybe_downcast() if hasattr(x, "maybe_downcast") else x


def operations_under(block) -> list:
    """Every operation under a block, depth first (an op before those in its regions), as a list
    made by MLIR's walk of each of the block's ops (a third faster than reading the blocks' lists
    from Python); the ops may be erased or moved afterwards."""
    found: list = []
    add = found.append

    def visit(op):
        add(op)
        return _ADVANCE

    for op in block.operations:
        op.operation.walk(visit, _PRE_ORDER)
    return found


def is_private(op) -> bool:
    """Whether a symbol op (a function) is private: nothing outside its module refers to it."""
    return "sym_visibility" in op.attributes and ir.StringAttr(op.attributes["sym_visibility"]).value == "private"


def function_bodies(m):
    """The entry blocks of the module's functions that have a body."""
    for op in m.body.operations:
        op = op.operation
        if op.name == "func.func" and len(op.regions[0].blocks):
            yield op.regions[0].blocks[0]


def functions(m):
    """(name, the func.func op, its entry block) of each of the module's functions with a body."""
    for body in function_bodies(m):
        op = body.owner
        op = getattr(op, "operation", op)
        yield ir.StringAttr(op.attributes["sym_name"]).value, op, body


def identity_map(rank: int) -> str:
    """The text of the identity affine map of `rank` dims: `affine_map<(d0, d1) -> (d0, d1)>`."""
    dims = ", ".join(f"d{i}" for i in range(rank))
    return f"affine_map<({dims}) -> ({dims})>"


def walk_in_scope(block, visit, scope) -> None:
    """visit(op, scope) on each op of a block, in order; where it returns false, the blocks of the
    op's regions are walked the same way with a copy of the scope: what is added to the scope in
    a nested block holds only inside it, as a value defined there dominates only there."""
    for op in list(block.operations):
        op = op.operation
        if not visit(op, scope):
            for region in op.regions:
                for b in region.blocks:
                    walk_in_scope(b, visit, scope.copy())


def one_use(value) -> bool:
    """Whether the value has exactly one use."""
    uses = iter(value.uses)
    return next(uses, None) is not None and next(uses, None) is None


def defining_op(value):
    """The op that defines `value`, or None for a block argument."""
    owner = value.owner
    owner = getattr(owner, "operation", owner)
    return owner if isinstance(owner, ir.Operation) else None


def is_function_argument(value) -> bool:
    """Whether `value` is an argument of a function's entry block (not of a loop's or a branch's
    block, and not an op's result)."""
    if defining_op(value) is not None:
        return False
    parent = value.owner.owner
    parent = getattr(parent, "operation", parent)
    return parent.name == "func.func" and value.owner == parent.regions[0].blocks[0]


def constant_value(value):
    """The integer an index or integer SSA value is an `arith.constant` of, or None."""
    op = defining_op(value)
    if op is None or op.name != "arith.constant":
        return None
    return ir.IntegerAttr(op.attributes["value"]).value


def row_major(t) -> bool:
    """Whether a ranked memref type has the identity layout (row-major, no offset)."""
    dims = ", ".join(f"d{i}" for i in range(t.rank))
    return str(t.layout) == f"affine_map<({dims}) -> ({dims})>"


def static_elements(t) -> int:
    """The product of a shaped type's static sizes (a dynamic one counts as 1)."""
    n = 1
    for d in t.shape:
        n *= d if d != ir.ShapedType.get_dynamic_size() else 1
    return n


def user(use):
    """The op a use (an operand slot) belongs to."""
    owner = use.owner
    return getattr(owner, "operation", owner)


def create(name: str, results=(), operands=(), regions: int = 0, **attributes):
    """An op built generically (no op class of the bindings needed), at the insertion point and
    location in effect: how the passes that rewrite a parsed module in place make new ops."""
    return ir.Operation.create(name, results=list(results), operands=list(operands), regions=regions,
                               attributes=attributes)


def splice_function(before, text: str, values: list) -> list:
    """The ops of `text`, a function whose arguments stand for `values` (values that dominate the
    op `before`), moved before `before`, its arguments replaced by those values: the values its
    `return` gives, now defined there. How a pass writes a piece of new IR as text (with the
    lowering's builder) where it rewrites a parsed module in place."""
    helper = ir.Module.parse(text, before.context)  # kept alive while its ops move over
    block = helper.body.operations[0].operation.regions[0].blocks[0]
    for arg, v in zip(block.arguments, values):
        arg.replace_all_uses_with(v)
    ops = [op.operation for op in block.operations]
    results = list(ops[-1].operands)
    for op in ops[:-1]:
        op.move_before(before)
    return results


def erase_unused(ops, pure=("arith.", "tensor.", "linalg.")) -> None:
    """Erase those of `ops` that give results no one reads and whose dialects' ops write no
    memory when they give results (`pure`: prefixes of op names), then likewise the ops that
    defined their operands."""
    def unused(op) -> bool:
        return len(op.results) and op.name.startswith(pure) and not any(next(iter(r.uses), None) for r in op.results)

    work = []
    for op in ops:
        if unused(op) and not any(op == w for w in work):
            work.append(op)
    while work:
        op = work.pop()
        producers = []
        for p in (defining_op(v) for v in op.operands):
            if p is not None and not any(p == q for q in producers):
                producers.append(p)
        op.erase()
        work.extend(p for p in producers if unused(p))


def get_global(symbol: str, memref) -> "ir.Value":
    """`memref.get_global @symbol` of type `memref` (a type or its text), at the insertion point
    (made directly: `create` takes the op's name as `name`)."""
    t = ir.Type.parse(memref) if isinstance(memref, str) else memref
    return ir.Operation.create("memref.get_global", results=[t],
                               attributes={"name": ir.FlatSymbolRefAttr.get(symbol)}).result


def int_constant(n: int, t=None) -> "ir.Value":
    """An `arith.constant` of the integer n (an index unless `t` is given), at the insertion point."""
    t = t or ir.IndexType.get()
    return create("arith.constant", [t], value=ir.IntegerAttr.get(t, n)).result


__all__ = ["ir", "passmanager", "irdl", "func", "scf", "arith", "llvm_dialect", "gpu_dialect", "Pure", "ExecutionEngine", "SOURCE", "VERSION", "pass_manager", "run_pipeline", "threaded",
           "append_parsed", "attributes", "symbols", "downcast", "operations_under", "function_bodies",
           "walk_in_scope", "one_use", "defining_op", "constant_value",
           "row_major", "static_elements", "user", "create", "splice_function", "erase_unused", "get_global",
           "int_constant"]
