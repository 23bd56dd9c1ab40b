"""The dg dialect: the op registry and its IRDL definition."""
from . import registry
from . import ops_elementwise, ops_reduce, ops_shape, ops_nn, ops_misc, ops_autodiff  # noqa: F401  (register ops)

OPS = registry.OPS
