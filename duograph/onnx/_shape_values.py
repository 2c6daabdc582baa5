"""Shape values of the ONNX importer: integer tensors known at import up to symbolic dims.

A model exported with a dynamic batch computes its shapes at run time: ``Shape(x)`` of an
``x`` of type ``[N, 3, 8, 8]``, then ``Gather``, ``Concat``, ``Reshape``. duograph's ops take
shapes as attributes, whose dims may be symbolic (sympy-backed ``SymDim``s, see
``graphlib/types.py``), so the importer keeps such a value as a ``ShapeValue`` (a 0-d or 1-d
tensor whose entries are ints or symbolic dims) and computes the shape arithmetic on it at
import (``FOLDS``, keyed by ONNX op type). A consumer that takes a shape (Reshape, Expand,
ConstantOfShape, Range...) reads its dims; any other consumer (``x * x.shape[0]``) gets it as a
graph value, computed at run time from the dims of the graph inputs (``materialize``).

Integer initializers (shapes, axes, indices, which torch's dynamo exporter keeps as
initializers) and float ones used only as settings (a Resize's scales) are known at import
even when the initializers are imported as trainable state, which the other float ones stay
(``known_initializers``).
"""
from __future__ import annotations

from typing import Callable, Dict, Mapping, Optional, Tuple

import numpy as np

from ..graphlib import functional as F
from ..graphlib.types import SymDim, as_dim

INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8")


def _sympy():
    import sympy
    return sympy


def _expr(d):
    return d.expr if isinstance(d, SymDim) else _sympy().Integer(int(d))


def _dim(expr):
    """An int or the canonical SymDim of the sympy expression ``expr``."""
    return as_dim(expr)


class ShapeValue:
    """A 0-d or 1-d tensor of ``dtype`` whose entries are ints or symbolic dims."""

    __slots__ = ("elems", "ndim", "dtype")

    def __init__(self, elems, ndim: int, dtype: str = "int64"):
        self.elems = tuple(e if isinstance(e, SymDim) else int(e) for e in elems)
        self.ndim = ndim
        self.dtype = dtype
        if ndim == 0 and len(self.elems) != 1:
            raise ValueError("a 0-d shape value holds one entry")

    @property
    def shape(self) -> tuple:
        return () if self.ndim == 0 else (len(self.elems),)

    @property
    def symbolic(self) -> bool:
        return any(isinstance(e, SymDim) for e in self.elems)

    def __repr__(self):
        inner = ", ".join(str(e) for e in self.elems)
        return f"ShapeValue({inner if self.ndim == 0 else '[' + inner + ']'}, {self.dtype})"


def settle(v):
    """A ShapeValue with no symbolic entry as the numpy array it is; anything else as is."""
    if isinstance(v, ShapeValue) and not v.symbolic:
        return np.asarray(v.elems, dtype=v.dtype).reshape(v.shape)
    return v


def as_shape_value(v) -> Optional[ShapeValue]:
    """``v`` (a ShapeValue, or a small 0-d/1-d integer or bool array) as a ShapeValue; None
    for anything else (floats, larger arrays, graph values)."""
    if isinstance(v, ShapeValue):
        return v
    if isinstance(v, np.ndarray) and v.ndim <= 1 and v.size <= 64 and \
            (v.dtype.name in INT_DTYPES or v.dtype.name == "bool"):
        return ShapeValue([int(e) for e in v.reshape(-1)], v.ndim, v.dtype.name)
    return None


def range_length(start, limit, delta: int):
    """The length of ONNX's Range(start, limit, delta) over dims: ceil((limit - start) /
    delta), at least 0 (an int, or a symbolic dim)."""
    sp = _sympy()
    return _dim(sp.Max(0, sp.ceiling((_expr(limit) - _expr(start)) / delta)))


def dim_offset(d, size) -> Optional[int]:
    """``d - size`` when it is a number (``T-1`` against ``T`` gives -1), else None."""
    diff = _sympy().simplify(_expr(d) - _expr(size))
    return int(diff) if diff.is_Integer else None


# -- materialising: a ShapeValue as a graph value ------------------------------------------------
def materialize(sv: ShapeValue, sources: Mapping[str, Tuple[object, int]], refuse):
    """``sv`` as a graph Value of its dtype, computed at run time: each symbol is the size of
    the axis of a graph input that ``sources`` names (``numel`` over that axis), combined by
    the arithmetic of its expression. ``refuse(why)`` is called for what cannot be built."""
    scalars = [_build_dim(e, sources, refuse) for e in sv.elems]
    out = scalars[0] if sv.ndim == 0 else F.stack(scalars, 0)
    return out if sv.dtype == "int64" else F.cast(out, sv.dtype)


def _build_dim(d, sources, refuse):
    if not isinstance(d, SymDim):
        return F.constant(np.asarray(int(d), np.int64), "int64")
    return _build_expr(d.expr, sources, refuse)


def _build_expr(e, sources, refuse):
    sp = _sympy()
    if e.is_Integer:
        return F.constant(np.asarray(int(e), np.int64), "int64")
    if e.is_Symbol:
        src = sources.get(str(e))
        if src is None:
            refuse(f"the symbolic dim {e} is no dim of a graph input, so its value cannot be "
                   "computed at run time")
        value, axis = src
        return F.numel(value, (axis,), dtype="int64")
    if e.is_Add or e.is_Mul:
        parts = [_build_expr(a, sources, refuse) for a in e.args]
        out = parts[0]
        for p in parts[1:]:
            out = F.add(out, p) if e.is_Add else F.mul(out, p)
        return out
    if isinstance(e, (sp.floor, sp.ceiling)):
        num, den = sp.fraction(sp.together(e.args[0]))
        if not den.is_Integer or den <= 0:
            refuse(f"the symbolic dim {e} cannot be computed at run time")
        sign = 1 if isinstance(e, sp.floor) else -1      # ceil(a/b) = -((-a) // b)
        q = F.floor_divide(_build_expr(sign * num, sources, refuse),
                           F.constant(np.asarray(int(den), np.int64), "int64"))
        return q if sign == 1 else F.neg(q)
    if isinstance(e, (sp.Max, sp.Min)):
        parts = [_build_expr(a, sources, refuse) for a in e.args]
        out = parts[0]
        for p in parts[1:]:
            out = F.maximum(out, p) if isinstance(e, sp.Max) else F.minimum(out, p)
        return out
    refuse(f"the symbolic dim {e} cannot be computed at run time")


# -- folding shape arithmetic ---------------------------------------------------------------------
# ONNX op type -> fold(ctx, values): ``values`` are the node's inputs as ShapeValues (None for
# a missing optional input); the fold returns the output (a ShapeValue, or a numpy array when
# it is known outright), or None when it does not apply (the node is then built in the graph).
FOLDS: Dict[str, Callable] = {}


def fold(*names: str):
    def register(fn):
        for n in names:
            FOLDS[n] = fn
        return fn
    return register


def _broadcast(a: ShapeValue, b: ShapeValue):
    if a.ndim == 1 and b.ndim == 1 and len(a.elems) != len(b.elems) and \
            1 not in (len(a.elems), len(b.elems)):
        return None
    n = max(len(a.elems), len(b.elems))
    ea = a.elems * n if len(a.elems) == 1 else a.elems
    eb = b.elems * n if len(b.elems) == 1 else b.elems
    return list(zip(ea, eb)), max(a.ndim, b.ndim)


def _elementwise(fn):
    def run(ctx, vals):
        a, b = vals[0], vals[1]
        if a.dtype != b.dtype or a.dtype not in INT_DTYPES:
            return None                   # float arithmetic on sizes: built in the graph
        pairs = _broadcast(a, b)
        if pairs is None:
            return None
        out = []
        for x, y in pairs[0]:
            r = fn(_expr(x), _expr(y))
            if r is None:
                return None
            out.append(_dim(r))
        return ShapeValue(out, pairs[1], a.dtype)
    return run


def _trunc_div(a, b):
    """ONNX's integer division (toward zero) where the signs are known."""
    if a.is_Integer and b.is_Integer:
        q = abs(int(a)) // abs(int(b)) if int(b) else None
        return None if q is None else q * (1 if (int(a) >= 0) == (int(b) > 0) else -1)
    if a.is_nonnegative and b.is_positive:
        return _sympy().floor(a / b)
    return None


fold("Add")(_elementwise(lambda a, b: a + b))
fold("Sub")(_elementwise(lambda a, b: a - b))
fold("Mul")(_elementwise(lambda a, b: a * b))
fold("Div")(_elementwise(_trunc_div))


@fold("Max", "Min")
def _max_min(ctx, vals):
    if len(vals) != 2 or None in vals:
        return None
    sp = _sympy()
    fn = sp.Max if ctx.node.op_type == "Max" else sp.Min
    return _elementwise(fn)(ctx, vals)


@fold("Neg")
def _neg(ctx, vals):
    (a,) = vals
    return ShapeValue([_dim(-_expr(e)) for e in a.elems], a.ndim, a.dtype)


@fold("Equal")
def _equal(ctx, vals):
    a, b = vals
    pairs = _broadcast(a, b)
    if pairs is None:
        return None
    out = []
    for x, y in pairs[0]:
        diff = _sympy().simplify(_expr(x) - _expr(y))
        if diff.is_zero is None:
            return None                    # undecided (N == M): built in the graph
        out.append(bool(diff.is_zero))
    return np.asarray(out, dtype=bool).reshape(() if pairs[1] == 0 else (len(out),))


@fold("Where")
def _where(ctx, vals):
    cond, a, b = vals
    if cond.symbolic:
        return None
    pairs = _broadcast(a, b)
    if pairs is None or cond.dtype != "bool" or a.dtype != b.dtype:
        return None
    n = len(pairs[0])
    picks = cond.elems * n if len(cond.elems) == 1 else cond.elems
    if len(picks) != n:
        return None
    return ShapeValue([x if c else y for c, (x, y) in zip(picks, pairs[0])],
                      max(pairs[1], cond.ndim), a.dtype)


@fold("Identity")
def _identity(ctx, vals):
    return vals[0]


@fold("Cast")
def _cast(ctx, vals):
    dt = _np_dtype(ctx.attr("to"))
    if dt not in INT_DTYPES + ("float32", "float64"):
        return None
    return ShapeValue(vals[0].elems, vals[0].ndim, dt)


@fold("Shape")
def _shape(ctx, vals):
    return np.asarray(vals[0].shape, np.int64)[_shape_range(ctx, vals[0].ndim)]


def _shape_range(ctx, n: int) -> slice:
    start, end = ctx.attr("start", 0), ctx.attr("end", n)
    start = min(max(start + n if start < 0 else start, 0), n)
    end = min(max(end + n if end < 0 else end, 0), n)
    return slice(start, end)


@fold("Size")
def _size(ctx, vals):
    return np.asarray(len(vals[0].elems), np.int64)


@fold("Gather")
def _gather(ctx, vals):
    data, idx = vals
    if data.ndim != 1 or idx.symbolic or ctx.attr("axis", 0) not in (0, -1):
        return None
    n = len(data.elems)
    picks = []
    for i in idx.elems:
        if not -n <= i < n:
            return None                  # out of range: the graph op reports it
        picks.append(data.elems[i])
    return ShapeValue(picks, idx.ndim, data.dtype)


@fold("Unsqueeze")
def _unsqueeze(ctx, vals):
    x = vals[0]
    axes = list(vals[1].elems) if len(vals) > 1 and vals[1] is not None else ctx.attr("axes")
    if x.ndim != 0 or axes is None or [int(a) for a in axes] not in ([0], [-1]):
        return None
    return ShapeValue(x.elems, 1, x.dtype)


@fold("Squeeze")
def _squeeze(ctx, vals):
    x = vals[0]
    axes = list(vals[1].elems) if len(vals) > 1 and vals[1] is not None else ctx.attr("axes")
    if x.ndim != 1 or len(x.elems) != 1 or (axes is not None and
                                            [int(a) for a in axes] not in ([0], [-1])):
        return None
    return ShapeValue(x.elems, 0, x.dtype)


@fold("Reshape")
def _reshape(ctx, vals):
    x, shape = vals[0], vals[1]
    if shape.symbolic or len(shape.elems) > 1:
        return None
    if shape.elems and shape.elems[0] not in (-1, len(x.elems)):
        return None                       # 0 (keep), or a size that does not fit
    if not shape.elems and len(x.elems) != 1:
        return None
    return ShapeValue(x.elems, len(shape.elems), x.dtype)


@fold("Concat")
def _concat(ctx, vals):
    vals = [v for v in vals if v is not None]
    if any(v.ndim != 1 for v in vals) or len({v.dtype for v in vals}) > 1:
        return None
    return ShapeValue([e for v in vals for e in v.elems], 1, vals[0].dtype)


@fold("Slice")
def _slice(ctx, vals):
    x = vals[0]
    if x.ndim != 1 or ctx.opset < 10:
        return None
    rest = [v for v in vals[1:]]
    if any(v is not None and v.symbolic for v in rest):
        return None
    starts, ends = rest[0].elems, rest[1].elems
    axes = rest[2].elems if len(rest) > 2 and rest[2] is not None else (0,)
    steps = rest[3].elems if len(rest) > 3 and rest[3] is not None else (1,)
    if len(starts) != 1 or tuple(axes) not in ((0,), (-1,)) or steps[0] == 0:
        return None
    lim = 2 ** 62
    s, e = max(min(starts[0], lim), -lim), max(min(ends[0], lim), -lim)
    return ShapeValue(x.elems[slice(s, e, steps[0])], 1, x.dtype)


@fold("ReduceProd", "ReduceSum")
def _reduce(ctx, vals):
    x = vals[0]
    if x.ndim != 1 or x.dtype not in INT_DTYPES:
        return None
    if len(vals) > 1 and vals[1] is not None and tuple(vals[1].elems) not in ((0,), (-1,)):
        return None
    sp = _sympy()
    parts = [_expr(e) for e in x.elems]
    total = sp.Mul(*parts) if ctx.node.op_type == "ReduceProd" else sp.Add(*parts)
    return ShapeValue([_dim(total)], 1 if ctx.attr("keepdims", 1) else 0, x.dtype)


# -- integer initializers -------------------------------------------------------------------------
# Float inputs that are read when the graph is built, never as data: an initializer used only
# there is no weight (torch's dynamo exporter keeps Resize's scales as one).
SETTINGS_SLOTS = {"Resize": (1, 2), "Upsample": (1,)}


def known_initializers(graph) -> set:
    """The names of ``graph``'s initializers that the importer knows when it builds the
    graph even where initializers become state: the integer and bool ones, and those used
    only as settings (``SETTINGS_SLOTS``: a Resize's scales). No gradient reaches an
    integer tensor, so as state they would only be values read at run time, where import
    needs them as numbers (shapes, axes, indices, Range bounds: torch's dynamo exporter
    keeps all of these as initializers, and shares one constant 0 between a Range, a
    Gather and an Equal on the data)."""
    uses: Dict[str, list] = {}
    for node in graph.node:
        for slot, name in enumerate(node.input):
            uses.setdefault(name, []).append(slot in SETTINGS_SLOTS.get(node.op_type, ()))
    return {t.name for t in graph.initializer
            if _np_dtype(t.data_type) in INT_DTYPES + ("bool",)
            or (uses.get(t.name) and all(uses[t.name]))}


def _np_dtype(elem_type: int) -> Optional[str]:
    """The numpy dtype name of an ONNX element type, None where numpy has none."""
    import onnx
    try:
        return onnx.helper.tensor_dtype_to_np_dtype(elem_type).name
    except Exception:               # noqa: BLE001 - an unknown or non-numpy element type
        return None
