"""``dg.fft``: PyTorch's ``torch.fft`` (fft, ifft, fft2, ifft2, fftn, ifftn, rfft, irfft,
rfft2, irfft2, rfftn, irfftn, fftfreq, rfftfreq, fftshift, ifftshift), eagerly, under
``dg.compile`` and in graph mode, with PyTorch's gradients (``graphlib/ops/fft.py``)."""
from .graphlib.ops.fft import (fft, fft2, fftfreq, fftn, fftshift, ifft, ifft2, ifftn,
                               ifftshift, irfft, irfft2, irfftn, rfft, rfft2, rfftfreq, rfftn)

__all__ = ["fft", "ifft", "fft2", "ifft2", "fftn", "ifftn", "rfft", "irfft", "rfft2",
           "irfft2", "rfftn", "irfftn", "fftfreq", "rfftfreq", "fftshift", "ifftshift"]
