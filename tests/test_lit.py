"""Runs the textual IR tests (tests/lit: RUN/CHECK lines) with lit + filecheck."""
import subprocess
import sys
from pathlib import Path


def test_lit_suite():
    here = Path(__file__).parent / "lit"
    code = "import sys; from lit.main import main; sys.argv = ['lit', '-q', sys.argv[1]]; main()"
    r = subprocess.run([sys.executable, "-c", code, str(here)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
