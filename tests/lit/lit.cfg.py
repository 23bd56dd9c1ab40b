# lit configuration for dg's textual IR tests: `.mlir` and `.dg` files with
# `RUN:` lines, checked by the Python `filecheck` port.
import os
import sys

import lit.formats

config.name = "dg"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".dg"]
config.test_source_root = os.path.dirname(__file__)
config.excludes = ["lit.cfg.py", "Inputs"]
bindir = os.path.dirname(sys.executable)
config.environment["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
config.environment["DG_MODE"] = "interp"
config.substitutions.append(("%dg", f'"{sys.executable}" -m dg'))
config.substitutions.append(("%filecheck", f'"{sys.executable}" -m filecheck'))
