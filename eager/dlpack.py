"""bfloat16 and float8 through DLPack, which numpy cannot do by itself.

(The float8 dtypes go the same way as bfloat16 below, through their bytes seen as uint8 and
DLPack's codes ``kDLFloat8_e4m3fn`` 10, ``e4m3fnuz`` 11, ``e5m2`` 12, ``e5m2fnuz`` 13,
``e8m0fnu`` 14, as PyTorch writes them. int4 and float4 are refused: numpy keeps one per
byte where DLPack packs them.)

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
# ml_dtypes' types numpy cannot exchange: (DLPack code, bits, the uint of their size)
_RETAGGED = {np.dtype(ml_dtypes.bfloat16): (K_DL_BFLOAT, 16, np.uint16),
             np.dtype(ml_dtypes.float8_e4m3fn): (10, 8, np.uint8),
             np.dtype(ml_dtypes.float8_e4m3fnuz): (11, 8, np.uint8),
             np.dtype(ml_dtypes.float8_e5m2): (12, 8, np.uint8),
             np.dtype(ml_dtypes.float8_e5m2fnuz): (13, 8, np.uint8),
             np.dtype(ml_dtypes.float8_e8m0fnu): (14, 8, np.uint8)}
_BY_CODE = {(code, bits): dt for dt, (code, bits, _) in _RETAGGED.items()}
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


def _retag(capsule, old_code: int, new_code: int, width: int = 16) -> bool:
    """Rewrite a ``width``-bit, one-lane ``old_code`` dtype as ``new_code``; whether it was
    one."""
    field = _dtype_field(capsule)
    if field is None:
        return False
    code, bits, lanes = field
    if (code.value, bits.value, lanes.value) != (old_code, width, 1):
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
    """``obj``'s data as an ``ml_dtypes`` array (sharing memory) when ``obj`` is a bfloat16
    or float8 DLPack producer; None when it is neither."""
    capsule = obj.__dlpack__()
    field = _dtype_field(capsule)
    dt = None if field is None else _BY_CODE.get((field[0].value, field[1].value))
    if dt is None or not _retag(capsule, _RETAGGED[dt][0], K_DL_UINT, _RETAGGED[dt][1]):
        return None
    return from_dlpack(_Retagged(capsule, obj.__dlpack_device__())).view(dt)


def dlpack_capsule(array, *args, **kwargs):
    """``array.__dlpack__(...)``, bfloat16 and float8 arrays included (tagged ``kDLBfloat``
    or ``kDLFloat8_*``, which PyTorch reads as its bfloat16 and float8 types)."""
    if array.dtype not in _RETAGGED:
        return array.__dlpack__(*args, **kwargs)
    code, bits, uint = _RETAGGED[array.dtype]
    capsule = array.view(uint).__dlpack__(*args, **kwargs)
    if not _retag(capsule, K_DL_UINT, code, bits):   # pragma: no cover - a numpy change
        raise BufferError(f"__dlpack__: could not tag the {array.dtype} data for DLPack")
    return capsule
