"""Test-session settings: tests marked ``gpu`` are skipped, with the reason, where no CUDA
device can be used (no cupy, no driver or no GPU), so CI without a GPU stays green."""
import pytest


def _cuda_reason():
    try:
        import cupy
    except ImportError:
        return "needs cupy (pip install 'duograph[gpu]')"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001 - a driver too old, no driver...
        return f"CUDA is not usable: {type(e).__name__}"
    return None if count > 0 else "no CUDA device"


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    reason = _cuda_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"gpu test: {reason}")
    for item in gpu_items:
        item.add_marker(skip)
