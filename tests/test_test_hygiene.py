"""The README's test command runs without PyTorch, JAX or TensorFlow: no test module may import
a peer except where a missing peer becomes a skip (``peers.py`` says how), and every module
that reaches PyTorch is marked ``torch`` so CI can run the oracle tests once it is installed."""
import pathlib
import textwrap

import pytest

import peers

TESTS = pathlib.Path(__file__).resolve().parent


def _flagged(source):
    return [module for _, module in peers.unguarded_imports(textwrap.dedent(source))]


def test_no_test_module_imports_a_peer_unguarded():
    offenders = [f"{path.name}:{line}: {module}"
                 for path in sorted(TESTS.glob("*.py"))
                 for line, module in peers.unguarded_imports(path.read_text(), str(path))]
    assert not offenders, (
        "these imports raise ImportError where the peer is not installed, which stops the "
        "README's `python -m pytest -q` at collection (or fails the test): use "
        "`torch = pytest.importorskip(\"torch\")`, the `torch` fixture, or an import inside "
        "`try: ... except ImportError:`\n  " + "\n  ".join(offenders))


@pytest.mark.parametrize("source, expected", [
    ("import numpy\nimport torch\n", ["torch"]),                     # what issue 23 found
    ("import torch.nn.functional as F\n", ["torch.nn.functional"]),
    ("from torch import nn\n", ["torch"]),
    ("import jax.numpy as jnp\n", ["jax.numpy"]),
    ("import tensorflow as tf\n", ["tensorflow"]),
    ("def test_x():\n    import torch\n", ["torch"]),                # inside a test: a failure
    ("class T:\n    def test(self):\n        from jax import grad\n", ["jax"]),
    ("try:\n    import torch\nexcept ValueError:\n    pass\n", ["torch"]),
    ("try:\n    pass\nexcept ImportError:\n    import torch\n", ["torch"]),   # the handler
    ("import importlib\nt = importlib.import_module('torch')\n", ["torch"]),
    ("t = __import__('jax')\n", ["jax"]),
    ("torch = pytest.importorskip('torch')\n", []),
    ("def test_x():\n    jax = pytest.importorskip('jax')\n", []),
    ("try:\n    import torch\nexcept ImportError:\n    torch = None\n", []),
    ("try:\n    import jax\nexcept (ImportError, RuntimeError):\n    jax = None\n", []),
    ("def f():\n    try:\n        import jax\n    except ModuleNotFoundError:\n        return\n",
     []),
    ("import torchaudio_like_name\nimport numpy\nfrom . import torch\n", []),
])
def test_unguarded_imports_are_found_and_guarded_ones_are_not(source, expected):
    assert _flagged(source) == expected


def test_peers_reached_sees_every_way_in():
    assert peers.peers_reached("torch = pytest.importorskip('torch')\n") == {"torch"}
    assert peers.peers_reached("def test_a(torch):\n    pass\n") == {"torch"}
    assert peers.peers_reached("try:\n    import jax\nexcept ImportError:\n    pass\n") == {"jax"}
    assert peers.peers_reached("import numpy as np\nx = np.ones(3)\n") == set()


def test_oracle_modules_are_marked_torch(request):
    """``pytest -m torch`` (CI's second run, with PyTorch installed) selects every module that
    reaches PyTorch: modules that importorskip it, guard its import, or use the fixture."""
    items = request.session.items
    marked = {item.path.name for item in items if item.get_closest_marker("torch")}
    unmarked = {item.path.name for item in items} - marked
    # these reach PyTorch and never skip as a whole, so their items are always collected
    for name in ("test_exec_fast_path.py", "test_eager_fast_path.py", "test_losses.py",
                 "test_compare.py", "test_runtime.py"):
        if name in marked | unmarked:
            assert name in marked, f"{name} reaches PyTorch but is not marked torch"
    assert "test_test_hygiene.py" in unmarked
    assert "test_ir.py" not in marked
