"""TensorType: a shape (ints or named symbolic dims) and a dtype; broadcasting rules."""
from __future__ import annotations

from typing import Dict, Iterable, Mapping, Optional, Sequence, Tuple, Union

from . import dtypes
from .errors import DimError, ShapeError, located

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
            try:
                d = as_dim(d)
            except ValueError as e:
                raise ValueError(f"bad symbolic dim {d!r} in shape {shape!r}: {e}") from None
            if isinstance(d, int) and d < 0:
                raise ValueError(f"negative dimension {d} in shape {shape!r}")
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


# A dim that only its kernel knows, at run time (PyTorch's "unbacked" sizes): the rows a
# bounded while_loop saves for its gradient, one per trip it made. No feed binds it (a
# placeholder may not use the name), shape checks skip it, and the memory planner leaves a
# value with it to its kernel, which allocates it at run time.
RUNTIME_DIM = "_trips"


def has_runtime_dim(shape: Shape) -> bool:
    """Whether ``shape`` has a dim only known at run time (``RUNTIME_DIM``)."""
    return any(isinstance(d, str) and RUNTIME_DIM in dim_symbols(d) for d in shape)


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
        """The size of a tensor of this type in bytes, or None when a dim is symbolic."""
        n = self.numel()
        return None if n is None else n * dtypes.itemsize(self.dtype)

    def with_shape(self, shape) -> "TensorType":
        """This type with ``shape`` instead (same dtype)."""
        return TensorType(shape, self.dtype)

    def with_dtype(self, dtype) -> "TensorType":
        """This type with ``dtype`` instead (same shape)."""
        return TensorType(self.shape, dtype)

    def __eq__(self, other):
        return (isinstance(other, TensorType) and self.shape == other.shape
                and self.dtype == other.dtype)

    def __hash__(self):
        return hash((self.shape, self.dtype))

    def __repr__(self):
        return f"{dtypes.SHORT_NAMES[self.dtype]}{format_shape(self.shape)}"

    def to_json(self):
        """The type as a JSON-ready dict ``{'shape': [...], 'dtype': name}``."""
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
        raise DimError(located(f"{op}: dim {dim} out of range for a tensor with {ndim} dims "
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


def reduction_dims(dim, ndim: int, op: str = "") -> Tuple[int, ...]:
    """``normalize_dims`` for a reduction's ``dim``: None *or an empty tuple or list* means
    every dim, as in PyTorch (``torch.sum(x, dim=())`` is ``x.sum()``, not ``x``)."""
    if isinstance(dim, (tuple, list)) and len(dim) == 0:
        dim = None
    return normalize_dims(dim, ndim, op)


# -- symbolic dims -----------------------------------------------------------------------------
# A symbolic dimension is a sympy expression over integer symbols (the names users give, such
# as ``N``), held by ``SymDim``: a ``str`` whose text is the expression's one canonical form,
# so ``N+2`` and ``2+N`` are the same dim (equal, same hash, same JSON) and every place that
# prints or names a dim keeps working. Arithmetic goes through sympy, never through string
# concatenation; text (a user's ``"2*N"``, a graph file) is read by a small parser that knows
# only numbers, names, ``+ - * / //``, parentheses and a few functions: nothing is evaluated.

class SymDim(str):
    """A symbolic dim: canonical text (``str``) plus its sympy expression (``.expr``)."""

    expr: object          # the sympy expression

    symbols: Tuple[str, ...]   # the names of the symbols it depends on, sorted
    is_symbol: bool            # a plain symbol (``N``), not an expression (``N+2``)


_SYMPY = None
_TEXT_CACHE: dict = {}       # text a user or a file wrote -> its dim (int or SymDim)
_FUNCS = ("floor", "ceiling", "Max", "Min")


def _sympy():
    global _SYMPY
    if _SYMPY is None:
        import sympy     # heavy to import: loaded at the first symbolic dim
        _SYMPY = sympy
    return _SYMPY


def _symbol(name: str):
    # symbols stand for sizes of at least 1 (a batch, a length): sympy then simplifies
    # ``N[1:]`` to ``N-1`` and ``max(N, 1)`` to ``N``
    return _sympy().Symbol(name, integer=True, positive=True)


def _from_expr(expr) -> Dim:
    """An int when ``expr`` is a number, else the SymDim of its canonical text."""
    sp = _sympy()
    expr = sp.sympify(expr) if not isinstance(expr, sp.Basic) else expr
    if expr.is_Integer:
        return int(expr)
    if expr.is_number:
        raise ValueError(f"a dim must be a whole number, found {expr}")
    text = str(expr).replace(" ", "")
    d = _TEXT_CACHE.get(text)
    if d is None:
        d = SymDim(text)
        d.expr = expr
        d.symbols = tuple(sorted(str(x) for x in expr.free_symbols))
        d.is_symbol = bool(expr.is_Symbol)
        _TEXT_CACHE[text] = d
    return d


def _parse_dim(text: str):
    """Parse ``text`` (``N``, ``2*N+1``, ``floor((H-3)/2)+1``) into a sympy expression."""
    sp = _sympy()
    tokens = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch.isdigit():
            j = i
            while j < len(text) and text[j].isdigit():
                j += 1
            tokens.append(("num", text[i:j]))
            i = j
        elif ch.isalpha() or ch == "_":
            j = i
            while j < len(text) and (text[j].isalnum() or text[j] == "_"):
                j += 1
            tokens.append(("name", text[i:j]))
            i = j
        elif text.startswith("//", i):
            tokens.append(("op", "//"))
            i += 2
        elif ch in "+-*/(),":
            tokens.append(("op", ch))
            i += 1
        else:
            raise ValueError(f"unexpected {ch!r} in the dim {text!r}")
    tokens.append(("end", ""))
    pos = [0]

    def peek():
        return tokens[pos[0]]

    def take(value=None):
        tok = tokens[pos[0]]
        if value is not None and tok[1] != value:
            raise ValueError(f"expected {value!r} in the dim {text!r}, found {tok[1]!r}")
        pos[0] += 1
        return tok

    def atom():
        kind, val = take()
        if kind == "num":
            return sp.Integer(int(val))
        if kind == "name":
            if peek()[1] == "(" and val in _FUNCS:
                take("(")
                args = [expr()]
                while peek()[1] == ",":
                    take(",")
                    args.append(expr())
                take(")")
                return getattr(sp, val)(*args)
            if val in _FUNCS:
                raise ValueError(f"{val} needs arguments in the dim {text!r}")
            return _symbol(val)
        if val == "(":
            e = expr()
            take(")")
            return e
        if val == "-":
            return -atom()
        raise ValueError(f"unexpected {val or 'end'!r} in the dim {text!r}")

    def term():
        e = atom()
        while peek()[1] in ("*", "/", "//"):
            op = take()[1]
            rhs = atom()
            e = e * rhs if op == "*" else (e / rhs if op == "/" else sp.floor(e / rhs))
        return e

    def expr():
        e = term()
        while peek()[1] in ("+", "-"):
            op = take()[1]
            rhs = term()
            e = e + rhs if op == "+" else e - rhs
        return e

    out = expr()
    if peek()[0] != "end":
        raise ValueError(f"unexpected {peek()[1]!r} in the dim {text!r}")
    return out


def as_dim(d) -> Dim:
    """An int, or the canonical SymDim of a symbol name or expression (``"2+N"`` gives the
    same dim as ``"N+2"``)."""
    if isinstance(d, SymDim):
        return d
    if isinstance(d, str):
        cached = _TEXT_CACHE.get(d)
        if cached is not None:
            return cached
        if not d.strip():
            raise ValueError("empty symbol name")
        out = _from_expr(_parse_dim(d))
        _TEXT_CACHE[d] = out
        return out
    if hasattr(d, "__index__") and not isinstance(d, bool):
        return int(d.__index__())
    return _from_expr(d)


def _expr(d):
    sp = _sympy()
    if isinstance(d, int):
        return sp.Integer(d)
    d = as_dim(d)
    return sp.Integer(d) if isinstance(d, int) else d.expr


def dim_symbols(d: Dim) -> Tuple[str, ...]:
    """The symbol names a dim depends on (none for an int)."""
    if isinstance(d, int):
        return ()
    d = as_dim(d)
    return () if isinstance(d, int) else d.symbols


def dim_add(a: Dim, b: Dim) -> Dim:
    """``a + b`` for dims: an int, or a symbolic dim such as ``N+2``."""
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    return _from_expr(_expr(a) + _expr(b))


def dim_product(dims: Iterable[Dim]) -> Dim:
    """The product of ``dims``: an int, a symbol, or a symbolic dim such as ``6*N``."""
    dims = list(dims)
    if all(isinstance(d, int) for d in dims):
        n = 1
        for d in dims:
            n *= d
        return n
    return _from_expr(_sympy().Mul(*[_expr(d) for d in dims]))


def dims_equal(a: Dim, b: Dim) -> bool:
    """Whether two dims are equal for every value of their symbols (``N*(M+1)`` and
    ``N*M+N`` are, however each was written)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return a == b or _sympy().expand(_expr(a) - _expr(b)) == 0


def dim_ceil_div(a: Dim, b: int) -> Dim:
    """``ceil(a / b)`` for a dim ``a`` and a positive int ``b``."""
    if isinstance(a, int):
        return -(-a // b)
    return _from_expr(_sympy().ceiling(_expr(a) / b))


def dim_floor_div(a: Dim, b: int) -> Dim:
    """``a // b`` for a dim ``a`` and a positive int ``b``."""
    if isinstance(a, int):
        return a // b
    return _from_expr(_sympy().floor(_expr(a) / b))


def dim_quotient(a: Dim, b: Dim) -> Optional[Dim]:
    """``a / b`` when it divides exactly for every value of the symbols (a polynomial with
    integer coefficients), else None."""
    if isinstance(a, int) and isinstance(b, int):
        return a // b if b and a % b == 0 else None
    sp = _sympy()
    if _expr(b) == 0:
        return None
    q = sp.cancel(_expr(a) / _expr(b))
    num, den = sp.fraction(q)
    if not den.is_Integer or den != 1:
        return None
    # the generators are the symbols and any floor/ceiling terms (integer-valued: a floor
    # dim such as (H-3)//2+1 is no polynomial of H, but one of its floor term)
    poly = sp.Poly(num) if num.free_symbols else None
    if poly is not None and not all(c.is_Integer for c in poly.coeffs()):
        return None
    return _from_expr(num)


def dim_slice(d: Dim, start, stop, step) -> Dim:
    """The length of ``x[start:stop:step]`` along a dim ``d`` (Python's slice rules) for
    ``step > 0``."""
    sp = _sympy()
    n = _expr(d)
    step = 1 if step is None else step

    def bound(v, default):
        if v is None:
            return default
        return sp.Max(0, n + v) if v < 0 else sp.Min(n, v)

    lo, hi = bound(start, sp.Integer(0)), bound(stop, n)
    return _from_expr(sp.Max(0, sp.ceiling((hi - lo) / step)))


def eval_dim(d: Dim, bindings: Mapping[str, int]) -> Optional[int]:
    """The size ``d`` has once ``bindings`` give each symbol's size; None when it cannot be
    evaluated (an unbound symbol)."""
    if isinstance(d, int):
        return d
    v = bindings.get(d)
    if v is not None:
        return v
    d = as_dim(d)
    if isinstance(d, int):
        return d
    names = d.symbols
    if any(s not in bindings for s in names):
        return None
    key = (d, tuple(int(bindings[s]) for s in names))
    size = _EVAL_CACHE.get(key)
    if size is None:
        # exact rational arithmetic (floats would floor 11/3 - 5/3 to 1)
        sp = _sympy()
        size = int(d.expr.xreplace({_symbol(s): sp.Integer(v) for s, v in zip(names, key[1])}))
        if len(_EVAL_CACHE) > 65536:
            _EVAL_CACHE.clear()
        _EVAL_CACHE[key] = size
    return size


_EVAL_CACHE: dict = {}


def solve_dim(d: Dim, size: int, bindings: Mapping[str, int]) -> Optional[Dict[str, int]]:
    """The values of ``d``'s one unbound symbol that make it ``size`` ({} when all its
    symbols are bound and it equals ``size``); None when no whole non-negative value does,
    or when more than one symbol is unbound."""
    if isinstance(d, int):
        return {} if d == size else None
    d = as_dim(d)
    if isinstance(d, int):
        return {} if d == size else None
    unbound = [s for s in d.symbols if s not in bindings]
    if not unbound:
        return {} if eval_dim(d, bindings) == size else None
    if len(unbound) > 1:
        return None
    sp = _sympy()
    known = {_symbol(s): int(bindings[s]) for s in d.symbols if s in bindings}
    x = _symbol(unbound[0])
    expr = d.expr.subs(known)
    try:
        roots = sp.solve(sp.Eq(expr, size), x)
    except (NotImplementedError, TypeError):
        roots = []
    for r in roots:
        if r.is_Integer and r >= 0:
            return {unbound[0]: int(r)}
    return None


def dim_to_json(d: Dim):
    """A dim for a graph file: the int, or ``{"sym": canonical text}``."""
    return d if isinstance(d, int) else {"sym": str(as_dim(d))}


def dim_from_json(obj) -> Dim:
    """The dim ``dim_to_json`` wrote (text parsed, never evaluated)."""
    if isinstance(obj, int) and not isinstance(obj, bool) and obj >= 0:
        return obj
    if isinstance(obj, dict) and set(obj) == {"sym"} and isinstance(obj["sym"], str) \
            and 0 < len(obj["sym"]) <= 1000:
        return as_dim(obj["sym"])
    raise ValueError("expected a non-negative int or {\"sym\": text}")
