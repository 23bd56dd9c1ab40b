"""The documentation in docs/ is checked against the code.

- Every example of docs/language.md runs, in the interpreter and in compiled mode, and gives
  what the page says: the ```dg blocks (a `def f():  # -> VALUE` line states the result of f),
  and the rows of the built-in tables (| Built-in | Signature | Example | Result |). The rows
  of one table run in one function and the blocks in one more, so each mode compiles a few
  functions, not one per example.
- Every built-in a dg program can call (dsl.builtins.BUILTINS) has a row in those tables, and
  every row names a built-in: a new built-in without documentation fails here.
- Every `dg` subcommand and option is in docs/cli.md; README.md links every file of docs/;
  docs/api.md's table of environment variables lists those of core/config.py, with the same
  values and defaults;
  the relative links between the documentation files lead to files and headings that exist.
"""
from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import dg
from dg.cli import build_parser
from dg.core.config import VARIABLES
from dg.dsl.builtins import BUILTINS

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
LANGUAGE = DOCS / "language.md"
HEADER = ["Built-in", "Signature", "Example", "Result"]
MODES = ["interp", "compiled"]
SOURCE_NAME = "<docs/language.md examples>"


# ------------------------------------------------------------------ reading the page
def _blocks(text: str) -> list[tuple[int, str]]:
    """(line of the opening fence, source) of each ```dg block."""
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        if lines[i].strip() == "```dg":
            start, body = i + 1, []
            i += 1
            while lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            out.append((start, "\n".join(body) + "\n"))
        i += 1
    return out


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


class Row:
    def __init__(self, line: int, table: int, cells: list[str]):
        self.line, self.table = line, table
        name, _, example, result = cells
        m = re.fullmatch(r"`(\w+)`", name)
        assert m, f"docs/language.md:{line}: the first cell of a built-in row is `name`, got {name!r}"
        self.name = m.group(1)
        m = re.fullmatch(r"`([^`]+)`", example)
        assert m, f"docs/language.md:{line}: the example of {self.name} is one `expression`, got {example!r}"
        self.example = m.group(1)
        self.result = result
        if result.startswith("error:"):
            self.kind = "error"
        elif result.startswith("prints"):
            self.kind = "prints"
        elif result.startswith("opens pdb"):
            self.kind = "breakpoint"
        else:
            self.kind = "value"

    def where(self) -> str:
        return f"docs/language.md:{self.line}: `{self.example}`"

    def quoted(self) -> list[str]:
        return re.findall(r"`([^`]*)`", self.result)


def _rows(text: str) -> list[Row]:
    """The rows of every built-in table, each with the number of its table."""
    rows, table, in_table = [], -1, False
    lines = text.splitlines()
    for i, line in enumerate(lines, 1):
        if line.startswith("|") and _cells(line) == HEADER:
            table += 1
            in_table = True
            continue
        if in_table and line.startswith("|"):
            if set(line.replace("|", "").strip()) <= {"-", ":", " "}:
                continue
            rows.append(Row(i, table, _cells(line)))
        else:
            in_table = False
    return rows


PAGE = LANGUAGE.read_text()
BLOCKS = _blocks(PAGE)
ROWS = _rows(PAGE)
FILE_BLOCKS = [(n, s) for n, s in BLOCKS if s.startswith("# file: ")]
PLAIN_BLOCKS = [(n, s) for n, s in BLOCKS if not s.startswith("# file: ")]
STATED = re.compile(r"^def (\w+)\(\):\s*# -> (.+)$", re.M)


# ------------------------------------------------------------------ comparing results
_DTYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64", "i32": "int32",
           "i64": "int64", "bool": "bool"}
_TYPE = re.compile(r"(f16|bf16|f32|f64|i32|i64|bool)(?:\[([0-9, ]*)\])?")


def _kind(a: np.ndarray) -> str:
    if a.dtype.name == "bfloat16" or a.dtype.kind == "f":
        return "f"
    return "i" if a.dtype.kind in "iu" else a.dtype.kind


def assert_same_value(actual, expected, where: str) -> None:
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and sorted(actual) == sorted(expected), \
            f"{where}: expected {expected!r}, got {actual!r}"
        for k in expected:
            assert_same_value(actual[k], expected[k], where)
        return
    if isinstance(expected, tuple):
        assert isinstance(actual, tuple) and len(actual) == len(expected), \
            f"{where}: expected {expected!r}, got {actual!r}"
        for a, e in zip(actual, expected):
            assert_same_value(a, e, where)
        return
    e, a = np.asarray(expected), np.asarray(actual)
    assert not isinstance(actual, tuple), f"{where}: expected {expected!r}, got the tuple {actual!r}"
    assert a.shape == e.shape, f"{where}: expected shape {e.shape}, got {a!r}"
    assert _kind(a) == _kind(e), f"{where}: expected {expected!r} ({e.dtype.kind}), got {a!r} ({a.dtype})"
    assert np.allclose(a.astype(np.float64), e.astype(np.float64), rtol=1e-3, atol=1e-4), \
        f"{where}: expected {expected!r}, got {a!r}"


def _check_value(actual, result: str, where: str) -> None:
    if re.fullmatch(r"\*[^*]+\*", result):  # a description: it ran, nothing to compare
        return
    m = re.fullmatch(r"`([^`]+)`", result)
    assert m, f"{where}: a result is `a value`, `a type` or *a description*, got {result!r}"
    text = m.group(1)
    t = _TYPE.fullmatch(text)
    if t:
        a = np.asarray(actual)
        assert a.dtype.name == _DTYPES[t.group(1)], f"{where}: expected {text}, got {a.dtype}"
        shape = tuple(int(d) for d in t.group(2).split(",")) if t.group(2) else ()
        assert a.shape == shape, f"{where}: expected {text}, got shape {a.shape}"
        return
    assert_same_value(actual, ast.literal_eval(text), where)


# ------------------------------------------------------------------ the examples as one module
def _table_function(k: int, rows: list[Row]) -> tuple[str, list[Row]]:
    """One function running the rows of table k that do not fail: values are returned in order."""
    body, valued = [], []
    for r in rows:
        if r.kind == "value":
            body.append(f"    doc_r{len(valued)} = {r.example}")
            valued.append(r)
        elif r.kind in ("prints", "breakpoint"):
            body.append(f"    {r.example}")
    names = ", ".join(f"doc_r{i}" for i in range(len(valued)))
    body.append(f"    return ({names},)" if valued else "    return 0")
    return f"def doc_table_{k}():\n" + "\n".join(body) + "\n", valued


def _stated(source: str) -> list[tuple[str, str]]:
    return STATED.findall(source)


def _module_text() -> tuple[str, dict]:
    parts = [s for _, s in PLAIN_BLOCKS]
    calls = [name for _, s in PLAIN_BLOCKS for name, _ in _stated(s)]
    parts.append(f"def doc_blocks():\n    return ({', '.join(f'{c}()' for c in calls)},)\n")
    tables = {}
    for k in sorted({r.table for r in ROWS}):
        text, valued = _table_function(k, [r for r in ROWS if r.table == k])
        parts.append(text)
        tables[k] = valued
    return "\n".join(parts), tables


MODULE_TEXT, TABLES = _module_text()


@pytest.fixture(scope="module", params=MODES)
def examples(request):
    return request.param, dg.loads(MODULE_TEXT, mode=request.param, filename=SOURCE_NAME)


def test_the_page_has_examples():
    assert len(PLAIN_BLOCKS) >= 10 and len(ROWS) >= 60
    assert sum(len(_stated(s)) for _, s in BLOCKS) >= 15


def test_blocks_give_what_they_state(examples):
    mode, m = examples
    stated = [(name, value) for _, s in PLAIN_BLOCKS for name, value in _stated(s)]
    results = m.doc_blocks()
    assert len(results) == len(stated), (len(results), len(stated))
    for (name, value), actual in zip(stated, results):
        assert_same_value(actual, ast.literal_eval(value), f"docs/language.md: {name}() ({mode})")


def test_builtin_tables_give_what_they_state(examples, capsys, monkeypatch):
    mode, m = examples
    stops = []
    monkeypatch.setattr(sys, "breakpointhook", lambda *a, **k: stops.append(sys._getframe(1).f_code.co_name))
    for k, valued in TABLES.items():
        results = getattr(m, f"doc_table_{k}")()
        if not valued:
            continue
        for r, actual in zip(valued, results):
            _check_value(actual, r.result, f"{r.where()} ({mode})")
    out = capsys.readouterr().out.splitlines()
    for r in ROWS:
        if r.kind == "prints":
            want = r.quoted()
            assert any(out[i:i + len(want)] == want for i in range(len(out))), \
                f"{r.where()} ({mode}): expected the lines {want}, the examples printed {out}"
    # pdb would open in the frame that holds the dg variables
    assert stops == ["__dg_breakpoint__"] * sum(r.kind == "breakpoint" for r in ROWS), f"{mode}: {stops}"


@pytest.mark.parametrize("mode", MODES)
def test_unavailable_builtins_say_so(mode):
    """A row of the reference that gives an error (a built-in not available) raises it, in each
    mode. (None does today: the loop runs over no row, rather than a parametrization over none
    that pytest reports as a skip.)"""
    helpers = "".join(s for _, s in PLAIN_BLOCKS if not _stated(s))
    for row in (r for r in ROWS if r.kind == "error"):
        m = dg.loads(helpers + f"\ndef doc_error():\n    return {row.example}\n", mode=mode)
        with pytest.raises(dg.DgError) as e:
            m.doc_error()
        for text in row.quoted():
            assert text in str(e.value), f"{row.where()} ({mode}): expected {text!r} in {e.value}"


@pytest.mark.parametrize("mode", MODES)
def test_file_examples(mode, tmp_path):
    assert FILE_BLOCKS, "the import example is written as files"
    for _, s in FILE_BLOCKS:
        name = s.splitlines()[0][len("# file: "):].strip()
        (tmp_path / name).write_text(s)
    for _, s in FILE_BLOCKS:
        stated = _stated(s)
        if stated:
            m = dg.load(tmp_path / s.splitlines()[0][len("# file: "):].strip(), mode=mode)
            for fname, value in stated:
                assert_same_value(getattr(m, fname)(), ast.literal_eval(value), f"docs/language.md: {fname}() ({mode})")


# ------------------------------------------------------------------ coverage of the docs
def test_every_builtin_is_documented():
    documented = {r.name for r in ROWS}
    missing = sorted(set(BUILTINS) - documented)
    assert not missing, (f"built-ins without a row in a table of docs/language.md "
                         f"(| Built-in | Signature | Example | Result |): {missing}")
    unknown = sorted(documented - set(BUILTINS))
    assert not unknown, f"docs/language.md documents built-ins that dsl/builtins.py does not have: {unknown}"
    names = [r.name for r in ROWS]
    assert len(names) == len(set(names)), "a built-in has two rows"


def _subcommands() -> dict:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices


def test_every_cli_subcommand_and_option_is_documented():
    text = (DOCS / "cli.md").read_text()
    for name, sp in _subcommands().items():
        assert re.search(rf"^#+ .*`dg {name}\b", text, re.M), f"docs/cli.md has no heading for `dg {name}`"
        for action in sp._actions:
            for opt in action.option_strings:
                if opt not in ("-h", "--help"):
                    assert opt in text, f"docs/cli.md does not mention `dg {name} {opt}`"
    for action in build_parser()._actions:  # dg --version, dg --config
        for opt in action.option_strings:
            if opt not in ("-h", "--help"):
                assert opt in text, f"docs/cli.md does not mention `dg {opt}`"


def _environment_table() -> dict:
    """{variable: (values, default)} of docs/api.md's table of environment variables, code marks dropped."""
    text = (DOCS / "api.md").read_text()
    section = text.split("\n## Environment variables\n", 1)[1].split("\n## ", 1)[0]
    rows = [_cells(line) for line in section.splitlines() if line.startswith("| `DG_")]
    assert rows and all(len(r) == 4 for r in rows), "docs/api.md: | Variable | Values | Default | Meaning |"
    table = {r[0].strip("`"): tuple(c.replace("`", "") for c in r[1:3]) for r in rows}
    assert len(table) == len(rows), "docs/api.md: a variable has two rows"
    return table


def test_the_environment_table_is_config():
    table = _environment_table()
    assert list(table) == list(VARIABLES), "docs/api.md's environment variables are not core/config.py's (in its order)"
    for name, v in VARIABLES.items():
        assert table[name] == (v.values, v.default), f"docs/api.md: {name}'s values or default differ from core/config.py"


def test_readme_links_every_doc():
    readme = (ROOT / "README.md").read_text()
    for f in sorted(DOCS.glob("*.md")):
        assert f"(docs/{f.name})" in readme, f"README.md does not link docs/{f.name}"
    assert "../shared" not in readme, "README.md links a file outside the repository"


def _slug(heading: str) -> str:
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def _anchors(path: Path) -> set:
    out, fenced = set(), False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            out.add(_slug(line.lstrip("#")))
    return out


def _prose(text: str) -> str:
    """The text without fenced blocks and code spans (where `](...)` is code, not a link)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def test_links_between_docs_resolve():
    for page in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s]+)\)", _prose(page.read_text())):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            assert dest.exists(), f"{page.name}: the link {target} leads nowhere"
            if anchor and dest.suffix == ".md":
                assert anchor in _anchors(dest), f"{page.name}: {dest.name} has no heading #{anchor}"
