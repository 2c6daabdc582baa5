"""TensorType: a shape (ints or named symbolic dims) and a dtype; broadcasting rules."""
from __future__ import annotations

from typing import Iterable, Mapping, Optional, Sequence, Tuple, Union

from . import dtypes
from .errors import ShapeError, located

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


def _as_int_dim(dim, op: str) -> int:
    """``dim`` as a Python int (numpy integers count); anything else is a TypeError."""
    if isinstance(dim, bool) or not hasattr(dim, "__index__"):
        raise TypeError(located(f"{op}: expected an int dim, found {dim!r}"))
    return int(dim.__index__())


def normalize_dim(dim: int, ndim: int, op: str = "", allow_end: bool = False) -> int:
    """A possibly negative axis as a non-negative one, with a clear error when out of range."""
    dim = _as_int_dim(dim, op)
    hi = ndim + 1 if allow_end else ndim
    if not -hi <= dim < hi:
        lo_s, hi_s = -hi, hi - 1
        raise ShapeError(located(f"{op}: dim {dim} out of range for a tensor with {ndim} dims "
                                 f"(expected {lo_s}..{hi_s})"))
    return dim % hi if hi else 0


def normalize_dims(dim, ndim: int, op: str = "") -> Tuple[int, ...]:
    """None -> all dims; an int or a sequence of ints -> sorted non-negative dims. A dim
    named twice (``(1, -1)`` of a 2-D tensor) is an error, as in PyTorch."""
    if dim is None:
        return tuple(range(ndim))
    if hasattr(dim, "__index__") and not isinstance(dim, bool):
        dim = (dim,)
    elif not isinstance(dim, (tuple, list)):
        raise TypeError(located(f"{op}: expected an int or a tuple of ints as dim, found "
                                f"{dim!r}"))
    dims = [normalize_dim(d, max(ndim, 1) if ndim == 0 else ndim, op) for d in dim]
    if len(set(dims)) != len(dims):
        raise ShapeError(located(f"{op}: dims {tuple(dim)} name the same dim more than once "
                                 f"(a tensor with {ndim} dims)"))
    if ndim == 0:
        return ()
    return tuple(sorted(dims))


def dims_product(dims: Iterable[Dim]):
    """Product of dims, as (int coefficient, sorted tuple of symbols); a derived product such
    as ``N*6`` counts as its factors, so ``[N*6]`` and ``[N,2,3]`` hold as many elements."""
    coeff, syms = 1, []
    for d in dims:
        if isinstance(d, int):
            coeff *= d
            continue
        for factor in _split_top(d, "*"):
            if factor.isdigit():
                coeff *= int(factor)
            else:
                syms.append(_unparen(factor))
    return coeff, tuple(sorted(syms))


# -- derived dims ------------------------------------------------------------------------------
# An op whose output size is a function of a symbolic input size names it with an expression
# over the symbols: ``N+2`` (cat, pad), ``N*6`` (flatten, reshape with -1), ``N[1:]``
# (slicing). The runtime evaluates them (``eval_dim``) once the feeds bind the symbols.

def _split_top(expr: str, sep: str) -> list:
    """``expr`` split at ``sep`` where it is outside brackets and parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(expr):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(expr[start:i])
            start = i + 1
    parts.append(expr[start:])
    return parts


def _unparen(expr: str) -> str:
    """``expr`` without parentheses that enclose all of it."""
    while expr.startswith("(") and _closing(expr, 0) == len(expr) - 1:
        expr = expr[1:-1]
    return expr


def _closing(expr: str, start: int) -> int:
    """Index of the bracket closing the one at ``start``."""
    depth = 0
    for i in range(start, len(expr)):
        if expr[i] in "([":
            depth += 1
        elif expr[i] in ")]":
            depth -= 1
            if depth == 0:
                return i
    return -1


def _operand(d: Dim, ops: str) -> str:
    """``d`` as an operand next to a higher-precedence operator: parenthesised when it holds
    one of ``ops`` at its top level."""
    s = str(d)
    return f"({s})" if any(len(_split_top(s, op)) > 1 for op in ops) else s


def dim_add(a: Dim, b: Dim) -> Dim:
    """``a + b`` for dims: an int, or a derived symbol such as ``N+2``."""
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    if b == 0:
        return a
    if a == 0:
        return b
    return f"{a}+{b}"


def dim_product(dims: Iterable[Dim]) -> Dim:
    """The product of ``dims``: an int, a symbol, or a derived symbol such as ``N*6``."""
    coeff, syms = dims_product(dims)
    if coeff == 0 or not syms:
        return coeff
    factors = [_operand(s, "+") for s in syms] + ([str(coeff)] if coeff != 1 else [])
    return "*".join(factors)


def dim_slice(d: Dim, start, stop, step) -> str:
    """The size of ``x[start:stop:step]`` along a symbolic dim ``d``, e.g. ``N[1:]``."""
    spec = f"{'' if start is None else start}:{'' if stop is None else stop}"
    if step not in (None, 1):
        spec += f":{step}"
    return f"{_operand(d, '+*')}[{spec}]"


def eval_dim(d: Dim, bindings: Mapping[str, int]) -> Optional[int]:
    """The size ``d`` has once ``bindings`` give each symbol's size; None when it cannot be
    evaluated (an unbound symbol)."""
    if isinstance(d, int):
        return d
    if d in bindings:
        return bindings[d]
    for sep in "+*":
        parts = _split_top(d, sep)
        if len(parts) > 1:
            sizes = [eval_dim(p, bindings) for p in parts]
            if any(s is None for s in sizes):
                return None
            total = 0 if sep == "+" else 1
            for s in sizes:
                total = total + s if sep == "+" else total * s
            return total
    if d.isdigit():
        return int(d)
    if d.startswith("(") and _closing(d, 0) == len(d) - 1:
        return eval_dim(d[1:-1], bindings)
    if d.endswith("]"):
        open_at = next((i for i in range(len(d) - 2, 0, -1)
                        if d[i] == "[" and _closing(d, i) == len(d) - 1), 0)
        size = eval_dim(d[:open_at], bindings) if open_at else None
        try:
            bounds = [int(b) if b else None for b in d[open_at + 1:-1].split(":")]
        except ValueError:
            return None
        if size is None or not 2 <= len(bounds) <= 3:
            return None
        return len(range(*slice(*bounds).indices(size)))
    return None
