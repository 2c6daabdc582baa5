"""Graph-mode entry points: placeholders, variables (state) and symbolic gradients."""
from __future__ import annotations

from typing import Optional

import numpy as np

from . import dtypes
from .errors import GraphError, located
from .ir import Graph, Value, current_graph
from .types import RUNTIME_DIM, TensorType, has_runtime_dim


def _graph(name: str, what: str) -> Graph:
    g = current_graph()
    if g is None:
        raise GraphError(located(f"{what} {name!r}: no graph is being built; create it "
                                 "inside `with dg.Graph('name'):`"))
    return g


def placeholder(name: str, shape=(), dtype="float32") -> Value:
    """A named graph input of the given shape (ints or symbol names) and dtype."""
    graph = _graph(name, "placeholder")
    try:
        t = TensorType(shape, dtype)
        if has_runtime_dim(t.shape):
            raise ValueError(f"the symbol {RUNTIME_DIM!r} in shape {shape!r} is reserved for "
                             "sizes only known at run time (a while_loop's saved trips); "
                             "name the dim otherwise")
        return graph.add_input(name, t)
    except (TypeError, ValueError, GraphError) as e:
        raise type(e)(located(f"placeholder {name!r}: {e}")) from None


def variable(name: str, value, dtype: Optional[str] = None) -> Value:
    """A state input with an initial value; the executable keeps it between runs.

    Bind its new value with ``graph.update(var, new_value)`` (or ``dg.assign``).
    """
    graph = _graph(name, "variable")
    try:
        if dtype is not None:
            value = np.asarray(value, dtype=dtypes.as_dtype(dtype))
        elif not isinstance(value, np.ndarray):
            value = np.asarray(value, dtype=dtypes.infer_data_dtype(value))
        return graph.add_state(name, value)
    except (TypeError, ValueError, GraphError) as e:
        raise type(e)(located(f"variable {name!r}: {e}")) from None


def assign(var: Value, new_value) -> None:
    """Make ``new_value`` the value of state ``var`` after each run (``graph.update``)."""
    if not isinstance(var, Value) or var.graph is None:
        raise GraphError(located(f"assign: expected a state Value made by dg.variable, "
                                 f"found {var!r}"))
    var.graph.update(var, new_value)
