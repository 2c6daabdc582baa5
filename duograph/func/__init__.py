"""duograph.func: torch.func's function transforms over duograph's ops.

``vmap`` maps a function over a batch dim with each op's batching rule (the ``batch``
trait of its OpDef, ``graphlib.batching``): eagerly through the dispatch interceptor, under
``dg.compile`` (the batched ops are what gets recorded) and on graph Values. ``grad``,
``grad_and_value``, ``vjp``, ``jvp``, ``jacrev``, ``jacfwd`` and ``hessian`` differentiate
with the OpDefs' vjp rules (forward mode by transposing them) and compose with each other
and with vmap (``vmap(grad(f))`` gives per-example gradients). ``functional_call`` runs a
module with other parameters; ``stack_module_state`` stacks several modules' state for
vmapping over models. ``vmap_graph`` maps a whole ``Graph`` over a batch (a graph-to-graph
transform with the same rules).
"""
from .graph_vmap import vmap_graph
from .module_state import functional_call, stack_module_state
from .transforms import grad, grad_and_value, hessian, jacfwd, jacrev, jvp, vjp
from .vmap import vmap

__all__ = ["vmap", "grad", "grad_and_value", "vjp", "jvp", "jacrev", "jacfwd", "hessian",
           "functional_call", "stack_module_state", "vmap_graph"]
