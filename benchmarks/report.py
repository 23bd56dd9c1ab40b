"""What every benchmark of this folder does with its figures at the end: the results kept as
JSON (`--json PATH`), and given back to the caller (a test, another benchmark)."""
from __future__ import annotations

import json


def kept(results: dict, path: str | None, indent: int = 2) -> dict:
    """`results`, written to `path` as JSON first when a path is given."""
    if path:
        with open(path, "w") as f:
            json.dump(results, f, indent=indent)
    return results
