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

    def kron(self, other):
        """``kron(other) -> Tensor``: ``dg.kron(self, other)``."""
        return F.kron(self, other)

    def inner(self, other):
        """``inner(other) -> Tensor``: ``dg.inner(self, other)``."""
        return F.inner(self, other)

    def vdot(self, other):
        """``vdot(other) -> Tensor``: ``dg.vdot(self, other)``."""
        return F.vdot(self, other)

    def addmv(self, mat, vec, *, beta=1, alpha=1):
        """``addmv(mat, vec, *, beta=1, alpha=1) -> Tensor``: ``dg.addmv(self, ...)``."""
        return F.addmv(self, mat, vec, beta=beta, alpha=alpha)

    def addr(self, vec1, vec2, *, beta=1, alpha=1):
        """``addr(vec1, vec2, *, beta=1, alpha=1) -> Tensor``: ``dg.addr(self, ...)``."""
        return F.addr(self, vec1, vec2, beta=beta, alpha=alpha)

    def addbmm(self, batch1, batch2, *, beta=1, alpha=1):
        """``addbmm(batch1, batch2, *, beta=1, alpha=1) -> Tensor``: ``dg.addbmm(self,
        ...)``."""
        return F.addbmm(self, batch1, batch2, beta=beta, alpha=alpha)

    def diag_embed(self, offset: int = 0, dim1: int = -2, dim2: int = -1):
        """``diag_embed(offset=0, dim1=-2, dim2=-1) -> Tensor``: ``dg.diag_embed(self,
        ...)``."""
        return F.diag_embed(self, offset, dim1, dim2)

    def diagflat(self, offset: int = 0):
        """``diagflat(offset=0) -> Tensor``: ``dg.diagflat(self, offset)``."""
        return F.diagflat(self, offset)

    def hsplit(self, indices_or_sections):
        """``hsplit(indices_or_sections)``: ``dg.hsplit(self, ...)``."""
        return F.hsplit(self, indices_or_sections)

    def vsplit(self, indices_or_sections):
        """``vsplit(indices_or_sections)``: ``dg.vsplit(self, ...)``."""
        return F.vsplit(self, indices_or_sections)

    def dsplit(self, indices_or_sections):
        """``dsplit(indices_or_sections)``: ``dg.dsplit(self, ...)``."""
        return F.dsplit(self, indices_or_sections)

    def select(self, dim: int, index: int):
        """``select(dim, index) -> Tensor``: ``dg.select(self, dim, index)``."""
        return F.select(self, dim, index)

    def aminmax(self, *, dim=None, keepdim: bool = False):
        """``aminmax(*, dim=None, keepdim=False) -> (min, max)``: ``dg.aminmax(self, ...)``."""
        return F.aminmax(self, dim=dim, keepdim=keepdim)

    def msort(self):
        """``msort() -> Tensor``: ``dg.msort(self)`` (sorted along dim 0)."""
        return F.msort(self)

    def ravel(self):
        """``ravel() -> Tensor``: ``dg.ravel(self)`` (flattened to 1-D)."""
        return F.ravel(self)

    def broadcast_to(self, size):
        """``broadcast_to(size) -> Tensor``: ``dg.broadcast_to(self, size)``."""
        return F.broadcast_to(self, tuple(size))

    def char(self):
        """``char() -> Tensor``: this tensor as int8, as ``torch.Tensor.char``."""
        return F.cast(self, "int8")

    def cfloat(self):
        """``cfloat() -> Tensor``: this tensor as complex64, as ``torch.Tensor.cfloat``."""
        return F.cast(self, "complex64")

    def cdouble(self):
        """``cdouble() -> Tensor``: this tensor as complex128, as ``torch.Tensor.cdouble``."""
        return F.cast(self, "complex128")

    def is_conj(self) -> bool:
        """``is_conj() -> bool``: False (duograph's ``conj`` is a new tensor, never a view with
        PyTorch's conjugate bit)."""
        return False

    def is_neg(self) -> bool:
        """``is_neg() -> bool``: False (no tensor carries PyTorch's lazy negation bit)."""
        return False

    def resolve_conj(self):
        """``resolve_conj() -> Tensor``: ``self`` (no lazy conjugation to materialise)."""
        return self

    def resolve_neg(self):
        """``resolve_neg() -> Tensor``: ``self`` (no lazy negation to materialise)."""
        return self

    def is_same_size(self, other) -> bool:
        """``is_same_size(other) -> bool``: whether the shapes are equal."""
        return tuple(self.shape) == tuple(other.shape)
