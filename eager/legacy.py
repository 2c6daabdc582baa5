"""PyTorch's legacy typed constructors (``dg.FloatTensor``, ``dg.LongTensor``...) and the type
names ``Tensor.type()`` gives.

``dg.LongTensor([1.7, -1.7])`` builds an int64 tensor (values truncated, as PyTorch),
``dg.FloatTensor(2, 3)`` a zero-filled float32 tensor of that shape (PyTorch leaves it
uninitialised), ``dg.FloatTensor(t)`` shares ``t`` when it has that dtype. The classes are
``Tensor`` subclasses for ``issubclass``; what they build is a plain ``Tensor``, and
``isinstance(t, dg.FloatTensor)`` asks whether ``t`` is a float32 tensor, as in PyTorch.
"""
from __future__ import annotations

from .tensors import (NAMES, Tensor, _legacy_data, legacy_dtype,  # noqa: F401 (re-exported)
                      legacy_type_name)


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
