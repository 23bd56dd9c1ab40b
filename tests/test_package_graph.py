"""The package graph is the pipeline (docs/architecture.md):

    core → dialects → dsl → lowering → runtime → dg (the public API and the command line)

A module imports only from its own folder and the folders before it, the modules of a folder
import each other without a cycle, and no module imports inside a function to dodge one. The
facade alone imports inside its functions: what a call needs, when it is called, so that
`import dg` and `dg --help` do not load MLIR.

Configuration is read in one place: no module but core/config.py reads a `DG_` environment
variable (writing one into a child process's environment is fine)."""
import ast
import importlib.util
import re
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


# ---------------------------------------------------------------- the rule API
# An op's `vjp` and `jvp` facets receive the autodiff pass's builder as their first parameter,
# named `g`. What they call on it must be dialects/rules.py's RuleBuilder: a method reached
# through `g` that only a later layer defines would make the dialect depend on that layer by duck
# typing, invisibly to the import checks above.
RULE_PARAM = "g"


def _rule_api() -> set:
    from dg.dialects.rules import BatchBuilder
    return set(dir(BatchBuilder)) | set(vars(BatchBuilder(None)))


def _calls_outside_the_rule_api(path: Path, api: set) -> list:
    """`FILE:LINE g.NAME` for each attribute reached through a `g` parameter that the rule API
    does not have."""
    bad = []
    for f in ast.walk(ast.parse(path.read_text())):
        if isinstance(f, (ast.FunctionDef, ast.Lambda)) and RULE_PARAM in [a.arg for a in f.args.args]:
            for n in ast.walk(f):
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == RULE_PARAM \
                        and n.attr not in api:
                    bad.append(f"{path.relative_to(ROOT)}:{n.lineno} {RULE_PARAM}.{n.attr}")
    return bad


def test_rules_use_only_the_rule_api():
    api = _rule_api()
    bad = sorted({b for p in sorted((ROOT / "dialects").rglob("*.py"))
                  for b in _calls_outside_the_rule_api(p, api)})
    assert not bad, "not in dialects/rules.py's RuleBuilder:\n" + "\n".join(bad)


def test_every_rule_takes_the_builder_as_g():
    """So that the check above sees every rule."""
    import inspect

    from dg.dialects.registry import OPS
    odd = [f"dg.{name}.{facet}" for name, op in sorted(OPS.items()) for facet in ("vjp", "jvp", "batch")
           if getattr(op, facet) is not None
           and list(inspect.signature(getattr(op, facet)).parameters)[0] != RULE_PARAM]
    assert not odd, odd


def test_the_rule_check_sees_a_foreign_call(tmp_path, monkeypatch):
    (tmp_path / "dialects").mkdir()
    (tmp_path / "dialects" / "ops_x.py").write_text(
        "def vjp(g, op, d):\n    return [g.mul(d, g.const(2.0, d))]\n\n\n"
        "other = lambda g, op, d: [g.emit_linalg(d)]\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    with pytest.raises(AssertionError, match=r"dialects/ops_x.py:5 g.emit_linalg"):
        test_rules_use_only_the_rule_api()


# ------------------------------------------------------------------ DG_ variables: core/config.py only
CONFIG = Path("core") / "config.py"
DG_NAME = re.compile(r"DG_[A-Z0-9_]+")


def _is_environ(node) -> bool:
    """`os.environ` (or `environ`, imported from os)."""
    return (isinstance(node, ast.Attribute) and node.attr in ("environ", "environb")) or \
        (isinstance(node, ast.Name) and node.id in ("environ", "environb"))


def _names_dg(node) -> bool:
    """A name that is, or begins as, a DG_ variable's: "DG_MODE", f"DG_{x}", "DG_" + x."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value.startswith("DG_")
    if isinstance(node, ast.JoinedStr):
        return bool(node.values) and _names_dg(node.values[0])
    if isinstance(node, ast.BinOp):
        return _names_dg(node.left)
    return False


def _env_keys(tree):
    """(line, key) of every read of the environment: os.environ.get(key), os.getenv(key),
    os.environ[key] (not as a target), key in os.environ."""
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and n.args:
            f = n.func
            if (isinstance(f, ast.Attribute) and f.attr == "get" and _is_environ(f.value)) or \
                    (isinstance(f, ast.Attribute) and f.attr == "getenv") or (isinstance(f, ast.Name) and f.id == "getenv"):
                yield n.lineno, n.args[0]
        elif isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Load) and _is_environ(n.value):
            yield n.lineno, n.slice
        elif isinstance(n, ast.Compare) and _is_environ(n.comparators[-1]) and \
                any(isinstance(op, (ast.In, ast.NotIn)) for op in n.ops):
            yield n.lineno, n.left


def dg_env_reads(source: str) -> list[int]:
    """The lines of `source` that read a DG_ environment variable: with its name written there
    ("DG_X", f"DG_{x}"), or with a name computed (a variable, a loop's) in a module that holds a
    DG_ variable's name as a string anywhere (NAME = "DG_X"; os.environ.get(NAME))."""
    tree = ast.parse(source)
    names_one = any(isinstance(n, ast.Constant) and isinstance(n.value, str) and DG_NAME.fullmatch(n.value)
                    for n in ast.walk(tree))
    return sorted({line for line, key in _env_keys(tree)
                   if _names_dg(key) or (names_one and not isinstance(key, ast.Constant))})


def test_only_config_reads_dg_variables():
    reads = [f"{path.relative_to(ROOT)}:{line} reads a DG_ environment variable (ask dg.core.config)"
             for folder in LAYERS + ["stdlib"] for path in sorted((ROOT / folder).rglob("*.py"))
             if path.relative_to(ROOT) != CONFIG for line in dg_env_reads(path.read_text())]
    assert not reads, "\n".join(reads)


@pytest.mark.parametrize("source", [
    'import os\nmode = os.environ.get("DG_MODE", "compiled")\n',
    'import os\nmode = os.getenv("DG_MODE")\n',
    'from os import environ\nmode = environ["DG_MODE"]\n',
    'import os\nquiet = "DG_LOG_COMPILES" not in os.environ\n',
    'import os\non = os.environ.get(f"DG_{name.upper()}", "0")\n',
    'import os\non = os.environ.get("DG_" + name)\n',
    'import os\nNAME = "DG_MODE"\nmode = os.environ.get(NAME)\n',
    'import os\nfor k in ("DG_MODE", "DG_DEVICE"):\n    print(os.environ[k])\n',
])
def test_a_planted_dg_read_is_caught(source):
    assert dg_env_reads(source), source


@pytest.mark.parametrize("source", [
    'import os\nenv = {**os.environ, "DG_CACHE": "0"}\n',  # a child's environment
    'import os\nos.environ["DG_CACHE"] = "0"\n',
    'import os\nhome = os.environ.get("CUDA_HOME", "") or os.environ.get("XDG_CACHE_HOME")\n',
    'import os\nlaunched = any(k in os.environ for k in ("PMI_RANK", "PMI_SIZE"))\n',
    'def f():\n    raise ValueError("set DG_LIBDEVICE")\n',
])
def test_what_is_not_a_dg_read(source):
    assert not dg_env_reads(source), source


def test_the_dg_read_check_sees_a_module(tmp_path, monkeypatch):
    """A module of runtime/ that reads DG_MODE itself fails the check; core/config.py may."""
    (tmp_path / "runtime").mkdir()
    (tmp_path / "runtime" / "bad.py").write_text('import os\n\nMODE = os.environ.get("DG_MODE")\n')
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "config.py").write_text('import os\n\nMODE = os.environ.get("DG_MODE")\n')
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    with pytest.raises(AssertionError, match=r"runtime/bad.py:3 reads a DG_ environment variable") as e:
        test_only_config_reads_dg_variables()
    assert "config.py" not in str(e.value)
