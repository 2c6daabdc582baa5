"""DLPack without PyTorch: bfloat16 tensors go out tagged as DLPack's bfloat16 and come back
(numpy alone refuses bfloat16 both ways), sharing memory."""
import numpy as np
import pytest

import duograph as dg


def test_bfloat16_round_trip_through_dlpack_shares_memory():
    t = dg.tensor([1.5, -2.25, 3.0]).to("bfloat16")
    with pytest.raises((BufferError, RuntimeError, TypeError)):
        np.from_dlpack(t)              # numpy cannot take DLPack's bfloat16 ...
    back = dg.from_dlpack(t)           # ... duograph can
    assert back.dtype == "bfloat16"
    np.testing.assert_array_equal(back.float().numpy(), [1.5, -2.25, 3.0])
    assert np.shares_memory(back.numpy().view(np.uint16), t.numpy().view(np.uint16))


def test_other_dtypes_are_unchanged():
    t = dg.tensor([1, 2, 3], dtype="int32")
    np.testing.assert_array_equal(np.from_dlpack(t), [1, 2, 3])
    assert dg.from_dlpack(t).dtype == "int32"
