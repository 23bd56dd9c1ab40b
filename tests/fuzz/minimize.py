"""Shrinking a failing program while it keeps failing the same way.

dg's syntax is a subset of Python's, so the program is edited as a Python AST
(with `?` sizes stood in for by a name) and printed back with `ast.unparse`.
Edits, biggest first: delete a statement (a whole function at the top
level), put a compound statement's body (or `else`) in its place, put an
expression's operand in its place, or a constant `1.0`. A `while` keeps its
condition and its first statement (the generator's guarantee that it ends).
The first edit that keeps `fails(src)` true is kept, and the search goes on
from there until no edit is kept, the deadline passes or the tests run out.
"""
from __future__ import annotations

import ast
import copy
import time

ANY = "_any_size_"
SKIP = {"annotation", "returns", "func", "keywords", "targets", "target", "slice", "iter", "ctx"}


def parse(src: str) -> ast.Module:
    return ast.parse(src.replace("?", ANY))


def unparse(tree: ast.AST) -> str:
    return ast.unparse(tree).replace(ANY, "?") + "\n"


def _stmt_lists(tree):
    """(owner, field) of every non-empty statement list, outermost first."""
    for node in ast.walk(tree):
        for f in ("body", "orelse"):
            lst = getattr(node, f, None)
            if isinstance(lst, list) and lst and isinstance(lst[0], ast.stmt):
                yield node, f


def _expr_slots(tree):
    """(owner, field, index, node) of every expression worth simplifying, outermost first."""
    out = []

    def visit(node):
        for f, value in ast.iter_fields(node):
            if f in SKIP or (isinstance(node, ast.While) and f == "test"):
                continue
            items = list(enumerate(value)) if isinstance(value, list) else [(None, value)]
            if isinstance(node, ast.While) and f == "body":
                items = items[1:]
            for i, child in items:
                if isinstance(child, ast.expr):
                    if _replacements(child):
                        out.append((node, f, i, child))
                    visit(child)
                elif isinstance(child, ast.AST):
                    visit(child)

    visit(tree)
    return out


def _replacements(node):
    """Simpler expressions to try in `node`'s place."""
    kids = {
        ast.BinOp: lambda n: [n.left, n.right],
        ast.UnaryOp: lambda n: [n.operand],
        ast.Call: lambda n: list(n.args),
        ast.IfExp: lambda n: [n.body, n.orelse],
        ast.BoolOp: lambda n: list(n.values),
        ast.Subscript: lambda n: [n.value],
    }.get(type(node), lambda n: [])(node)
    if isinstance(node, (ast.BinOp, ast.UnaryOp, ast.Call, ast.IfExp, ast.Subscript)):
        kids.append(ast.Constant(1.0))
    return kids


def edits(tree):
    """The edits of `tree`, biggest first, as plain tuples (see `apply`)."""
    lists = list(_stmt_lists(tree))
    out = [("del", li, j) for li, (o, f) in enumerate(lists) for j in range(len(getattr(o, f)))
           if not (j == 0 and isinstance(o, ast.While) and f == "body")]
    for li, (o, f) in enumerate(lists):
        for j, st in enumerate(getattr(o, f)):
            if isinstance(st, (ast.If, ast.For, ast.While)):
                out.append(("inline", li, j, "body"))
                if st.orelse:
                    out.append(("inline", li, j, "orelse"))
    for si, (_, _, _, node) in enumerate(_expr_slots(tree)):
        out += [("expr", si, ci) for ci in range(len(_replacements(node)))]
    return out


def apply(tree, edit):
    """A copy of `tree` with `edit` made."""
    t = copy.deepcopy(tree)
    if edit[0] == "expr":
        owner, f, i, node = _expr_slots(t)[edit[1]]
        new = copy.deepcopy(_replacements(node)[edit[2]])
        if i is None:
            setattr(owner, f, new)
        else:
            getattr(owner, f)[i] = new
        return t
    owner, f = list(_stmt_lists(t))[edit[1]]
    lst = getattr(owner, f)
    j = edit[2]
    if edit[0] == "del":
        del lst[j]
        if not lst and not isinstance(owner, ast.Module) and not (isinstance(owner, ast.If) and f == "orelse"):
            lst.append(ast.Pass())
    else:
        lst[j:j + 1] = getattr(lst[j], edit[3])
    return t


def minimize(src: str, fails, deadline: float | None = None, max_tests: int = 2000, log=None) -> str:
    """The smallest program reached from `src` by edits that keep `fails` true (greedy)."""
    try:
        tree = parse(src)
    except SyntaxError:
        return src
    best = unparse(tree)
    if best != src and not fails(best):
        return src
    tried = {best}
    tests = 0
    changed = True
    while changed:
        changed = False
        i = 0
        todo = edits(tree)
        while i < len(todo):
            if (deadline is not None and time.time() > deadline) or tests >= max_tests:
                return best
            cand_tree = apply(tree, todo[i])
            cand = unparse(cand_tree)
            i += 1
            if cand in tried:
                continue
            tried.add(cand)
            tests += 1
            if fails(cand):
                tree, best, changed = cand_tree, cand, True
                if log:
                    log(f"  shrunk to {len(best.splitlines())} lines ({tests} tests)")
                todo = edits(tree)
                i -= 1  # the same position holds the next edit now
    return best
