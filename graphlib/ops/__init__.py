"""The op set, one file per family; importing this package registers every op."""
from . import creation, elementwise, shape, reduction, linalg, nn  # noqa: F401  (order matters)
