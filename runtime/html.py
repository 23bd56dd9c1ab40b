"""HTML summaries of loaded dg functions and modules, for notebooks (`_repr_html_`).

Expects: `function_summary` (`declared` and `specialized`) and `module_summary` read a
`DgFunction` (from `dg.load`, `dg.loads` or `@dg.function`) or a `DgModule` as they are,
without compiling anything; `function_html` and `module_html` take the plain data those give
(strings, lists, tuples).
Guarantees: every text shown — names, types, file names, IR — is escaped with `html.escape`,
so `<`, `>` and `&` show as written; the IR of the last specialization is in a collapsed
`<details>` element, present only when the function has a specialization.
"""
from __future__ import annotations

from html import escape

from dg.dsl import ast as A
from dg.lowering.pipeline import SHOWN

from .signature import shown_type

HIDDEN_PREFIX = "__dg_"  # the functions runtime.autodiff_api adds to a source


# ------------------------------------------------------------ plain data from dg objects
def type_text(te) -> str:
    """An annotation as dg writes it: `f32`, `f32[N, 3, ?]`, `(f32, i64)`."""
    if isinstance(te, A.TupleTypeExpr):
        inner = ", ".join(type_text(t) for t in te.elts)
        return f"({inner},)" if len(te.elts) == 1 else f"({inner})"
    if isinstance(te, A.RecordTypeExpr):
        return "{" + ", ".join(f'"{k}": {type_text(t)}' for k, t in zip(te.keys, te.elts)) + "}"
    if isinstance(te, A.ListTypeExpr):
        return f"list[{type_text(te.elt)}]"
    if te.dims is None:
        return te.dtype
    return f"{te.dtype}[{', '.join('?' if d is None else str(d) for d in te.dims)}]"


def signature_text(fd: A.FuncDef) -> str:
    """`def f(x: f32[N, 3], n: i64 = 3) -> f32`: the function's `.dg` signature."""
    params = []
    for p in fd.params:
        text = p.name
        if p.annotation is not None:
            text += f": {type_text(p.annotation)}"
        if p.default is not None:
            text += f" = {p.default.value!r}"
        params.append(text)
    returns = f" -> {type_text(fd.returns)}" if fd.returns is not None else ""
    return f"def {fd.name}({', '.join(params)}){returns}"


def function_summary(fn, title: str | None = None, kind: str = "dg function") -> dict:
    """What `function_html` shows of a DgFunction: its declaration and its specializations so far."""
    return {**declared(fn, title, kind), **specialized(fn)}


def declared(fn, title: str | None = None, kind: str = "dg function") -> dict:
    return {
        "kind": kind,
        "title": title or fn.name,
        "signature": signature_text(fn.fd),
        "defined_at": f"{fn.fd.loc.file}:{fn.fd.loc.line}",
        "mode": fn.mode,
        "device": fn.device,
    }


def specialized(fn) -> dict:
    """The specializations a DgFunction has made (none for None), the stages made of the last."""
    last = None if fn is None else fn._last
    made = set() if last is None else {"dg", *last.stages}
    return {
        "specializations": [] if fn is None else [
            (", ".join(shown_type(t) for t in c.sig.param_types), c.runner is not None) for c in list(fn._cache.values())],
        "stages": [(s, s in made) for s in SHOWN],
        "ir": None if last is None else last.ir_text,
    }


def module_summary(module) -> dict:
    """What `module_html` shows of a DgModule: its functions, in the order of the source."""
    source = module._source
    return {
        "file": source.file,
        "mode": module._mode,
        "device": module._device,
        "functions": [(name, signature_text(fd), fd.loc.line) for name, fd in list(source.funcs.items())
                      if not name.startswith(HIDDEN_PREFIX)],
    }


# ------------------------------------------------------------ HTML from plain data
def _code(text: str) -> str:
    return f"<code>{escape(text)}</code>"


def _row(label: str, cell: str) -> str:
    return f'<tr><th style="text-align:left">{escape(label)}</th><td style="text-align:left">{cell}</td></tr>'


def function_html(d: dict) -> str:
    """A table: signature, place, mode and device, specializations, stages; then the IR, collapsed."""
    if d["specializations"]:
        specs = "<br>".join(_code(f"{d['title']}({types})") + ("" if ready else " (IR only)")
                            for types, ready in d["specializations"])
    else:
        specs = "none yet (made at the first call)"
    made = [s for s, m in d["stages"] if m]
    rest = [s for s, m in d["stages"] if not m]
    parts = []
    if made:
        parts.append(", ".join(_code(s) for s in made) + " made")
    if rest:
        parts.append(", ".join(_code(s) for s in rest) + " with " + _code(".ir(stage)"))
    stages = "; ".join(parts)
    out = [f'<div class="dg-function"><b>{escape(d["kind"])}</b> {_code(d["title"])}',
           '<table class="dg-function">',
           _row("signature", _code(d["signature"])),
           _row("defined at", _code(d["defined_at"])),
           _row("mode", f"{escape(d['mode'])}, {escape(d['device'])}"),
           _row("specializations", specs),
           _row("stages", stages),
           "</table>"]
    if d["ir"] is not None:
        out.append(f"<details><summary>IR of the last specialization ({_code('dg')} stage)</summary>"
                   f"<pre>{escape(d['ir'])}</pre></details>")
    out.append("</div>")
    return "\n".join(out)


def module_html(d: dict) -> str:
    """A table of the module's functions: name, signature, line."""
    out = [f'<div class="dg-module"><b>dg module</b> {_code(d["file"])} '
           f"({escape(d['mode'])}, {escape(d['device'])})",
           '<table class="dg-module">',
           "<tr><th>function</th><th>signature</th><th>line</th></tr>"]
    for name, sig, line in d["functions"]:
        out.append(f'<tr><td style="text-align:left">{_code(name)}</td><td style="text-align:left">{_code(sig)}'
                   f"</td><td>{line}</td></tr>")
    out += ["</table>", "</div>"]
    return "\n".join(out)
