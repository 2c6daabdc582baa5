"""The op registry: every op is one ``OpDef`` holding everything about it.

- ``infer(types, attrs) -> [TensorType]``: shape/dtype inference; raises ShapeError/DTypeError
  with a message that says what was expected and what was found.
- ``kernel(xp, *arrays, **attrs)``: reference implementation over the array module ``xp``
  (numpy or cupy); returns one array, or a tuple for multi-output ops. No fast paths and no
  backend branches: a backend (``runtime/``) registers its own faster kernels and ``out=``
  forms in tables keyed by the OpDef, and falls back to this one.
- ``vjp(cts, inputs, outputs, attrs, needs) -> [cotangent or None per input]``: the gradient
  rule (``needs[i]`` says whether input i wants a cotangent; skip the work when not),
  written with the public op functions so it serves graph mode, the eager tape and higher
  orders alike. Broadcasting and dtype are undone centrally (``autodiff``), not per rule.
- ``expr``: for elementwise ops, a scalar expression template over ``{0}``, ``{1}``... used by
  fusion code generators.
"""
from __future__ import annotations

from typing import Callable, Dict, Optional

REGISTRY: Dict[str, "OpDef"] = {}


class OpDef:
    """Definition of one op. Calling it applies the op to Values, tensors or numbers."""

    __slots__ = ("name", "infer", "kernel", "vjp", "expr", "elementwise", "promote",
                 "nondiff_inputs", "random", "multi_output",
                 "doc", "__weakref__")

    def __init__(self, name: str, infer: Callable, kernel: Callable,
                 vjp: Optional[Callable] = None, *, expr: Optional[str] = None,
                 elementwise: bool = False, promote: bool = False,
                 nondiff_inputs: tuple = (), random: bool = False, multi_output: bool = False,
                 doc: str = ""):
        self.name = name
        self.infer = infer
        self.kernel = kernel
        self.vjp = vjp
        self.expr = expr
        self.elementwise = elementwise
        self.promote = promote          # Python scalars among the inputs follow weak promotion
        self.nondiff_inputs = tuple(nondiff_inputs)
        self.random = random            # reads a seed: never merged or dropped by passes
        self.multi_output = multi_output  # always returns a tuple, even of one output
        self.doc = doc

    def __call__(self, *inputs, **attrs):
        return _apply(self, inputs, attrs)

    def __repr__(self):
        return f"<op {self.name}>"


def _apply(op, inputs, attrs):
    """Bound to ``dispatch.apply`` on first use (dispatch imports this module)."""
    global _apply
    from .dispatch import apply
    _apply = apply
    return apply(op, inputs, attrs)


def register(op: OpDef) -> OpDef:
    if op.name in REGISTRY:
        raise ValueError(f"op {op.name!r} is already registered")
    REGISTRY[op.name] = op
    return op


def get_op(name: str) -> OpDef:
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"no op named {name!r} is registered") from None
