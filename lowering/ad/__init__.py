"""Autodiff: a pass on dg IR (`dg opt --passes autodiff`).

Expects: a verified dg module in which gradient requests are function
declarations carrying `dg.kind` ("grad", "value_and_grad", "vjp", "jvp" or
"checkpoint", which carries `dg.slots` too), `dg.of` (the function
differentiated) and `dg.wrt` (argument indices); the emitter makes these for
`grad(f)(...)` and friends, and calls them with `func.call`. Guarantees:
every such declaration gets a body, and the module comes back as dg IR
(text) that both the interpreter and the compiled backends run; no other
function changes.

The pass is functions over explicit objects, in rooms of their own:
- activity.py: which values get adjoints or tangents, which loop slots need
  no tape;
- module.py: the module being written (`Derivatives`): derived functions'
  names and texts, copying ops;
- sweep.py: the state of one derived function being written (`Sweep`), and
  what every sweep writes with (tapes, index arithmetic, adjoint sums);
- reverse.py: VJP functions (a forward sweep that tapes, a reverse sweep
  that calls each op's `vjp` facet);
- forward.py: JVP functions (one sweep calling each op's `jvp` facet);
- checkpoint.py: loops that keep a bounded number of snapshots
  (`checkpoint(f, slots=c)`).
The rules the ops give (their `vjp` and `jvp` facets) write with
dialects/rules.py's `RuleBuilder` and see an `OpView`.

A declaration is defined once the declarations it reaches are (its `dg.of`,
and every declaration a function it reaches calls), so that a gradient
differentiated again (`grad` of `grad`, `jvp` of `grad`) is read back with
its body first. A gradient that reaches itself is an error.
"""
from __future__ import annotations

from dg.core.errors import DgError, DgTypeError
from dg.core.locations import loc_of
from dg.core.writer import Value

from ..irmodel import Func
from .activity import is_float
from .forward import jvp_function
from .module import Derivatives, ints, unquoted
from .reverse import vjp_function


def _of(f: Func) -> str:
    return unquoted(f.attrs["dg.of"]).lstrip("@")


def reached(mod: Derivatives, sym: str) -> set:
    """Every declaration that defining `sym` needs defined first, however far."""
    out, todo = set(), [sym]
    while todo:
        for d in _reached(mod, todo.pop()):
            if d not in out:
                out.add(d)
                todo.append(d)
    return out


def _reached(mod: Derivatives, sym: str) -> list:
    """The gradient declarations that differentiating declaration `sym` reaches: its target, and
    through the calls of every function reached (a declaration's target in turn)."""
    seen, stack, found = set(), [_of(mod.funcs[sym])], []
    while stack:
        s = stack.pop()
        if s in seen or s not in mod.funcs:
            continue
        seen.add(s)
        f = mod.funcs[s]
        if f.body is None and "dg.kind" in f.attrs:
            found.append(s)
        stack.extend(mod.callees(s))  # (a declaration's: its target)
    return found


def definition_order(mod: Derivatives) -> list:
    """The declarations, each after those it reaches (a checkpoint declaration reaches none:
    its body only calls its function)."""
    done, visiting, order = set(), [], []

    def visit(sym: str) -> None:
        if sym in done:
            return
        if sym in visiting:
            f = mod.funcs[sym]
            cycle = " -> ".join(visiting[visiting.index(sym):] + [sym])
            raise DgError(f"a gradient cannot differentiate itself: {cycle}", loc_of(f.location))
        visiting.append(sym)
        if unquoted(mod.funcs[sym].attrs["dg.kind"]) != "checkpoint":
            for d in _reached(mod, sym):
                visit(d)
        visiting.pop()
        done.add(sym)
        order.append(sym)

    for sym in mod.declarations():
        visit(sym)
    return order


def define(mod: Derivatives, sym: str) -> None:
    """Give a gradient declaration its body: a call of the function derived from its target."""
    f = mod.funcs[sym]
    kind, of, wrt = unquoted(f.attrs["dg.kind"]), _of(f), ints(f.attrs["dg.wrt"])
    target = mod.funcs.get(of)
    if target is None:
        raise DgError(f"{sym}: the function '{of}' to differentiate is not in the module")
    w, _, args = mod.start(f)
    w.loc = f.loc
    if kind == "checkpoint":  # outside gradients, the function itself
        w.op("func.return", w.op("func.call", args, list(target.result_types), {"callee": f"@{of}"}), [])
        mod.write(sym, args, f.result_types, f.loc, w)
        return
    n = len(target.args)
    float_results = [i for i, t in enumerate(target.result_types) if is_float(Value(t))]
    if kind == "jvp":
        core = jvp_function(mod, of, tuple(wrt))
        out_types = list(target.result_types) + [target.result_types[i] for i in float_results]
        w.op("func.return", w.op("func.call", args, out_types, {"callee": f"@{core}"}), [])
        mod.write(sym, args, f.result_types, f.loc, w)
        return
    if kind == "vjp":
        cts = args[n:]
    else:
        if len(target.result_types) != 1 or not float_results or Value(target.result_types[0]).tt.rank:
            raise DgTypeError(f"{kind}() needs a function that returns one float scalar; "
                              f"'{of}' returns ({', '.join(target.result_types)})", loc_of(f.location))
        cts = [w.const(1.0, Value(target.result_types[0]).tt)]
    core = vjp_function(mod, of, tuple(wrt))
    out_types = list(target.result_types) + [target.args[i].type for i in wrt]
    outs = w.op("func.call", args[:n] + cts, out_types, {"callee": f"@{core}"})
    values, grads = outs[:len(target.result_types)], outs[len(target.result_types):]
    w.op("func.return", grads if kind in ("grad", "vjp") else values + grads, [])
    mod.write(sym, args, f.result_types, f.loc, w)


def needs_autodiff(text: str) -> bool:
    return "dg.kind" in text
