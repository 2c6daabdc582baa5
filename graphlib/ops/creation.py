"""Creation ops: constants, filled tensors, ranges, and seeded random numbers.

Random ops take their randomness as an explicit ``seed`` input (an int64 scalar), so a graph
is a deterministic function of its inputs. Each random node also gets a ``stream`` number,
distinct per node of a graph, so two calls with the same seed draw independent numbers while
running the same graph twice with the same seed gives the same numbers.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import ml_dtypes
import numpy as np

from .. import dtypes
from .. import xp as xpu
from ..attrs import Attr, Attrs, AttrValueError
from ..batching import leading_batch_rule
from ..dispatch import apply
from ..errors import DTypeError, GraphError, ShapeError, UnsupportedDTypeError, located
from ..ir import ConstArray, current_graph, install_service
from ..registry import OpDef, register
from ..types import TensorType, as_shape
from ._common import operand


def _constant_infer(types, attrs):
    v = attrs["value"]
    shape = v.array.shape if isinstance(v, ConstArray) else ()
    return [TensorType(shape, attrs["dtype"])]


def _constant_kernel(xp, value, dtype):
    if isinstance(value, ConstArray):
        return xp.asarray(value.array, dtype=dtype)
    return xp.asarray(value, dtype=dtype)


constant_op = register(OpDef("constant", _constant_infer, _constant_kernel, constant=True,
                             external=True,
                             attrs=Attrs(value=Attr("constant"), dtype=Attr("dtype"))))


def _filled_infer(types, attrs):
    return [TensorType(attrs["shape"], attrs["dtype"])]


full_op = register(OpDef(
    "full", _filled_infer,
    lambda xp, shape, fill_value, dtype: xp.full(shape, fill_value, dtype=dtype),
    cheap=True, fills=True,
    attrs=Attrs(shape=Attr("shape"), fill_value=Attr("number"), dtype=Attr("dtype"))))


def _like_infer(types, attrs):
    (t,) = types
    return [TensorType(t.shape, attrs["dtype"] or t.dtype)]


full_like_op = register(OpDef(
    "full_like", _like_infer,
    lambda xp, x, fill_value, dtype: xp.full(x.shape, fill_value, dtype=dtype or x.dtype),
    nondiff_inputs=(0,), cheap=True, fills=True,
    complex_ok=True, storage_ok=True,
    attrs=Attrs(fill_value=Attr("number"), dtype=Attr("dtype", default=None)),
    batch=leading_batch_rule))


def _arange_size(start, end, step) -> int:
    if all(isinstance(v, int) for v in (start, end, step)):
        return max(0, -((start - end) // step))       # exact for ints of any size
    return max(0, math.ceil((end - start) / step))


def _arange_infer(types, attrs):
    return [TensorType((_arange_size(attrs["start"], attrs["end"], attrs["step"]),),
                       attrs["dtype"])]


def _arange_kernel(xp, start, end, step, dtype):
    if dtypes.kind(dtype) != "f":     # counted in int64, then wrapped, as in PyTorch
        n = _arange_size(start, end, step)
        return xp.arange(n, dtype="int64").__mul__(step).__add__(start).astype(dtype)
    return xp.arange(start, end, step, dtype=dtype)


arange_op = register(OpDef(
    "arange", _arange_infer, _arange_kernel,
    attrs=Attrs(start=Attr("number"), end=Attr("number"), step=Attr("number"),
                dtype=Attr("dtype"))))


def _eye_infer(types, attrs):
    return [TensorType((attrs["n"], attrs["m"]), attrs["dtype"])]


eye_op = register(OpDef("eye", _eye_infer,
                        lambda xp, n, m, dtype: xp.eye(n, m, dtype=dtype),
                        attrs=Attrs(n=Attr(int, min=0), m=Attr(int, min=0), dtype=Attr("dtype"))))


def _linspace_infer(types, attrs):
    return [TensorType((attrs["steps"],), attrs["dtype"])]


def _linspace_kernel(xp, start, end, steps, dtype):
    if dtypes.is_float(dtype):
        return xp.linspace(start, end, steps, dtype=dtype)
    # integers truncate toward zero, as PyTorch (numpy's integer linspace rounds down)
    return xp.trunc(xp.linspace(start, end, steps, dtype="float64")).astype(dtype)


linspace_op = register(OpDef(
    "linspace", _linspace_infer, _linspace_kernel,
    attrs=Attrs(start=Attr("number"), end=Attr("number"), steps=Attr(int, min=0),
                dtype=Attr("dtype"))))


def _random_infer(types, attrs):
    (seed,) = types
    _check_seed(seed)
    return [TensorType(attrs["shape"], attrs["dtype"])]


def _check_seed(t):
    if t.ndim != 0 or dtypes.kind(t.dtype) != "i":
        raise DTypeError(f"expected an integer scalar seed, found {t!r}")


def _uniform_kernel(xp, seed, shape, low, high, dtype, stream):
    rng = xpu.rng(xp, seed, stream)
    u = rng.random(shape, dtype=xp.float64 if dtype == "float16" else dtype)
    out = (u * (high - low) + low).astype(dtype, copy=False)
    # rounding to ``dtype`` can reach ``high`` (float16 does, 1 draw in 4000): stay below it
    top = xp.nextafter(xp.asarray(high, dtype=dtype), xp.asarray(low, dtype=dtype))
    return xp.minimum(out, top)


def _normal_kernel(xp, seed, shape, mean, std, dtype, stream):
    rng = xpu.rng(xp, seed, stream)
    z = rng.standard_normal(shape, dtype=xp.float64 if dtype == "float16" else dtype)
    return (z * std + mean).astype(dtype, copy=False)


uniform_op = register(OpDef("uniform", _random_infer, _uniform_kernel, random=True,
                            nondiff_inputs=(0,),
                            attrs=Attrs(shape=Attr("shape"), low=Attr("number"),
                                        high=Attr("number"), dtype=Attr("dtype"),
                                        stream=Attr(int, default=None))))
normal_op = register(OpDef("normal", _random_infer, _normal_kernel, random=True,
                           nondiff_inputs=(0,),
                           attrs=Attrs(shape=Attr("shape"), mean=Attr("number"), std=Attr("number"),
                                       dtype=Attr("dtype"), stream=Attr(int, default=None))))


def _bernoulli_infer(types, attrs):
    p, seed = types
    _check_seed(seed)
    if not dtypes.is_float(p.dtype):
        raise DTypeError(f"bernoulli: expected floating-point probabilities, found {p.dtype}")
    return [TensorType(p.shape, p.dtype)]


def _bernoulli_kernel(xp, p, seed, stream):
    rng = xpu.rng(xp, seed, stream)
    return (rng.random(p.shape) < p).astype(p.dtype)


bernoulli_op = register(OpDef("bernoulli", _bernoulli_infer, _bernoulli_kernel, random=True,
                              nondiff_inputs=(0, 1),
                              attrs=Attrs(stream=Attr(int, default=None))))


def _randint_infer(types, attrs):
    (seed,) = types
    _check_seed(seed)
    if attrs["high"] <= attrs["low"]:
        raise ValueError(f"randint: high ({attrs['high']}) must exceed low ({attrs['low']})")
    return [TensorType(attrs["shape"], attrs["dtype"])]


def _randint_kernel(xp, seed, shape, low, high, dtype, stream):
    rng = xpu.rng(xp, seed, stream)
    return rng.integers(low, high, size=shape).astype(dtype, copy=False)


randint_op = register(OpDef("randint", _randint_infer, _randint_kernel, random=True,
                            nondiff_inputs=(0,),
                            attrs=Attrs(shape=Attr("shape"), low=Attr(int), high=Attr(int),
                                        dtype=Attr("dtype"), stream=Attr(int, default=None))))

# -- public functions --------------------------------------------------------------------------
_default_seed: Optional[Callable[[], int]] = None


def set_default_seed_source(fn: Optional[Callable[[], int]]) -> None:
    """Eager mode installs its global generator here: random ops without a seed draw one."""
    global _default_seed
    _default_seed = fn


def _graph_seed_start() -> int:
    """The first value of a graph's ``rng_seed`` state: drawn from eager mode's generator
    when one is installed, so ``dg.manual_seed()`` makes graph-mode dropout reproducible."""
    return _default_seed() if _default_seed is not None else 0


install_service("default_seed", _graph_seed_start)     # Graph.seed_state()


def _seed_operand(seed, name):
    if seed is not None:
        return seed
    if current_graph() is None and _default_seed is not None:
        return _default_seed()
    raise GraphError(located(f"{name}: graph-mode random ops need an explicit seed, e.g. "
                             f"seed = dg.placeholder('seed', (), 'int64'); "
                             f"{name}(..., seed=seed)"))


def _size(shape, name):
    if not isinstance(shape, (tuple, list)):
        shape = (shape,)
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    try:
        out = as_shape(shape)
    except (TypeError, ValueError) as e:
        raise ShapeError(located(f"{name}: {e}")) from None
    if current_graph() is None and any(isinstance(d, str) for d in out):
        raise ShapeError(located(f"{name}: expected int sizes (a symbolic size such as "
                                 f"{next(d for d in out if isinstance(d, str))!r} needs "
                                 f"graph mode), found {list(shape)}"))
    return out


def _number(value, name: str, what: str, integer: bool = False):
    """A Python number argument (numpy scalars count), else a TypeError naming ``name``."""
    if hasattr(value, "item") and getattr(value, "shape", None) == () and not hasattr(
            value, "graph"):
        value = value.item()
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok:
        raise TypeError(located(f"{name}: expected {what} to be "
                                f"{'an int' if integer else 'a number'}, found "
                                f"{type(value).__name__} {value!r}"))
    return value


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def _limits(dtype: str) -> tuple:
    """(lowest, largest) value of ``dtype`` (bfloat16's through ml_dtypes)."""
    if dtypes.is_float(dtype):
        info = ml_dtypes.finfo(dtype) if dtype == "bfloat16" else np.finfo(dtype)
        return float(info.min), float(info.max)
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _text(limit) -> str:
    return str(limit) if isinstance(limit, int) else f"{limit:.6g}"


def _checked_value(value, dtype: str, name: str, what: str):
    """``value`` (a Python number) for a tensor of ``dtype``, checked as PyTorch converts a
    fill value or a bound (``c10::checked_convert``): a value outside the dtype's range is
    refused ("value cannot be converted ... without overflow") where numpy would wrap it or
    make it inf; infinities fill float dtypes and NaN too, but no integer dtype; an int fills
    an unsigned dtype from -max on, by two's complement (-1 is 255 in uint8); bool takes
    anything. Python ints beyond int64 are refused for every dtype."""
    if isinstance(value, bool) or dtype == "bool":
        return value
    if isinstance(value, int) and not _INT64_MIN <= value <= _INT64_MAX:
        raise AttrValueError(located(f"{name}: {what} {value} cannot be converted to int64 "
                                     f"without overflow (as in PyTorch)"))
    lo, hi = _limits(dtype)
    if dtypes.is_float(dtype):
        ok = not math.isfinite(value) or -hi <= value <= hi
    elif isinstance(value, float):
        ok = math.isfinite(value) and lo <= value <= hi
    elif lo == 0:       # unsigned: -max..-1 wrap by two's complement, as in PyTorch
        ok = -hi <= value <= hi
        value = value % (hi + 1) if ok else value
    else:
        ok = lo <= value <= hi
    if not ok:
        raise AttrValueError(located(f"{name}: {what} {value!r} cannot be converted to {dtype} "
                                     f"without overflow (its range is [{_text(lo)}, "
                                     f"{_text(hi)}]), as in PyTorch"))
    return value


def _dtype(dtype, name: str, default=None):
    """``dtype`` as a dtype name (``default`` for None); a bad one is a TypeError naming
    ``name``."""
    if dtype is None:
        return default
    try:
        return dtypes.as_dtype(dtype)
    except (TypeError, ValueError) as e:
        raise TypeError(located(f"{name}: {e}")) from None


def _float_dtype(dtype, name: str = "tensor"):
    return _dtype(dtype, name, dtypes.DEFAULT_FLOAT)


def _random_float_dtype(dtype, name: str):
    """A floating-point dtype for a random draw: an integer or bool dtype is refused, as
    PyTorch refuses it (a NotImplementedError there; UnsupportedDTypeError is one too)."""
    dt = _float_dtype(dtype, name)
    if not dtypes.is_float(dt):
        raise UnsupportedDTypeError(located(f"{name}: expected a floating-point dtype for random "
                                 f"samples, found {dt}"))
    return dt


def constant(value, dtype=None):
    """A tensor holding ``value`` (a number, nested list or array)."""
    try:
        dt = dtypes.as_dtype(dtype) if dtype is not None else None
        if isinstance(value, (bool, int, float, complex)) and not isinstance(value,
                                                                             np.ndarray):
            dt = dt or dtypes.default_dtype_for(value)
            py = dtypes.python_scalar(value, dt)
            return apply(constant_op, (), {"value": py, "dtype": dt})
        arr = np.asarray(value)
        dt = dt or dtypes.infer_data_dtype(value)
        arr = arr.astype(dt)
    except (TypeError, ValueError) as e:   # a string, an object, a ragged list...
        raise TypeError(located(f"constant: {e}")) from None
    return apply(constant_op, (), {"value": ConstArray(arr), "dtype": dt})


def _fill_value(value, name):
    """A Python number to fill with (numpy scalars count)."""
    if hasattr(value, "item") and getattr(value, "shape", None) == () and not hasattr(
            value, "graph"):
        value = value.item()
    if not isinstance(value, (bool, int, float)):
        raise TypeError(located(f"{name}: expected a Python number as fill_value, found "
                                f"{type(value).__name__}"))
    return value


def full(size, fill_value, dtype=None):
    """A tensor of shape ``size`` filled with ``fill_value``."""
    fill_value = _fill_value(fill_value, "full")
    dt = _dtype(dtype, "full", dtypes.default_dtype_for(fill_value))
    return full_op(shape=_size((size,) if isinstance(size, (int, str)) else size, "full"),
                   fill_value=_checked_value(fill_value, dt, "full", "fill_value"), dtype=dt)


def zeros(*size, dtype=None):
    """A tensor of zeros (float32 unless ``dtype`` says otherwise)."""
    return full_op(shape=_size(size, "zeros"), fill_value=0,
                   dtype=_float_dtype(dtype, "zeros"))


def ones(*size, dtype=None):
    """A tensor of ones (float32 unless ``dtype`` says otherwise)."""
    return full_op(shape=_size(size, "ones"), fill_value=1,
                   dtype=_float_dtype(dtype, "ones"))


def full_like(x, fill_value, dtype=None, _name="full_like"):
    """A tensor shaped like ``x`` (and of its dtype unless ``dtype`` is given), filled."""
    x = operand(x, _name)
    dt = _dtype(dtype, _name)
    value = _checked_value(_fill_value(fill_value, _name), dt or dtypes.as_dtype(x.dtype),
                           _name, "fill_value")
    return full_like_op(x, fill_value=value, dtype=dt)


def zeros_like(x, dtype=None):
    """Zeros with the shape of ``x`` (and its dtype unless ``dtype`` is given)."""
    return full_like(x, 0, dtype, _name="zeros_like")


def ones_like(x, dtype=None):
    """Ones with the shape of ``x`` (and its dtype unless ``dtype`` is given)."""
    return full_like(x, 1, dtype, _name="ones_like")


def arange(start, end=None, step=1, dtype=None):
    """Values from ``start`` (inclusive) to ``end`` (exclusive) by ``step``."""
    if end is None:
        start, end = 0, start
    start, end, step = (_number(v, "arange", w) for v, w in
                        ((start, "start"), (end, "end"), (step, "step")))
    if dtype is None:
        dtype = (dtypes.DEFAULT_FLOAT if any(isinstance(v, float) for v in (start, end, step))
                 else dtypes.DEFAULT_INT)
    dtype = _dtype(dtype, "arange")
    start, end, step = _arange_bounds(start, end, step, dtype)
    return arange_op(start=start, end=end, step=step, dtype=dtype)


def _arange_bounds(start, end, step, dtype: str) -> tuple:
    """(start, end, step) for ``arange_op``, checked as PyTorch checks them. Integer dtypes
    count in int64 from the bounds truncated to int64 (so ``arange(0, 5, 0.5,
    dtype=int64)`` has a step of 0 and is refused); the size is that of the bounds as given,
    except for int64, counted exactly in ints. A bound beyond int64, an infinite or NaN
    bound, a range whose direction disagrees with the step's sign and a size beyond int64
    are errors, as there."""
    for v, what in ((start, "start"), (end, "end"), (step, "step")):
        if isinstance(v, int) and not _INT64_MIN <= v <= _INT64_MAX:
            raise AttrValueError(located(f"arange: {what} {v} cannot be converted to int64 "
                                         f"without overflow (as in PyTorch)"))
    if not (math.isfinite(start) and math.isfinite(end) and math.isfinite(step)):
        raise AttrValueError(located(f"arange: unsupported range {start} -> {end} by {step} "
                                     f"(start, end and step must be finite)"))
    if dtype == "bool":
        raise UnsupportedDTypeError(located("arange: dtype bool is not supported (as in "
                                            "PyTorch); expected a number dtype"))
    given = (start, end, step)
    if dtypes.kind(dtype) != "f":
        for v, what in zip(given, ("start", "end", "step")):
            if not _INT64_MIN <= v < 2.0 ** 63:
                raise AttrValueError(located(f"arange: {what} {v} cannot be converted to "
                                             f"int64 without overflow (as in PyTorch)"))
        start, end, step = (int(v) for v in given)      # toward zero
    if step == 0:
        how = f" ({given[2]} truncated to an int, as {dtype} counts)" if given[2] else ""
        raise AttrValueError(located(f"arange: step must not be 0{how}"))
    if (step > 0 and end < start) or (step < 0 and end > start):
        raise AttrValueError(located(f"arange: the bounds {start} -> {end} are inconsistent "
                                     f"with the sign of step {step} (as PyTorch refuses)"))
    n = _arange_size(*((start, end, step) if dtype == "int64" else given))
    if n > _INT64_MAX:
        raise AttrValueError(located(f"arange: {n} elements (start {start}, end {end}, step "
                                     f"{step}) are more than an int64 can count"))
    if dtypes.kind(dtype) != "f":
        end = start + n * step          # the end that gives the size PyTorch counts
    return start, end, step


def eye(n: int, m: Optional[int] = None, dtype=None):
    """Identity matrix of shape (n, m)."""
    n = _number(n, "eye", "n", integer=True)
    m = n if m is None else _number(m, "eye", "m", integer=True)
    return eye_op(n=n, m=m, dtype=_float_dtype(dtype, "eye"))


def linspace(start, end, steps: int, dtype=None):
    """``steps`` evenly spaced values from ``start`` to ``end`` inclusive (integer dtypes
    truncate toward zero, as PyTorch; bool is refused)."""
    start, end = _number(start, "linspace", "start"), _number(end, "linspace", "end")
    steps = _number(steps, "linspace", "steps", integer=True)
    if steps < 0:
        raise ValueError(located(f"linspace: steps must be non-negative, found {steps}"))
    dtype = _float_dtype(dtype, "linspace")
    if dtype == "bool":
        raise DTypeError(located("linspace: dtype bool is not supported (as in PyTorch); "
                                 "expected an integer or floating-point dtype"))
    # the bounds convert to the dtype first, as in PyTorch: refused when out of its range,
    # truncated to ints for an integer dtype (uint8 takes -5 as 251)
    start, end = (_checked_value(v, dtype, "linspace", what)
                  for v, what in ((start, "start"), (end, "end")))
    if not dtypes.is_float(dtype):
        start, end = int(start), int(end)
    return linspace_op(start=float(start), end=float(end), steps=int(steps), dtype=dtype)


def uniform(*size, seed=None, low: float = 0.0, high: float = 1.0, dtype=None,
            _name="uniform"):
    """Uniform samples in [low, high) drawn from ``seed``."""
    low, high = _number(low, _name, "low"), _number(high, _name, "high")
    if not low <= high:
        raise ValueError(located(f"{_name}: expected low <= high, found low={low}, "
                                 f"high={high}"))
    return uniform_op(_seed_operand(seed, _name), shape=_size(size, _name),
                      low=float(low), high=float(high), dtype=_random_float_dtype(dtype, _name))


def rand(*size, seed=None, dtype=None):
    """Uniform samples in [0, 1)."""
    return uniform(*size, seed=seed, dtype=dtype, _name="rand")


def normal(*size, seed=None, mean: float = 0.0, std: float = 1.0, dtype=None,
           _name="normal"):
    """Normal samples N(mean, std**2) drawn from ``seed``."""
    mean, std = _number(mean, _name, "mean"), _number(std, _name, "std")
    if not std >= 0:
        raise ValueError(located(f"{_name}: std must be >= 0, found {std}"))
    return normal_op(_seed_operand(seed, _name), shape=_size(size, _name),
                     mean=float(mean), std=float(std),
                     dtype=_random_float_dtype(dtype, _name))


def randn(*size, seed=None, dtype=None):
    """Standard normal samples."""
    return normal(*size, seed=seed, dtype=dtype, _name="randn")


def bernoulli(p, seed=None):
    """1 with probability ``p`` (elementwise), else 0, in the dtype of ``p``."""
    return bernoulli_op(p, _seed_operand(seed, "bernoulli"))


def randint(low, high=None, size=(), seed=None, dtype=None):
    """Integers uniformly drawn from [low, high)."""
    if high is None:
        low, high = 0, low
    low, high = _number(low, "randint", "low", True), _number(high, "randint", "high", True)
    dtype = _dtype(dtype, "randint", dtypes.DEFAULT_INT)
    _check_randint_range(low, high, dtype)
    return randint_op(_seed_operand(seed, "randint"), shape=_size((size,) if isinstance(
        size, (int, str)) else size, "randint"), low=int(low), high=int(high), dtype=dtype)


def _check_randint_range(low: int, high: int, dtype: str) -> None:
    """PyTorch's checks of ``randint``'s bounds: ``low`` and ``high - 1`` must be values of
    ``dtype`` (``randint(0, 300, dtype=uint8)`` would wrap), both within int64."""
    for v, what in ((low, "low"), (high, "high")):
        if not _INT64_MIN <= v <= _INT64_MAX:
            raise AttrValueError(located(f"randint: {what} {v} cannot be converted to int64 "
                                         f"without overflow (as in PyTorch)"))
    if high <= low:
        return          # refused by the op, naming both
    lo, hi = (0, 1) if dtype == "bool" else _limits(dtype)
    if dtypes.is_float(dtype):
        lo = -hi
    for v, what in ((low, "low"), (high - 1, "high - 1")):
        if not lo <= v <= hi:
            raise AttrValueError(located(
                f"randint: {what} = {v} is out of bounds for {dtype} (its values lie in "
                f"[{_text(lo)}, {_text(hi)}]); the draws would wrap around, PyTorch refuses "
                f"them too"))


# -- device transfer ---------------------------------------------------------------------------
def _to_device_infer(types, attrs):
    if attrs["device"] not in ("cpu", "cuda"):
        raise ValueError(f"to_device: unknown device {attrs['device']!r}")
    return [types[0]]


def _to_device_kernel(xp, x, device):
    return xpu.to_device(x, device)


to_device_op = register(OpDef(
    "to_device", _to_device_infer, _to_device_kernel,
    lambda cts, ins, outs, a, needs: [to_device(cts[0], getattr(ins[0], "device", "cpu"))],
    complex_ok=True, storage_ok=True, attrs=Attrs(device=Attr(str, choices=("cpu", "cuda"))),
    batch=leading_batch_rule))


def to_device(x, device: str):
    """Copy ``x`` to ``device`` ('cpu' or 'cuda'); differentiable."""
    return to_device_op(x, device=device)
