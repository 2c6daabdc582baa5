"""dtypes and the one place where type promotion is decided.

duograph knows twelve dtypes, named as numpy names them (PyTorch has the same ones):

    bool, uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64,
    complex64, complex128

Complex tensors run only the ops whose OpDef says ``complex_ok`` (arithmetic, matmul, sums,
shapes, ``abs``/``angle``/``real``/``imag``/``conj``, the FFTs...); every other op refuses
them with an UnsupportedDTypeError naming the op, as PyTorch refuses ``relu`` or ``<`` of
complex tensors. Promotion: a complex dtype wins over every real kind, widened to
complex128 by float64 (``float64 + complex64 -> complex128``); a Python complex scalar with
a float tensor gives that float's complex (``f64 * 1j -> complex128``), with an integer or
bool tensor complex64.

(bfloat16 is numpy's through ``ml_dtypes``.)

**uint16, uint32, uint64** are real integer dtypes. PyTorch 2.13 has them with few kernels
(``*``, ``&``, ``==``, ``/``, casts, shapes, sums; no ``+``, ``<``, ``max``...) and refuses to
promote them with any other integer, bool or complex dtype ("Promotion for uint16, uint32, uint64
types is not supported"): duograph refuses the same promotions (a DTypeError naming the two
dtypes; with a float the float wins, as in PyTorch) but computes every integer op on them
with numpy's unsigned semantics (``+``/``-``/``*`` wrap, ``//`` and ``%`` floor, ``<<``/``>>``
logical), which ONNX models need. That is a deliberate difference: where PyTorch raises
NotImplementedError for a missing kernel, duograph computes. Sums and products give int64,
as PyTorch's do.

**Storage dtypes** (``STORAGE_DTYPES``), numpy's through ``ml_dtypes``: PyTorch's
float8_e4m3fn, float8_e5m2, float8_e4m3fnuz, float8_e5m2fnuz, float8_e8m0fnu, int4, uint4,
int2, uint2, and float4_e2m1fn (PyTorch has only the packed float4_e2m1fn_x2). They hold
data: casts to and from them, creation, shape and indexing ops (the ops whose OpDef says
``storage_ok``); every other op refuses them, naming itself, and they promote with no other
dtype, as PyTorch refuses ("Promotion for Float8 Types is not supported"). PyTorch's CPU
also multiplies float8 tensors and takes their ``abs``/``==``/``mm``; duograph asks for a cast
to a compute dtype first. Casts round to nearest even; like PyTorch's ``.to()``, a cast to
float8_e4m3fn saturates (out-of-range values and infinities become +-448) and the other
float8 casts do not (overflow gives inf for e5m2, NaN for the fnuz types).

Any other array dtype is refused: nothing silently becomes int64.

Defaults: a Python ``float`` (or a list of them) becomes ``float32``; a Python ``int`` becomes
``int64``; a Python ``bool`` becomes ``bool``.

Promotion between two tensors (``result_dtype(a, b)``):

1. Same dtype: that dtype.
2. Same kind (both integers or both floats): the wider one (``uint8 + int32 -> int32``,
   ``int32 + int64 -> int64``, ``float16 + float32 -> float32``); two of one width that
   cannot hold each other take the next width, as PyTorch does (``uint8 + int8 -> int16``,
   ``float16 + bfloat16 -> float32``).
3. ``bool`` with anything: the other dtype.
4. Integer with float: **the float dtype** (``int64 + float32 -> float32``). numpy would widen
   to ``float64`` here; duograph follows PyTorch instead, so integer data never silently turns a
   float32 model into float64.

Python scalars are *weak* (as in NEP 50 and PyTorch): they take the tensor's dtype when their
kind fits, so ``x_f32 * 2`` and ``x_f32 * 0.5`` stay float32 and ``i64 + 1`` stays int64. A
float scalar with an integer or bool tensor gives the default float (``float32``); an int
scalar with a bool tensor gives ``int64``.

0-d tensors are *half weak*, as in PyTorch (``result_type(*operands)``, what op functions
use): operands fall in three categories, tensors with dimensions > 0-d tensors > Python
scalars, and a lower category changes the result only when its kind (bool < integer < float)
is higher than the higher category's, or when that is bool. So ``f32 + f64[]`` is float32,
``i32 + i64[]`` is int32 and ``f16 + f32[]`` is float16, while ``i32 + f64[]`` is float64
(rule 4 between the two) and ``bool + i8[]`` is int8. The op functions cast such a 0-d
operand to the result dtype before the op (``dispatch``), as PyTorch computes in the common
dtype; the ops themselves then promote by rules 1-4 alone.
"""
from __future__ import annotations

from typing import Optional

import ml_dtypes  # noqa: F401  (registers numpy's bfloat16)
import numpy as np

from .errors import DTypeError, located

# the dtypes that hold data only (module docstring): float8, float4, int4, int2
STORAGE_FLOAT_DTYPES = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                        "float8_e8m0fnu", "float4_e2m1fn")
STORAGE_DTYPES = STORAGE_FLOAT_DTYPES + ("int4", "uint4", "int2", "uint2")
# PyTorch's unsigned types that promote with no other integer (module docstring)
WIDE_UNSIGNED = ("uint16", "uint32", "uint64")
DTYPE_NAMES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16",
               "float32", "float64", "complex64", "complex128") + WIDE_UNSIGNED + STORAGE_DTYPES
# the dtypes ops compute in (PyTorch's promotion table covers them all but the last three)
COMPUTE_DTYPES = tuple(d for d in DTYPE_NAMES if d not in STORAGE_DTYPES)
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
INT_DTYPES = ("uint8", "int8", "int16", "int32", "int64") + WIDE_UNSIGNED
COMPLEX_DTYPES = ("complex64", "complex128")
NUMERIC_DTYPES = INT_DTYPES + FLOAT_DTYPES
DEFAULT_COMPLEX = "complex64"

DEFAULT_FLOAT = "float32"
DEFAULT_INT = "int64"

SHORT_NAMES = {
    "bool": "b8", "uint8": "u8", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64",
    "complex64": "c64", "complex128": "c128", "uint16": "u16", "uint32": "u32", "uint64": "u64",
    "float8_e4m3fn": "f8e4m3fn", "float8_e5m2": "f8e5m2", "float8_e4m3fnuz": "f8e4m3fnuz",
    "float8_e5m2fnuz": "f8e5m2fnuz", "float8_e8m0fnu": "f8e8m0fnu", "float4_e2m1fn": "f4e2m1fn",
    "int4": "i4", "uint4": "u4", "int2": "i2", "uint2": "u2",
}

# Rank inside a kind: used for "the wider one" (rule 2); equal ranks of different dtypes
# (uint8/int8, float16/bfloat16) promote to _TIE.
_RANK = {"bool": 0, "uint8": 1, "int8": 1, "int16": 2, "int32": 3, "int64": 4,
         "float16": 5, "bfloat16": 5, "float32": 6, "float64": 7, "complex64": 8,
         "complex128": 9, "uint16": 2, "uint32": 3, "uint64": 4}
_TIE = {1: "int16", 5: "float32"}

# largest finite value of each float8/float4 storage dtype (saturating casts clip to it)
STORAGE_MAX = {n: float(ml_dtypes.finfo(getattr(ml_dtypes, n)).max)
               for n in STORAGE_FLOAT_DTYPES}

_ALIASES = {
    "float": "float32", "half": "float16", "double": "float64", "long": "int64",
    "int": "int64", "short": "int16", "f16": "float16", "f32": "float32", "f64": "float64",
    "bf16": "bfloat16", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u8": "uint8", "b8": "bool", "cfloat": "complex64", "cdouble": "complex128",
    "c64": "complex64", "c128": "complex128", "u16": "uint16", "u32": "uint32", "u64": "uint64",
}

def as_dtype(dtype) -> str:
    """Normalise a dtype given as a name, a numpy dtype or a Python type to its duograph name."""
    if isinstance(dtype, str):
        name = _ALIASES.get(dtype, dtype)
        if name in DTYPE_NAMES:
            return name
    elif dtype is float:
        return DEFAULT_FLOAT
    elif dtype is int:
        return DEFAULT_INT
    elif dtype is bool:
        return "bool"
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = None
        if name in DTYPE_NAMES:
            return name
        dtype = name or dtype
    raise TypeError(located(f"unsupported dtype {dtype!r}: expected one of "
                            f"{', '.join(DTYPE_NAMES)}"))


def _promotion_refused(a: str, b: str) -> str:
    """PyTorch's refusal to promote its shell and storage dtypes, in its words."""
    group = "Float8 Types" if a.startswith("float8") or b.startswith("float8") else (
        "uint16, uint32, uint64 types" if a in WIDE_UNSIGNED or b in WIDE_UNSIGNED else
        "sub-byte and float4 types")
    return (f"Promotion for {group} is not supported, attempted to promote {a} and {b}; "
            f"cast one of them first")


def is_storage(dtype: str) -> bool:
    """Whether ``dtype`` holds data only (float8, float4, int4, int2: module docstring)."""
    return dtype in STORAGE_DTYPES


# numpy dtype objects of the float dtypes: bfloat16's numpy kind is "V", not "f", so kernels
# ask ``arr.dtype in FLOAT_NP`` (``is_float_array``) rather than ``arr.dtype.kind == "f"``
FLOAT_NP = frozenset(np.dtype(n) for n in FLOAT_DTYPES)
HALF_NP = frozenset(np.dtype(n) for n in ("float16", "bfloat16"))
# the dtypes gradients flow through (floats and complex, as in PyTorch)
GRAD_DTYPES = FLOAT_DTYPES + COMPLEX_DTYPES
GRAD_NP = frozenset(np.dtype(n) for n in GRAD_DTYPES)


def is_differentiable(dtype: str) -> bool:
    """Whether tensors of ``dtype`` can require gradients (floats and complex)."""
    return dtype in GRAD_DTYPES


def is_float_array(arr) -> bool:
    """Whether a numpy (or cupy) array, or a numpy dtype, holds one of the float dtypes."""
    return getattr(arr, "dtype", arr) in FLOAT_NP


def kind(dtype: str) -> str:
    """'b' for bool, 'i' for integers (signed or not), 'f' for floats, 'c' for complex."""
    if dtype == "bool":
        return "b"
    if dtype in FLOAT_DTYPES or dtype in STORAGE_FLOAT_DTYPES:
        return "f"
    return "c" if dtype in COMPLEX_DTYPES else "i"


_KIND_ORDER = {"b": 0, "i": 1, "f": 2, "c": 3}


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


def is_complex(dtype: str) -> bool:
    return dtype in COMPLEX_DTYPES


def complex_of(dtype: str) -> str:
    """The complex dtype whose parts are ``dtype`` (float64 -> complex128; the other floats,
    and anything else, complex64: duograph has no complex32)."""
    if dtype in COMPLEX_DTYPES:
        return dtype
    return "complex128" if dtype == "float64" else DEFAULT_COMPLEX


def real_of(dtype: str) -> str:
    """The dtype of a complex dtype's parts (complex64 -> float32); others unchanged."""
    return {"complex64": "float32", "complex128": "float64"}.get(dtype, dtype)


def result_dtype(a: str, b: str) -> str:
    """Promote two tensor dtypes (rules 1-4 of the module docstring)."""
    if a == b:
        return a
    ka, kb = kind(a), kind(b)
    if a in STORAGE_DTYPES or b in STORAGE_DTYPES or (
            (a in WIDE_UNSIGNED or b in WIDE_UNSIGNED) and "f" not in (ka, kb)):
        raise DTypeError(located(_promotion_refused(a, b)))
    if "c" in (ka, kb) and ka != kb:     # complex with a real: the complex of the wider
        c, other = (a, b) if ka == "c" else (b, a)
        return "complex128" if other == "float64" else c
    if ka == kb:
        ra, rb = _RANK[a], _RANK[b]
        if ra == rb:
            return _TIE[ra]
        return a if ra > rb else b
    if ka == "b":
        return b
    if kb == "b":
        return a
    return a if ka == "f" else b


def _combine_categories(higher: Optional[str], lower: Optional[str]) -> Optional[str]:
    """PyTorch's ``combine_categories``: the lower category counts when its kind is higher
    (or the higher category is bool)."""
    if higher is None:
        return lower
    if lower is not None and kind(lower) == "c" and higher in WIDE_UNSIGNED:
        return lower                        # u16 + c128[] -> complex128, as PyTorch
    if lower is not None and higher in STORAGE_DTYPES:     # f8 + c64[] refused, as PyTorch
        return result_dtype(higher, lower) if _KIND_ORDER[kind(lower)] > _KIND_ORDER[
            kind(higher)] else higher
    if lower is not None and kind(lower) == "c" and kind(higher) == "f":
        return complex_of(higher)           # f32 + c128[] -> complex64, as PyTorch
    if lower is None or kind(higher) in "fc":
        return higher
    if higher == "bool" or kind(lower) in "fc":
        return result_dtype(higher, lower)
    return higher


def result_type(*operands) -> str:
    """The dtype ``torch.result_type`` gives tensors, Values, arrays or TensorTypes (anything
    with a ``dtype`` and a ``shape``): rules 1-4 inside each category (tensors with
    dimensions, 0-d tensors), then the categories combined as the module docstring says."""
    dim = zero = None
    for x in operands:
        d = x.dtype if isinstance(x.dtype, str) else as_dtype(x.dtype)
        if len(x.shape) == 0:
            zero = d if zero is None else result_dtype(zero, d)
        else:
            dim = d if dim is None else result_dtype(dim, d)
    if dim is None and zero is None:
        raise TypeError("result_type: expected at least one tensor operand")
    return _combine_categories(dim, zero)


def scalar_kind(value) -> str:
    """Kind of a Python scalar: 'b', 'i', 'f' or 'c' (numpy scalars count by their dtype)."""
    if isinstance(value, (bool, np.bool_)):
        return "b"
    if isinstance(value, (int, np.integer)):
        return "i"
    if isinstance(value, (float, np.floating)):
        return "f"
    if isinstance(value, (complex, np.complexfloating)):
        return "c"
    raise TypeError(f"expected a Python number, found {type(value).__name__}")


def weak_result_dtype(tensor_dtype: str, value) -> str:
    """dtype of ``tensor <op> python_scalar`` under the weak-scalar rule."""
    sk = scalar_kind(value)
    tk = kind(tensor_dtype)
    if _KIND_ORDER[sk] <= _KIND_ORDER[tk]:
        return tensor_dtype
    if sk == "c":
        return complex_of(tensor_dtype)
    return DEFAULT_FLOAT if sk == "f" else DEFAULT_INT


def python_scalar(value, dtype: str):
    """``value`` as the Python number a constant of ``dtype`` holds: bool, int, float, or
    complex (a real value stays a float for a complex dtype)."""
    if dtype == "bool":
        return bool(value)
    if dtype in COMPLEX_DTYPES:
        return complex(value) if isinstance(value, (complex, np.complexfloating)) else float(
            value)
    return float(value) if dtype in FLOAT_DTYPES else int(value)


def default_dtype_for(value) -> str:
    """dtype a Python scalar gets on its own."""
    return {"b": "bool", "i": DEFAULT_INT, "f": DEFAULT_FLOAT,
            "c": DEFAULT_COMPLEX}[scalar_kind(value)]


def infer_data_dtype(data) -> str:
    """dtype for ``tensor(data)``: numpy arrays keep theirs, Python floats become float32."""
    if isinstance(data, np.ndarray):
        if data.dtype.name in DTYPE_NAMES:
            return data.dtype.name
        if data.dtype.kind == "f":
            return "float64" if data.dtype.itemsize > 8 else DEFAULT_FLOAT
        if data.dtype.kind == "c":
            return "complex128"
        raise TypeError(located(f"unsupported array dtype {data.dtype}: expected one of "
                                f"{', '.join(DTYPE_NAMES)}"))
    if isinstance(data, np.generic):
        return as_dtype(data.dtype)
    arr = np.asarray(data)
    if arr.dtype.kind == "f":
        return DEFAULT_FLOAT
    if arr.dtype.kind == "c":
        return DEFAULT_COMPLEX
    if arr.dtype.kind in "iu":
        return DEFAULT_INT
    if arr.dtype.kind == "b":
        return "bool"
    raise TypeError(f"cannot make a tensor from {type(data).__name__} (array dtype {arr.dtype})")


def itemsize(dtype: str) -> int:
    return np.dtype(dtype).itemsize
