"""The op set, one file per family; importing this package registers every op.

Each op's kernel here is its reference over an array module ``xp`` (numpy or cupy); faster
forms belong to the backends (``runtime/``), which register them in tables keyed by the op.
"""
from . import creation, elementwise, shape, reduction, linalg, nn, fused  # noqa: F401 (in order)
from . import conv, pool, control, resample, scan, sorting, norms  # noqa: F401
from . import pointwise, layout, activations  # noqa: F401
from . import index_ops, scatter, masking, indexing  # noqa: F401 (in order)
from . import collectives  # noqa: F401
from . import solve, factorize  # noqa: F401
from . import complexes, fft  # noqa: F401 (in order)
