"""Export the digits model (samples/digits.dg) as a C library, build samples/export/digits.c
against it with the system C compiler, and run it: training and classifying with no Python.

    pip install scikit-learn
    python samples/export/build.py [--out build/export] [--steps 1000]

Writes into --out: libdigits.so, libdigits.a and digits.h (`dg export`), digits.bin (the
training and test sets of scikit-learn's digits, as samples/digits.py splits them),
params.bin (initial weights) and the program `digits`, then runs it.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

import dg

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from digits import load_data  # noqa: E402  (samples/digits.py: the same data and split)

HIDDEN, BATCH = 64, 32


def build(out: Path) -> Path:
    """Export the model and build the C program; the program's path."""
    m = dg.load(HERE.parent / "digits.dg")
    w1, b1 = np.zeros((64, HIDDEN), np.float32), np.zeros(HIDDEN, np.float32)
    w2, b2 = np.zeros((HIDDEN, 10), np.float32), np.zeros(10, np.float32)
    x, y = np.zeros((BATCH, 64), np.float32), np.zeros(BATCH, np.int64)
    dg.export({"step": m.step, "forward": m.forward}, out,
                    {"step": (w1, b1, w2, b2, x, y, np.float32(0.2)), "forward": (x, w1, b1, w2, b2)})
    cc = shutil.which("cc")
    if cc is None:
        raise SystemExit("the sample needs a C compiler (cc)")
    exe = out / "digits"
    subprocess.run([cc, "-O2", "-o", str(exe), str(HERE / "digits.c"), f"-I{out}", f"-L{out}", "-ldigits",
                    f"-Wl,-rpath,{out.resolve()}"], check=True)
    return exe


def write_data(out: Path, seed: int = 0) -> None:
    (xtr, ytr), (xte, yte) = load_data(seed)
    with open(out / "digits.bin", "wb") as f:
        f.write(np.array([len(xtr), len(xte)], np.int64).tobytes())
        for a in (xtr, ytr, xte, yte):
            f.write(np.ascontiguousarray(a).tobytes())
    rng = np.random.default_rng(seed)
    with open(out / "params.bin", "wb") as f:
        f.write(np.array([HIDDEN], np.int64).tobytes())
        for a in (rng.normal(0, 1 / 8, (64, HIDDEN)), np.zeros(HIDDEN), rng.normal(0, 1 / np.sqrt(HIDDEN), (HIDDEN, 10)),
                  np.zeros(10)):
            f.write(a.astype(np.float32).tobytes())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="build/export", help="the folder to write into")
    ap.add_argument("--steps", type=int, default=1000, help="training steps the C program takes")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    exe = build(out)
    write_data(out)
    print(f"built {exe} against {out / 'libdigits.so'}")
    return subprocess.run([str(exe), str(out / "digits.bin"), str(out / "params.bin"), str(a.steps)]).returncode


if __name__ == "__main__":
    sys.exit(main())
