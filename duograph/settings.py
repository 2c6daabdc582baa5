"""PyTorch's process-wide settings: ``set_default_dtype``/``get_default_dtype`` and
``set_num_threads``/``get_num_threads``, and the type tests ``is_tensor``,
``is_floating_point``."""
from __future__ import annotations

import os
import sys

from .eager import dispatch as _dispatch
from .eager.tensors import Tensor
from .graphlib import dtypes
from .graphlib.ir import Value

try:                                    # BLAS thread pools (numpy's, scipy's)
    import threadpoolctl as _threadpoolctl
except ImportError:                     # pragma: no cover - optional
    _threadpoolctl = None

_threads = {"n": None}


def set_default_dtype(d) -> None:
    """Make ``d`` (float32 or float64, as PyTorch allows; float16 and bfloat16 too) the dtype
    of tensors made from Python floats, of ``dg.randn``/``dg.zeros``... without a dtype and
    of integer ops that produce floats, as ``torch.set_default_dtype``. Integer dtypes raise
    TypeError, as PyTorch's."""
    name = dtypes.as_dtype(d)
    if not dtypes.is_float(name):
        raise TypeError(f"set_default_dtype: only floating-point types are supported as the "
                        f"default type, found {name}")
    if name != dtypes.DEFAULT_FLOAT:
        dtypes.DEFAULT_FLOAT = name
        _dispatch.clear_caches()       # prepared plans hold inferred (default) dtypes


def get_default_dtype() -> str:
    """The default floating-point dtype (``float32`` unless ``set_default_dtype`` changed
    it), as ``torch.get_default_dtype``."""
    return dtypes.DEFAULT_FLOAT


def set_num_threads(n: int) -> None:
    """Use ``n`` threads for intra-op parallelism, as ``torch.set_num_threads``: the BLAS
    pools (through threadpoolctl, where installed) and numba's parallel loops."""
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        raise ValueError(f"set_num_threads: expected a positive number of threads, found {n!r}")
    _threads["n"] = n
    if _threadpoolctl is not None:
        _threadpoolctl.threadpool_limits(limits=n)
    numba = sys.modules.get("numba")      # only if loaded: importing numba costs seconds
    if numba is not None:
        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))


def get_num_threads() -> int:
    """The number of intra-op threads: what ``set_num_threads`` set, else the BLAS pool's
    size (the number of CPUs when it cannot be read), as ``torch.get_num_threads``."""
    if _threads["n"] is not None:
        return _threads["n"]
    if _threadpoolctl is not None:
        sizes = [p.get("num_threads", 0) for p in _threadpoolctl.threadpool_info()
                 if p.get("user_api") == "blas"]
        if sizes:
            return int(max(sizes))
    return os.cpu_count() or 1


def is_tensor(obj) -> bool:
    """Whether ``obj`` is a duograph tensor (eager) or graph Value, as ``torch.is_tensor``."""
    return isinstance(obj, (Tensor, Value))


def is_floating_point(input) -> bool:
    """Whether ``input``'s dtype is floating point, as ``torch.is_floating_point``."""
    if not is_tensor(input):
        raise TypeError(f"is_floating_point(): argument 'input' must be Tensor, not "
                        f"{type(input).__name__}")
    return dtypes.is_float(input.dtype)

