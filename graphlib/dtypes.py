"""dtypes and the one place where type promotion is decided.

duograph knows seven dtypes, named as numpy names them:

    bool, uint8, int32, int64, float16, float32, float64

Defaults: a Python ``float`` (or a list of them) becomes ``float32``; a Python ``int`` becomes
``int64``; a Python ``bool`` becomes ``bool``.

Promotion between two tensors (``result_dtype(a, b)``):

1. Same dtype: that dtype.
2. Same kind (both integers or both floats): the wider one, as numpy does
   (``uint8 + int32 -> int32``, ``int32 + int64 -> int64``, ``float16 + float32 -> float32``).
3. ``bool`` with anything: the other dtype.
4. Integer with float: **the float dtype** (``int64 + float32 -> float32``). numpy would widen
   to ``float64`` here; duograph follows PyTorch instead, so integer data never silently turns a
   float32 model into float64.

Python scalars are *weak* (as in NEP 50 and PyTorch): they take the tensor's dtype when their
kind fits, so ``x_f32 * 2`` and ``x_f32 * 0.5`` stay float32 and ``i64 + 1`` stays int64. A
float scalar with an integer or bool tensor gives the default float (``float32``); an int
scalar with a bool tensor gives ``int64``.
"""
from __future__ import annotations

import numpy as np

from .errors import located

DTYPE_NAMES = ("bool", "uint8", "int32", "int64", "float16", "float32", "float64")
FLOAT_DTYPES = ("float16", "float32", "float64")
INT_DTYPES = ("uint8", "int32", "int64")

DEFAULT_FLOAT = "float32"
DEFAULT_INT = "int64"

SHORT_NAMES = {
    "bool": "b8", "uint8": "u8", "int32": "i32", "int64": "i64",
    "float16": "f16", "float32": "f32", "float64": "f64",
}

# Rank inside a kind: used for "the wider one" (rule 2).
_RANK = {"bool": 0, "uint8": 1, "int32": 2, "int64": 3, "float16": 4, "float32": 5, "float64": 6}

_ALIASES = {
    "float": "float32", "half": "float16", "double": "float64", "long": "int64",
    "int": "int64", "f16": "float16", "f32": "float32", "f64": "float64",
    "i32": "int32", "i64": "int64", "u8": "uint8", "b8": "bool",
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
    raise TypeError(located(f"unsupported dtype {dtype!r}: expected one of "
                            f"{', '.join(DTYPE_NAMES)}"))


def kind(dtype: str) -> str:
    """'b' for bool, 'i' for integers (signed or not), 'f' for floats."""
    if dtype == "bool":
        return "b"
    return "f" if dtype in FLOAT_DTYPES else "i"


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


def result_dtype(a: str, b: str) -> str:
    """Promote two tensor dtypes (rules 1-4 of the module docstring)."""
    if a == b:
        return a
    ka, kb = kind(a), kind(b)
    if ka == kb:
        return a if _RANK[a] > _RANK[b] else b
    if ka == "b":
        return b
    if kb == "b":
        return a
    return a if ka == "f" else b


def scalar_kind(value) -> str:
    """Kind of a Python scalar: 'b', 'i' or 'f' (numpy scalars count by their dtype)."""
    if isinstance(value, (bool, np.bool_)):
        return "b"
    if isinstance(value, (int, np.integer)):
        return "i"
    if isinstance(value, (float, np.floating)):
        return "f"
    raise TypeError(f"expected a Python number, found {type(value).__name__}")


def weak_result_dtype(tensor_dtype: str, value) -> str:
    """dtype of ``tensor <op> python_scalar`` under the weak-scalar rule."""
    sk = scalar_kind(value)
    tk = kind(tensor_dtype)
    order = {"b": 0, "i": 1, "f": 2}
    if order[sk] <= order[tk]:
        return tensor_dtype
    return DEFAULT_FLOAT if sk == "f" else DEFAULT_INT


def default_dtype_for(value) -> str:
    """dtype a Python scalar gets on its own."""
    return {"b": "bool", "i": DEFAULT_INT, "f": DEFAULT_FLOAT}[scalar_kind(value)]


def infer_data_dtype(data) -> str:
    """dtype for ``tensor(data)``: numpy arrays keep theirs, Python floats become float32."""
    if isinstance(data, np.ndarray):
        if data.dtype.name in DTYPE_NAMES:
            return data.dtype.name
        if data.dtype.kind == "f":
            return "float64" if data.dtype.itemsize > 8 else DEFAULT_FLOAT
        if data.dtype.kind in "iu":
            return DEFAULT_INT
        raise TypeError(f"unsupported array dtype {data.dtype}")
    if isinstance(data, np.generic):
        return as_dtype(data.dtype)
    arr = np.asarray(data)
    if arr.dtype.kind == "f":
        return DEFAULT_FLOAT
    if arr.dtype.kind in "iu":
        return DEFAULT_INT
    if arr.dtype.kind == "b":
        return "bool"
    raise TypeError(f"cannot make a tensor from {type(data).__name__} (array dtype {arr.dtype})")


def itemsize(dtype: str) -> int:
    return np.dtype(dtype).itemsize
