"""`dg graph`: a function's dataflow graph as Graphviz DOT (or SVG via `dot`)."""
from __future__ import annotations

import shutil
import subprocess

from dg.core.errors import DgError
from dg.core.locations import loc_of
from dg.core.mlir import ir
from dg.dialects.dialect import shared_context


def to_dot(ir_text: str) -> str:
    with shared_context():
        module = ir.Module.parse(ir_text)
        lines = ["digraph dg {", '  rankdir=TB; node [shape=box, fontname="monospace", fontsize=10];']
        ids: dict = {}
        counter = [0]

        def node_id(op):
            key = op
            if key not in ids:
                counter[0] += 1
                ids[key] = f"n{counter[0]}"
            return ids[key]

        producers: dict = {}

        def walk(block, cluster):
            for arg in block.arguments:
                nid = f"a{counter[0]}_{arg.arg_number}"
                counter[0] += 1
                producers[arg] = nid
                lines.append(f'  {nid} [label="arg {arg.arg_number}\\n{arg.type}", shape=ellipse];')
            for op in block.operations:
                op = op.operation
                nid = node_id(op)
                where = loc_of(op.location)
                label = op.name.replace("dg.", "") + (f"\\n{where.line}:{where.col}" if where else "")
                lines.append(f'  {nid} [label="{label}"];')
                for v in op.operands:
                    src = producers.get(v)
                    if src:
                        lines.append(f'  {src} -> {nid} [label="{v.type}", fontsize=8];')
                for r in op.results:
                    producers[r] = nid
                for region in op.regions:
                    for b in region.blocks:
                        walk(b, cluster)

        for f in module.body.operations:
            for region in f.operation.regions:
                for b in region.blocks:
                    walk(b, None)
        lines.append("}")
    return "\n".join(lines) + "\n"


def write_graph(ir_text: str, path: str) -> None:
    dot = to_dot(ir_text)
    if path.endswith(".svg"):
        exe = shutil.which("dot")
        if exe is None:
            raise DgError("writing .svg needs Graphviz's `dot` program; write a .dot file instead")
        svg = subprocess.run([exe, "-Tsvg"], input=dot.encode(), capture_output=True, check=True).stdout
        with open(path, "wb") as f:
            f.write(svg)
    else:
        with open(path, "w") as f:
            f.write(dot)
