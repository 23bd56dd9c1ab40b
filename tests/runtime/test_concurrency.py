"""Threads that make the first calls of a process's compiled functions at the same moment: each
gets its result (the runtime's symbols were registered racily: 'JIT session error: Symbols not
found', then a crash, in 3 runs of 5). In processes of their own, so that a crash fails the test."""
import os
import subprocess
import sys

import pytest

RUN = """
import threading, numpy as np, dg
src = "\\n".join(f"def f{i}(x: f32[N]) -> f32:\\n    return sum(tanh(x) * {i}.0)\\n" for i in range(8))
m = dg.loads(src, mode="compiled", filename="t.dg")
x = np.ones(4096, np.float32)
out, errors = {}, []
start = threading.Barrier(8)

def first_call(i):
    start.wait()
    try:
        out[i] = float(getattr(m, f"f{i}")(x))
    except Exception as e:
        errors.append(repr(e))

threads = [threading.Thread(target=first_call, args=(i,)) for i in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(repr((errors, [round(out.get(i, -1.0), 1) for i in range(8)])))
"""


@pytest.mark.slow
@pytest.mark.parametrize("cache", ["off", "cold", "warm"])
def test_first_calls_from_eight_threads(tmp_path, cache):
    env = {"DG_CACHE": "0"} if cache == "off" else {"DG_CACHE_DIR": str(tmp_path)}
    for _ in range(3 if cache != "warm" else 4):  # (warm: the first run fills the cache)
        r = subprocess.run([sys.executable, "-c", RUN], capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, **env))
        assert r.returncode == 0 and "JIT session error" not in r.stderr, r.stderr[-2000:]
        want = [round(4096 * 0.7615942 * i, 1) for i in range(8)]
        errors, values = eval(r.stdout.strip().splitlines()[-1])
        assert errors == [] and values == pytest.approx(want, rel=1e-5)
