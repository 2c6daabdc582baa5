"""Every public op function in one namespace (re-exported as ``dg.*``)."""
from __future__ import annotations

import sys
from collections import namedtuple

from . import methods
from .ops.conv import (conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d,  # noqa: F401
                       conv_transpose3d)
from .ops.pool import (adaptive_avg_pool2d, avg_pool1d, avg_pool2d, avg_pool3d,  # noqa: F401
                       max_pool1d, max_pool2d, max_pool3d)
from .ops.resample import pixel_shuffle, pixel_unshuffle  # noqa: F401
from .ops.creation import (arange, bernoulli, constant, eye, full, full_like, linspace,  # noqa
                           normal, ones, ones_like, rand, randint, randn, uniform, zeros,
                           zeros_like)
from .ops.elementwise import (abs, add, bitwise_and, bitwise_not, bitwise_or,  # noqa
                              bitwise_xor, cast, clamp, clip, cos, div, eq, erf, exp, ge,
                              gelu, gt, le, leaky_relu, log, logical_and, logical_not,
                              logical_or, lt, maximum, minimum, mul, ne, neg, pow, reciprocal,
                              relu, rsqrt, sigmoid, sign, sin, softplus, sqrt, square, sub,
                              tanh)
from .ops.elementwise import (acos, acosh, arccos, arccosh, arcsin, arcsinh,  # noqa: F401
                              arctan, arctanh, asin, asinh, atan, atanh, ceil, cosh, exp2,
                              expm1, fix, floor, frac, isfinite, isinf, isnan, log10, log1p,
                              log2, logsigmoid, sinh, tan, trunc)
from .ops.elementwise import (arctan2, atan2, floor_divide, fmod, hypot,  # noqa: F401
                              logical_xor, remainder)
from .ops.linalg import matmul, mm  # noqa: F401
from .ops.elementwise import conj  # noqa: F401
from .ops.complexes import (angle, complex, imag, polar, real, view_as_complex,  # noqa: F401
                            view_as_real)
from .ops.layout import view_dtype as _view_dtype  # noqa: F401  (Tensor.view(dtype))
from .ops.pointwise import (bitwise_left_shift, bitwise_right_shift, lerp,  # noqa: F401
                            nan_to_num, round, xlogy)
from .ops.layout import (cross, diag, diagonal, einsum, flip, fliplr, flipud,  # noqa: F401
                         ger, meshgrid, moveaxis, movedim, narrow, outer, repeat_interleave,
                         roll, tensor_split, tile, trace, tril, triu, unflatten)
from .ops.nn import (batch_norm_train, log_softmax, one_hot, softmax,  # noqa: F401
                     softmax_cross_entropy, stop_gradient)
from .ops.reduction import (amax, amin, argmax, argmin, logsumexp, mean, numel,  # noqa
                            prod, std, sum, var)
from .ops.reduction import max_all as _max_all, max_dim as _max_dim  # (max and min's forms)
from .ops.reduction import min_all as _min_all, min_dim as _min_dim
from .ops.shape import (broadcast_to, cat, chunk, concatenate, expand, flatten,  # noqa
                        gather, getitem, index_add, index_select, pad, permute, reshape,
                        scatter_add, split, squeeze, stack, sum_to, transpose, unsqueeze)
from .ops.indexing import (argwhere, index_copy, index_fill, index_put,  # noqa: F401
                           masked_fill, masked_scatter, masked_select, nonzero,
                           nonzero_static, scatter, scatter_reduce, take, take_along_dim,
                           where)

from .ops.norms import norm  # noqa: F401
from .ops.composites import (addmm, bmm, cdist, copysign, cosine_similarity,  # noqa: F401
                             logaddexp, multinomial, nansum, normalize, randperm, rms_norm,
                             searchsorted, std_mean)
from .ops.composites import (addcdiv, addcmul, all, any, broadcast_tensors,  # noqa: F401
                             clamp_max, clamp_min, column_stack, count_nonzero, diff, dist,
                             dot, dstack, hstack, logspace, mv, nanmean, rot90, swapaxes,
                             unbind, var_mean, vstack)
from .ops.sampling import affine_grid, grid_sample  # noqa: F401  (nn.functional's)
from .ops.scan import cummax, cummin, cumprod, cumsum, logcumsumexp  # noqa: F401
from .ops.sorting import (allclose, argsort, equal, isclose, kthvalue, median,  # noqa: F401
                          mode, sort, topk, unique)

MaxMin = namedtuple("MaxMin", ["values", "indices"])
# the (values, indices) pairs, named as torch.return_types names them (subclasses of MaxMin)
_max_result = type("max", (MaxMin,), {"__slots__": ()})
_min_result = type("min", (MaxMin,), {"__slots__": ()})


def max(x, dim=None, keepdim: bool = False):
    """``max(x)`` is the largest element; ``max(x, dim)`` gives (values, indices) as PyTorch,
    with PyTorch's gradients: ``max(x)`` shares it evenly between ties, ``max(x, dim)``
    sends it to the returned index."""
    if dim is None:
        return _max_all(x)
    return _max_result(*_max_dim(x, dim, keepdim))


def min(x, dim=None, keepdim: bool = False):
    """``min(x)`` is the smallest element; ``min(x, dim)`` gives (values, indices), with the
    gradients of ``max``."""
    if dim is None:
        return _min_all(x)
    return _min_result(*_min_dim(x, dim, keepdim))


subtract, multiply, divide, true_divide = sub, mul, div, div
negative, absolute = neg, abs
concat = cat

# what `from duograph.graphlib.functional import *` (and so `dg.*`) takes: the op functions
__all__ = ["adaptive_avg_pool2d", "avg_pool2d", "conv2d", "max_pool2d", "arange", "bernoulli",
           "constant", "eye", "full", "full_like", "linspace", "normal", "ones", "ones_like",
           "rand", "randint", "randn", "uniform", "zeros", "zeros_like", "abs", "add",
           "bitwise_and", "bitwise_not", "bitwise_or", "bitwise_xor", "cast",
           "clamp", "clip", "cos", "div", "eq", "erf", "exp", "ge", "gelu", "gt", "le",
           "leaky_relu", "log", "logical_and", "logical_not", "logical_or", "lt", "maximum",
           "minimum", "mul", "ne", "neg", "pow", "reciprocal", "relu", "rsqrt", "sigmoid", "sign",
           "sin", "softplus", "sqrt", "square", "sub", "tanh", "where", "matmul", "mm",
           "batch_norm_train", "log_softmax", "one_hot", "softmax", "softmax_cross_entropy",
           "stop_gradient", "amax", "amin", "argmax", "argmin", "logsumexp", "mean", "numel",
           "prod", "std", "sum", "var", "broadcast_to", "cat", "chunk", "concatenate", "expand",
           "flatten", "gather", "getitem", "index_add", "index_select", "pad", "permute",
           "reshape", "scatter_add", "split", "squeeze", "stack", "sum_to", "transpose",
           "unsqueeze", "MaxMin", "max", "min", "concat", "subtract", "multiply", "divide",
           "true_divide", "negative", "absolute",
           "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "log1p",
           "expm1", "log2", "log10", "exp2", "floor", "ceil", "trunc", "fix", "frac", "isnan",
           "isinf", "isfinite", "logsigmoid", "arcsin", "arccos", "arctan", "arcsinh",
           "arccosh", "arctanh", "remainder", "fmod", "floor_divide", "atan2", "arctan2",
           "hypot", "logical_xor",
           "round", "nan_to_num", "lerp", "xlogy", "bitwise_left_shift",
           "bitwise_right_shift", "cross", "diag", "diagonal", "einsum", "flip", "fliplr",
           "flipud", "ger", "meshgrid", "moveaxis", "movedim", "narrow", "outer",
           "repeat_interleave", "roll", "tensor_split", "tile", "trace", "tril", "triu",
           "unflatten",
           "conv1d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
           "max_pool1d", "max_pool3d", "avg_pool1d", "avg_pool3d", "pixel_shuffle",
           "pixel_unshuffle",
           "argwhere", "index_copy", "index_fill", "index_put", "masked_fill",
           "masked_scatter", "masked_select", "nonzero", "nonzero_static", "scatter",
           "scatter_reduce", "take", "take_along_dim"]
__all__ += ["conj", "angle", "complex", "imag", "polar", "real", "view_as_complex",
            "view_as_real"]
__all__ += ["cumsum", "cumprod", "cummax", "cummin", "logcumsumexp", "sort", "argsort", "topk",
            "kthvalue", "median", "mode", "unique", "norm", "isclose", "allclose", "equal"]
# PyTorch's compositions (normalize is torch.nn.functional's only: dg.nn.functional has it)
__all__ += ["addmm", "bmm", "cdist", "copysign", "cosine_similarity", "logaddexp",
            "multinomial", "nansum", "randperm", "rms_norm", "searchsorted", "std_mean",
            "addcdiv", "addcmul", "all", "any", "broadcast_tensors", "clamp_max", "clamp_min",
            "column_stack", "count_nonzero", "diff", "dist", "dot", "dstack", "hstack",
            "logspace", "mv", "nanmean", "rot90", "swapaxes", "unbind", "var_mean", "vstack"]

# PyTorch accepts numpy's spellings axis= and keepdims= wherever dim= and keepdim= are
from .aliases import add_axis_aliases as _add_axis_aliases  # noqa: E402
_add_axis_aliases(globals(), __all__)


methods.set_functions(sys.modules[__name__])    # the tensor methods call these functions

# PyTorch's special and number-theoretic functions (graphlib/ops/special.py)
from .ops.special import (deg2rad, digamma, erfc, erfinv, fmax, fmin, gcd, heaviside,  # noqa
                          i0, isneginf, isposinf, lcm, ldexp, lgamma, logaddexp2, logit,
                          nextafter, polygamma, rad2deg, signbit, sinc)
from .ops import special as _special  # noqa: E402
__all__ += list(_special.__all__)
# PyTorch's products and array functions composed of other ops (graphlib/ops/products.py)
from .ops.products import (addbmm, addmv, addr, aminmax, atleast_1d, atleast_2d,  # noqa
                           atleast_3d, baddbmm, block_diag, cartesian_prod, diag_embed,
                           diagflat, dsplit, hsplit, inner, kron, msort, ravel, select,
                           tensordot, tril_indices, triu_indices, vander, vdot, vsplit)
from .ops import products as _products  # noqa: E402
__all__ += list(_products.__all__)
_add_axis_aliases(globals(), ["aminmax", "select"])
