"""Runs the textual IR tests (tests/lit: RUN/CHECK lines) with lit + filecheck."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

LIT = Path(__file__).resolve().parent / "lit"


@pytest.mark.slow  # (about three minutes of `dg opt` processes: the slow tier)
def test_lit_suite():
    code = "import sys; from lit.main import main; sys.argv = ['lit', '-q', sys.argv[1]]; main()"
    r = subprocess.run([sys.executable, "-c", code, str(LIT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_pass_runs_alone_in_a_lit_test():
    """Each pass of the pipeline has a test of tests/lit/passes that runs it alone on textual IR
    (`dg opt FILE --passes NAME`)."""
    from dg.lowering.pipeline import PASSES

    alone = set()
    for f in (LIT / "passes").glob("*.mlir"):
        for line in f.read_text().splitlines():
            m = re.search(r"RUN: %dg opt \S+ --passes \"?([\w-]+)(\{[^}]*\})?\"?( |$)", line)
            if m:
                alone.add(m.group(1))
    assert sorted(set(PASSES) - alone) == []
