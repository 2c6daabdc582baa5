"""The CPU backend's out= forms that keep full-size temporaries out of a planned step
(tanh_backward, sigmoid_backward, cat, bernoulli) give their kernels' bits, written over an
input too; and the shared scratch of fused kernels' temporaries is one buffer per thread."""
import threading

import numpy as np
import pytest

from duograph.graphlib.ops import creation, elementwise, shape
from duograph.runtime.cpu import workspace
from duograph.runtime.cpu.tables import KERNELS, OUT_KERNELS


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("n", [7, 40000])
def test_elementwise_backward_out_forms_equal_their_kernels_bit_for_bit(dt, n):
    rng = np.random.default_rng(0)
    g = rng.standard_normal((2, n)).astype(dt)
    y = np.tanh(rng.standard_normal((2, n))).astype(dt)
    for op in (elementwise.tanh_backward_op, elementwise.sigmoid_backward_op):
        ref = KERNELS[op](np, g, y)
        out = np.empty_like(g)
        assert OUT_KERNELS[op](np, g, y, out=out)
        np.testing.assert_array_equal(out, ref)
        over = g.copy()           # the planner may write the gradient over the cotangent
        if OUT_KERNELS[op](np, over, y, out=over):
            np.testing.assert_array_equal(over, ref)
    over = g.copy()
    assert OUT_KERNELS[elementwise.tanh_backward_op](np, over, y, out=over)
    # a half-overlapping output is declined (the runtime then runs the kernel and copies)
    flat = g.reshape(-1).copy()
    a, b = flat[1:n + 1].reshape(1, n), flat[:n].reshape(1, n)
    assert not OUT_KERNELS[elementwise.tanh_backward_op](np, a, y[:1], out=b)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_cat_and_bernoulli_out_forms_equal_their_kernels_bit_for_bit(dt):
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((3, k)).astype(dt) for k in (2, 5)]
    out = np.empty((3, 7), dt)
    assert OUT_KERNELS[shape.cat_op](np, *xs, out=out, dim=-1)
    np.testing.assert_array_equal(out, KERNELS[shape.cat_op](np, *xs, dim=-1))
    seed = np.array(77, np.int64)
    for n in (5, 16384 * 2 + 3):
        p = rng.random((n,)).astype(dt)
        ref = KERNELS[creation.bernoulli_op](np, p, seed, stream=3)
        out = np.empty_like(p)
        assert OUT_KERNELS[creation.bernoulli_op](np, p, seed, out=out, stream=3)
        np.testing.assert_array_equal(out, ref)


def test_scratch_is_shared_per_thread_and_grows_only():
    workspace.release()
    small = workspace.Scratch([((4, 4), np.float32)])
    large = workspace.Scratch([((64, 64), np.float32), ((8,), bool)])
    assert workspace.workspace_bytes() >= 64 * 64 * 4 + 8
    a, = small.arrays()
    b, _ = large.arrays()
    assert np.shares_memory(a, b)           # one buffer: the runners take turns
    seen = []
    t = threading.Thread(target=lambda: seen.append(small.arrays()[0]))
    t.start()
    t.join()
    assert not np.shares_memory(seen[0], a)  # another thread, another buffer
    workspace.release()
