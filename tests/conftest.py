"""Test-session settings: tests marked ``gpu`` are skipped, with the reason, where no CUDA
device can be used (no cupy, no driver or no GPU), so CI without a GPU stays green.

PyTorch is an optional oracle (see ``peers.py``): the ``torch`` fixture skips a test where it
is not installed, and every test of a module that reaches PyTorch is marked ``torch``, so CI
runs the whole suite without PyTorch (the README's command) and then ``pytest -m torch``."""
import functools
import pathlib

import pytest

import peers


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "torch: the module compares against PyTorch (marked by conftest.py)")


@pytest.fixture(scope="session")
def torch():
    """PyTorch, the oracle; the test skips where it is not installed."""
    return pytest.importorskip("torch")


@functools.lru_cache(maxsize=None)
def _module_reaches_torch(path: str) -> bool:
    if not path.endswith(".py"):
        return False
    return "torch" in peers.peers_reached(pathlib.Path(path).read_text(), path)


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
    for item in items:
        if "torch" in getattr(item, "fixturenames", ()) or _module_reaches_torch(str(item.path)):
            item.add_marker(pytest.mark.torch)
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    reason = _cuda_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"gpu test: {reason}")
    for item in gpu_items:
        item.add_marker(skip)
