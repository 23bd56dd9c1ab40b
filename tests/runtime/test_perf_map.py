"""DG_PERF_MAP=1: compiled code's functions are named in /tmp/perf-<pid>.map for Linux perf, at
the addresses the JIT gave them, internal ones (placed from a named one of their section) too."""
import os

import numpy as np

import dg
from dg.core.abi import LINKED
from dg.runtime import perf_map

SRC = """
def inner(x: f32[?], k: i64) -> f32:
    if k <= 0:
        return sum(x)
    return inner(x * 0.5, k - 1) + 1.0

def outer(x: f32[?]) -> f32:
    return inner(x, 3)
"""


def test_the_map_names_each_function_at_its_address(monkeypatch):
    monkeypatch.setenv("DG_PERF_MAP", "1")
    monkeypatch.setenv("DG_CACHE", "0")
    monkeypatch.setenv("DG_QUICK_START", "0")
    before = os.path.getsize(perf_map.path()) if os.path.exists(perf_map.path()) else 0
    m = dg.loads(SRC, mode="compiled", filename="perfmap.dg")
    assert m.outer(np.ones(4, np.float32)) == 3.5
    with open(perf_map.path()) as f:
        f.seek(before)
        rows = [line.split() for line in f]
    names = {name: (int(start, 16), int(size, 16)) for start, size, name in rows}
    outer, inner = LINKED + "outer", LINKED + "inner"  # (inner is internal: placed from outer's section)
    assert names[outer][1] > 0 and names[inner][1] > 0
    start, size = names[outer]
    assert not start <= names[inner][0] < start + size  # (each its own range)
