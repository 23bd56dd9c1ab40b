"""`fn.graph()`: a function's dataflow graph, drawn for people (runtime/graph.py)."""
import re
import shutil

import numpy as np
import pytest

import dg
from dg.runtime import graph as graph_module

MODEL = """\
def step(x: f64[N, 3], w: f64[3, 3], n: i64) -> f64:
    h = x
    for i in range(n):
        h = tanh(h @ w) * 0.5
    if n > 2:
        h = h + 1.0
    else:
        h = h - 2.0
    s = sum(h * h)
    return s

def count(x: f64[N], k: i64) -> f64:
    t = 0.0
    i = 0
    while i < k:
        t = t + sum(x[i] * x)
        i = i + 1
    return t

def outer(x: f64[N]) -> f64:
    y = count(x, 3)
    return y * 2.0

def slope(x: f64[N]):
    return grad(outer)(x)

def dense(x: f32[B, I], w: f32[I, O], b: f32[O]) -> f32[B, O]:
    return x @ w + b

def layer(x: f32[B, 4], w: f32[4, H], b: f32[H]) -> f32[B, H]:
    return tanh(dense(x, w, b))
"""
FORWARD_LINES = {3, 4, 5, 6, 8, 9}  # the lines of step's body that compute something

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")


@pytest.fixture(scope="module")
def m():
    return dg.loads(MODEL, mode="interp", filename="model.dg")


@pytest.fixture(scope="module")
def step(m):
    return m.step.graph()


@pytest.fixture(scope="module")
def step_grad(m):
    return m.step.graph(grad=True)


def labels(dot: str) -> dict:
    """Node id -> its label (the HTML-like label's text, tags and repeated spaces removed)."""
    out = {}
    for nid, label in re.findall(r"^\s*(n\d+) \[label=<(.*?)> (?=[a-z]+=)", dot, re.M):
        text = re.sub(r"<[^>]+>", " ", label).replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
        out[nid] = " ".join(text.split())
    return out


def clusters(dot: str) -> dict:
    """Cluster label -> the ids of the nodes inside it (nested clusters' included)."""
    out, stack = {}, []
    for line in dot.splitlines():
        line = line.strip()
        if line.startswith("subgraph cluster_"):
            stack.append([])
        elif stack and line.startswith(("color=", "label=")) and "label=" in line and not stack[-1]:
            stack[-1].append(re.search(r'label=("[^"]*"|\S+)', line)[1].strip('"'))
        elif line == "}" and stack:
            name, *nodes = stack.pop()
            out[name] = nodes
            if stack:
                stack[-1].extend(nodes)
        elif stack and re.match(r"n\d+ \[", line):
            stack[-1].append(line.split()[0])
    return out


def edges(dot: str) -> list:
    return re.findall(r"^\s*(n\d+) -> (n\d+) \[(.*)\]$", dot, re.M)


def node_named(nodes: dict, text: str) -> str:
    found = [n for n, label in nodes.items() if text in label]
    assert found, f"no node labelled {text!r} in {sorted(nodes.values())}"
    return found[0]


def test_nodes_are_named_by_variables_and_parameters(step):
    nodes = labels(step.source)
    for param, shape in (("x", "f64[N, 3]"), ("w", "f64[3, 3]"), ("n", "i64")):
        assert any(label.split() == [param, *shape.split()] for label in nodes.values()), (param, nodes)
    assert "arg" not in " ".join(nodes.values())
    assert any(label.startswith("h = · * 0.5") for label in nodes.values()), nodes  # line 4's h
    assert node_named(nodes, "s = sum(·, axes=(0, 1))")
    assert "line 9" in nodes[node_named(nodes, "s = sum")]


def test_loops_and_branches_are_clusters_that_hold_their_bodies(step):
    dot = step.source
    nodes, boxes = labels(dot), clusters(dot)
    loop = next(k for k in boxes if k.startswith("for i in range(n)"))
    assert loop.endswith("model.dg:3")
    inside = {nodes[n].split("line")[0].strip() for n in boxes[loop]}
    assert {"tanh(·)", "· @ ·", "h = · * 0.5"} <= inside, inside
    assert any(t.startswith("i in range(0, ·, 1)") for t in inside)
    assert any("carried" in nodes[n] and nodes[n].split()[0] == "h" for n in boxes[loop])
    branch = next(k for k in boxes if k.startswith("if n > 2"))
    assert branch.endswith("model.dg:5")
    assert node_named(nodes, "h = · + 1.0") in boxes["then"] and node_named(nodes, "h = · - 2.0") in boxes["else"]
    assert set(boxes["then"]) | set(boxes["else"]) <= set(boxes[branch])
    assert node_named(nodes, "s = sum") not in boxes[loop] + boxes[branch]
    # what an iteration gives the next feeds the carried value back (dashed)
    carried = next(n for n in boxes[loop] if "carried" in nodes[n])
    assert any(t == node_named(nodes, "h = · * 0.5") and h == carried and "dashed" in a for t, h, a in edges(dot))


def test_edges_carry_readable_types(step):
    dot = step.source
    types = {"".join(re.search(r'label=(?:"([^"]*)"|(\S+))', a).groups("")) for _, _, a in edges(dot)}
    assert "f64[N, 3]" in types and "f64[3, 3]" in types and "f64" in types and "bool" in types, types
    assert "tensor<" not in dot and "xf64" not in dot


def test_constants_are_folded_into_their_users(step):
    nodes = labels(step.source)
    assert not any("constant" in label for label in nodes.values())
    assert not any(label.strip() in ("0.5", "1.0", "2.0", "0", "1", "2") for label in nodes.values())
    assert node_named(nodes, "· > 2") and node_named(nodes, "· * 0.5")


def test_a_while_loop_carries_named_values(m):
    g = m.count.graph()
    nodes, boxes = labels(g.source), clusters(g.source)
    loop = next(k for k in boxes if k.startswith("while i < k"))
    carried = [nodes[n] for n in boxes[loop] if "carried" in nodes[n]]
    assert sorted(c.split()[0] for c in carried) == ["i", "t"]
    assert any("from 0.0" in c for c in carried)
    assert node_named(nodes, "t = · + ·") in boxes[loop]


def test_calls_and_gradient_requests_are_labelled_by_what_they_call(m):
    assert "count(·, 3)" in " ".join(labels(m.outer.graph().source).values())
    assert "grad(outer)(·)" in " ".join(labels(m.slope.graph().source).values())


def test_conversions_to_declared_types_are_not_drawn(m):
    nodes = labels(m.layer.graph().source)
    assert sorted(label.split("line")[0].strip() for label in nodes.values()) == sorted(
        ["x f32[B, 4]", "w f32[4, H]", "b f32[H]", "dense(·, ·, ·)", "tanh(·)", "return"])


def test_grad_draws_backward_nodes_tied_to_their_forward_lines(step_grad, step):
    dot = step_grad.source
    nodes = labels(dot)
    assert step_grad.title == "gradient of step with respect to x, w"
    backward = {n: label for n, label in nodes.items() if label.lstrip().startswith("∂")}
    tied = [re.search(r"\(line (\d+)\)", label) for label in backward.values()]
    lines = {int(t[1]) for t in tied if t}
    assert {4, 9} <= lines <= FORWARD_LINES, lines
    assert node_named(nodes, "∂ s") and node_named(nodes, "∂ h")
    for out in ("∂ x", "∂ w"):  # the gradients, named by their parameters
        assert node_named(nodes, out)
    # backward nodes are drawn in another colour than the forward ones
    colour = dict(re.findall(r"^\s*(n\d+) \[.*fillcolor=\"(#\w+)\"", dot, re.M))
    assert {colour[n] for n in backward} == {graph_module.BACKWARD["fillcolor"]}
    assert colour[node_named(nodes, "tanh(·)")] == graph_module.FORWARD["fillcolor"]
    assert any(k.startswith("reverse of for i in range(n)") for k in clusters(dot))
    assert len(nodes) > len(labels(step.source))


def test_grad_with_respect_to_chosen_parameters(m):
    g = m.step.graph(grad=1)
    nodes = labels(g.source)
    assert g.title == "gradient of step with respect to w"
    assert node_named(nodes, "∂ w") and not any(label.strip() == "∂ x" for label in nodes.values())
    with pytest.raises(dg.DgError, match="argument 2: it is not a float"):
        m.step.graph(grad=2)


def test_dot_and_gv_write_the_source(step, tmp_path):
    for name in ("g.dot", "g.gv"):
        path = step.save(tmp_path / name)
        assert path.read_text() == step.source
        assert step.source.startswith("digraph dg {")


@needs_dot
def test_svg_png_and_pdf_are_rendered(step, tmp_path):
    svg = step.save(tmp_path / "g.svg").read_text()
    assert "<svg" in svg and "step(x, w, n)" in svg
    assert step.save(tmp_path / "g.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert step.save(tmp_path / "g.PDF").read_bytes().startswith(b"%PDF")


@needs_dot
def test_notebooks_get_svg(step):
    svg = step._repr_svg_()
    assert isinstance(svg, str) and "<svg" in svg and "</svg>" in svg


def test_repr_says_what_it_is(step):
    r = repr(step)
    assert r.startswith("<dg graph of step(x, w, n): ") and "clusters" in r and ".save(" in r


def test_an_unknown_extension_is_an_error(step, tmp_path):
    with pytest.raises(dg.DgError, match=r"\.svg, \.png, \.pdf, \.dot, \.gv"):
        step.save(tmp_path / "g.jpg")
    with pytest.raises(dg.DgError, match="extension"):
        step.save(tmp_path / "graph")
    assert not list(tmp_path.iterdir())


def test_without_dot_rendering_says_how_to_install_it(step, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    for name in ("g.svg", "g.png"):
        with pytest.raises(dg.DgError, match="apt install graphviz.*brew install graphviz.*conda"):
            step.save(tmp_path / name)
    assert not list(tmp_path.iterdir())  # no DOT text where a picture was asked for
    assert step._repr_svg_() is None  # a notebook shows the text repr instead
    assert step.save(tmp_path / "g.dot").read_text() == step.source


def test_without_the_graphviz_package_drawing_says_how_to_install_it(m, monkeypatch):
    monkeypatch.setattr(graph_module, "graphviz", None)
    with pytest.raises(dg.DgError, match=r"pip install dg\[graph\]"):
        m.step.graph()


def test_a_signature_can_be_given(m):
    g = m.dense.graph(args=(np.ones((2, 4), np.float32), np.ones((4, 5), np.float32), np.ones(5, np.float32)))
    nodes = labels(g.source)
    assert node_named(nodes, "· @ ·") and node_named(nodes, "· + ·")
    assert [label.split()[0] for label in nodes.values()][:3] == ["x", "w", "b"]
