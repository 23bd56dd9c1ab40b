"""The dg dialect: the op registry (one file per family of ops) and its IRDL definition."""
from . import ops_autodiff, ops_conv, ops_dist, ops_elementwise, ops_gather, ops_misc, ops_nn, ops_pool, ops_reduce, ops_shape  # noqa: F401  (they register the ops)
from .registry import OPS  # noqa: F401
