"""Complex numbers' own ops (PyTorch's ``torch.real``, ``imag``, ``angle``, ``complex``,
``polar``, ``view_as_real`` and ``view_as_complex``), with PyTorch's gradient convention
for complex values: the gradient of a real loss ``L`` with respect to ``z = x + iy`` is
``dL/dx + i dL/dy`` (the conjugate Wirtinger derivative, times 2), so a holomorphic ``f``
has the vjp ``g * conj(f'(z))``. ``conj`` lives with the elementwise ops (their rules call
it). Differences: duograph's ``real``, ``imag``, ``view_as_real`` and ``view_as_complex``
return copies, not views of the input's memory.
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes
from ..attrs import Attrs
from ..batching import elementwise_rule, leading_batch_rule
from ..errors import DTypeError, ShapeError, located
from ..registry import OpDef, register
from ..types import TensorType, broadcast_shapes
from ._common import operand
from .elementwise import cos as _cos
from .elementwise import sin as _sin
from .elementwise import where
from .shape import getitem, stack

COMPLEX = dtypes.COMPLEX_DTYPES


def _part_infer(name):
    def infer(types, attrs):
        (t,) = types
        if t.dtype not in COMPLEX:
            raise DTypeError(f"{name}: expected a complex tensor, found {t.dtype}")
        return [TensorType(t.shape, dtypes.real_of(t.dtype))]
    return infer


def _imag_vjp(cts, ins, outs, attrs, needs):
    (g,) = cts
    return [complex_op(g * 0.0, g)]


real_op = register(OpDef("real", _part_infer("real"), lambda xp, x: xp.real(x).copy(),
                         lambda cts, ins, outs, attrs, needs: [cts[0]],
                         saves_no_data=True, complex_ok=True, attrs=Attrs(),
                         doc="the real part of a complex tensor", batch=leading_batch_rule))
imag_op = register(OpDef("imag", _part_infer("imag"), lambda xp, x: xp.imag(x).copy(),
                         _imag_vjp, saves_no_data=True, complex_ok=True,
                         attrs=Attrs(), doc="the imaginary part of a complex tensor",
                         batch=leading_batch_rule))


def _angle_vjp(cts, ins, outs, attrs, needs):
    # theta = atan2(y, x): dtheta/dx = -y/r^2, dtheta/dy = x/r^2, so g (-y + ix) / r^2,
    # 0 at z = 0 (PyTorch's angle_backward)
    (g,), (z,) = cts, ins
    re, im = real_op(z), imag_op(z)
    r2 = re * re + im * im
    scale = where(r2 == 0, 0.0, g / where(r2 == 0, 1.0, r2))
    return [complex_op(-im * scale, re * scale)]


angle_op = register(OpDef("angle", _part_infer("angle"), lambda xp, x: xp.angle(x),
                          _angle_vjp, complex_ok=True, attrs=Attrs(),
                          doc="the argument (phase) of a complex tensor, in (-pi, pi]",
                          batch=leading_batch_rule))


def _complex_infer(types, attrs):
    a, b = types
    if a.dtype != b.dtype or a.dtype not in ("float32", "float64"):
        raise DTypeError(f"complex: expected real and imag of one dtype, float32 or float64, "
                         f"found {a.dtype} and {b.dtype}")
    return [TensorType(broadcast_shapes(a.shape, b.shape, op="complex"),
                       dtypes.complex_of(a.dtype))]


def _complex_kernel(xp, a, b):
    out = xp.empty(np.broadcast_shapes(a.shape, b.shape), dtypes.complex_of(a.dtype.name))
    out.real, out.imag = a, b
    return out


complex_op = register(OpDef(
    "complex", _complex_infer, _complex_kernel,
    lambda cts, ins, outs, attrs, needs: [real_op(cts[0]) if needs[0] else None,
                                          imag_op(cts[0]) if needs[1] else None],
    saves_no_data=True, complex_ok=True, attrs=Attrs(),
    doc="the complex tensor real + i imag", batch=elementwise_rule))


# -- public functions ---------------------------------------------------------------------------
def real(input):
    """The real part, as ``torch.real`` (a copy); a real tensor is returned as it is."""
    x = operand(input, "real")
    return real_op(x) if x.dtype in COMPLEX else x


def imag(input):
    """The imaginary part of a complex tensor, as ``torch.imag`` (a copy); a real tensor is
    refused, as there."""
    x = operand(input, "imag")
    if x.dtype not in COMPLEX:
        raise DTypeError(located(f"imag: imag is not implemented for tensors with non-complex "
                                 f"dtypes, found {x.dtype}"))
    return imag_op(x)


def angle(input):
    """The argument of each element, as ``torch.angle``: for a complex tensor its phase
    (gradient ``g i z / |z|^2``, 0 at 0); for a real one ``pi`` where it is negative, else 0
    (gradient 0), in the default float for integers."""
    x = operand(input, "angle")
    if x.dtype in COMPLEX:
        return angle_op(x)
    if x.dtype == "bool" or not dtypes.is_float(x.dtype):
        x = x.float() if hasattr(x, "float") else x.astype(dtypes.DEFAULT_FLOAT)
    return where(x < 0, math.pi, 0.0 * x)


def complex(real, imag):
    """The complex tensor ``real + i imag`` (float32 parts give complex64, float64 ones
    complex128), as ``torch.complex``; the parts broadcast."""
    return complex_op(operand(real, "complex", "real"), operand(imag, "complex", "imag"))


def polar(abs, angle):
    """``abs * (cos(angle) + i sin(angle))``, as ``torch.polar``."""
    abs, angle = operand(abs, "polar", "abs"), operand(angle, "polar", "angle")
    return complex_op(abs * _cos(angle), abs * _sin(angle))


def view_as_real(input):
    """A complex tensor as real numbers with a last dim of 2 (real, imag), as
    ``torch.view_as_real`` (a copy here)."""
    x = operand(input, "view_as_real")
    if x.dtype not in COMPLEX:
        raise DTypeError(located(f"view_as_real: expected a complex tensor, found {x.dtype}"))
    return stack([real_op(x), imag_op(x)], -1)


def view_as_complex(input):
    """A real tensor with a last dim of 2 (real, imag) as a complex tensor, as
    ``torch.view_as_complex`` (a copy here; float32 or float64)."""
    x = operand(input, "view_as_complex")
    if x.dtype not in ("float32", "float64"):
        raise DTypeError(located(f"view_as_complex: expected a float32 or float64 tensor, "
                                 f"found {x.dtype}"))
    if x.ndim == 0 or x.shape[-1] != 2:
        raise ShapeError(located(f"view_as_complex: Tensor must have a last dimension of size "
                                 f"2, found shape {list(x.shape)}"))
    return complex_op(getitem(x, (Ellipsis, 0)), getitem(x, (Ellipsis, 1)))

