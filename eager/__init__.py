"""duograph.eager: eager tensors with an autograd tape that records the same IR.

``Tensor`` runs every registry op at once through one dispatch (``dispatch.eager_apply``: a
plan per op and operand signature, dispatch interceptors in front of it); when a gradient is
wanted it records an ``EagerNode`` (an IR ``Node`` over tensors), and ``backward`` walks those
nodes with the registry's vjp rules through graphlib's one autodiff engine. ``record()`` turns
the executed nodes into a ``Graph``; ``compile()`` records, compiles and replays under guards.

Modules, bottom to top; each imports only modules listed before it (no import circles,
checked by tests/test_structure.py):
- ``grad_mode``, ``decisions`` (decisions noted for compile's guards), ``device`` (devices,
  the backend provider), ``pyrandom``, ``dlpack`` (bfloat16 through DLPack);
- ``tensors``: the ``Tensor`` class, ``Parameter``, ``SeedTensor``;
- ``tape``: ``EagerNode``;
- ``dispatch``: ``eager_apply``, the plan cache, ``intercept`` (the one hook point for
  autocast, vmap and collectives), the fast operators;
- ``inplace`` (``Tensor``'s in-place methods), ``autograd``, ``creation``, ``legacy``,
  ``guards``, ``record``, ``compile``.
Services from above reach the lower modules through documented hooks: the methods installed
on ``Tensor`` by ``dispatch`` and ``inplace``, ``tensors.set_autograd`` (done here).

eager may import graphlib and numpy; never passes or the runtime: the face package
(``duograph/__init__.py``) installs the runtime's backends with
``device.set_backend_provider``.
"""
from . import autograd, inplace  # noqa: F401 (inplace installs Tensor's in-place methods)
from .compile import CompiledFunction, compile
from .creation import (arange, as_tensor, empty, empty_like, eye, from_dlpack, from_numpy,
                       full, full_like, linspace, manual_seed, ones, ones_like, rand, rand_like,
                       randint, randint_like, randn, randn_like, tensor, zeros, zeros_like)
from .dispatch import intercept
from .grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from .record import Recorder, record
from .tape import EagerNode
from .tensors import Tensor, set_autograd

set_autograd(autograd)

__all__ = [
    "Tensor", "EagerNode", "tensor", "as_tensor", "from_numpy", "zeros", "ones", "empty",
    "full", "arange", "linspace", "eye", "rand", "randn", "randint", "zeros_like",
    "ones_like", "full_like", "empty_like", "rand_like", "randn_like", "randint_like",
    "manual_seed",
    "no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled", "record", "Recorder",
    "autograd", "compile", "CompiledFunction", "from_dlpack", "intercept",
]
