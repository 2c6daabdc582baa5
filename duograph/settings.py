"""PyTorch's process-wide settings: ``set_default_dtype``/``get_default_dtype`` and
``set_num_threads``/``get_num_threads``, and the type tests ``is_tensor``,
``is_floating_point``."""
from __future__ import annotations

import json
import math
import os
import sys

import numpy as np

from .eager import dispatch as _dispatch
from .eager.creation import _generator
from .eager.creation import manual_seed as _mseed
from .eager.tensors import PRINT_OPTIONS, Tensor
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
        # PyTorch's default complex dtype follows: complex128 under float64, else complex64
        # (PyTorch's complex32 for float16 has no counterpart here)
        dtypes.DEFAULT_COMPLEX = "complex128" if name == "float64" else "complex64"
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



def seed() -> int:
    """Seed the global generator from a fresh non-deterministic number and return that
    number, as ``torch.seed``."""
    value = int(np.random.SeedSequence().entropy % (2 ** 63))
    _mseed(value)
    return value



def get_rng_state() -> Tensor:
    """The global generator's state as a uint8 tensor (its numpy bit generator's state,
    JSON-encoded), as ``torch.get_rng_state``; ``set_rng_state`` restores it."""
    state = _generator().bit_generator.state
    data = json.dumps(state, default=int).encode()
    return Tensor._wrap(np.frombuffer(data, dtype=np.uint8).copy())


def set_rng_state(new_state: Tensor) -> None:
    """Restore the global generator from ``get_rng_state()``'s tensor, as
    ``torch.set_rng_state``."""
    if not isinstance(new_state, Tensor) or new_state.dtype != "uint8":
        raise TypeError(f"set_rng_state: expected a uint8 tensor from get_rng_state(), found "
                        f"{type(new_state).__name__}")
    try:
        state = json.loads(bytes(new_state.numpy().tobytes()).decode())
    except ValueError as e:
        raise ValueError(f"set_rng_state: not a state from get_rng_state() ({e})") from None
    gen = _generator()
    gen.bit_generator.state = state


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None,
                     profile=None, sci_mode=None) -> None:
    """How tensors print, as ``torch.set_printoptions``: digits after the point
    (``precision``, default 4), the element count above which a tensor is summarised
    (``threshold``, 1000) with ``edgeitems`` (3) at each end, the line width (``linewidth``,
    75; PyTorch's is 80), a ``profile`` ('default', 'short' or 'full') setting
    all of them, and ``sci_mode`` (True forces scientific notation, False forbids it, None
    lets numpy choose)."""
    options = PRINT_OPTIONS
    if profile is not None:
        presets = {"default": dict(precision=4, threshold=1000, edgeitems=3),
                   "short": dict(precision=2, threshold=1000, edgeitems=2),
                   "full": dict(precision=4, threshold=sys.maxsize, edgeitems=3)}
        if profile not in presets:
            raise ValueError(f"set_printoptions: profile must be 'default', 'short' or "
                             f"'full', found {profile!r}")
        options.update(presets[profile], max_line_width=75)
    for key, value in (("precision", precision), ("threshold", threshold),
                       ("edgeitems", edgeitems), ("max_line_width", linewidth)):
        if value is not None:
            options[key] = int(value)
    if sci_mode is not None:
        options["suppress_small"] = not sci_mode
        options["floatmode"] = "maxprec"
        if sci_mode:
            options["formatter"] = {"float_kind": lambda v: f"{v:.{options['precision']}e}"}
        else:
            options.pop("formatter", None)


def _tensor_argument(name: str, input):
    if not is_tensor(input):
        raise TypeError(f"{name}(): argument 'input' must be Tensor, not "
                        f"{type(input).__name__}")
    return input


def is_complex(input) -> bool:
    """Whether ``input``'s dtype is complex64 or complex128, as ``torch.is_complex``."""
    return dtypes.is_complex(_tensor_argument("is_complex", input).dtype)


def is_nonzero(input) -> bool:
    """Whether the single element of ``input`` is nonzero, as ``torch.is_nonzero``: a tensor
    of no or several elements raises RuntimeError."""
    x = _tensor_argument("is_nonzero", input)
    n = int(np.prod(x.shape, dtype=np.int64))
    if n == 0:
        raise RuntimeError("is_nonzero: Boolean value of Tensor with no values is ambiguous")
    if n > 1:
        raise RuntimeError("is_nonzero: Boolean value of Tensor with more than one value is "
                           "ambiguous")
    return bool(np.asarray(x.numpy()).reshape(()) != 0)


def is_same_size(input, other) -> bool:
    """Whether two tensors have the same shape, as ``torch.is_same_size``."""
    return tuple(_tensor_argument("is_same_size", input).shape) == tuple(
        _tensor_argument("is_same_size", other).shape)


def is_conj(input) -> bool:
    """False: duograph's ``conj`` gives a new tensor, never a lazily conjugated view, so no
    tensor carries PyTorch's conjugate bit (``torch.is_conj``)."""
    _tensor_argument("is_conj", input)
    return False


def is_neg(input) -> bool:
    """False: no duograph tensor carries PyTorch's lazy negation bit (``torch.is_neg``)."""
    _tensor_argument("is_neg", input)
    return False


def resolve_conj(input):
    """``input`` itself: there is no lazy conjugation to materialise
    (``torch.resolve_conj``)."""
    return _tensor_argument("resolve_conj", input)


def resolve_neg(input):
    """``input`` itself: there is no lazy negation to materialise (``torch.resolve_neg``)."""
    return _tensor_argument("resolve_neg", input)


class _NumInfo:
    """The fields of ``finfo``/``iinfo``, printed as PyTorch prints them."""

    _fields: tuple = ()

    def __repr__(self) -> str:
        kind = type(self).__name__
        shown = ", ".join(f"{k}={getattr(self, k):.6g}" if isinstance(getattr(self, k), float)
                          else f"{k}={getattr(self, k)}" for k in self._fields)
        return f"{kind}({shown}, dtype={self.dtype})"


class finfo(_NumInfo):
    """Machine limits of a floating-point dtype (default: the default dtype), as
    ``torch.finfo``: ``bits``, ``eps``, ``max``, ``min``, ``tiny``, ``smallest_normal``,
    ``resolution`` and ``dtype``. A complex dtype reports its real part's type."""

    _fields = ("resolution", "min", "max", "eps", "smallest_normal", "tiny")

    def __init__(self, type=None):
        name = dtypes.DEFAULT_FLOAT if type is None else dtypes.as_dtype(type)
        name = {"complex64": "float32", "complex128": "float64"}.get(name, name)
        if dtypes.kind(name) != "f":
            raise TypeError("finfo() requires a floating point input type, found "
                            f"{name}. Use iinfo to handle it")
        import ml_dtypes                  # numpy's finfo lacks bfloat16 and the float8s
        info = ml_dtypes.finfo(np.dtype(name))
        self.bits, self.dtype = int(info.bits), name
        self.eps, self.max, self.min = float(info.eps), float(info.max), float(info.min)
        self.tiny = self.smallest_normal = float(info.smallest_normal)
        # PyTorch's resolution: 10 ** -(the decimal digits eps resolves), a power of ten
        self.resolution = 10.0 ** -int(math.floor(-math.log10(self.eps)))


class iinfo(_NumInfo):
    """Limits of an integer dtype, as ``torch.iinfo``: ``bits``, ``min``, ``max``, ``dtype``."""

    _fields = ("min", "max")

    def __init__(self, type):
        name = dtypes.as_dtype(type)
        if name == "bool":
            raise TypeError("bool is not supported by iinfo")
        if dtypes.kind(name) != "i":
            raise TypeError(f"iinfo() requires an integer input type, found {name}. Use "
                            "finfo to handle it")
        import ml_dtypes                  # int4/int2 are ml_dtypes' types
        info = ml_dtypes.iinfo(np.dtype(name))
        self.bits, self.min, self.max, self.dtype = int(info.bits), int(info.min), \
            int(info.max), name
