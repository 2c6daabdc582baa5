"""Small builders shared by the op files: unary and binary elementwise ops."""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from .. import dtypes
from ..attrs import Attrs
from ..errors import DTypeError, UnsupportedDTypeError, located
from ..registry import OpDef, register
from ..types import TensorType, broadcast_shapes


def operand(x, op: str, what: str = "input"):
    """``x`` ready for an op function that reads its ``ndim``/``shape`` before applying the
    op: tensors, Values and arrays as they are; Python numbers and (nested) lists or tuples
    of numbers as arrays of PyTorch's default dtypes (float32 for floats), as elementwise
    ops already take them; anything else a TypeError naming ``op`` and the user's line."""
    if hasattr(x, "ndim") and hasattr(x, "shape") and hasattr(x, "dtype"):
        return x
    if isinstance(x, (bool, int, float, list, tuple)):
        try:
            arr = np.asarray(x)
            if arr.dtype == object or arr.dtype.kind not in "biuf":
                raise ValueError("not a rectangular nest of numbers")
            return arr.astype(dtypes.infer_data_dtype(x), copy=False)
        except (ValueError, TypeError) as e:
            raise TypeError(located(f"{op}: expected {what} to be a tensor or a rectangular "
                                    f"nest of numbers, found a {type(x).__name__} that is "
                                    f"not ({e})")) from None
    raise TypeError(located(f"{op}: expected {what} to be a tensor, found "
                            f"{type(x).__name__}"))


def unary_infer(float_out: bool = False, out_dtype: Optional[str] = None,
                allowed: Optional[tuple] = None, name: str = ""):
    def infer(types, attrs):
        (t,) = types
        if allowed is not None and t.dtype not in allowed:
            raise DTypeError(f"{name}: expected a tensor of dtype {' or '.join(allowed)}, "
                             f"found {t.dtype}")
        dt = t.dtype
        if out_dtype is not None:
            dt = out_dtype
        elif float_out and not dtypes.is_differentiable(dt):
            dt = dtypes.DEFAULT_FLOAT
        return [TensorType(t.shape, dt)]
    return infer


def float_kernel(kernel: Callable) -> Callable:
    """``kernel`` run on non-float inputs cast to the default float first, so it computes in
    (and returns) the dtype inference gives, not numpy's float64."""
    def run(xp, *arrays, **attrs):
        for a in arrays:
            if a.dtype not in dtypes.GRAD_NP:
                arrays = [a if a.dtype in dtypes.GRAD_NP else a.astype(dtypes.DEFAULT_FLOAT)
                          for a in arrays]
                break
        return kernel(xp, *arrays, **attrs)
    run.direct = lambda in_dtypes: kernel if all(dtypes.is_differentiable(d)
                                                 for d in in_dtypes) else None
    return run


def promoting_kernel(kernel: Callable, float_out: bool = False) -> Callable:
    """``kernel(xp, a, b)`` run on operands cast to their promoted dtype (``result_dtype``),
    so ``i32 + f32`` computes in float32 as inference says, where numpy would use float64."""
    def run(xp, a, b, **attrs):
        if a.dtype != b.dtype:
            dt = dtypes.result_dtype(a.dtype.name, b.dtype.name)
            if float_out and not dtypes.is_differentiable(dt):
                dt = dtypes.DEFAULT_FLOAT
            a, b = a.astype(dt, copy=False), b.astype(dt, copy=False)
        elif float_out and a.dtype not in dtypes.GRAD_NP:
            a, b = a.astype(dtypes.DEFAULT_FLOAT), b.astype(dtypes.DEFAULT_FLOAT)
        return kernel(xp, a, b, **attrs)

    def direct(in_dtypes):
        a, b = in_dtypes
        return kernel if a == b and (not float_out or dtypes.is_differentiable(a)) else None
    run.direct = direct
    return run


def unary(name: str, kernel: Callable, vjp: Optional[Callable] = None, *,
          expr: Optional[str] = None, float_out: bool = False,
          out_dtype: Optional[str] = None, allowed: Optional[tuple] = None,
          doc: str = "", **traits) -> OpDef:
    """Register an elementwise unary op. ``vjp(ct, x, y, **attrs)`` returns the input cotangent;
    ``traits`` are OpDef traits (``vjp_reads_output=True``...)."""
    rule = None
    if vjp is not None:
        def rule(cts, ins, outs, attrs, needs):
            return [vjp(cts[0], ins[0], outs[0], **attrs)]
    if float_out:
        kernel = float_kernel(kernel)
    elif out_dtype is not None and "ufunc" in traits:   # the bare ufunc on any operand
        traits.setdefault("ufunc_mixed", True)
    traits.setdefault("attrs", Attrs())
    return register(OpDef(name, unary_infer(float_out, out_dtype, allowed, name), kernel,
                          rule, expr=expr, elementwise=True, doc=doc, **traits))


def binary_infer(name: str, out_dtype: Optional[str] = None, float_out: bool = False,
                 allowed_kinds: Optional[str] = None, bool_ok: bool = True):
    def infer(types, attrs):
        a, b = types
        if allowed_kinds is not None:
            for t in (a, b):
                if dtypes.kind(t.dtype) not in allowed_kinds:
                    raise UnsupportedDTypeError(f"{name}: unsupported dtype {t.dtype}")
        if not bool_ok and a.dtype == b.dtype == "bool":
            raise DTypeError(f"{name}: expected numeric operands, found bool and bool; use "
                             "ne (!=) or logical_not (~) for masks, or cast them first")
        shape = broadcast_shapes(a.shape, b.shape, op=name)
        if out_dtype is not None:
            dt = out_dtype
        else:
            dt = dtypes.result_dtype(a.dtype, b.dtype)
            if float_out and not dtypes.is_differentiable(dt):
                dt = dtypes.DEFAULT_FLOAT
        return [TensorType(shape, dt)]
    return infer


def binary(name: str, kernel: Callable, vjp: Optional[Callable] = None, *,
           expr: Optional[str] = None, out_dtype: Optional[str] = None,
           float_out: bool = False, allowed_kinds: Optional[str] = None,
           bool_ok: bool = True, doc: str = "", **traits) -> OpDef:
    """Register an elementwise binary op with broadcasting and weak-scalar promotion.

    ``vjp`` is a pair of rules ``(for_a, for_b)``, each ``rule(ct, a, b, y)`` giving that
    operand's cotangent in the broadcast shape (``autodiff`` sums it back to the operand's
    shape); only the rules for operands that need a gradient run. ``bool_ok=False`` refuses
    two bool operands (numpy and PyTorch have no bool subtraction). ``traits`` are OpDef
    traits (``saves_no_data=True``...).
    """
    rule = None
    if vjp is not None:
        rule_a, rule_b = vjp

        def rule(cts, ins, outs, attrs, needs):
            g, (a, b), y = cts[0], ins, outs[0]
            return [rule_a(g, a, b, y) if needs[0] else None,
                    rule_b(g, a, b, y) if needs[1] else None]
    if out_dtype is None:   # comparisons and logic compare mixed dtypes exactly as they are
        kernel = promoting_kernel(kernel, float_out)
    elif "ufunc" in traits:   # so the bare ufunc is the kernel on operands of any dtypes
        traits.setdefault("ufunc_mixed", True)
    traits.setdefault("attrs", Attrs())
    return register(OpDef(name, binary_infer(name, out_dtype, float_out, allowed_kinds,
                                             bool_ok),
                          kernel, rule, expr=expr, elementwise=True, promote=True,
                          float_compute=float_out, doc=doc, **traits))
