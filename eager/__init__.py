"""duograph.eager: eager tensors with an autograd tape that records the same IR.

``Tensor`` runs every registry op at once (``eager_apply``); when a gradient is wanted it
records an ``EagerNode`` (an IR ``Node`` over tensors), and ``backward`` walks those nodes
with the registry's vjp rules through graphlib's one autodiff engine. ``record()`` turns the
executed nodes into a ``Graph``; ``compile()`` records, compiles and replays under guards.
"""
from . import autograd
from .compile import CompiledFunction, compile
from .creation import (arange, as_tensor, empty, empty_like, eye, from_dlpack, from_numpy,
                       full, full_like, linspace, manual_seed, ones, ones_like, rand, rand_like,
                       randint, randint_like, randn, randn_like, tensor, zeros, zeros_like)
from .grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from .record import Recorder, record
from .tensors import EagerNode, Tensor

__all__ = [
    "Tensor", "EagerNode", "tensor", "as_tensor", "from_numpy", "zeros", "ones", "empty",
    "full", "arange", "linspace", "eye", "rand", "randn", "randint", "zeros_like",
    "ones_like", "full_like", "empty_like", "rand_like", "randn_like", "randint_like",
    "manual_seed",
    "no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled", "record", "Recorder",
    "autograd", "compile", "CompiledFunction", "from_dlpack",
]
