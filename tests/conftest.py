"""The test suite verifies the IR after every MLIR pass (DG_VERIFY_PASSES=1: core.mlir.pass_manager),
which dg's pipelines otherwise leave to one verification before LLVM, so that a pass that makes
invalid IR is caught where it does. Subprocesses the tests start inherit it."""
import os

os.environ.setdefault("DG_VERIFY_PASSES", "1")
