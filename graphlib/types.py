"""TensorType: a shape (ints or named symbolic dims) and a dtype; broadcasting rules."""
from __future__ import annotations

from typing import Iterable, Sequence, Tuple, Union

from . import dtypes
from .errors import ShapeError

Dim = Union[int, str]
Shape = Tuple[Dim, ...]


def as_shape(shape) -> Shape:
    """Normalise a shape given as an int, a tuple/list of ints and symbol names."""
    if isinstance(shape, (int, str)) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        dims = tuple(shape)
    except TypeError:
        raise TypeError(f"expected a shape (tuple of ints or symbol names), found {shape!r}")
    out = []
    for d in dims:
        if isinstance(d, str):
            if not d:
                raise ValueError(f"empty symbol name in shape {shape!r}")
            out.append(d)
        elif hasattr(d, "__index__") and not isinstance(d, bool):
            d = int(d.__index__())
            if d < 0:
                raise ValueError(f"negative dimension {d} in shape {shape!r}")
            out.append(d)
        else:
            raise TypeError(f"expected ints or symbol names in a shape, found {d!r} in {shape!r}")
    return tuple(out)


def is_static(shape: Shape) -> bool:
    return all(isinstance(d, int) for d in shape)


def format_shape(shape: Shape) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


class TensorType:
    """The abstract type of a Value: shape and dtype. Immutable and hashable."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype="float32"):
        object.__setattr__(self, "shape", as_shape(shape))
        object.__setattr__(self, "dtype", dtypes.as_dtype(dtype))

    def __setattr__(self, name, value):
        raise AttributeError("TensorType is immutable")

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self):
        """Number of elements (an int), or None when a dim is symbolic."""
        n = 1
        for d in self.shape:
            if not isinstance(d, int):
                return None
            n *= d
        return n

    def nbytes(self):
        n = self.numel()
        return None if n is None else n * dtypes.itemsize(self.dtype)

    def with_shape(self, shape) -> "TensorType":
        return TensorType(shape, self.dtype)

    def with_dtype(self, dtype) -> "TensorType":
        return TensorType(self.shape, dtype)

    def __eq__(self, other):
        return (isinstance(other, TensorType) and self.shape == other.shape
                and self.dtype == other.dtype)

    def __hash__(self):
        return hash((self.shape, self.dtype))

    def __repr__(self):
        return f"{dtypes.SHORT_NAMES[self.dtype]}{format_shape(self.shape)}"

    def to_json(self):
        return {"shape": list(self.shape), "dtype": self.dtype}


def broadcast_shapes(*shapes: Sequence[Dim], op: str = "broadcast") -> Shape:
    """numpy broadcasting extended to symbols.

    A symbol meets 1 -> the symbol; a symbol meets an int k > 1 -> k (the symbol must be 1 or
    k at run time); two different symbols cannot be broadcast at build time.
    """
    ndim = max((len(s) for s in shapes), default=0)
    result = []
    for axis in range(-ndim, 0):
        dim: Dim = 1
        for s in shapes:
            if len(s) < -axis:
                continue
            d = s[axis]
            if d == dim or d == 1:
                continue
            if dim == 1:
                dim = d
            elif isinstance(d, str) and isinstance(dim, int):
                continue
            elif isinstance(dim, str) and isinstance(d, int):
                dim = d
            else:
                shown = " and ".join(format_shape(s) for s in shapes)
                raise ShapeError(f"{op}: shapes {shown} cannot be broadcast "
                                 f"(dim {axis}: {dim} vs {d})")
        result.append(dim)
    return tuple(result)


def normalize_dim(dim: int, ndim: int, op: str = "", allow_end: bool = False) -> int:
    """A possibly negative axis as a non-negative one, with a clear error when out of range."""
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"{op}: expected an int dim, found {dim!r}")
    hi = ndim + 1 if allow_end else ndim
    if not -hi <= dim < hi:
        lo_s, hi_s = -hi, hi - 1
        raise ShapeError(f"{op}: dim {dim} out of range for a tensor with {ndim} dims "
                         f"(expected {lo_s}..{hi_s})")
    return dim % hi if hi else 0


def normalize_dims(dim, ndim: int, op: str = "") -> Tuple[int, ...]:
    """None -> all dims; an int or a sequence -> sorted, de-duplicated non-negative dims."""
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, int):
        dim = (dim,)
    dims = sorted({normalize_dim(d, max(ndim, 1) if ndim == 0 else ndim, op) for d in dim})
    if ndim == 0:
        return ()
    return tuple(dims)


def dims_product(dims: Iterable[Dim]):
    """Product of dims, as (int coefficient, sorted tuple of symbols)."""
    coeff, syms = 1, []
    for d in dims:
        if isinstance(d, int):
            coeff *= d
        else:
            syms.append(d)
    return coeff, tuple(sorted(syms))
