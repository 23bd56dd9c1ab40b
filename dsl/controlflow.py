"""Rewrite `break`, `continue` and early `return` into boolean flags.

Expects: a parsed `FuncDef`. Guarantees: the rewritten body has no `break`
or `continue`, and at most one `return`, as its last top-level statement;
so every `if`/`for`/`while` maps to a structured `scf` op (as TensorFlow's
AutoGraph does). The flags are ordinary loop-carried bool variables:

- `return e` anywhere but at the very end becomes `$retval = e; $ret = True`,
  loops also stop on `$ret`, and the function ends with `return $retval`;
- `break` becomes `$brkN = True`; a `while` also tests `not $brkN`, and a
  `for` names the flags that end it (`For.stops`: the emitter makes it a
  `while` over its iterations that also tests them);
- `continue` becomes `$contN = True`, reset at the start of each iteration.

Statements after one that may set a flag are guarded by `if not flag:`.
Names starting with `$` are the rewrite's own; the emitter may give them a
placeholder value on paths where they are not yet set.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from . import ast as A

# The rewrite's own variables: `$` cannot start a dg name, so they never collide.
RET = "$ret"
RETVAL = "$retval"


def _walk_stmts(stmts, in_loop_too=True):
    for s in stmts:
        yield s
        if isinstance(s, A.If):
            yield from _walk_stmts(s.body, in_loop_too)
            yield from _walk_stmts(s.orelse, in_loop_too)
        elif isinstance(s, (A.For, A.While)) and in_loop_too:
            yield from _walk_stmts(s.body, in_loop_too)


def has_return(stmts) -> bool:
    return any(isinstance(s, A.Return) for s in _walk_stmts(stmts))


def returns_a_value(stmts) -> bool:
    return any(isinstance(s, A.Return) and s.value is not None for s in _walk_stmts(stmts))


def _has_loop_exit(stmts, kind) -> bool:
    """A break/continue of *this* loop level (not inside nested loops)."""
    return any(isinstance(s, kind) for s in _walk_stmts(stmts, in_loop_too=False))


def needs_rewrite(fn: A.FuncDef) -> bool:
    body = fn.body
    for i, s in enumerate(_walk_stmts(body)):
        if isinstance(s, (A.Break, A.Continue)):
            return True
    returns = [s for s in _walk_stmts(body) if isinstance(s, A.Return)]
    if not returns:
        return False
    return not (len(returns) == 1 and body and body[-1] is returns[0])


@dataclass
class _Loop:
    brk: str | None
    cont: str | None


@dataclass
class _Ctx:
    counter: itertools.count = field(default_factory=lambda: itertools.count(1))
    loops: list = field(default_factory=list)


def _name(n, loc):
    return A.Name(loc, n)


def _set(n, value: bool, loc):
    return A.Assign(loc, [_name(n, loc)], A.Const(loc, value))


def _not_any(flags, loc):
    names = [_name(f, loc) for f in flags]
    e = names[0] if len(names) == 1 else A.BoolOp(loc, "or", names)
    return A.UnaryOp(loc, "not", e)


def rewrite(fn: A.FuncDef) -> A.FuncDef:
    if not needs_rewrite(fn):
        return fn
    ctx = _Ctx()
    flagged = has_return(fn.body) and not (
        fn.body and isinstance(fn.body[-1], A.Return)
        and sum(isinstance(s, A.Return) for s in _walk_stmts(fn.body)) == 1
    )
    body = _block(fn.body, ctx, flagged)
    if flagged:
        loc = fn.loc
        tail = []
        if not (fn.body and isinstance(fn.body[-1], A.Return)):
            # Paths that fall off the end return nothing: say so instead of
            # returning a placeholder.
            end = fn.body[-1].loc if fn.body else loc
            tail = [A.Assert(end, _name(RET, end), A.Const(end, f"{fn.name}() reached its end without a return"))]
        body = [_set(RET, False, loc)] + body + tail + [A.Return(loc, _name(RETVAL, loc))]
    return A.FuncDef(fn.loc, fn.name, fn.params, fn.returns, body)


def _exits(s, ctx: _Ctx, flagged: bool) -> list[str]:
    """Flags that statement `s` (already known to be compound) may set."""
    out = []
    inner = [s] if not isinstance(s, (A.If,)) else s.body + s.orelse
    if flagged and has_return(inner if isinstance(s, A.If) else [s]):
        out.append(RET)
    if ctx.loops and isinstance(s, A.If):
        loop = ctx.loops[-1]
        if loop.brk and _has_loop_exit(s.body + s.orelse, A.Break):
            out.append(loop.brk)
        if loop.cont and _has_loop_exit(s.body + s.orelse, A.Continue):
            out.append(loop.cont)
    return out


def _block(stmts, ctx: _Ctx, flagged: bool) -> list:
    out = []
    for idx, s in enumerate(stmts):
        rest = stmts[idx + 1:]
        loc = s.loc
        if isinstance(s, A.Return) and flagged:
            value = s.value if s.value is not None else A.Const(loc, None)
            out += [A.Assign(loc, [_name(RETVAL, loc)], value), _set(RET, True, loc)]
            return out
        if isinstance(s, A.Break):
            out.append(_set(ctx.loops[-1].brk, True, loc))
            return out
        if isinstance(s, A.Continue):
            out.append(_set(ctx.loops[-1].cont, True, loc))
            return out
        if isinstance(s, A.If):
            out.append(A.If(loc, s.test, _block(s.body, ctx, flagged), _block(s.orelse, ctx, flagged)))
            flags = _exits(s, ctx, flagged)
        elif isinstance(s, (A.While, A.For)):
            out += _loop(s, ctx, flagged)
            flags = [RET] if flagged and has_return(s.body) else []
        else:
            out.append(s)
            flags = []
        if flags and rest:
            guarded = _block(rest, ctx, flagged)
            if guarded:
                out.append(A.If(rest[0].loc, _not_any(flags, rest[0].loc), guarded, []))
            return out
    return out


def _loop(s, ctx: _Ctx, flagged: bool) -> list:
    loc = s.loc
    k = next(ctx.counter)
    brk = f"$brk{k}" if _has_loop_exit(s.body, A.Break) else None
    cont = f"$cont{k}" if _has_loop_exit(s.body, A.Continue) else None
    ctx.loops.append(_Loop(brk, cont))
    body = _block(s.body, ctx, flagged)
    ctx.loops.pop()
    if cont:
        body = [_set(cont, False, loc)] + body
    stops = ([brk] if brk else []) + ([RET] if flagged and has_return(s.body) else [])
    pre = [_set(brk, False, loc)] if brk else []
    if isinstance(s, A.While):
        test = s.test
        if stops:
            # Flags first: once set, the user's condition is not evaluated again.
            test = A.BoolOp(loc, "and", [_not_any(stops, loc), s.test])
        return pre + [A.While(loc, test, body)]
    return pre + [A.For(loc, s.target, s.iter, body, stops or None)]
