"""The package graph is the pipeline (docs/architecture.md):

    core → dialects → dsl → lowering → runtime → dg (the public API and the command line)

A module imports only from its own folder and the folders before it, the modules of a folder
import each other without a cycle, and no module imports inside a function to dodge one. The
facade alone imports inside its functions: what a call needs, when it is called, so that
`import dg` and `dg --help` do not load MLIR."""
import ast
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["core", "dialects", "dsl", "lowering", "runtime", "dg"]
IMPORTS_WHEN_CALLED = {"dg"}


def _modules():
    """(layer, path, dotted name) of every module of dg."""
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            parts = list(path.relative_to(ROOT / layer).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            yield layer, path, ".".join(["dg"] + ([] if layer == "dg" else [layer]) + parts)


def _layer(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "dg"


def _imports(path: Path, name: str):
    """(the import node, whether it is inside a function, the dotted name of the dg module it
    takes something from) for each import of a dg module."""
    tree = ast.parse(path.read_text())
    inside = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
              for n in ast.walk(f) if n is not f}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) if node.level \
                else node.module or ""
            if base.split(".")[0] != "dg":
                continue
            # `from dg.x import y`: y may be a module of x (then that module is what is imported)
            for a in node.names:
                sub = f"{base}.{a.name}"
                yield node, id(node) in inside, sub if _is_module(sub) else base
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "dg":
                    yield node, id(node) in inside, a.name


_NAMES: dict = {}


def _is_module(name: str) -> bool:
    if ROOT not in _NAMES:
        _NAMES[ROOT] = {n for _, _, n in _modules()}
    return name in _NAMES[ROOT]


def test_no_import_runs_against_the_pipeline():
    back = [f"{path.relative_to(ROOT)}:{node.lineno} imports {target}"
            for layer, path, name in _modules() for node, _, target in _imports(path, name)
            if LAYERS.index(_layer(target)) > LAYERS.index(layer)]
    assert not back, "\n".join(back)


def test_no_import_inside_a_function():
    lazy = [f"{path.relative_to(ROOT)}:{node.lineno} imports {target} inside a function"
            for layer, path, name in _modules() if layer not in IMPORTS_WHEN_CALLED
            for node, inside, target in _imports(path, name) if inside]
    assert not lazy, "\n".join(lazy)


@pytest.mark.parametrize("layer", LAYERS)
def test_the_modules_of_a_folder_form_no_cycle(layer):
    graph = {name: {t for _, _, t in _imports(path, name) if _layer(t) == layer and t != name}
             for lay, path, name in _modules() if lay == layer}
    done, on_path = set(), []

    def visit(m):
        if m in on_path:
            raise AssertionError(f"{layer}/: a cycle: {' -> '.join(on_path[on_path.index(m):] + [m])}")
        if m in done or m not in graph:
            return
        on_path.append(m)
        for n in sorted(graph[m]):
            visit(n)
        on_path.pop()
        done.add(m)

    for m in sorted(graph):
        visit(m)
    assert done == set(graph)  # every module was reached, none on a cycle


def test_op_families_share_only_through_helpers():
    """An op family (dialects/ops_*.py) imports no other family: what several share is public in
    dialects/helpers.py."""
    crossing = [f"{path.relative_to(ROOT)}:{node.lineno} imports {target}"
                for layer, path, name in _modules() if layer == "dialects" and path.name.startswith("ops_")
                for node, _, target in _imports(path, name)
                if target.startswith("dg.dialects.ops_") and target != name]
    assert not crossing, "\n".join(crossing)


def test_the_checks_see_what_they_look_for(tmp_path, monkeypatch):
    """A module of core/ that imports lowering/, and one that imports inside a function, are caught."""
    (tmp_path / "core" / "sub").mkdir(parents=True)
    (tmp_path / "core" / "sub" / "bad.py").write_text(
        "from dg.lowering import pipeline\n\n\ndef f():\n    from .. import types\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    with pytest.raises(AssertionError, match="core/sub/bad.py:1 imports dg.lowering"):
        test_no_import_runs_against_the_pipeline()
    with pytest.raises(AssertionError, match=r"core/sub/bad.py:5 imports dg.core inside a function"):
        test_no_import_inside_a_function()
