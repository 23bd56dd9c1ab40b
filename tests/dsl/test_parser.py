"""The `.dg` parser: AST shapes, source locations and syntax errors."""
from __future__ import annotations

import textwrap

import pytest

from dg.core.errors import DgSyntaxError, Loc, source_line
from dg.dsl import ast as A
from dg.dsl.parser import parse, parse_expr, parse_type

FILE = "t.dg"


def mod(src: str) -> A.Module:
    return parse(textwrap.dedent(src), FILE)


def body(src: str) -> list:
    """The statements of `src`, parsed as the body of `def f():` (so a
    statement on the first line of `src` is at line 2, column 5)."""
    text = "def f():\n" + textwrap.indent(textwrap.dedent(src), "    ")
    return parse(text, FILE).funcs[0].body


def stmt(src: str):
    (s,) = body(src)
    return s


def expr(src: str):
    return parse_expr(src, FILE)


def at(node) -> tuple[int, int]:
    return node.loc.line, node.loc.col


def syntax_error(src: str, **kw) -> DgSyntaxError:
    with pytest.raises(DgSyntaxError) as info:
        parse(src, kw.get("file", FILE))
    return info.value


def check_error(src: str, line: int, col: int, fragment: str) -> DgSyntaxError:
    """The error's message, position, echoed source line and caret."""
    err = syntax_error(src)
    text = str(err)
    assert text.startswith(f"{FILE}:{line}:{col}: error: "), text
    assert fragment in text.splitlines()[0], text
    assert err.loc == Loc(FILE, line, col)
    src_line = src.replace("\r\n", "\n").split("\n")[line - 1]
    lines = text.splitlines()
    assert lines[1] == "  " + src_line, text
    caret = lines[2]
    assert caret.endswith("^") and len(caret) == 2 + col, text
    return err


# ------------------------------------------------------------------ top level
def test_empty_and_blank_files():
    for src in ["", "\n", "\n\n   \n", "# just a comment", "# a\n\n# b\n"]:
        m = parse(src, FILE)
        assert isinstance(m, A.Module)
        assert m.funcs == [] and m.imports == [] and m.file == FILE
        assert m.loc == Loc(FILE, 1, 1)


def test_imports():
    m = mod(
        """\
        import layers
        import layers as L
        from nn import dense, relu
        from nn import (
            a,  # comment
            b,
        )
        """
    )
    i0, i1, i2, i3 = m.imports
    assert (i0.module, i0.names, i0.alias) == ("layers", None, None)
    assert (i1.module, i1.names, i1.alias) == ("layers", None, "L")
    assert (i2.module, i2.names) == ("nn", ["dense", "relu"])
    assert (i3.module, i3.names) == ("nn", ["a", "b"])
    assert [at(i) for i in m.imports] == [(1, 1), (2, 1), (3, 1), (4, 1)]
    assert m.funcs == []


def test_def_params_defaults_and_return_type():
    m = mod(
        """\
        def f(x: f32[B, 784, ?], w, n: i64 = -3, lr=1e-3, s="hi", flag=True,) -> (f32[B], f32):
            return x
        """
    )
    (f,) = m.funcs
    assert f.name == "f" and at(f) == (1, 1)
    x, w, n, lr, s, flag = f.params
    assert (x.name, at(x)) == ("x", (1, 7))
    assert isinstance(x.annotation, A.TypeExpr)
    assert x.annotation.dtype == "f32" and x.annotation.dims == ["B", 784, None]
    assert at(x.annotation) == (1, 10)
    assert w.annotation is None and w.default is None
    assert n.annotation == A.TypeExpr(Loc(FILE, 1, 32), "i64", None)
    # the unary minus is folded into the constant
    assert isinstance(n.default, A.Const) and n.default.value == -3 and at(n.default) == (1, 38)
    assert lr.default.value == 1e-3
    assert s.default.value == "hi"
    assert flag.default.value is True
    assert isinstance(f.returns, A.TupleTypeExpr) and at(f.returns) == (1, 74)
    assert [(t.dtype, t.dims) for t in f.returns.elts] == [("f32", ["B"]), ("f32", None)]


def test_def_without_params_or_annotations():
    (f,) = mod("def main():\n    pass\n").funcs
    assert f.params == [] and f.returns is None and isinstance(f.body[0], A.Pass)


def test_one_line_def_and_several_functions():
    m = mod(
        """\
        def f(x): return x

        def g(x) -> f32:
            return f(x)
        """
    )
    assert [f.name for f in m.funcs] == ["f", "g"]
    assert isinstance(m.funcs[0].body[0], A.Return)
    assert at(m.funcs[1]) == (3, 1)


def test_types():
    t = parse_type("f32", FILE)
    assert t == A.TypeExpr(Loc(FILE, 1, 1), "f32", None)
    t = parse_type("bool[N, 3, ?,]", FILE)
    assert (t.dtype, t.dims) == ("bool", ["N", 3, None])
    t = parse_type("((f32, i64[?]), bf16[2, 2])", FILE)
    assert isinstance(t, A.TupleTypeExpr) and at(t) == (1, 1)
    inner, last = t.elts
    assert isinstance(inner, A.TupleTypeExpr) and inner.elts[1].dims == [None]
    assert last.dims == [2, 2]
    t = parse_type("(f32,)", FILE)
    assert isinstance(t, A.TupleTypeExpr) and len(t.elts) == 1
    assert parse_type("(f32)", FILE) == A.TypeExpr(Loc(FILE, 1, 2), "f32", None)


def test_question_mark_only_inside_types():
    with pytest.raises(DgSyntaxError):
        expr("x[?]")
    with pytest.raises(DgSyntaxError):
        parse_type("f32[]", FILE)


# ------------------------------------------------------------------ statements
def test_assignments():
    s = stmt("x = 1")
    assert isinstance(s, A.Assign) and at(s) == (2, 5)
    assert s.targets == [A.Name(Loc(FILE, 2, 5), "x")] and s.value == A.Const(Loc(FILE, 2, 9), 1)

    s = stmt("a = b = c + 1")
    assert [t.id for t in s.targets] == ["a", "b"] and isinstance(s.value, A.BinOp)

    for src in ["a, b = e", "(a, b) = e", "a, b, = e", "[a, b] = e"]:
        s = stmt(src)
        (t,) = s.targets
        assert isinstance(t, A.Tuple), src
        assert [n.id for n in t.elts] == ["a", "b"], src

    s = stmt("(a, b), c = e")
    assert isinstance(s.targets[0].elts[0], A.Tuple)

    s = stmt("x: f32[N] = zeros([n])")
    assert isinstance(s, A.AnnAssign) and at(s) == (2, 5)
    assert s.target == A.Name(Loc(FILE, 2, 5), "x")
    assert (s.annotation.dtype, s.annotation.dims) == ("f32", ["N"])
    assert isinstance(s.value, A.Call)

    s = stmt("x[i, 1:] = e")
    assert isinstance(s, A.Assign)
    (t,) = s.targets
    assert isinstance(t, A.Subscript) and t.value.id == "x" and at(t) == (2, 5)


@pytest.mark.parametrize("op", ["+", "-", "*", "/", "@", "//", "%", "**"])
def test_augmented_assignment(op):
    s = stmt(f"x {op}= y")
    assert isinstance(s, A.AugAssign) and s.op == op
    assert s.target.id == "x" and s.value.id == "y" and at(s) == (2, 5)
    s = stmt(f"x[0, :] {op}= 2")
    assert isinstance(s.target, A.Subscript) and s.op == op


def test_if_elif_else_nests():
    (s,) = body(
        """\
        if a:
            x = 1
        elif b:
            x = 2
        elif c:
            pass
        else:
            x = 3
        """
    )
    assert isinstance(s, A.If) and s.test.id == "a" and at(s) == (2, 5)
    (e1,) = s.orelse
    assert isinstance(e1, A.If) and e1.test.id == "b" and at(e1) == (4, 5)
    (e2,) = e1.orelse
    assert isinstance(e2, A.If) and e2.test.id == "c" and isinstance(e2.body[0], A.Pass)
    assert isinstance(e2.orelse[0], A.Assign) and at(e2.orelse[0]) == (9, 9)

    s = stmt("if a:\n    pass\n")
    assert s.orelse == []


def test_loops_and_jumps():
    f, w = body(
        """\
        for i in range(0, n, 2):
            if i > 3:
                break
            continue
        while x > 0:
            x = x - 1
        """
    )
    assert isinstance(f, A.For) and f.target == A.Name(Loc(FILE, 2, 9), "i")
    assert isinstance(f.iter, A.Call) and len(f.iter.args) == 3
    assert isinstance(f.body[0].body[0], A.Break) and at(f.body[0].body[0]) == (4, 13)
    assert isinstance(f.body[1], A.Continue) and at(f.body[1]) == (5, 9)
    assert isinstance(w, A.While) and isinstance(w.test, A.Compare) and at(w) == (6, 5)


def test_return_forms():
    r0, r1, r2 = body("return\nreturn x\nreturn a, b\n")
    assert r0 == A.Return(Loc(FILE, 2, 5), None)
    assert r1.value.id == "x"
    assert isinstance(r2.value, A.Tuple) and [e.id for e in r2.value.elts] == ["a", "b"]
    assert at(r2.value) == (4, 12)


def test_pass_assert_print_breakpoint():
    p, a1, a2, pr, bp = body(
        """\
        pass
        assert x > 0
        assert x > 0, "x must be positive"
        print(a, b)
        breakpoint()
        """
    )
    assert isinstance(p, A.Pass)
    assert isinstance(a1, A.Assert) and a1.msg is None and at(a1) == (3, 5)
    assert a2.msg == A.Const(Loc(FILE, 4, 19), "x must be positive")
    assert isinstance(pr, A.ExprStmt) and pr.value.func.id == "print" and len(pr.value.args) == 2
    assert isinstance(bp.value, A.Call) and bp.value.args == [] and bp.value.kwargs == []


def test_one_line_suites_and_semicolons():
    s, t = body(
        """\
        if c: x = 1; y = 2;
        else: return x
        while c: c = c - 1
        """
    )[:2]
    assert [type(x) for x in s.body] == [A.Assign, A.Assign]
    assert isinstance(s.orelse[0], A.Return)
    assert isinstance(t, A.While)
    assert len(body("x = 1; y = 2\n")) == 2


def test_docstring_is_an_expression_statement():
    (d, r) = body('"""Docs.\n\nMore."""\nreturn 1\n')
    assert isinstance(d, A.ExprStmt) and d.value.value == "Docs.\n\n    More."


# ------------------------------------------------------------------ expressions
def test_literals():
    assert expr("1").value == 1 and type(expr("1").value) is int
    assert expr("1_000").value == 1000
    for src, v in [("0.5", 0.5), ("1.", 1.0), (".5", 0.5), ("1e-3", 1e-3), ("2.5E+4", 2.5e4), ("1.e2", 100.0)]:
        c = expr(src)
        assert isinstance(c, A.Const) and type(c.value) is float and c.value == v, src
    assert expr("True").value is True and expr("False").value is False
    assert isinstance(expr("None"), A.Const) and expr("None").value is None
    assert expr("'a\\tb'").value == "a\tb"
    assert expr('"it\'s"').value == "it's"
    assert expr("r'\\n'").value == "\\n"
    assert expr("'a' \"b\"").value == "ab"
    assert expr("'\\u00e9\\x41'").value == "éA"


def test_names_tuples_lists():
    assert expr("x") == A.Name(Loc(FILE, 1, 1), "x")
    t = expr("(a, b)")
    assert isinstance(t, A.Tuple) and at(t) == (1, 1) and len(t.elts) == 2
    t = expr("(a,)")
    assert isinstance(t, A.Tuple) and len(t.elts) == 1
    assert expr("()") == A.Tuple(Loc(FILE, 1, 1), [])
    assert expr("(a)") == A.Name(Loc(FILE, 1, 2), "a")
    t = expr("a, b")
    assert isinstance(t, A.Tuple) and at(t) == (1, 1)
    lst = expr("[[1.0, 2.0], [3.0, 4.0],]")
    assert isinstance(lst, A.List) and len(lst.elts) == 2
    assert all(isinstance(e, A.List) for e in lst.elts)
    assert at(lst.elts[1]) == (1, 14)
    assert expr("[]") == A.List(Loc(FILE, 1, 1), [])
    shape = expr("[x.shape[0], 3]")
    assert isinstance(shape.elts[0], A.Subscript)


def test_binary_precedence_and_associativity():
    e = expr("a + b * c")
    assert e.op == "+" and e.right.op == "*"
    e = expr("(a + b) * c")
    assert e.op == "*" and e.left.op == "+"
    e = expr("a - b - c")
    assert e.op == "-" and e.left.op == "-" and e.left.left.id == "a"
    assert at(e) == (1, 1) and at(e.left) == (1, 1)
    e = expr("a ** b ** c")
    assert e.op == "**" and e.left.id == "a" and e.right.op == "**"
    e = expr("a @ b + c // d % e / f")
    assert e.op == "+" and e.left.op == "@"
    assert e.right.op == "/" and e.right.left.op == "%" and e.right.left.left.op == "//"
    e = expr("x  *  y")
    assert at(e) == (1, 1) and at(e.right) == (1, 7)


def test_positions_include_parentheses_as_in_python():
    # A node starting with a parenthesised operand starts at the "(";
    # the parenthesised node itself keeps its own position.
    e = expr("(a + b) * c")
    assert at(e) == (1, 1) and at(e.left) == (1, 2)
    e = expr("((a)) < b")
    assert at(e) == (1, 1) and at(e.left) == (1, 3)
    assert at(expr("(x).T")) == (1, 1)
    assert at(expr("(f)(x)")) == (1, 1)
    assert at(expr("(a) if b else c")) == (1, 1)
    assert at(expr("x[(a):b]").items[0]) == (1, 3)
    assert at(stmt("(x) = 1")) == (2, 5)
    assert at(stmt("(y)[0] += 1")) == (2, 5)
    assert at(stmt("(y)")) == (2, 5)


def test_unary_and_power():
    e = expr("-x**2")
    assert isinstance(e, A.UnaryOp) and e.op == "-" and e.operand.op == "**"
    e = expr("2**-1")
    assert e.op == "**" and isinstance(e.right, A.UnaryOp)
    e = expr("-a * b")
    assert e.op == "*" and isinstance(e.left, A.UnaryOp)
    e = expr("- -x")
    assert e.operand.op == "-"
    e = expr("+x")
    assert e.op == "+"
    e = expr("-5")
    assert isinstance(e, A.UnaryOp) and e.operand.value == 5


def test_boolean_and_comparison():
    e = expr("a < b <= c")
    assert isinstance(e, A.Compare) and e.ops == ["<", "<="]
    assert e.left.id == "a" and [c.id for c in e.comparators] == ["b", "c"]
    for op in ["<", "<=", ">", ">=", "==", "!="]:
        assert expr(f"a {op} b").ops == [op]
    e = expr("a and b and c")
    assert isinstance(e, A.BoolOp) and e.op == "and" and len(e.values) == 3
    e = expr("a or b and c")
    assert e.op == "or" and e.values[1].op == "and"
    e = expr("not a == b")
    assert isinstance(e, A.UnaryOp) and e.op == "not" and isinstance(e.operand, A.Compare)
    e = expr("not a and b")
    assert e.op == "and" and e.values[0].op == "not"
    e = expr("a + 1 < b * 2")
    assert e.left.op == "+" and e.comparators[0].op == "*"


def test_conditional_expression():
    e = expr("a if c else b")
    assert isinstance(e, A.IfExp) and (e.body.id, e.test.id, e.orelse.id) == ("a", "c", "b")
    assert at(e) == (1, 1)
    e = expr("a if c else b if d else e")
    assert isinstance(e.orelse, A.IfExp)
    e = expr("x + 1 if a or b else -x")
    assert e.body.op == "+" and e.test.op == "or" and e.orelse.op == "-"


def test_calls_and_attributes():
    e = expr("f(a, b, k=v, axis=-1,)")
    assert isinstance(e, A.Call) and e.func.id == "f" and len(e.args) == 2
    k, axis = e.kwargs
    assert isinstance(k, A.Keyword) and (k.name, k.value.id) == ("k", "v") and at(k) == (1, 9)
    assert axis.name == "axis" and isinstance(axis.value, A.UnaryOp)
    e = expr("grad(f, wrt=(0, 1))(w, x)")
    assert isinstance(e.func, A.Call) and isinstance(e.func.kwargs[0].value, A.Tuple)
    e = expr("x.T.shape")
    assert isinstance(e, A.Attribute) and e.attr == "shape" and e.value.attr == "T"
    assert at(e) == (1, 1)
    e = expr("f()")
    assert e.args == [] and e.kwargs == []


def test_subscripts_and_slices():
    e = expr("x[i, 1:3, ::2, ..., None, -1, :, a:, :b]")
    assert isinstance(e, A.Subscript) and e.value.id == "x" and at(e) == (1, 1)
    i, s13, s2, ell, none, neg, full, lo, hi = e.items
    assert i.id == "i"
    assert isinstance(s13, A.Slice) and (s13.lower.value, s13.upper.value, s13.step) == (1, 3, None)
    assert at(s13) == (1, 6)
    assert isinstance(s2, A.Slice) and s2.lower is None and s2.upper is None and s2.step.value == 2
    assert at(s2) == (1, 11)
    assert isinstance(ell, A.EllipsisLit) and at(ell) == (1, 16)
    assert isinstance(none, A.Const) and none.value is None
    assert isinstance(neg, A.UnaryOp)
    assert full == A.Slice(Loc(FILE, 1, 31), None, None, None)
    assert lo.lower.id == "a" and lo.upper is None
    assert hi.lower is None and hi.upper.id == "b"
    e = expr("x[0][1]")
    assert isinstance(e.value, A.Subscript)
    e = expr("x.shape[0]")
    assert isinstance(e.value, A.Attribute)
    assert len(expr("x[i,]").items) == 1


# ------------------------------------------------------------------ layout
def test_comments_in_odd_places():
    m = mod(
        """\
        # header comment
        def f(x,  # the input
              y,  # another
        ):  # after the colon
            # first line of the body is a comment
            a = [1,  # inside a list
                 2]
                # over-indented comment line
            return a  # trailing
        # comment at column 0 between functions
            # indented comment between functions
        def g():
            pass
        # comment at end of file without newline"""
    )
    f, g = m.funcs
    assert [p.name for p in f.params] == ["x", "y"]
    assert [type(s) for s in f.body] == [A.Assign, A.Return]
    assert at(f.body[1]) == (9, 5)
    assert at(g) == (12, 1)


def test_continuation_lines():
    (s, t, u) = body(
        """\
        y = f(a,
              b,
            c)
        z = x[1,
        2] + (3 +
                4)
        w = 1 + \\
            2
        """
    )
    assert len(s.value.args) == 3 and at(s.value.args[2]) == (4, 9)
    assert isinstance(t.value, A.BinOp)
    assert at(u.value.right) == (9, 9)


def test_line_endings_tabs_and_final_newline():
    crlf = "def f(x):\r\n    y = x\r\n\r\n    return y\r\n"
    (f,) = parse(crlf, FILE).funcs
    assert at(f.body[1]) == (4, 5)
    (f,) = parse("def f(x):\n\ty = x\n\treturn y", FILE).funcs
    assert at(f.body[0]) == (2, 2) and at(f.body[1].value) == (3, 9)
    (f,) = parse("def f(x):\n    return x", FILE).funcs
    assert isinstance(f.body[0], A.Return)
    (f,) = parse("\ufeffdef f(): pass\n", FILE).funcs  # a UTF-8 BOM is skipped
    assert f.name == "f"


def test_nested_blocks_and_dedent_to_outer_levels():
    (f, g) = mod(
        """\
        def f(x):
            for i in range(3):
                while x > 0:
                    if x > 5:
                        x = x - 2
            return x
        def g():
            pass
        """
    ).funcs
    loop, ret = f.body
    assert isinstance(loop.body[0].body[0], A.If)
    assert isinstance(ret, A.Return) and at(ret) == (6, 5)


def test_unicode_identifiers():
    (s,) = body("α = β + 1\n")
    assert s.targets[0].id == "α" and s.value.left.id == "β"


# ------------------------------------------------------------------ errors
def test_error_unexpected_token():
    err = check_error("def f(x):\n    y = (x + )\n", 2, 14, "unexpected token ')'")
    assert err.raw_message.startswith("unexpected token ')'")


def test_error_unexpected_character():
    check_error("def f(x):\n    return x $ 1\n", 2, 14, "unexpected character '$'")


def test_error_expected_indented_block():
    check_error("def f(x):\nreturn x\n", 2, 1, "expected an indented block")
    check_error("def f(x):\n    if x:\n    return x\n", 3, 5, "expected an indented block")
    err = syntax_error("def f(x):\n")
    assert "expected an indented block" in str(err) and err.loc.line == 1


def test_error_unexpected_indent():
    check_error("def f(x):\n    y = x\n        return y\n", 3, 9, "unexpected indent")
    check_error("  def f(): pass\n", 1, 3, "unexpected indent")


def test_error_bad_dedent():
    check_error("def f(x):\n    if x:\n        y = 1\n      z = 2\n", 4, 7, "unindent does not match any outer indentation level")


def test_error_inconsistent_tabs():
    check_error("def f(x):\n\tif x:\n        y = 1\n", 3, 9, "inconsistent use of tabs and spaces")


def test_error_end_of_file_and_line():
    check_error("def f(x):\n    return x +", 2, 15, "unexpected end of line")
    check_error("def f(x):\n    y = (x +\n    1\n", 2, 9, "'(' was never closed")
    check_error("def f(x)\n    pass\n", 1, 9, "expected ':'")


def test_error_hints():
    check_error("def f(x):\n    y = [1, 2\n    return y\n", 2, 9, "'[' was never closed")
    check_error("def f(x):\n    y = f(a,\n          b c)\n", 3, 13, "perhaps a ',' is missing")
    check_error("def f(x):\n    else:\n        pass\n", 2, 5, "unexpected token 'else'")
    check_error("def f(x: f32[:]):\n    pass\n", 1, 14, "expected an integer, a name or '?'")
    check_error("def f(x):\n    if x = 1:\n        pass\n", 2, 10, "expected ':'")


def test_error_string_literals():
    check_error("def f(x):\n    print('abc)\n", 2, 11, "unterminated string literal")
    check_error('def f(x):\n    """doc""("\n    return x\n', 2, 5, "unterminated triple-quoted string literal")
    check_error("def f(x):\n    print(f'{x}')\n", 2, 11, "f-strings are not supported")
    check_error("def f(x):\n    print(b'x')\n", 2, 11, "bytes literals are not supported")


@pytest.mark.parametrize(
    "src, line, col, fragment",
    [
        ("def f(x):\n    g = lambda y: y\n", 2, 9, "'lambda' is not supported"),
        ("class A:\n    pass\n", 1, 1, "'class' is not supported"),
        ("def f(x):\n    with x:\n        pass\n", 2, 5, "'with' is not supported"),
        ("def f(x):\n    try:\n        pass\n", 2, 5, "'try' is not supported"),
        ("def f(x):\n    global y\n", 2, 5, "'global' is not supported"),
        ("def f(x):\n    yield x\n", 2, 5, "'yield' is not supported"),
        ("def f(x):\n    del x\n", 2, 5, "'del' is not supported"),
        ("def f(*args):\n    pass\n", 1, 7, "unexpected token '*'"),
        ("def f(**kw):\n    pass\n", 1, 7, "unexpected token '**'"),
        ("@dg.function\ndef f(x):\n    pass\n", 1, 1, "decorators are not supported"),
        ("def f(x):\n    if (y := x):\n        pass\n", 2, 11, "walrus"),
        ("def f(x):\n    return [i for i in x]\n", 2, 15, "unexpected token 'for'"),
        ("def f(x):\n    return {1: 2}\n", 2, 13, "a record's keys are strings"),
        ("def f(x):\n    for i in range(3):\n        pass\n    else:\n        pass\n", 4, 5, "unexpected token 'else'"),
        ("x += 1\n", 1, 1, "only 'def', 'import' and constants (NAME = value) are allowed at the top level"),
        ("def f(x):\n    def g(y):\n        return y\n", 2, 5, "nested function definitions are not supported"),
        ("def f(x):\n    import layers\n", 2, 5, "'import' is only allowed at the top level"),
        ("def f(x):\n    break\n", 2, 5, "'break' outside loop"),
        ("def f(x):\n    if x:\n        continue\n", 3, 9, "'continue' outside loop"),
        ("def f(x=y):\n    pass\n", 1, 9, "a parameter default must be a literal constant"),
        ("def f(x=[1]):\n    pass\n", 1, 9, "a parameter default must be a literal constant"),
        ("def f(x=1, y):\n    pass\n", 1, 12, "without a default follows"),
        ("def f(x, x):\n    pass\n", 1, 10, "duplicate parameter 'x'"),
        ("def f(x):\n    g(a=1, x)\n", 2, 12, "positional argument follows keyword argument"),
        ("def f(x):\n    g(a=1, a=2)\n", 2, 12, "keyword argument 'a' repeated"),
        ("def f(x):\n    f(x) = 1\n", 2, 5, "cannot assign to function call"),
        ("def f(x):\n    1 = x\n", 2, 5, "cannot assign to literal"),
        ("def f(x):\n    a + b = x\n", 2, 5, "cannot assign to expression"),
        ("def f(x):\n    x[0][1] = 2\n", 2, 5, "subscript of a name"),
        ("def f(x):\n    a, b += 1\n", 2, 5, "illegal expression for augmented assignment"),
        ("def f(x):\n    x: (f32, f32) = x\n", 2, 8, "must be a tensor type"),
        ("def f(x):\n    y = 007\n", 2, 9, "leading zeros"),
        ("def f(x):\n    y = x[?]\n", 2, 11, "unexpected token '?'"),
        ("def f(x):\n    y = x is None\n", 2, 11, "'is' is not supported"),
        ("def f(x):\n    return x \\ 2\n", 2, 14, "line continuation"),
        ("def f(x):\n    return x\x00\n", 2, 13, "null bytes"),
        ("def f(x):\n    return x  # \x00\n", 2, 17, "null bytes"),
    ],
)
def test_error_messages_and_positions(src, line, col, fragment):
    check_error(src, line, col, fragment)


def test_error_too_deeply_nested():
    err = syntax_error("def f(x):\n    return " + "(" * 1000 + "x" + ")" * 1000 + "\n")
    assert "too many nested parentheses" in str(err)
    err = syntax_error("def f(x):\n    return " + "-" * 5000 + "x\n")
    assert "too deeply nested" in str(err)
    err = syntax_error("def f(x):\n    return " + " + ".join(["x"] * 3000) + "\n")
    assert "too deeply nested" in str(err)
    deep = "def f(x):\n" + "".join(" " * i + "if x:\n" for i in range(1, 150)) + " " * 150 + "pass\n"
    err = syntax_error(deep)
    assert "too many levels of indentation" in str(err)


def test_error_carries_the_file_name_and_a_caret_under_tabs():
    err = syntax_error("def f(x):\n\treturn )\n", file="model.dg")
    text = str(err)
    assert text.startswith("model.dg:2:9: error: unexpected token ')'")
    assert text.splitlines()[1:] == ["  \treturn )", "  \t       ^"]


def test_error_line_numbers_with_crlf():
    err = syntax_error("def f(x):\r\n    y = 1\r\n    return $\r\n")
    assert str(err).startswith(f"{FILE}:3:12: error: unexpected character '$'")
    assert str(err).splitlines()[1] == "      return $"


def test_register_false_keeps_the_registered_source():
    parse("def f(x):\n    return x\n", "real.dg")
    with pytest.raises(DgSyntaxError):
        parse_type("f32[", "real.dg", register=False)
    err = syntax_error("def f(x):\n    return x $\n", file="real.dg")
    assert "return x $" in str(err)
    parse_expr("a + b", "real.dg", register=False)
    assert source_line("real.dg", 2) == "    return x $"


def test_parse_expr_errors():
    with pytest.raises(DgSyntaxError) as info:
        parse_expr("a +", FILE)
    assert str(info.value).startswith(f"{FILE}:1:4: error: unexpected end of line")
