"""What compiling costs, told as it happens: every specialization dg makes is logged through
Python's `logging` (the logger `dg`, level INFO) with its reason and the time of each stage, for
an application that configures logging; `DG_LOG_COMPILES=1` also prints the lines to stderr
where logging is not set up.

    dg: f(f32[4, 3], i64): new signature (1 compiled before): emitted in 0.012 s
    dg: f(f32[4, 3], i64): compiled in 0.46 s: passes 0.21 s, LLVM 0.25 s (disk cache miss)
"""
from __future__ import annotations

import logging
import sys

from dg.core.config import config

logger = logging.getLogger("dg")


def _on() -> bool:
    return config.log_compiles


class _Stderr(logging.StreamHandler):
    """A handler that writes to whatever sys.stderr is when a record comes (a notebook's, a test's)."""

    def __init__(self):
        super().__init__(sys.stderr)
        self.setFormatter(logging.Formatter("%(name)s: %(message)s"))

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _):
        pass


def log(message: str) -> None:
    if _on():
        if not logger.handlers and not logging.getLogger().handlers:  # logging not set up: to stderr
            logger.addHandler(_Stderr())
        if logger.getEffectiveLevel() > logging.INFO:
            logger.setLevel(logging.INFO)
    logger.info(message)
