"""`dg.saved_residuals(f, wrt=...)(*args)`: what the reverse sweep of f's gradient keeps.

Expects: a dg function (or checkpoint(...) of one) and arguments it takes. Guarantees: the
gradient is made as `dg.grad` makes it, instrumented (`lowering.instrument.residual_taps`) and
run once in the interpreter on these arguments; the report lists, per `.dg` line:
- the values of the forward sweep that the reverse sweep reads (kept once per call),
- each loop's tape (one row of its carried values per iteration) or, in a checkpointed
  loop, its snapshot slots; and the tapes the reverse sweep makes one at a time as it
  replays a loop (the largest is what counts),
- each loop's iterations in the forward sweep and the iterations the gradient runs again
  (the reverse sweep recomputes every iteration's body once; a `while` loop is run a
  second time to be taped; a checkpointed loop replays its segments).
`total_bytes` adds the values, the tapes and, per loop, the largest tape of its reverse
sweep: a bound on what the gradient holds at its peak beyond f's own arrays.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dg.dialects.dialect import parse
from dg.lowering.instrument import residual_taps

from . import interp, modes
from .program import DgFunction


@dataclass
class Residual:
    place: str  # "file:line"
    kind: str  # "value", "tape", "snapshots"; "replay tape", "replay snapshots": made in the reverse sweep
    what: str  # the op that made a value; "" for tapes
    shape: tuple  # a value's shape; a tape's row shape (the largest, where several add up)
    dtype: str
    row_bytes: int  # per iteration (a row of each of the loop's tapes), or the values' bytes
    rows: int  # a tape's rows (snapshot slots for a checkpointed loop); values: how many
    bytes: int  # all of them, each at the largest seen
    iterations: int = 0  # loops: iterations of the forward sweep
    recomputed: int = 0  # loops: iterations run again by the gradient


class Residuals:
    """The rows of a saved-residuals report; `total_bytes`; `str()` is a table."""

    def __init__(self, rows: list):
        self.rows = rows

    def __iter__(self):
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]

    @property
    def total_bytes(self) -> int:
        return sum(r.bytes for r in self.rows)

    def __repr__(self) -> str:
        return f"<Residuals: {len(self.rows)} rows, {self.total_bytes} bytes>"

    def __str__(self) -> str:
        head = ["line", "kept", "shape", "dtype", "bytes each", "count", "bytes", "iterations", "recomputed"]
        body = [[r.place, r.kind + (f" ({r.what})" if r.what else ""), "x".join(map(str, r.shape)) or "scalar",
                 r.dtype, str(r.row_bytes), str(r.rows), str(r.bytes),
                 str(r.iterations) if r.kind != "value" else "", str(r.recomputed) if r.kind != "value" else ""]
                for r in self.rows]
        body.append(["total", "", "", "", "", "", str(self.total_bytes), "", ""])
        widths = [max(len(row[i]) for row in [head] + body) for i in range(len(head))]
        line = lambda row: "  ".join(c.ljust(wd) for c, wd in zip(row, widths)).rstrip()  # noqa: E731
        return "\n".join([line(head), line(["-" * wd for wd in widths])] + [line(r) for r in body])


def _place(row) -> str:
    return f"{row[0]}:{row[1]}" if row else "?"


def report(table: list, seen: dict) -> Residuals:
    """The rows from the taps' table and what each tap saw: id -> (executions, largest array)."""
    values, tapes, steps = {}, {}, {}
    for i, (place, kind, what, flag) in enumerate(table):
        if i not in seen:
            continue
        count, big = seen[i]
        key = (_place(place), kind, what, flag)
        if kind == "step":  # flag: the forward sweep's copy of the loop
            st = steps.setdefault(_place(place), [0, 0])
            st[0 if flag else 1] += count
        else:  # each tap's largest array; the taps of one line and kind add up
            (values if kind == "value" else tapes).setdefault(key, []).append(big)
    rows = []
    for (place, _, what, _), vs in values.items():
        v = max(vs, key=lambda a: a.nbytes)
        rows.append(Residual(place, "value", what, v.shape, str(v.dtype), sum(a.nbytes for a in vs), len(vs),
                             sum(a.nbytes for a in vs)))
    for (place, kind, _, reverse), ts in tapes.items():  # reverse: made in the reverse sweep's loops
        t = max(ts, key=lambda a: a.nbytes)
        row = sum(int(np.prod(a.shape[1:], dtype=np.int64)) * a.dtype.itemsize for a in ts)
        it, again = steps.get(place, (0, 0))
        rows.append(Residual(place, f"replay {kind}" if reverse else kind, "", t.shape[1:], str(t.dtype), row,
                             t.shape[0], sum(a.nbytes for a in ts), it, again))
    rows.sort(key=lambda r: (_line(r.place), r.kind))
    return Residuals(rows)


def _line(place: str):
    file, _, line = place.rpartition(":")
    return (file, int(line) if line.isdigit() else 0)


def measure(gradient: DgFunction, args, kwargs) -> Residuals:
    """Run `gradient` (the dg function that `dg.grad` makes) once in the interpreter on these
    arguments, with residual taps."""
    runs = DgFunction(gradient.source, gradient.name, "interp", "cpu", False)
    comp, arrays = runs.specialize(args, kwargs, run=False)
    m = parse(modes.grad_text(comp))
    table = residual_taps(m)
    tr = interp.Translation(m)
    seen: dict = {}

    def tap(i, value):
        a = np.asarray(value)
        count, big = seen.get(i, (0, None))
        seen[i] = (count + 1, a if big is None or a.nbytes > big.nbytes else big)
        return value

    tr.ns["_tap"] = tap
    interp.run(tr, comp.symbol, arrays)
    return report(table, seen)
