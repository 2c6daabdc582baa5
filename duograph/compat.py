"""PyTorch's other names for things duograph has: dtype aliases, ``device`` objects,
``cuda.is_available()``, ``autograd.Variable``, ``FloatTensor``-style constructors.

They exist so that PyTorch code runs after ``import duograph as torch``; each is a thin
alias, never a second implementation.
"""
from __future__ import annotations

import builtins
import warnings

# dtype aliases (duograph's dtypes are their names)
long = "int64"
int = "int32"            # noqa: A001 - PyTorch's name (torch.int is int32)
float = "float32"        # noqa: A001
double = "float64"
half = "float16"
short = "int16"
bool = "bool"            # noqa: A001


class device(str):
    """``dg.device("cuda:0")``: a device string (``"cuda"``) that also has PyTorch's
    ``type`` and ``index``; accepted wherever a device string is."""

    def __new__(cls, spec, index=None):
        if isinstance(spec, device):
            return spec
        if not isinstance(spec, str):
            raise TypeError(f"device: expected a string such as 'cpu' or 'cuda:0', found "
                            f"{type(spec).__name__}")
        kind, _, num = spec.partition(":")
        if kind not in ("cpu", "cuda"):
            raise RuntimeError(f"device: expected one of cpu, cuda, found {spec!r}")
        if num:
            if not num.isdigit() or index is not None:
                raise RuntimeError(f"device: invalid device string {spec!r}")
            index = builtins.int(num)
        self = super().__new__(cls, kind)
        self.type = kind
        self.index = index
        return self

    def __repr__(self):
        extra = "" if self.index is None else f", index={self.index}"
        return f"device(type={self.type!r}{extra})"


class _Cuda:
    """``dg.cuda``: whether a CUDA device can be used (cupy installed and a GPU present)."""

    @staticmethod
    def is_available():
        return _Cuda.device_count() > 0

    @staticmethod
    def device_count():
        try:
            import cupy
            return cupy.cuda.runtime.getDeviceCount()
        except Exception:  # noqa: BLE001 - no cupy, no driver, no device: none usable
            return 0


cuda = _Cuda()


def Variable(data, requires_grad=False, volatile=None):  # noqa: N802 - PyTorch's name
    """The deprecated ``torch.autograd.Variable``: as PyTorch, a new tensor sharing ``data``'s
    memory, cut from its history (a leaf) and requiring grad when asked; ``data`` must be a
    tensor (anything else raises TypeError, as PyTorch)."""
    from .eager import Tensor
    if volatile is not None:
        warnings.warn("volatile has no effect (as in PyTorch); use dg.no_grad()",
                      UserWarning, stacklevel=2)
    if not isinstance(data, Tensor):
        raise TypeError(f"Variable data has to be a tensor, but got {type(data).__name__}")
    t = data.detach()
    if requires_grad:
        t.requires_grad_(True)
    return t
