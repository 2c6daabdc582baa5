"""The GPU op-table tests of ``test_gpu.py`` run on the stand-in device (``fake_device.py``)
on any machine: every op in graph mode (interpreted and planned, O0 and O2, values and
gradients) and in eager mode (values and gradients) through the "cuda" device's code paths.
This is what found the composite ops whose internal constants were made on the CPU (tril,
pad, interpolate, einsum's gradient...); a real GPU adds cupy's own behaviour
(``test_gpu.py``, marked ``gpu``)."""
import pytest
from fake_device import fake_cuda

import test_gpu as gpu_tests


@pytest.fixture(autouse=True, scope="module")
def _cuda():
    with fake_cuda() as backend:
        yield backend


@pytest.mark.parametrize("op, sample", gpu_tests.FORWARD)
def test_graph_mode_on_the_device(op, sample):
    gpu_tests.test_op_table_graph_mode_on_the_gpu_equals_the_cpu(op, sample)


@pytest.mark.parametrize("op, sample", gpu_tests.GRAD)
def test_graph_gradients_on_the_device(op, sample):
    gpu_tests.test_op_table_gradients_on_the_gpu_equal_the_cpu(op, sample)


@pytest.mark.parametrize("op, sample", gpu_tests.FORWARD)
def test_eager_on_the_device(op, sample):
    gpu_tests.test_op_table_eager_on_the_gpu_equals_the_cpu(op, sample)


@pytest.mark.parametrize("op, sample", gpu_tests.GRAD)
def test_eager_gradients_on_the_device(op, sample):
    gpu_tests.test_op_table_eager_gradients_on_the_gpu_equal_the_cpu(op, sample)
