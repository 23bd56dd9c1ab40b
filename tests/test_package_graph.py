"""The package graph is the pipeline (docs/architecture.md):

    core → dialects → dsl → lowering → runtime → dg (the public API and the command line)

A module imports only from its own folder and the folders before it, the modules of a folder
import each other without a cycle, and no module imports inside a function to dodge one. The
facade alone imports inside its functions: what a call needs, when it is called, so that
`import dg` and `dg --help` do not load MLIR."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["core", "dialects", "dsl", "lowering", "runtime", "dg"]
IMPORTS_WHEN_CALLED = {"dg"}


def _modules():
    for layer in LAYERS:
        for path in sorted((ROOT / layer).glob("*.py")):
            yield layer, path


def _imports(layer: str, path: Path):
    """(the import node, whether it is inside a function, the dg module it names: (layer, module))."""
    tree = ast.parse(path.read_text())
    inside = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
              for n in ast.walk(f) if n is not f}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = [layer] + (node.module.split(".") if node.module else [])
            elif (node.module or "").split(".")[0] == "dg":
                base = node.module.split(".")[1:] or ["dg"]
                if base[0] not in LAYERS:
                    base = ["dg"] + base
            else:
                continue
            names = [base] if len(base) > 1 else [base + [a.name] for a in node.names]
            for parts in names:
                yield node, id(node) in inside, (parts[0], parts[1] if len(parts) > 1 else "__init__")
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == "dg":
                    parts = parts[1:] or ["dg"]
                    yield node, id(node) in inside, (parts[0] if parts[0] in LAYERS else "dg", "__init__")


def test_no_import_runs_against_the_pipeline():
    back = [f"{path.relative_to(ROOT)}:{node.lineno} imports {target[0]}.{target[1]}"
            for layer, path in _modules() for node, _, target in _imports(layer, path)
            if LAYERS.index(target[0]) > LAYERS.index(layer)]
    assert not back, "\n".join(back)


def test_no_import_inside_a_function():
    lazy = [f"{path.relative_to(ROOT)}:{node.lineno} imports {target[0]}.{target[1]} inside a function"
            for layer, path in _modules() if layer not in IMPORTS_WHEN_CALLED
            for node, inside, target in _imports(layer, path) if inside]
    assert not lazy, "\n".join(lazy)


@pytest.mark.parametrize("layer", LAYERS)
def test_the_modules_of_a_folder_form_no_cycle(layer):
    graph = {path.stem: {t[1] for _, _, t in _imports(layer, path) if t[0] == layer and t[1] != path.stem}
             for lay, path in _modules() if lay == layer}
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


def test_the_check_sees_a_back_edge(tmp_path, monkeypatch):
    """The checks above read what they should: a module of core/ that imports lowering/ is caught."""
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "bad.py").write_text("from dg.lowering import pipeline\n\n\ndef f():\n    from . import types\n")
    import sys

    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    with pytest.raises(AssertionError, match="core/bad.py:1 imports lowering.pipeline"):
        test_no_import_runs_against_the_pipeline()
    with pytest.raises(AssertionError, match="core/bad.py:5 imports core.types inside a function"):
        test_no_import_inside_a_function()
