"""PyTorch's module-level in-place functions: ``dg.sqrt_(x)``, ``dg.relu_(x)``,
``F.elu_(x)``... Each is the tensor's in-place method (``x.sqrt_()``) called as a function:
it writes into ``x``, bumps its version and takes over its autograd history, with the
method's refusals (a leaf that requires grad, a view of one, a result dtype that does not
fit). Eager tensors only, as in PyTorch.
"""
from __future__ import annotations

from typing import Callable

from .eager.tensors import Tensor
from .nn import functional as NF

# torch's module-level in-place functions that are Tensor methods here
TENSOR_METHOD_NAMES = (
    "abs_", "acos_", "acosh_", "arccos_", "arccosh_", "arcsin_", "arcsinh_", "arctan_",
    "arctanh_", "asin_", "asinh_", "atan_", "atanh_", "ceil_", "clamp_", "clamp_max_",
    "clamp_min_", "clip_", "cos_", "cosh_", "detach_", "erf_", "exp2_", "exp_", "expm1_",
    "fill_", "fix_", "floor_", "frac_", "index_put_", "log10_", "log1p_", "log2_", "log_",
    "nan_to_num_", "neg_", "negative_", "reciprocal_", "relu_", "round_", "rsqrt_",
    "sigmoid_", "sin_", "sinh_", "sqrt_", "square_", "tan_", "tanh_", "trunc_", "xlogy_",
    "zero_")


def _check(name: str, input) -> None:
    if not isinstance(input, Tensor):
        raise TypeError(f"{name}(): argument 'input' must be a Tensor (an eager tensor: "
                        f"in-place functions do not build graphs), not {type(input).__name__}")


def _from_method(name: str) -> Callable:
    def fn(input, *args, **kwargs):
        _check(name, input)
        return getattr(input, name)(*args, **kwargs)
    fn.__name__ = fn.__qualname__ = name
    method_doc = getattr(Tensor, name).__doc__ or ""
    fn.__doc__ = (f"``{name}(input, ...)``: ``input.{name}(...)``, PyTorch's module-level "
                  f"in-place form; returns ``input``.\n\n{method_doc}")
    return fn


def _activation(name: str, out_of_place: Callable, doc: str) -> Callable:
    def fn(input, *args, **kwargs):
        _check(name, input)
        return input._inplace(lambda s: out_of_place(s, *args, **kwargs), name)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"``{name}(input, ...)``: {doc}, written into ``input`` (returned), as "
                  f"PyTorch's ``{name}``; the arguments are those of ``{name[:-1]}``.")
    return fn


FUNCTIONS = {name: _from_method(name) for name in TENSOR_METHOD_NAMES}
# activations with an in-place form in torch and torch.nn.functional
ACTIVATIONS = {
    "relu_": FUNCTIONS["relu_"],
    "elu_": _activation("elu_", NF.elu, "x for x > 0, else alpha * (exp(x) - 1)"),
    "selu_": _activation("selu_", NF.selu, "the self-normalising elu"),
    "celu_": _activation("celu_", NF.celu, "max(0, x) + min(0, alpha * (exp(x / alpha) - 1))"),
    "leaky_relu_": _activation("leaky_relu_", NF.leaky_relu,
                               "x for x >= 0, else negative_slope * x"),
    "hardtanh_": _activation("hardtanh_", NF.hardtanh, "x clamped to [min_val, max_val]"),
    "threshold_": _activation("threshold_", NF.threshold,
                              "x where x > threshold, else value"),
}
# of those, the ones torch has at module level too
MODULE_LEVEL_ACTIVATIONS = ("selu_", "celu_", "threshold_")


# Tensor methods whose in-place form PyTorch has and duograph derives here: the out-of-place
# method's result (same shape; a comparison's bools become 1 and 0 of this tensor's dtype, as
# PyTorch writes them) written into the tensor
DERIVED_METHOD_NAMES = (
    "eq_", "ne_", "gt_", "ge_", "lt_", "le_", "greater_", "greater_equal_", "less_",
    "less_equal_", "not_equal_", "logical_and_", "logical_or_", "logical_xor_",
    "logical_not_", "tril_", "triu_", "cumsum_", "cumprod_", "addcmul_", "addcdiv_",
    "clamp_min_", "clamp_max_", "copysign_", "float_power_", "logaddexp_", "addmm_",
    "lerp_", "sign_", "sgn_", "square_")
# (issue 28's special functions)
DERIVED_METHOD_NAMES += (
    "erfc_", "erfinv_", "lgamma_", "digamma_", "polygamma_", "i0_", "sinc_", "logit_",
    "deg2rad_", "rad2deg_", "heaviside_", "gcd_", "lcm_", "nextafter_", "ldexp_", "absolute_",
    "addmv_", "addr_", "addbmm_", "baddbmm_")
# torch's module-level forms of derived in-place methods (dg.erfc_(x) is x.erfc_())
DERIVED_FUNCTION_NAMES = ("erfc_", "i0_", "sinc_", "logit_", "deg2rad_", "rad2deg_", "gcd_",
                          "lcm_", "ldexp_", "addmv_")


def _derived_method(name: str) -> Callable:
    base = name[:-1]

    def method(self, *args, **kwargs):
        return self._inplace(lambda s: getattr(s, base)(*args, **kwargs), name,
                             *[a for a in args if isinstance(a, Tensor)])
    method.__name__ = method.__qualname__ = name
    method.__doc__ = (f"``{name}(...)``: ``{base}(...)`` written into this tensor (PyTorch's "
                      f"in-place form; a comparison writes 1 and 0 in this tensor's dtype).")
    return method


def install_tensor_methods() -> None:
    """The derived in-place methods and the comparison spellings (``greater``...) on
    ``Tensor``, where it lacks them."""
    spellings = {"greater": "gt", "greater_equal": "ge", "less": "lt", "less_equal": "le",
                 "not_equal": "ne", "sgn": "sign"}
    for alias, name in spellings.items():
        if not hasattr(Tensor, alias) and hasattr(Tensor, name):
            setattr(Tensor, alias, getattr(Tensor, name))
    for name in DERIVED_METHOD_NAMES:
        if not hasattr(Tensor, name) and hasattr(Tensor, name[:-1]):
            setattr(Tensor, name, _derived_method(name))


def install(package, functional) -> None:
    """Put the functions on ``duograph`` (``package``) and ``duograph.nn.functional``."""
    for name, fn in FUNCTIONS.items():
        setattr(package, name, fn)
    for name in MODULE_LEVEL_ACTIVATIONS:
        setattr(package, name, ACTIVATIONS[name])
    for name, fn in ACTIVATIONS.items():
        setattr(functional, name, fn)
    install_tensor_methods()
    for name in DERIVED_FUNCTION_NAMES:
        FUNCTIONS[name] = _from_method(name)
        setattr(package, name, FUNCTIONS[name])
