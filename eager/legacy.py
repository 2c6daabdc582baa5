"""PyTorch's legacy typed constructors (``dg.FloatTensor``, ``dg.LongTensor``...) and the type
names ``Tensor.type()`` gives.

``dg.LongTensor([1.7, -1.7])`` builds an int64 tensor (values truncated, as PyTorch),
``dg.FloatTensor(2, 3)`` a zero-filled float32 tensor of that shape (PyTorch leaves it
uninitialised), ``dg.FloatTensor(t)`` shares ``t`` when it has that dtype. The classes are
``Tensor`` subclasses for ``issubclass``; what they build is a plain ``Tensor``, and
``isinstance(t, dg.FloatTensor)`` asks whether ``t`` is a float32 tensor, as in PyTorch.
"""
from __future__ import annotations

from ..graphlib import dtypes
from .tensors import Tensor, _legacy_data

# dtype -> PyTorch's legacy class name
NAMES = {"float32": "FloatTensor", "float64": "DoubleTensor", "float16": "HalfTensor",
         "bfloat16": "BFloat16Tensor", "uint8": "ByteTensor", "int8": "CharTensor",
         "int16": "ShortTensor", "int32": "IntTensor", "int64": "LongTensor",
         "bool": "BoolTensor"}
_BY_NAME = {name: dt for dt, name in NAMES.items()}
_PREFIXES = ("duograph.cuda.", "torch.cuda.", "duograph.", "torch.")


def legacy_type_name(t: Tensor) -> str:
    """``t.type()``: ``'duograph.FloatTensor'``, ``'duograph.cuda.LongTensor'``..."""
    return ("duograph.cuda." if t.device == "cuda" else "duograph.") + NAMES[t.dtype]


def legacy_dtype(spec):
    """(dtype, device or None) for ``t.type(spec)``: a dtype, a legacy class, or a legacy
    type name (``'torch.DoubleTensor'``, ``'duograph.cuda.FloatTensor'``)."""
    dt = getattr(spec, "_legacy_dtype", None)
    if dt is not None:
        return dt, None
    if isinstance(spec, str):
        for prefix in _PREFIXES:
            if spec.startswith(prefix) and spec[len(prefix):] in _BY_NAME:
                return _BY_NAME[spec[len(prefix):]], ("cuda" if ".cuda." in prefix else "cpu")
    try:
        return dtypes.as_dtype(spec), None
    except TypeError:
        raise TypeError(f"type(): expected a dtype, a legacy tensor class or a type name "
                        f"such as 'torch.FloatTensor', found {spec!r}") from None


class _LegacyMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor) and obj.dtype == cls._legacy_dtype

    def __repr__(cls):
        return f"<class 'duograph.{cls.__name__}'>"


def _legacy_class(dtype: str):
    name = NAMES[dtype]

    def __new__(cls, *args, device=None):
        return Tensor._wrap(_legacy_data(args, device, dtype, name))

    doc = (f"PyTorch's legacy constructor for {dtype} tensors: ``{name}(data)`` (a {dtype} "
           f"copy of a list or array), ``{name}(*sizes)`` (zero-filled), ``{name}()`` "
           f"(empty), ``{name}(tensor)`` (shares a {dtype} tensor). ``isinstance(t, {name})`` "
           f"asks whether ``t`` holds {dtype}.")
    return _LegacyMeta(name, (Tensor,), {"__slots__": (), "__new__": __new__,
                                         "_legacy_dtype": dtype, "__doc__": doc,
                                         "__module__": "duograph"})


FloatTensor = _legacy_class("float32")
DoubleTensor = _legacy_class("float64")
HalfTensor = _legacy_class("float16")
BFloat16Tensor = _legacy_class("bfloat16")
ByteTensor = _legacy_class("uint8")
CharTensor = _legacy_class("int8")
ShortTensor = _legacy_class("int16")
IntTensor = _legacy_class("int32")
LongTensor = _legacy_class("int64")
BoolTensor = _legacy_class("bool")

__all__ = list(NAMES.values())
