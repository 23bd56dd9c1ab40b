"""dg passes and pipelines over textual or parsed IR (what `dg opt` runs).

A pipeline is a comma-separated list of pass names. Names registered here
are dg's own passes (Python functions over an `ir.Module`); any other name
is handed to MLIR's pass manager (`canonicalize`, `cse`, `symbol-dce`,
`inline`, ...), consecutive MLIR passes in one pass-manager run.
"""
from __future__ import annotations

from typing import Callable

from dg.dialects.dialect import shared_context
from dg.dialects.mlir import ir, passmanager
from dg.errors import DgError

PASSES: dict[str, Callable] = {}


def register_pass(name: str):
    def deco(fn):
        PASSES[name] = fn
        return fn

    return deco


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


def run_pipeline(module: "ir.Module", pipeline: str) -> "ir.Module":
    names = split_top_level(pipeline)
    pending: list[str] = []

    def flush(m):
        if not pending:
            return m
        text = f"builtin.module({','.join(pending)})"
        pending.clear()
        with m.context:
            try:
                pm = passmanager.PassManager.parse(text)
            except Exception as e:
                raise DgError(f"unknown pass in '{text}': {e}") from None
            try:
                pm.run(m.operation)
            except Exception as e:
                raise DgError(f"pass pipeline '{text}' failed: {e}") from None
        return m

    for n in names:
        base = n.split("{")[0].split("(")[0]
        if base in PASSES:
            module = flush(module)
            module = PASSES[base](module) or module
        else:
            pending.append(n)
    return flush(module)


def parse_ir(text: str, filename: str = "<ir>") -> "ir.Module":
    with shared_context():
        try:
            m = ir.Module.parse(text)
        except Exception as e:
            raise DgError(f"{filename}: cannot parse the IR: {e}") from None
        if not m.operation.verify():
            raise DgError(f"{filename}: the IR does not verify")
    return m


@register_pass("autodiff")
def _autodiff(module):
    """Define every gradient declaration (`dg.kind`) of the module (see lowering/autodiff.py)."""
    from .autodiff import run_autodiff

    return run_autodiff(module)
