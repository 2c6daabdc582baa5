"""duograph.runtime: backends (numpy, cupy) and the executor of compiled graphs.

It knows graphlib only: never eager.
"""
from .backends import get_backend
from .executable import Executable, compile_graph, needed_nodes

__all__ = ["Executable", "compile_graph", "get_backend", "needed_nodes"]
