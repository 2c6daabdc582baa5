"""The CPU backend's plain kernels: where numpy + numba + BLAS beat an op's reference kernel.

Each function here takes the reference kernel's arguments, does the fast thing where it
applies (numba loops, BLAS sums, the small-batch matmul form) and otherwise calls the op's
reference kernel, so the two never drift apart; tests check that both give the same bits
(``dg.config.override(numba=False)`` runs the reference where numba would), except conv2d's
direct loops, which sum in another order (tests/test_conv_algos.py bounds the difference).

- conv2d and its gradients: direct numba loops (``conv_direct``), patch copies (im2col,
  col2im, numba loops in ``conv_numba``) and BLAS, or Winograd transforms and BLAS
  (``conv_winograd``: forward and input gradient of 3x3 stride-1 convs), as
  ``autotune.conv_algorithm`` picks;
  the forward and the input gradient per image, as batched matmuls on NCHW arrays as they
  are (no transposing copies); ``*_into`` forms write into the planned runtime's buffers.
- max pooling, its backward and gather: numba loops; without numba, the backward of
  windows that tile the input moves the cotangent's bits through masks (``select``).
- batch norm (training) and its backward: numba loops (``norm_numba``), else the reference
  formula with its channel sums as BLAS matrix-vector products (``blas_reduce``).
- sum, mean, sum_to: leading and trailing dims summed through BLAS.
- matmul: the small-batch ``x @ W.T`` form chosen by ``config.matmul_swap`` (by default
  only where it gives the same bits).
- softmax_cross_entropy and its backward: numba loops over the rows (``loss_numba``).
"""
from __future__ import annotations


import numpy as np

from ...graphlib.ops import conv, elementwise, linalg, nn, reduction
from ...graphlib.ops import shape as shape_ops
from ...graphlib.ops._common import promoting_kernel
from . import autotune, blas_reduce, conv_winograd
from .numba_support import numba_module
from . import select
from .scratch import workspace
from .select import UINT_OF_SIZE

# -- numba loops for conv2d and pooling --------------------------------------------------------
# The loops of ``conv_numba`` (max pooling; conv2d's im2col and col2im) run on numpy arrays of
# these dtypes (conv2d: float32 and float64); float16 and the rest stay on the reference
# kernels (tests/test_conv.py checks both).
_NUMBA_DTYPES = frozenset(np.dtype(name) for name in (
    "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
    "uint64"))
_FLOAT_DTYPES = frozenset([np.dtype("float32"), np.dtype("float64")])


def _pool_numba(*arrays):
    """The numba loops (module ``conv_numba``) where they apply: arrays of a dtype they
    compute, numba installed and ``config.numba`` on; else None."""
    for a in arrays:
        if a.dtype not in _NUMBA_DTYPES:     # a set of dtypes: ``.name`` costs ~2 us
            return None
    return numba_module("conv_numba")


def _conv_numba(*arrays):
    """The numba loops for conv2d's patch copies where they apply (float32/float64 arrays),
    else None."""
    for a in arrays:
        if a.dtype not in _FLOAT_DTYPES:
            return None
    return _pool_numba(*arrays)


# -- scratch memory for patch matrices (scratch.py): im2col's patches and the input
# gradient's patch cotangents live only inside one kernel call
def _workspace(shape, dtype):
    return workspace(shape, dtype, "patches")


def _flat(a):
    """``a`` C-contiguous and 1-D (a view where ``a`` is contiguous already)."""
    return np.ascontiguousarray(a).reshape(-1)


def _pool_geometry(x_shape, out_hw, kernel_size, stride, padding, dilation) -> tuple:
    """The geometry arguments of the numba pool loops."""
    n, c, h, w = x_shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel_size, stride, padding, dilation
    return n * c, h, w, out_hw[0], out_hw[1], kh, kw, sh, sw, ph, pw, dh, dw


def _conv_geometry(x_shape, kernel, stride, padding, dilation, out_hw) -> tuple:
    """The geometry arguments of the numba im2col and col2im loops."""
    n, c, h, w = x_shape
    return (n, c, h, w, out_hw[0], out_hw[1], kernel[0], kernel[1], stride[0], stride[1],
            padding[0], padding[2], dilation[0], dilation[1])


# -- conv2d ------------------------------------------------------------------------------------
def conv2d(xp, x, w, b=None, *, stride, padding, dilation, groups):
    nb = _conv_numba(x)
    if nb is None:
        return conv._conv2d_kernel(xp, x, w, b, stride=stride, padding=padding,
                                   dilation=dilation, groups=groups)
    out_hw = conv._spatial_out("conv2d", x.shape, tuple(w.shape[2:]), stride, dilation,
                               padding)
    out = np.empty((x.shape[0], w.shape[0]) + tuple(out_hw), dtype=np.result_type(x, w))
    conv2d_into(nb, x, w, b, stride, padding, dilation, groups, out)
    return out


def _algorithm(kind, x_shape, w, stride, padding, dilation, groups, dtype, runners) -> str:
    """``autotune.conv_algorithm`` for this conv2d pass ("direct" or "gemm")."""
    return autotune.conv_algorithm(kind, (stride, padding, dilation, dtype), x_shape,
                                   w.shape, groups, runners)


def _direct():
    """The direct loops (``conv_direct``), compiled alongside ``conv_numba``."""
    return numba_module("conv_direct")


def _direct_geometry(x_shape, w_shape, stride, padding, dilation, out_hw) -> tuple:
    """The geometry arguments of the ``conv_direct`` loops."""
    n, c, h, wd = x_shape
    return (n, c, h, wd, w_shape[0], out_hw[0], out_hw[1], w_shape[2], w_shape[3], stride[0],
            stride[1], padding[0], padding[2], dilation[0], dilation[1])


def conv2d_into(nb, x, w, b, stride, padding, dilation, groups, out) -> None:
    """conv2d written into ``out`` (C-contiguous, of the result's shape and dtype), by the
    algorithm ``autotune.conv_algorithm`` picks: the direct loops or im2col + GEMM
    (``_conv2d_gemm_into``); then the bias."""
    def runners():
        scratch = np.empty_like(out)
        return {"direct": lambda: _conv2d_direct_into(nb, x, w, stride, padding, dilation,
                                                      scratch),
                "gemm": lambda: _conv2d_gemm_into(nb, x, w, stride, padding, dilation,
                                                  groups, scratch),
                "winograd": lambda: _conv2d_winograd_into(x, w, padding, scratch)}
    algorithm = _algorithm("forward", x.shape, w, stride, padding, dilation, groups,
                           out.dtype, runners)
    if algorithm == "direct":
        _conv2d_direct_into(nb, x, w, stride, padding, dilation, out)
    elif algorithm == "winograd":
        _conv2d_winograd_into(x, w, padding, out)
    else:
        _conv2d_gemm_into(nb, x, w, stride, padding, dilation, groups, out)
    if b is not None:
        # over (N, C*H*W) rows with the bias repeated to a row (see conv2d_from_patches)
        length = out.shape[2] * out.shape[3]
        flat = out.reshape(out.shape[0], -1)
        flat += b.astype(out.dtype, copy=False).repeat(length).reshape(1, -1)


def _conv2d_direct_into(nb, x, w, stride, padding, dilation, out) -> None:
    _direct().forward(_flat(x.astype(out.dtype, copy=False)),
                        _flat(w.astype(out.dtype, copy=False)), out.reshape(-1),
                        *_direct_geometry(x.shape, w.shape, stride, padding, dilation,
                                          out.shape[2:]))


def _conv2d_winograd_into(x, w, padding, out) -> None:
    conv_winograd.forward_into(x.astype(out.dtype, copy=False), w, padding, out)


def _conv2d_gemm_into(nb, x, w, stride, padding, dilation, groups, out) -> None:
    """im2col per image (``im2col_images``), then one small matmul per image (and group)
    straight into the NCHW output, no transposing copy (the (512, 32, 4, 4) output of the
    digits CNN: 2.1 -> 1.6 ms with the patch copy)."""
    n, c = x.shape[:2]
    out_ch, cg, kh, kw = w.shape
    out_hw = out.shape[2:]
    length = out_hw[0] * out_hw[1]
    if _pointwise(w.shape, stride, padding):      # the patches are x itself
        cols = np.ascontiguousarray(x).reshape(n, groups, cg, length)
    else:
        cols = _workspace((n, groups, cg * kh * kw, length), x.dtype)
        nb.im2col_images(_flat(x), cols.reshape(-1), *_conv_geometry(
            x.shape, (kh, kw), stride, padding, dilation, out_hw))
    wmat = np.ascontiguousarray(w).reshape(groups, out_ch // groups, cg * kh * kw)
    np.matmul(wmat.astype(out.dtype, copy=False), cols,
              out=out.reshape(n, groups, out_ch // groups, length))


def _pointwise(w_shape, stride, padding) -> bool:
    """A 1x1 kernel without stride or padding: its patches are the input itself."""
    return (w_shape[2] == w_shape[3] == 1 and tuple(stride) == (1, 1)
            and not any(padding))


def _im2col(nb, x, kernel, stride, padding, dilation, out_hw):
    """conv2d's patches in one numba pass: no padded copy, rows of length W_out."""
    n, c = x.shape[:2]
    cols = _workspace((c * kernel[0] * kernel[1], n * out_hw[0] * out_hw[1]), x.dtype)
    nb.im2col(_flat(x), cols.reshape(-1), *_conv_geometry(x.shape, kernel, stride, padding,
                                                          dilation, out_hw))
    return cols


def conv2d_input_grad(xp, g, w, *, shape, stride, padding, dilation, groups):
    nb = _conv_numba(g, w)
    if nb is None:
        return conv._conv2d_input_grad_kernel(xp, g, w, shape=shape, stride=stride,
                                              padding=padding, dilation=dilation,
                                              groups=groups)
    gx = np.empty(shape, dtype=np.result_type(g, w))
    conv2d_input_grad_into(nb, g, w, stride, padding, dilation, groups, gx)
    return gx


def conv2d_input_grad_into(nb, g, w, stride, padding, dilation, groups, gx) -> None:
    """conv2d's input gradient written into ``gx`` (C-contiguous), by the algorithm
    ``autotune.conv_algorithm`` picks: the direct loops or GEMM + col2im."""
    def runners():
        scratch = np.empty_like(gx)
        return {"direct": lambda: _input_grad_direct_into(nb, g, w, stride, padding,
                                                          dilation, scratch),
                "gemm": lambda: _input_grad_gemm_into(nb, g, w, stride, padding, dilation,
                                                      groups, scratch),
                "winograd": lambda: _input_grad_winograd_into(g, w, padding, scratch)}
    algorithm = _algorithm("input_grad", gx.shape, w, stride, padding, dilation, groups,
                           gx.dtype, runners)
    if algorithm == "direct":
        _input_grad_direct_into(nb, g, w, stride, padding, dilation, gx)
    elif algorithm == "winograd":
        _input_grad_winograd_into(g, w, padding, gx)
    else:
        _input_grad_gemm_into(nb, g, w, stride, padding, dilation, groups, gx)


def _input_grad_direct_into(nb, g, w, stride, padding, dilation, gx) -> None:
    _direct().input_grad(_flat(g.astype(gx.dtype, copy=False)),
                           _flat(w.astype(gx.dtype, copy=False)), gx.reshape(-1),
                           *_direct_geometry(gx.shape, w.shape, stride, padding, dilation,
                                             g.shape[2:]))


def _input_grad_winograd_into(g, w, padding, gx) -> None:
    """The input gradient of a 3x3 stride-1 conv is the forward conv of the cotangent by the
    kernel flipped in space with its channel axes swapped, padded by 2 - padding."""
    flipped = w[:, :, ::-1, ::-1].swapaxes(0, 1).astype(gx.dtype, copy=False)
    conv_winograd.forward_into(g.astype(gx.dtype, copy=False), flipped,
                               tuple(2 - p for p in padding), gx)


def _input_grad_gemm_into(nb, g, w, stride, padding, dilation, groups, gx) -> None:
    """The patch cotangents per image, ``W.T @ g[b]``, from g as it is (no transposing
    copy), then ``col2im_images``."""
    n = gx.shape[0]
    out_ch, cg, kh, kw = w.shape
    out_hw = tuple(g.shape[2:])
    length = out_hw[0] * out_hw[1]
    wmat = np.ascontiguousarray(w).reshape(groups, out_ch // groups, cg * kh * kw)
    pointwise = _pointwise(w.shape, stride, padding)
    dcols = (gx.reshape(n, groups, cg, length) if pointwise else
             _workspace((n, groups, cg * kh * kw, length), gx.dtype))
    np.matmul(wmat.swapaxes(-1, -2).astype(dcols.dtype, copy=False),
              np.ascontiguousarray(g).reshape(n, groups, out_ch // groups, length), out=dcols)
    if pointwise:                       # the patch cotangents are gx itself
        return
    gx.fill(0)                          # col2im straight into gx: no padded copy
    nb.col2im_images(dcols.reshape(-1), gx.reshape(-1), *_conv_geometry(
        gx.shape, (kh, kw), stride, padding, dilation, out_hw))


def conv2d_weight_grad(xp, x, g, *, shape, stride, padding, dilation, groups):
    nb = _conv_numba(x)
    if nb is None:
        return conv._conv2d_weight_grad_kernel(xp, x, g, shape=shape, stride=stride,
                                               padding=padding, dilation=dilation,
                                               groups=groups)
    dtype = np.result_type(x, g)

    def gemm():
        return _weight_grad_gemm(nb, x, g, shape, stride, padding, dilation, groups)

    def direct():
        gw = np.empty(shape, dtype=dtype)
        _direct().weight_grad(_flat(x.astype(dtype, copy=False)),
                                _flat(g.astype(dtype, copy=False)), gw.reshape(-1),
                                *_direct_geometry(x.shape, shape, stride, padding, dilation,
                                                  g.shape[2:]))
        return gw
    w = np.broadcast_to(np.empty((), dtype), shape)       # the weight's shape, for the choice
    if _algorithm("weight_grad", x.shape, w, stride, padding, dilation, groups, dtype,
                  lambda: {"direct": direct, "gemm": gemm}) == "direct":
        return direct()
    return gemm()


def _weight_grad_gemm(nb, x, g, shape, stride, padding, dilation, groups):
    """im2col over the batch (``im2col``), then one product per group; for a 1x1 kernel
    without stride or padding, one product per image (``g[b] @ x[b].T``), summed."""
    out_hw = tuple(g.shape[2:])
    kernel = tuple(shape[2:])
    if _pointwise(shape, stride, padding):
        n, length = x.shape[0], out_hw[0] * out_hw[1]
        xs = np.ascontiguousarray(x).reshape(n, groups, -1, length)
        gs = np.ascontiguousarray(g).reshape(n, groups, -1, length)
        return np.matmul(gs, xs.swapaxes(-1, -2)).sum(axis=0).reshape(shape)
    cols = _im2col(nb, x, kernel, stride, padding, dilation, out_hw)
    cols = cols.reshape(groups, x.shape[1] // groups * kernel[0] * kernel[1], -1)
    return conv.weight_grad_from_patches(np, cols, out_hw[1], g, groups, shape)


# -- max pooling -------------------------------------------------------------------------------
def _is_2x2(x_shape, out_hw, kernel_size, stride, padding, dilation,
            odd_edge: bool = False) -> bool:
    """2x2 windows at stride 2 that tile the input exactly (no padding, dilation or rest);
    with ``odd_edge``, also an input with one more row or column than the windows cover
    (floor mode over an odd size)."""
    rest = (0, 1) if odd_edge else (0,)
    return (tuple(kernel_size) == (2, 2) and tuple(stride) == (2, 2)
            and tuple(padding) == (0, 0) and tuple(dilation) == (1, 1)
            and x_shape[2] - 2 * out_hw[0] in rest and x_shape[3] - 2 * out_hw[1] in rest)


def max_pool2d(xp, x, kernel_size, stride, padding, dilation, ceil_mode):
    nb = _pool_numba(x)
    if nb is None:
        return conv._max_pool2d_kernel(xp, x, kernel_size, stride, padding, dilation,
                                       ceil_mode)
    out_hw, _ = conv._pool_layout(x.shape, kernel_size, stride, padding, dilation, ceil_mode)
    n, c = x.shape[:2]
    out = np.empty((n, c) + tuple(out_hw), dtype=x.dtype)
    max_pool2d_into(nb, x, kernel_size, stride, padding, dilation, out)
    return out


def max_pool2d_into(nb, x, kernel_size, stride, padding, dilation, out) -> None:
    """max_pool2d written into ``out`` (C-contiguous, of the result's shape and dtype)."""
    out_hw = out.shape[2:]
    geometry = _pool_geometry(x.shape, out_hw, kernel_size, stride, padding, dilation)
    if _is_2x2(x.shape, out_hw, kernel_size, stride, padding, dilation):
        nb.max_pool_forward_2x2(_flat(x), out.reshape(-1), *geometry[:5])
    else:
        nb.max_pool_forward(_flat(x), out.reshape(-1), *geometry,
                            x.dtype.type(conv._lowest(np, x.dtype)))


def _windows_overlap(kernel_size, stride, dilation) -> bool:
    """Whether an input element can lie in more than one window."""
    return any(s < d * (k - 1) + 1 for k, s, d in zip(kernel_size, stride, dilation))


def _tiles(x_shape, out_hw, kernel_size, stride, padding, dilation) -> bool:
    """Windows that tile the input: stride = kernel, no padding or dilation, no partial
    window (ceil_mode's last one)."""
    return (tuple(kernel_size) == tuple(stride) and tuple(padding) == (0, 0)
            and tuple(dilation) == (1, 1) and out_hw[0] * stride[0] <= x_shape[2]
            and out_hw[1] * stride[1] <= x_shape[3])


def _max_pool_tiled_backward(xp, g, x, kernel_size, out_hw):
    """The numpy backward for windows that tile x (each element in one window at most):
    per tap, a mask of the windows whose first maximum sits there, and the cotangent's bits
    moved through it (no branches, no argmax array); bit for bit the general kernel's
    result (0 + g at the winner). None where a window holds a NaN (the general kernel's
    rule for NaNs applies then) or for a dtype without a same-size unsigned integer."""
    kh, kw = kernel_size
    ho, wo = out_hw
    name = UINT_OF_SIZE.get(g.dtype.itemsize)
    if name is None or g.dtype.kind != "f":
        return None

    def tap(a, i, j):
        return a[:, :, i:i + kh * ho:kh, j:j + kw * wo:kw]
    best = tap(x, 0, 0).copy()
    for k in range(1, kh * kw):
        xp.maximum(best, tap(x, k // kw, k % kw), out=best)
    if x.dtype.kind == "f" and bool(xp.isnan(best).any()):
        return None
    it = getattr(xp, name)
    bits = (g + g.dtype.type(0)).view(it)           # 0 + g, as the general kernel adds it
    gx = xp.zeros(x.shape, dtype=g.dtype)
    mask = xp.empty(best.shape, dtype=it)
    free = None                                     # windows whose winner is still unplaced
    for k in range(kh * kw):
        i, j = divmod(k, kw)
        eq = tap(x, i, j) == best
        if free is None:
            free = ~eq
        else:
            eq &= free
            free &= ~eq
        xp.subtract(0, eq, out=mask, dtype=it)      # True -> all ones
        xp.bitwise_and(bits, mask, out=tap(gx, i, j).view(it))
    return gx


def max_pool2d_backward(xp, g, x, kernel_size, stride, padding, dilation, ceil_mode):
    n, c, h, w = x.shape
    out_hw = tuple(g.shape[2:])
    nb = _pool_numba(g, x)
    if nb is not None:
        gx = np.empty((n, c, h, w), dtype=g.dtype)
        max_pool2d_backward_into(nb, g, x, kernel_size, stride, padding, dilation, gx)
        return gx
    if _tiles(x.shape, out_hw, kernel_size, stride, padding, dilation):
        gx = _max_pool_tiled_backward(xp, g, x, kernel_size, out_hw)
        if gx is not None:
            return gx
    return conv._max_pool2d_backward_kernel(xp, g, x, kernel_size, stride, padding, dilation,
                                            ceil_mode)


def max_pool2d_backward_into(nb, g, x, kernel_size, stride, padding, dilation, gx) -> None:
    """max_pool2d's backward written into ``gx`` (C-contiguous, x's shape, g's dtype)."""
    out_hw = tuple(g.shape[2:])
    geometry = _pool_geometry(x.shape, out_hw, kernel_size, stride, padding, dilation)
    if _is_2x2(x.shape, out_hw, kernel_size, stride, padding, dilation, odd_edge=True):
        bits = np.dtype(UINT_OF_SIZE[g.dtype.itemsize]).type
        nb.max_pool_backward_2x2(_flat(g).view(bits), _flat(x), gx.reshape(-1).view(bits),
                                 *geometry[:5], bits(1 << (8 * g.dtype.itemsize - 1)))
    else:
        gx.fill(0)
        nb.max_pool_backward(_flat(g), _flat(x), gx.reshape(-1), *geometry,
                             _windows_overlap(kernel_size, stride, dilation))


def max_pool2d_gather(xp, c, x, kernel_size, stride, padding, dilation, ceil_mode):
    nb = _pool_numba(c, x)
    if nb is None:
        return conv._max_pool2d_gather_kernel(xp, c, x, kernel_size, stride, padding,
                                              dilation, ceil_mode)
    out_hw, _ = conv._pool_layout(x.shape, kernel_size, stride, padding, dilation, ceil_mode)
    out = np.empty(tuple(x.shape[:2]) + tuple(out_hw), dtype=c.dtype)
    nb.max_pool_gather(_flat(c), _flat(x), out.reshape(-1),
                       *_pool_geometry(x.shape, out_hw, kernel_size, stride, padding,
                                       dilation))
    return out


# -- batch norm (training) ---------------------------------------------------------------------
def _norm_numba(*arrays):
    """The ``norm_numba`` module for C-contiguous numpy float32/float64 arrays of one dtype
    with something in them, where numba is installed and on; else None."""
    dt = arrays[0].dtype
    for a in arrays:
        if type(a) is not np.ndarray or a.dtype != dt or not a.flags.c_contiguous:
            return None
    if dt not in (np.float32, np.float64) or arrays[0].size == 0:
        return None
    return numba_module("norm_numba")


def _as3(a):
    """(N, C, S) view of a C-contiguous (N, C, ...) array."""
    return a.reshape(a.shape[0], a.shape[1], -1)


def channel_sum(xp, a, dims):
    """The sum over ``dims`` in ``a``'s dtype, through BLAS where that applies."""
    parts = blas_reduce.split(a, dims)
    if parts is not None:
        return blas_reduce.blas_sum(a, parts)
    return a.sum(axis=dims, dtype=a.dtype)


def bn_forward(xp, x, w, b, eps, out=None):
    """(y, mean, biased var): numba loops, or the reference formula with BLAS sums."""
    nb = _norm_numba(x, w, b, *(out or ()))
    if nb is not None:
        y, mean, var = out if out is not None else nn._bn_buffers(x)
        nb.forward(_as3(x), w, b, eps, _as3(y), mean, var)
        return y, mean, var
    return nn._bn_forward(xp, x, w, b, eps, out, channel_sum)


def bn_backward(xp, dy, x, w, mean, var, eps, out=None):
    """(dx, dweight, dbias): numba loops, or the reference formula with BLAS sums."""
    nb = _norm_numba(dy, x, w, mean, var, *(out or ()))
    if nb is not None:
        dx, dw, db = out if out is not None else nn._bn_buffers(x)
        nb.backward(_as3(dy), _as3(x), w, mean, var, eps, _as3(dx), dw, db)
        return dx, dw, db
    return nn._bn_backward(xp, dy, x, w, mean, var, eps, out, channel_sum)


def batch_norm_train(xp, x, w, b, *, eps):
    if x.dtype == np.float16:
        return nn._half_in_float32(xp, lambda *a: bn_forward(xp, *a, eps), x, w, b)
    return bn_forward(xp, x, w, b, eps)


def batch_norm_train_backward(xp, dy, x, w, mean, var, *, eps):
    if x.dtype == np.float16:
        return nn._half_in_float32(xp, lambda *a: bn_backward(xp, *a, eps), dy, x, w, mean,
                                   var)
    return bn_backward(xp, dy, x, w, mean, var, eps)


# -- sums through BLAS -------------------------------------------------------------------------
def sum_(xp, x, dim, keepdim, dtype=None):
    parts = None if dtype is not None or len(dim) >= x.ndim else blas_reduce.split(x, dim)
    if parts is not None:
        return blas_reduce.blas_sum(x, parts).reshape(
            reduction._reduced_shape(x.shape, dim, keepdim))
    return reduction._sum_kernel(xp, x, dim, keepdim, dtype)


def mean(xp, x, dim, keepdim):
    parts = blas_reduce.split(x, dim)
    if parts is not None:
        total = blas_reduce.blas_sum(x, parts)
        total /= x.dtype.type(x.size // total.size)
        return total.reshape(reduction._reduced_shape(x.shape, dim, keepdim))
    return reduction._mean_kernel(xp, x, dim, keepdim)


def sum_to(xp, x, shape):
    axes, _ = shape_ops._sum_to_axes(x.shape, shape)
    parts = blas_reduce.split(x, axes) if axes else None
    if parts is not None:           # a bias gradient: BLAS sums at memory speed
        return blas_reduce.blas_sum(x, parts).reshape(shape)
    return shape_ops._sum_to_kernel(xp, x, shape)


# -- matmul: the 2-D product of a few rows by a transposed weight ------------------------------
# The small-batch ``x @ W.T`` runs as ``(W @ x.T).T`` where ``config.matmul_swap`` and the
# measurement of ``autotune.use_swap`` say so (see ``autotune.py``).
def matmul_into(xp, a, b, out=None):
    """``np.matmul(a, b)`` (into ``out`` when given), in the form ``config.matmul_swap``
    picks for a few rows times a transposed weight (``autotune.use_swap``)."""
    if autotune.use_swap(a, b):
        r = autotune.swapped(a, b)
        if out is None:
            return np.ascontiguousarray(r)
        np.copyto(out, r)
        return out
    return np.matmul(a, b) if out is None else np.matmul(a, b, out=out)


matmul = promoting_kernel(matmul_into)


# -- softmax cross-entropy -----------------------------------------------------------------------
_SCE_TARGETS = frozenset(np.dtype(n) for n in ("int32", "int64", "uint8"))


def _loss_numba(x, t):
    """The ``loss_numba`` module for numpy (N, C) float32/float64 logits with something in
    them and integer class indices (N,); else None (the reference kernels run)."""
    if type(x) is not np.ndarray or type(t) is not np.ndarray or x.dtype not in _FLOAT_DTYPES \
            or t.dtype not in _SCE_TARGETS or x.ndim != 2 or t.ndim != 1 or not x.size \
            or t.shape[0] != x.shape[0]:
        return None
    return numba_module("loss_numba")


def softmax_cross_entropy(xp, x, t, *, ignore_index, reduction):
    nb = _loss_numba(x, t)
    if nb is None:
        return nn._sce_kernel(xp, x, t, ignore_index=ignore_index, reduction=reduction)
    m = np.empty(x.shape[0], x.dtype)
    e = np.empty(x.shape, x.dtype)
    nb.shift(x, m, e)
    np.exp(e, out=e)
    losses = np.empty(x.shape[0], x.dtype)
    count, total, bad = nb.forward(x, m, e, t, ignore_index, losses)
    if bad >= 0:
        raise nn._out_of_bounds(t, x.shape[1], ignore_index)
    if reduction == "none":
        return losses
    if reduction == "mean":
        total = total / count if count else float("nan")   # every target ignored: NaN
    return np.asarray(total, x.dtype)


def sce_backward_into(g, x, t, ignore_index, reduction, out) -> bool:
    """softmax_cross_entropy_backward written into ``out`` by the numba loops; False
    (nothing written) where they do not apply."""
    nb = _loss_numba(x, t)
    if nb is None or type(out) is not np.ndarray or out.dtype != x.dtype \
            or out.shape != x.shape or not out.flags.writeable \
            or np.may_share_memory(out, x):
        return False
    g = np.asarray(g, x.dtype).reshape(-1)
    nb.shift(x, np.empty(x.shape[0], x.dtype), out)
    np.exp(out, out=out)
    if nb.backward(out, t, ignore_index, g, reduction == "none", reduction == "mean") >= 0:
        raise nn._out_of_bounds(t, x.shape[1], ignore_index)
    return True


def softmax_cross_entropy_backward(xp, g, x, t, *, ignore_index, reduction):
    out = np.empty(x.shape, x.dtype) if type(x) is np.ndarray else None
    if out is not None and sce_backward_into(g, x, t, ignore_index, reduction, out):
        return out
    return nn._sce_backward_kernel(xp, g, x, t, ignore_index=ignore_index,
                                   reduction=reduction)


def table() -> dict:
    """op -> CPU kernel, for the backend to register."""
    return {
        conv.conv2d_op: conv2d, conv.conv2d_input_grad_op: conv2d_input_grad,
        conv.conv2d_weight_grad_op: conv2d_weight_grad, conv.max_pool2d_op: max_pool2d,
        conv.max_pool2d_backward_op: max_pool2d_backward,
        conv.max_pool2d_gather_op: max_pool2d_gather,
        nn.batch_norm_train_op: batch_norm_train,
        nn.batch_norm_train_backward_op: batch_norm_train_backward,
        reduction.sum_op: sum_, reduction.mean_op: mean, shape_ops.sum_to_op: sum_to,
        linalg.matmul_op: matmul, nn.softmax_cross_entropy_op: softmax_cross_entropy,
        nn.softmax_cross_entropy_backward_op: softmax_cross_entropy_backward,
        elementwise.where_op: select.where, elementwise.relu_op: select.relu,
    }
