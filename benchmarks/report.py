"""What the benchmarks of this folder share: a median of timed calls, and the results kept as
JSON (`--json PATH`) and given back to the caller (a test, another benchmark)."""
from __future__ import annotations

import json
import statistics
import time


def median_time(fn, repeats: int) -> float:
    """The median of `repeats` timed calls of fn, in seconds."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def kept(results: dict, path: str | None, indent: int = 2) -> dict:
    """`results`, written to `path` as JSON first when a path is given."""
    if path:
        with open(path, "w") as f:
            json.dump(results, f, indent=indent)
    return results
