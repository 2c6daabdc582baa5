"""bfloat16 through DLPack, which numpy cannot do by itself.

numpy has no bfloat16 of its own (duograph's is ``ml_dtypes.bfloat16``, a numpy "V" kind
dtype), so ``np.from_dlpack`` refuses a PyTorch or JAX bfloat16 array ("Unsupported dtype in
DLTensor") and a bfloat16 numpy array has no ``__dlpack__``. Both directions go through the
same bytes seen as uint16: the producer's capsule is taken as it is and only the dtype field
of its ``DLTensor`` is rewritten (``kDLBfloat`` 16 <-> ``kDLUInt`` 16) before the consumer
reads it. The data is shared, never copied, and the capsule's ownership rules (the
consumer calls its deleter) are unchanged. Both capsule layouts are handled: the legacy
``dltensor`` (``DLManagedTensor``, the ``DLTensor`` first) and ``dltensor_versioned``
(``DLManagedTensorVersioned``: version, manager context, deleter and flags, 32 bytes, then
the ``DLTensor``).
"""
from __future__ import annotations

import ctypes

import ml_dtypes
import numpy as np

K_DL_UINT, K_DL_BFLOAT = 1, 4
# DLTensor: void *data; DLDevice device (2 x int32); int32 ndim; DLDataType dtype
# (uint8 code, uint8 bits, uint16 lanes): the dtype sits 20 bytes in
_DTYPE_OFFSET = 20
_TENSOR_OFFSET = {b"dltensor": 0, b"dltensor_versioned": 32}

_get_name = ctypes.pythonapi.PyCapsule_GetName
_get_name.restype, _get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype, _get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object,
                                                                 ctypes.c_char_p]


def _dtype_field(capsule):
    """(code, bits, lanes) ctypes views of the capsule's DLTensor dtype, or None when the
    capsule is not an unconsumed DLPack tensor."""
    name = _get_name(capsule)
    if name not in _TENSOR_OFFSET:
        return None
    address = _get_pointer(capsule, name) + _TENSOR_OFFSET[name] + _DTYPE_OFFSET
    return (ctypes.c_uint8.from_address(address), ctypes.c_uint8.from_address(address + 1),
            ctypes.c_uint16.from_address(address + 2))


def _retag(capsule, old_code: int, new_code: int) -> bool:
    """Rewrite a 16-bit, one-lane ``old_code`` dtype as ``new_code``; whether it was one."""
    field = _dtype_field(capsule)
    if field is None:
        return False
    code, bits, lanes = field
    if (code.value, bits.value, lanes.value) != (old_code, 16, 1):
        return False
    code.value = new_code
    return True


class _Retagged:
    """A DLPack producer handing out one capsule already retagged."""

    def __init__(self, capsule, device):
        self._capsule, self._device = capsule, device

    def __dlpack__(self, *args, **kwargs):
        capsule, self._capsule = self._capsule, None
        if capsule is None:
            raise BufferError("this DLPack capsule was already consumed")
        return capsule

    def __dlpack_device__(self):
        return self._device


def bfloat16_from_dlpack(obj, from_dlpack=np.from_dlpack):
    """``obj``'s data as an ``ml_dtypes.bfloat16`` array (sharing memory) when ``obj`` is a
    bfloat16 DLPack producer; None when it is not bfloat16."""
    capsule = obj.__dlpack__()
    if not _retag(capsule, K_DL_BFLOAT, K_DL_UINT):
        return None
    return from_dlpack(_Retagged(capsule, obj.__dlpack_device__())).view(ml_dtypes.bfloat16)


def dlpack_capsule(array, *args, **kwargs):
    """``array.__dlpack__(...)``, bfloat16 arrays included (tagged ``kDLBfloat``, which
    PyTorch and JAX read as their bfloat16)."""
    if array.dtype != ml_dtypes.bfloat16:
        return array.__dlpack__(*args, **kwargs)
    capsule = array.view(np.uint16).__dlpack__(*args, **kwargs)
    if not _retag(capsule, K_DL_UINT, K_DL_BFLOAT):   # pragma: no cover - a numpy change
        raise BufferError("__dlpack__: could not tag the bfloat16 data for DLPack")
    return capsule
