"""`dg.grad`, `dg.value_and_grad` and `dg.vjp` on loaded dg functions.

Expects: a `DgFunction` (from `dg.load`, `dg.loads` or `@dg.function`) or
another gradient function. Guarantees: the result is callable like the
function it differentiates; each call runs a small dg function, added to
the same source, whose body is the language's own `grad(f, wrt=...)(...)`
expression, so Python and `.dg` code share one path (the emitter's
declaration, the autodiff pass, either mode) and the same argument checks.
"""
from __future__ import annotations

import itertools

import numpy as np

from dg.core.errors import DgError
from dg.core.tracebacks import user_facing
from dg.dsl.parser import parse

from . import html
from .program import DgFunction

_names = itertools.count()


def _root(fn):
    while isinstance(fn, GradFunction):
        fn = fn.base
    if not isinstance(fn, DgFunction):
        raise DgError(f"dg.grad needs a dg function (from dg.load or @dg.function), got {type(fn).__name__}")
    return fn


def _check_wrt(wrt):
    ok = isinstance(wrt, int) and not isinstance(wrt, bool) or (
        isinstance(wrt, tuple) and wrt and all(isinstance(i, int) and not isinstance(i, bool) for i in wrt))
    if not ok:
        raise DgError(f"wrt must be an int or a non-empty tuple of ints, got {wrt!r}")


def _wrapped(root, name_hint: str, params_text: str, body: str):
    """A dg function made from source text in the differentiated function's source, with its parameter types."""
    name = f"__dg_{name_hint}_{next(_names)}"
    text = f"def {name}({params_text}):\n    {body}\n"
    fd = parse(text, f"<dg.{name_hint} of {root.name}>", register=True).funcs[0]
    for p, q in zip(fd.params, root.fd.params):
        p.annotation = q.annotation  # the same parameter types, checked the same way
    root.source.funcs[name] = fd
    return DgFunction(root.source, name, root.mode, root.device, root.check_numerics)


def _params(root):
    out = []
    for p in root.fd.params:
        out.append(p.name if p.default is None else f"{p.name}={p.default.value!r}")
    return ", ".join(out), ", ".join(p.name for p in root.fd.params)


class GradFunction:
    """grad(f, wrt) or value_and_grad(f, wrt) of a dg function, callable from Python."""
    def __init__(self, kind: str, base, wrt=0):
        _check_wrt(wrt)
        self.kind = kind
        self.base = base
        self.wrt = wrt
        self.root = _root(base)
        self.__name__ = f"{kind}({getattr(base, '__name__', 'f')})"
        self._wrapped = None

    def expr(self) -> str:
        inner = self.base.expr() if isinstance(self.base, GradFunction) else self.root.name
        return f"{self.kind}({inner}, wrt={self.wrt!r})"

    def _fn(self):
        """The dg function that runs this gradient: one per expression and differentiated function,
        so that `dg.value_and_grad(m.loss)(...)` written in a training loop compiles once, not
        once per step."""
        if self._wrapped is None:
            made = self.root.gradients
            expr = self.expr()
            if expr not in made:
                params, names = _params(self.root)
                made[expr] = _wrapped(self.root, self.kind, params, f"return {expr}({names})")
            self._wrapped = made[expr]
        return self._wrapped

    @user_facing
    def __call__(self, *args, **kwargs):
        return self._fn()(*args, **kwargs)

    @user_facing
    def ir(self, stage: str = "dg", args=None) -> str:
        return self._fn().ir(stage, args)

    def _repr_html_(self) -> str:
        """The differentiated function's declaration; specializations once the gradient has run."""
        runs = self._wrapped or self.root.gradients.get(self.expr())
        return html.function_html({**html.declared(self.root, self.expr(), "dg gradient"), **html.specialized(runs)})


@user_facing
def vjp(fn, *primals):
    """(fn(*primals), pullback): pullback(cotangent) gives one cotangent per primal, as a tuple."""
    root = _root(fn)
    if isinstance(fn, GradFunction):
        raise DgError("dg.vjp of a gradient function is not supported; use dg.grad for higher orders")
    value = fn(*primals)
    params, names = _params(root)
    w = _wrapped(root, "vjp", f"{params}, __dg_ct", f"return vjp({root.name}, {names})[1](__dg_ct)")

    def like(c, v):
        """A Python number as a cotangent takes the result's dtype (as a weak literal would)."""
        if isinstance(v, tuple):
            return tuple(like(a, b) for a, b in zip(c, v)) if isinstance(c, (tuple, list)) else c
        if isinstance(c, (int, float)) and not isinstance(c, bool):
            return np.asarray(c, dtype=np.asarray(v).dtype)
        return c

    @user_facing
    def pullback(ct):
        return w(*primals, like(ct, value))

    return value, pullback
