"""The op set, one file per family; importing this package registers every op."""
from . import creation, elementwise, shape, reduction, linalg, nn, fused  # noqa: F401 (in order)
from . import conv, control  # noqa: F401
from . import out_kernels  # noqa: F401  (out= forms for the planned runtime; last)
