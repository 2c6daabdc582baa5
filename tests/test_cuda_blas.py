"""The capturable cuBLAS matmul of the cuda backend (runtime/cuda/blas.py), on any machine:
``plan_matmul`` maps numpy's matmul (vectors, broadcast batches, transposed and sliced
views) onto one strided-batched column-major gemm; ``emulate_gemm`` reads the operands'
memory exactly as cuBLAS would for that plan. A wrong leading dimension, operation or batch
stride gives a wrong product here. The call itself runs in tests/test_gpu.py."""
from __future__ import annotations

import numpy as np
import pytest

from duograph.runtime.cuda.blas import OP_N, OP_T, GemmPlan, array_module, plan_matmul


def emulate_gemm(plan: GemmPlan, a_flat: np.ndarray, b_flat: np.ndarray) -> np.ndarray:
    """What cuBLAS computes for ``plan`` over flat element buffers (numpy, column-major
    reading as cuBLAS does): the row-major result of shape ``(batch, m, n)``. For tests."""
    out = np.empty((plan.batch, plan.m, plan.n), np.result_type(a_flat, b_flat))

    def read(flat, opnd, rows, cols, i):
        # the row-major rows x cols matrix the operand holds
        base = i * opnd.stride
        if opnd.op == OP_N:
            idx = base + np.arange(rows)[:, None] * opnd.ld + np.arange(cols)[None, :]
        else:
            idx = base + np.arange(rows)[:, None] + np.arange(cols)[None, :] * opnd.ld
        return flat[idx]
    for i in range(plan.batch):
        out[i] = read(a_flat, plan.a, plan.m, plan.k, i) @ read(b_flat, plan.b, plan.k,
                                                                plan.n, i)
    return out


def _elements(x):
    return tuple(s // x.itemsize for s in x.strides)


def _flat(x):
    """x's memory from its first element on, as a flat array (views read their base)."""
    if x.size == 0:
        return np.zeros(0, x.dtype)
    span = 1 + sum((n - 1) * s for n, s in zip(x.shape, _elements(x)))
    return np.lib.stride_tricks.as_strided(x, shape=(span,), strides=(x.itemsize,))


def _gemm_matmul(a, b):
    plan, copy_a, copy_b = plan_matmul(a.shape, _elements(a), b.shape, _elements(b))
    copied = (copy_a, copy_b)
    if copy_a or copy_b:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        if copy_a:
            a = np.ascontiguousarray(np.broadcast_to(a, batch + a.shape[-2:])
                                     if a.ndim > 1 else a)
        if copy_b:
            b = np.ascontiguousarray(np.broadcast_to(b, batch + b.shape[-2:])
                                     if b.ndim > 1 else b)
        plan, copy_a, copy_b = plan_matmul(a.shape, _elements(a), b.shape, _elements(b))
        assert not (copy_a or copy_b), "contiguous operands must plan"
    return emulate_gemm(plan, _flat(a), _flat(b)).reshape(plan.out_shape), plan, copied


rng = np.random.default_rng(0)


def r(*shape):
    return rng.standard_normal(shape)


CASES = {
    "2d": (r(3, 4), r(4, 5)),
    "a transposed": (r(4, 3).T, r(4, 5)),
    "b transposed": (r(3, 4), r(5, 4).T),
    "both transposed": (r(4, 3).T, r(5, 4).T),
    "a row slice": (r(6, 4)[::2], r(4, 5)),
    "a column slice": (r(3, 8)[:, :4], r(4, 5)),
    "b column step": (r(3, 4), r(4, 10)[:, ::2]),
    "vector @ matrix": (r(4), r(4, 5)),
    "matrix @ vector": (r(3, 4), r(4)),
    "strided vectors": (r(8)[::2], r(4, 5)),
    "vector @ vector": (r(4), r(4)),
    "batched": (r(2, 3, 4), r(2, 4, 5)),
    "batch broadcast a": (r(3, 4), r(2, 4, 5)),
    "batch broadcast b": (r(2, 3, 4), r(4, 5)),
    "batch dims 1 and n": (r(1, 3, 3, 4), r(2, 1, 4, 5)),
    "two batch dims": (r(2, 3, 3, 4), r(2, 3, 4, 5)),
    "batched transposed": (r(2, 4, 3).transpose(0, 2, 1), r(2, 5, 4).transpose(0, 2, 1)),
    "batch axis moved": (r(3, 2, 4).transpose(1, 0, 2), r(2, 4, 5)),
    "batched vector": (r(2, 3, 4), r(4)),
    "k = 1": (r(3, 1), r(1, 5)),
    "m = 1": (r(1, 4), r(4, 5)),
    "n = 1": (r(3, 4), r(4, 1)),
    "im2col-like": (r(2, 6, 9), r(2, 9, 20)[:, :, 3:17]),
    "broadcast inside a": (np.broadcast_to(r(1, 4), (3, 4)), r(4, 5)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_one_strided_batched_gemm_computes_numpy_matmul(name):
    a, b = CASES[name]
    got, plan, _ = _gemm_matmul(a, b)
    np.testing.assert_allclose(got, np.matmul(a, b), rtol=1e-12, atol=1e-12)
    assert got.shape == np.matmul(a, b).shape
    assert plan.a.op in (OP_N, OP_T) and plan.b.op in (OP_N, OP_T)


def test_views_are_read_in_place_not_copied():
    """Transposed and sliced operands are read where they lie (op T, a leading dimension
    wider than the matrix); only what no gemm can read (broadcast rows) is copied."""
    for name in ("a transposed", "b transposed", "a row slice", "a column slice",
                 "batched transposed", "batch axis moved", "batch broadcast a",
                 "im2col-like", "strided vectors"):
        _, _, copied = _gemm_matmul(*CASES[name])
        assert copied == (False, False), name
    _, plan, _ = _gemm_matmul(*CASES["a transposed"])
    assert plan.a.op == OP_T and plan.b.op == OP_N
    _, plan, _ = _gemm_matmul(*CASES["batch broadcast a"])
    assert plan.a.stride == 0 and plan.b.stride == 20
    _, _, copied = _gemm_matmul(*CASES["broadcast inside a"])
    assert copied == (True, False)
    _, _, copied = _gemm_matmul(*CASES["batch dims 1 and n"])
    assert copied == (True, True)         # broadcast against a walked dim: no one stride


def test_random_shapes_and_views():
    for trial in range(200):
        m, k, n = (int(v) for v in rng.integers(1, 6, 3))
        batch = tuple(int(v) for v in rng.integers(1, 4, rng.integers(0, 3)))
        a = r(*batch, m, k)
        b = r(*batch[rng.integers(0, len(batch) + 1):], k, n)
        if rng.random() < 0.5:
            a = np.swapaxes(np.ascontiguousarray(np.swapaxes(a, -1, -2)), -1, -2)
        if rng.random() < 0.5:
            b = np.swapaxes(np.ascontiguousarray(np.swapaxes(b, -1, -2)), -1, -2)
        got, _, _ = _gemm_matmul(a, b)
        np.testing.assert_allclose(got, np.matmul(a, b), rtol=1e-12, atol=1e-12,
                                   err_msg=f"trial {trial}: {a.shape} @ {b.shape}")


def test_empty_batch_has_no_plan_and_inner_dims_are_checked():
    assert plan_matmul((0, 3, 4), (12, 4, 1), (4, 5), (5, 1)) == (None, False, False)
    # empty matrices (any strides, as cupy gives them) plan without reading: the caller
    # zero-fills for k = 0 and has nothing to do for m or n = 0
    for a, b in (((3, 0), (0, 0)), ((0, 4), (0, 0))):
        plan, copy_a, copy_b = plan_matmul(a, (0, 0), (a[1], 5), (0, 0))
        assert plan.out_shape == (a[0], 5) and not (copy_a or copy_b)
    with pytest.raises(ValueError, match="inner dims"):
        plan_matmul((3, 4), (4, 1), (5, 6), (6, 1))


def test_array_module_without_cublas_is_the_module():
    """On an array module that is not cupy (numpy here, a fake cupy in other tests) the
    backend's module is the module itself, matmul included."""
    assert array_module(np) is np
