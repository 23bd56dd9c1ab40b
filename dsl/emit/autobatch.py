"""Automatic batching (§3.1): a `for x in xs:` over a list whose iterations depend on one another
only through sums runs batched, as `vmap` would.

The loop qualifies when every variable it carries (assigns, and had before it) is a sum it adds to
once per iteration, at the body's top level (`total += loss(p, x)` or `total = total + ...`), read
nowhere else in the body; when the body has no `break`, `continue` or `return`, and neither it nor
a function of the source it calls prints or stops at a `breakpoint` (their order would change); and when no variable the body assigns is read after the
loop (nor the loop variable). The body becomes a function of the item and of the values it reads
(`FN__autobatch_LINE_COL`, a hidden function of the source), and the loop

    xs_ = xs
    if len(xs_) > 0:
        incs = vmap(body, in_axes=(0, None, ...))(xs_, reads...)
        total = total + sum(incs[0], 0)

`dg.load(..., autobatch=False)` and `DG_AUTOBATCH=0` leave loops as they are.
"""
from __future__ import annotations

import dataclasses

from .. import ast as A

PREFIX = "__dg_autobatch_"  # (the hidden functions of a source start with __dg_)
EFFECTS = ("print", "breakpoint")


def _nodes(x):
    """Every node under x (a node or a list of them), x's included."""
    if isinstance(x, list):
        for e in x:
            yield from _nodes(e)
    elif isinstance(x, A.Node):
        yield x
        for f in dataclasses.fields(x):
            yield from _nodes(getattr(x, f.name))


def _stored(stmts) -> set:
    """The names the statements assign (targets of assignments and loops, however nested)."""
    out = set()
    for n in _nodes(stmts):
        targets = n.targets if isinstance(n, A.Assign) else [n.target] if isinstance(n, (A.AugAssign, A.AnnAssign, A.For)) else []
        for t in targets:
            for m in _nodes(t):
                if isinstance(m, A.Name) and (m is t or isinstance(t, (A.Tuple, A.List))):
                    out.add(m.id)
    return out


def _read(x, skip=()) -> set:
    """The names read under x (a name as an assignment's whole target is not read)."""
    targets = set()
    for n in _nodes(x):
        if isinstance(n, (A.Assign,)):
            targets |= {id(t) for t in n.targets}
            for t in n.targets:
                if isinstance(t, (A.Tuple, A.List)):
                    targets |= {id(e) for e in _nodes(t) if isinstance(e, A.Name)}
        elif isinstance(n, (A.AnnAssign, A.For)):
            targets.add(id(n.target))
    return {n.id for n in _nodes(x) if isinstance(n, A.Name) and id(n) not in targets and id(n) not in skip}


def _has_effects(em, body) -> bool:
    """Whether the statements, or the functions of the source they call (however deep), print or
    stop at a breakpoint: their order and values would change in a batch."""
    seen, todo = set(), [body]
    while todo:
        for n in _nodes(todo.pop()):
            if isinstance(n, A.Call) and isinstance(n.func, A.Name):
                name = n.func.id
                if name in EFFECTS:
                    return True
                fd = em.source.funcs.get(name) if hasattr(em.source, "funcs") else None
                if fd is not None and name not in seen:
                    seen.add(name)
                    todo.append(fd.body)
    return False


def _increment(st, carried: set):
    """(name, the expression added) when st is `c += e` or `c = c + e` for a carried c."""
    if isinstance(st, A.AugAssign) and st.op == "+" and isinstance(st.target, A.Name) and st.target.id in carried:
        return st.target.id, st.value
    if isinstance(st, A.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], A.Name) \
            and st.targets[0].id in carried and isinstance(st.value, A.BinOp) and st.value.op == "+" \
            and isinstance(st.value.left, A.Name) and st.value.left.id == st.targets[0].id:
        return st.targets[0].id, st.value.right
    return None


def autobatched(em, s: A.For, list_name: str):
    """The statements that run loop `s` over the list bound to `list_name` batched, or None when
    it does not qualify."""
    if not em.mod.autobatch or s.stops or not isinstance(s.target, A.Name):
        return None
    body = s.body
    if any(isinstance(n, (A.Return, A.Break, A.Continue)) for n in _nodes(body)):
        return None
    if _has_effects(em, body):
        return None
    before = {k for k in em.env if not k.startswith("$")}
    assigned = _stored(body)
    carried = assigned & before
    incs = {}
    for st in body:
        inc = _increment(st, carried)
        if inc is not None:
            if inc[0] in incs:
                return None  # added to twice: one increment per sum
            incs[inc[0]] = (st, inc[1])
    if not incs or set(incs) != carried:
        return None
    updates = {id(st) for st, _ in incs.values()}
    rest = [st for st in body if id(st) not in updates]
    if _read(rest) & carried or any(_read(e) & carried for _, e in incs.values()):
        return None
    temps = (assigned - carried) | {s.target.id}
    outside = _read([st for st in em.fd.body], skip={id(n) for n in _nodes(body)} | {id(s.target)})
    if temps & outside:
        return None  # read after the loop: the last item's value, which a batch does not keep
    reads = sorted((_read(body) - temps - carried) & before)
    loc = s.loc
    name = f"{PREFIX}{em.fd.name}_{loc.line}_{loc.col}"
    inc_names = [f"ab_inc_{k}" for k in range(len(incs))]
    order = list(incs)
    new_body = []
    for st in body:
        if id(st) in updates:
            c = next(k for k in order if incs[k][0] is st)
            new_body.append(A.Assign(st.loc, [A.Name(st.loc, inc_names[order.index(c)])], incs[c][1]))
        else:
            new_body.append(st)
    new_body.append(A.Return(loc, A.Tuple(loc, [A.Name(loc, n) for n in inc_names])))
    params = [A.Param(loc, s.target.id)] + [A.Param(loc, r) for r in reads]
    em.source.funcs[name] = A.FuncDef(loc, name, params, None, new_body)
    got = A.Name(loc, f"$ab{em.fresh()[1:]}")
    axes = A.Tuple(loc, [A.Const(loc, 0)] + [A.Const(loc, None) for _ in reads])
    mapped = A.Call(loc, A.Name(loc, "vmap"), [A.Name(loc, name)], [A.Keyword(loc, "in_axes", axes)])
    call = A.Call(loc, mapped, [A.Name(loc, list_name)] + [A.Name(loc, r) for r in reads], [])
    sums = [A.Assign(loc, [A.Name(loc, c)],
                     A.BinOp(loc, "+", A.Name(loc, c),
                             A.Call(loc, A.Name(loc, "sum"), [A.Subscript(loc, got, [A.Const(loc, k)]), A.Const(loc, 0)], [])))
            for k, c in enumerate(order)]
    nonempty = A.Compare(loc, A.Call(loc, A.Name(loc, "len"), [A.Name(loc, list_name)], []), [">"], [A.Const(loc, 0)])
    return [A.If(loc, nonempty, [A.Assign(loc, [got], call)] + sums, [])]
