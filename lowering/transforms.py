"""The passes that define a module's function transformations: `autodiff` and `batch`.

Expects: a verified dg module whose transformation requests are function
declarations carrying `dg.kind`: "grad", "value_and_grad", "vjp", "jvp",
"checkpoint" (lowering/ad) or "vmap" (lowering/batching). Guarantees: each
pass gives every declaration of its kinds a body, and first every
declaration those reach (a `vmap` of a `grad`, a `grad` of a function that
calls a `vmap`), each after those it reaches; both passes write into one
`Derivatives`, so a batched function can be differentiated and a gradient
batched.
"""
from __future__ import annotations

from dg.dialects.dialect import parse

from .ad import definition_order, define, reached
from .ad.module import Derivatives, unquoted
from .ad.reverse import vjp_function
from .batching import define_vmap
from .irmodel import Func, read_module

BATCH = ("vmap",)


def _kind(mod: Derivatives, sym: str) -> str:
    return unquoted(mod.funcs[sym].attrs["dg.kind"])


def transformed(funcs: list[Func], kinds: tuple | None = None) -> Derivatives:
    """The module of `funcs` with every declaration of `kinds` (all when None) defined, and those
    they reach."""
    mod = Derivatives(funcs)
    order = definition_order(mod)
    wanted = set(order) if kinds is None else {s for s in order if _kind(mod, s) in kinds}
    for sym in list(wanted):
        wanted |= reached(mod, sym)
    for sym in order:
        if sym in wanted:
            (define_vmap if _kind(mod, sym) in BATCH else define)(mod, sym)
    return mod


def differentiate(module) -> str:
    """The module's text with every declaration defined."""
    return transformed(read_module(module)).module_text()


def gradient_module(funcs: list[Func], sym: str, mask: tuple) -> tuple[str, str]:
    """(the module's text, the name of `sym`'s VJP function with respect to `mask` in it)."""
    mod = transformed(funcs)
    name = vjp_function(mod, sym, mask)
    return mod.module_text(), name


def _declares(module, kinds: tuple | None) -> bool:
    for op in module.body.operations:
        a = op.operation.attributes
        if "dg.kind" in a and (kinds is None or unquoted(str(a["dg.kind"])) in kinds):
            return True
    return False


def run_autodiff(module):
    """The `autodiff` pass: every declaration defined (the module itself when it has none)."""
    if not _declares(module, None):
        return module
    return parse(differentiate(module))


def run_batch(module):
    """The `batch` pass: every `vmap` declaration defined, and what they reach (the module itself
    when it has none)."""
    if not _declares(module, BATCH):
        return module
    return parse(transformed(read_module(module), BATCH).module_text())
