"""The `dg` dialect, defined in IRDL from the op registry, and the MLIR
contexts that have it loaded.

Each registry entry becomes an `irdl.operation` with its operands (fixed or
variadic), its attributes, and its results. Ops marked pure get MLIR's
no-side-effect and speculatable interfaces so that `cse` and
`canonicalize` can remove and merge them. dg ops print in generic form.
"""
from __future__ import annotations

from dg.core.errors import DgError
from dg.core.mlir import Pure, ir, irdl

from .registry import OPS

_ATTR_CONSTRAINT = {
    "int": 'irdl.base "#builtin.integer"',
    "ints": 'irdl.base "#builtin.dense_array"',
    "float": 'irdl.base "#builtin.float"',
    "str": 'irdl.base "#builtin.string"',
    "strs": 'irdl.base "#builtin.array"',
    "bool": 'irdl.base "#builtin.integer"',
    "dtype": 'irdl.base "#builtin.type"',
    "dense": "irdl.any",
}


def irdl_text() -> str:
    lines = ["irdl.dialect @dg {"]
    for name, op in sorted(OPS.items()):
        lines.append(f"  irdl.operation @{name} {{")
        # One `irdl.any` per operand and result: a shared constraint variable
        # would force them all to the same type.
        if op.nargs is None:
            # IRDL binds a constraint variable to one type, so a variadic tail
            # holds values of one type (dg uses it for i64 sizes and indices).
            for i in range(op.nfixed):
                lines.append(f"    %a{i} = irdl.any")
            lines.append("    %va = irdl.any")
            args = "".join(f"a{i}: %a{i}, " for i in range(op.nfixed))
            lines.append(f"    irdl.operands({args}rest: variadic %va)")
        elif op.nargs:
            for i in range(op.nargs):
                lines.append(f"    %a{i} = irdl.any")
            args = ", ".join(f"a{i}: %a{i}" for i in range(op.nargs))
            lines.append(f"    irdl.operands({args})")
        if op.attrs:
            for i, (aname, kind) in enumerate(op.attrs.items()):
                lines.append(f"    %at{i} = {_ATTR_CONSTRAINT[kind]}")
            attrs = ", ".join(f'"{a}" = %at{i}' for i, a in enumerate(op.attrs))
            lines.append(f"    irdl.attributes {{{attrs}}}")
        if op.nresults is None:
            lines.append("    %vr = irdl.any")
            lines.append("    irdl.results(res: variadic %vr)")
        elif op.nresults:
            for i in range(op.nresults):
                lines.append(f"    %r{i} = irdl.any")
            res = ", ".join(f"r{i}: %r{i}" for i in range(op.nresults))
            lines.append(f"    irdl.results({res})")
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines)


_DEFINITION = None


def new_context() -> "ir.Context":
    """An MLIR context with the dg dialect (and the upstream ones) loaded."""
    global _DEFINITION
    ctx = ir.Context()
    with ctx, ir.Location.unknown():
        text = _DEFINITION or irdl_text()
        _DEFINITION = text
        irdl.load_dialects(ir.Module.parse(text))
        for name, op in OPS.items():
            if op.pure:
                Pure.attach(f"dg.{name}")
    return ctx


_SHARED = None


def shared_context() -> "ir.Context":
    """One long-lived context for the process (MLIR contexts are not cheap)."""
    global _SHARED
    if _SHARED is None:
        _SHARED = new_context()
    return _SHARED


def parse(text: str, source: str | None = None) -> "ir.Module":
    """Textual IR parsed in the shared context and verified by MLIR: IR from a user's `source`
    (a file) that does not is a DgError; IR dg made itself that does not is dg's own error."""
    with shared_context():
        try:
            m = ir.Module.parse(text)
            ok = m.operation.verify()
        except Exception as e:
            if source is None:
                raise RuntimeError(f"dg made IR that does not parse: {e}\n{text}") from e
            raise DgError(f"{source}: cannot parse the IR: {e}") from e
        if not ok:
            if source is None:
                raise RuntimeError(f"dg made IR that does not verify:\n{text}")
            raise DgError(f"{source}: the IR does not verify")
    return m


def asm(module) -> str:
    """A module's text, with locations."""
    return module.operation.get_asm(enable_debug_info=True, assume_verified=True)
