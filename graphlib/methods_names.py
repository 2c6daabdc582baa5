"""Tensor methods for the functions PyTorch added names for (``erfc``, ``lgamma``,
``heaviside``, ``gcd``, ``kron``, ``det``...), shared by Values and eager tensors as
``methods_compat.PyTorchMethods`` (which inherits them). Each is the op function of the same
name with ``self`` as its first tensor operand."""
from __future__ import annotations

F = None            # the functional module, set by ``methods.set_functions``


class NamesMethods:
    """``x.<name>(...)`` for ``dg.<name>(x, ...)``."""

    __slots__ = ()

    def erfc(self):
        """``erfc() -> Tensor``: ``dg.erfc(self)``."""
        return F.erfc(self)

    def erfinv(self):
        """``erfinv() -> Tensor``: ``dg.erfinv(self)``."""
        return F.erfinv(self)

    def lgamma(self):
        """``lgamma() -> Tensor``: ``dg.lgamma(self)``."""
        return F.lgamma(self)

    def digamma(self):
        """``digamma() -> Tensor``: ``dg.digamma(self)``."""
        return F.digamma(self)

    def i0(self):
        """``i0() -> Tensor``: ``dg.i0(self)``."""
        return F.i0(self)

    def sinc(self):
        """``sinc() -> Tensor``: ``dg.sinc(self)``."""
        return F.sinc(self)

    def deg2rad(self):
        """``deg2rad() -> Tensor``: ``dg.deg2rad(self)``."""
        return F.deg2rad(self)

    def rad2deg(self):
        """``rad2deg() -> Tensor``: ``dg.rad2deg(self)``."""
        return F.rad2deg(self)

    def signbit(self):
        """``signbit() -> Tensor``: ``dg.signbit(self)``."""
        return F.signbit(self)

    def isposinf(self):
        """``isposinf() -> Tensor``: ``dg.isposinf(self)``."""
        return F.isposinf(self)

    def isneginf(self):
        """``isneginf() -> Tensor``: ``dg.isneginf(self)``."""
        return F.isneginf(self)

    def heaviside(self, values):
        """``heaviside(values) -> Tensor``: ``dg.heaviside(self, values)``."""
        return F.heaviside(self, values)

    def fmax(self, other):
        """``fmax(other) -> Tensor``: ``dg.fmax(self, other)``."""
        return F.fmax(self, other)

    def fmin(self, other):
        """``fmin(other) -> Tensor``: ``dg.fmin(self, other)``."""
        return F.fmin(self, other)

    def gcd(self, other):
        """``gcd(other) -> Tensor``: ``dg.gcd(self, other)``."""
        return F.gcd(self, other)

    def lcm(self, other):
        """``lcm(other) -> Tensor``: ``dg.lcm(self, other)``."""
        return F.lcm(self, other)

    def nextafter(self, other):
        """``nextafter(other) -> Tensor``: ``dg.nextafter(self, other)``."""
        return F.nextafter(self, other)

    def ldexp(self, other):
        """``ldexp(other) -> Tensor``: ``dg.ldexp(self, other)``."""
        return F.ldexp(self, other)

    def logaddexp2(self, other):
        """``logaddexp2(other) -> Tensor``: ``dg.logaddexp2(self, other)``."""
        return F.logaddexp2(self, other)

    def logical_and(self, other):
        """``logical_and(other) -> Tensor``: ``dg.logical_and(self, other)``."""
        return F.logical_and(self, other)

    def logical_or(self, other):
        """``logical_or(other) -> Tensor``: ``dg.logical_or(self, other)``."""
        return F.logical_or(self, other)

    def polygamma(self, n: int):
        """``polygamma(n) -> Tensor``: ``dg.polygamma(n, self)``."""
        return F.polygamma(n, self)

    def logit(self, eps=None):
        """``logit(eps=None) -> Tensor``: ``dg.logit(self, eps)``."""
        return F.logit(self, eps)

    def absolute(self):
        """``absolute() -> Tensor``: ``abs()``'s alias, as PyTorch's."""
        return F.abs(self)

    def negative(self):
        """``negative() -> Tensor``: ``neg()``'s alias, as PyTorch's."""
        return F.neg(self)
