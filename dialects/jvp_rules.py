"""Forward-mode rules shared by families of ops: the `jvp` facets of the registry.

A JVP rule is `(g, op, ts) -> tangent` (or a list, one per result): `g`
the autodiff pass's builder, `op` the view of the forward op (its values
in the function being written, its attributes, its `name`), `ts` one
tangent per operand, None where the operand has none (zero). A tangent
may come back in an operand's shape where the op broadcasts; the pass
broadcasts it to the result's. None: the result's tangent is zero.

- `linear(*positions)`: an op linear in those operands (the others fixed):
  its tangent is the op itself applied to their tangents.
- `bilinear(i, j)`: a product: f(ti, xj) + f(xi, tj).
- `diagonal`: an elementwise op. Its Jacobian is diagonal, so it is its
  own transpose, and the VJP rule applied to a tangent (broadcast to the
  result's shape) is the JVP: d * f'(x) per operand, summed.
- `reduction`: an op that maps each slice along `axes` to one number
  (max, prod, logsumexp, var, ...): the tangent is the slice's gradient
  (the VJP of ones) times the tangent, summed along the same axes.
"""
from __future__ import annotations

from .registry import OPS


def _zeros_at(g, op, ts, positions):
    return [(ts[i] if ts[i] is not None else g.zeros_like(op.operands[i])) if i in positions else op.operands[i]
            for i in range(len(op.operands))]


def linear(*positions):
    """The JVP of an op linear in the operands at `positions` (all of them when none are named)."""
    def rule(g, op, ts):
        pos = positions or tuple(range(len(op.operands)))
        if all(ts[i] is None for i in pos):
            return None
        return g.dg_op(op.name, _zeros_at(g, op, ts, pos), op.attrs)
    return rule


def bilinear(i: int, j: int):
    """The JVP of an op linear in operand i and in operand j separately (a product)."""
    def rule(g, op, ts):
        out = None
        for k in (i, j):
            if ts[k] is not None:
                args = list(op.operands)
                args[k] = ts[k]
                term = g.dg_op(op.name, args, op.attrs)
                out = term if out is None else g.add(out, term)
        return out
    return rule


def diagonal(g, op, ts):
    """The JVP of an elementwise op, from its VJP (a diagonal Jacobian is its own transpose)."""
    vjp = OPS[op.name].vjp
    y = op.results[0]
    out = None
    for t in {id(t): t for t in ts if t is not None}.values():  # one VJP per distinct tangent (x * x: one)
        terms = vjp(g, op, g.bcast(t, y))
        for i, u in enumerate(ts):
            if u is t and terms[i] is not None:
                out = terms[i] if out is None else g.add(out, terms[i])
    return out


def reduction(g, op, ts):
    """The JVP of a reduction along `axes` (of operand 0): <the slice's gradient, the tangent>."""
    t = ts[0]
    if t is None:
        return None
    y = op.results[0]
    ones = g.add(g.zeros_like(y), g.const(1.0, y))
    grad = OPS[op.name].vjp(g, op, ones)[0]
    axes = op.attrs.get("axes", tuple(range(op.types[0].rank)))
    keep = op.attrs.get("keepdims", False)
    return g.dg_op("sum", [g.mul(grad, t)], {"axes": tuple(axes), "keepdims": keep})
