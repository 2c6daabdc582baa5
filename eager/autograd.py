"""Eager autograd: ``backward``, ``grad``, custom ``Function`` and ``gradcheck``.

The walk (``_walk``) is graphlib's ``backward_pass`` specialised for the tape: the same vjp
rules that graph mode uses, in the same order, with what the tape already knows (which values
want a gradient, which tensors have hooks) taken as given. This module gathers the recorded
nodes, checks them (freed graphs, tensors modified in place after being saved), runs hooks,
and accumulates into leaves' ``.grad``.
"""
from __future__ import annotations

import weakref
from typing import List, Sequence

import numpy as np

from ..graphlib import dtypes
from ..graphlib.autodiff import fit_to, value_key
from ..graphlib.errors import GraphError
from ..graphlib.functional import ones_like
from ..graphlib.ops.creation import zeros_like
from ..graphlib.registry import OpDef
from ..graphlib.types import TensorType
from . import grad_mode
from . import dispatch as tensor_mod
from .dispatch import eager_apply
from .tape import EagerNode
from .tensors import Tensor, _HookHandle, tensor_from_data


def _collect(roots: Sequence[Tensor]):
    """``(nodes, leaves)``: the nodes reachable from the roots in topological order
    (iterative DFS, no recursion), each checked as it is placed (freed, or holding a saved
    tensor modified since: ``_check_node`` raises), and the leaf tensors among their inputs
    that want a gradient, by key (a leaf input's key is the tensor itself)."""
    order: List[EagerNode] = []
    leaves = {}
    seen = set()
    for r in roots:
        root = r.grad_fn
        if root is None or root in seen:
            continue
        seen.add(root)
        stack = [root]
        while stack:
            node = stack[-1]
            for nxt in node.next_nodes:      # rescanned on return: a node has few inputs
                if nxt is not None and nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
                    break
            else:
                stack.pop()
                if node.freed:
                    _check_node(node)
                saved = node.saved_versions
                if saved is not None:
                    i = 0
                    for t in node.inputs:
                        if t._version[0] != saved[i]:
                            _check_node(node)
                        i += 1
                    if len(saved) > i:
                        for ref in node._out_refs:
                            t = ref()
                            if t is not None and t._version[0] != saved[i]:
                                _check_node(node)
                            i += 1
                for k in node.input_keys:
                    if type(k) is not tuple and k.requires_grad and k.grad_fn is None:
                        leaves[k] = k
                order.append(node)
    return order, leaves


_NO_SOURCE = ("\n  (to see where the op was created, run with DUOGRAPH_SOURCE=1 or "
              "dg.set_capture_source(True))")


def _check_node(node: EagerNode) -> None:
    """Raise the error for a node found freed or holding a saved tensor modified since (the
    full check, run where ``_collect``'s quick one saw something)."""
    where = f"\n  in: {node.source}" if node.source else _NO_SOURCE
    if node.freed:
        raise RuntimeError(
            f"backward through the graph a second time: the saved tensors of "
            f"{node.op.name} were freed by the previous backward; pass "
            f"retain_graph=True to the first backward if you need to go through it "
            f"again{where}")
    if node.saved_versions is not None:
        tensors = list(node.inputs) + [node.output_tensor(i) for i in
                                       range(len(node._out_refs))]
        for k, (t, v) in enumerate(zip(tensors, node.saved_versions)):
            if t is not None and t._version[0] != v:
                role = (f"input {k}" if k < len(node.inputs)
                        else f"output {k - len(node.inputs)}")
                raise RuntimeError(
                    f"a tensor needed to compute the gradient of {node.op.name} "
                    f"({role}, shape {list(t.shape)}) was modified by an in-place "
                    f"operation: it is at version {t._version[0]}, the gradient needs "
                    f"version {v}. Use the out-of-place form, or .clone() before "
                    f"modifying{where}")


def _ones_like(t: Tensor) -> Tensor:
    with grad_mode.no_grad():
        return ones_like(t)


def _grad_seed(root: Tensor, g, create_graph: bool) -> Tensor:
    if g is None:
        arr = root.array
        if arr.size != 1:
            raise RuntimeError(f"backward: grad can be created implicitly only for scalar "
                               f"outputs; this output has shape {list(root.shape)}: pass "
                               f"gradient= of that shape")
        if type(arr) is np.ndarray and not tensor_mod._recorders:   # ones_like, undispatched
            # (inside record() the seed must be an op of the recorded graph)
            return Tensor._wrap(np.ones(arr.shape, arr.dtype))
        return _ones_like(root)
    if not isinstance(g, Tensor):
        g = tensor_from_data(g, root.dtype, root.device)
    if tuple(g.shape) != tuple(root.shape):
        raise RuntimeError(f"backward: gradient has shape {list(g.shape)}, expected the "
                           f"output's shape {list(root.shape)}")
    return g if create_graph else g.detach()


def _run(roots, grad_roots, retain_graph, create_graph, wanted=None, early=None):
    """The shared core of backward() and grad(): returns (cotangents by key, nodes).
    ``early(leaf, key, cotangent)``: called for each leaf with a post-accumulate-grad hook as
    soon as the walk has passed the last node that reads it (its cotangent is then
    complete)."""
    roots = list(roots)
    if grad_roots is None:
        grad_roots = [None] * len(roots)
    if len(grad_roots) != len(roots):
        raise RuntimeError(f"got {len(grad_roots)} gradients for {len(roots)} outputs")
    for r in roots:
        if not isinstance(r, Tensor):
            raise TypeError(f"backward: expected tensors, found {type(r).__name__}")
        if not r.requires_grad:
            raise RuntimeError("element 0 of tensors does not require grad and does not have "
                               "a grad_fn: nothing to differentiate (did you call it inside "
                               "dg.no_grad(), or forget requires_grad=True?)")
    if retain_graph is None:
        retain_graph = create_graph
    nodes, leaves = _collect(roots)
    seeds = {}
    for r, g in zip(roots, grad_roots):
        k = value_key(r)
        seed = _grad_seed(r, g, create_graph)
        seeds[k] = seed if k not in seeds else seeds[k] + seed
        if r.grad_fn is None:
            leaves[k] = r
    ready = _ready_positions(nodes, leaves) if early is not None else None
    with grad_mode.set_grad_enabled(create_graph):
        cts = _walk(nodes, seeds, leaves, create_graph, wanted, ready, early)
    if not retain_graph:
        for node in nodes:      # node.release(), inlined
            node.freed = True
            node.inputs = ()
            node._out_data = ()
    return cts, leaves


def _on_grad(t, ct, create_graph, wanted):
    """An output's complete cotangent meets its tensor: hooks may replace it, retain_grad
    keeps it, ``grad()`` may want it."""
    if t._hooks:
        for hook in list(t._hooks):
            new = hook(ct)
            if new is not None:
                ct = new
    if t._retains_grad:
        _accumulate(t, ct, create_graph)
    if wanted is not None and t in wanted:
        wanted[t] = ct
    return ct


def _ready_positions(nodes, leaves):
    """{walk position j: leaf keys whose cotangent is complete before the walk's j-th node}
    for the leaves with post-accumulate-grad hooks: one past the last node (in the walk's
    reversed order) that reads them; None when no leaf has such a hook."""
    hooked = {k for k, t in leaves.items() if t in _post_accumulate}
    if not hooked:
        return None
    last = {}
    for j, node in enumerate(reversed(nodes)):
        for k in node.input_keys:
            if k in hooked:
                last[k] = j
    ready: dict = {}
    for k in hooked:
        ready.setdefault(last.get(k, -1) + 1, []).append(k)
    return ready


def _walk(nodes, seeds, leaves, create_graph, wanted, ready=None, early=None):
    """graphlib's ``backward_pass`` for the eager tape (the same vjp rules, the same order and
    results), with what the tape already knows taken as given: every output of a collected
    node wants a gradient (a non-leaf input's key is such an output), a leaf input wants one
    when it is in ``leaves``; hooks, ``retain_grad`` and ``grad()``'s wanted tensors are
    looked up only on tensors that have them. Without ``create_graph`` (and outside
    ``record()``), nothing of the backward is recorded, so a rule may run as the CPU
    backend's kernel for it (its ``vjp_kernels``, tied to the rule: a replaced rule runs
    itself) and cotangents of one shape and dtype are summed on their arrays; such results
    stay arrays in ``cts`` until a tensor is needed (a hook, a rule, a leaf's result)."""
    cts = dict(seeds)
    get = cts.get
    float_np = _FLOAT_NP
    wrap = tensor_mod._wrap
    arrays_sum = not create_graph and not tensor_mod._recorders
    # the CPU backend's kernels for vjp rules (the provider's backends may have a
    # ``vjp_kernels`` table, runtime/backend.py's ``VjpKernelTable``; the reference has none)
    vjp_kernels = getattr(tensor_mod.backend_for("cpu"), "vjp_kernels", None) \
        if arrays_sum else None
    for j, node in enumerate(reversed(nodes)):
        if ready is not None and j in ready:
            for k in ready.pop(j):
                early(leaves[k], k, get(k))
        n_out = node.n_outputs
        if n_out == 1:
            c = get((node, 0))
            if c is None:
                continue
        else:
            out_cts = [get((node, i)) for i in range(n_out)]
            if all(c is None for c in out_cts):
                continue
            out_cts = [wrap(c) if type(c) is _ndarray else c for c in out_cts]
        op = node.op
        keys = node.input_keys
        nondiff = op.nondiff_inputs
        ins = node.inputs
        n_in = len(ins)
        if n_in == 1 and not nondiff:
            k = keys[0]
            if (type(k) is not tuple and k not in leaves) or (
                    ins[0].array.dtype not in float_np):
                continue
            targets = _FIRST
            needs = _ALL_NEEDED[1]
        elif n_in == 2 and not nondiff:
            k = keys[0]
            t0 = (type(k) is tuple or k in leaves) and ins[0].array.dtype in float_np
            k = keys[1]
            t1 = (type(k) is tuple or k in leaves) and ins[1].array.dtype in float_np
            if t0:
                targets, needs = (_BOTH, _ALL_NEEDED[2]) if t1 else (_FIRST, _FIRST_ONLY)
            elif t1:
                targets, needs = _SECOND, _SECOND_ONLY
            else:
                continue
        else:
            targets = []
            i = 0
            for x in ins:
                k = keys[i]
                if (type(k) is tuple or k in leaves) and x.array.dtype in float_np and (
                        not nondiff or i not in nondiff):
                    targets.append(i)
                i += 1
            if not targets:
                continue
            if len(targets) == n_in:
                needs = _ALL_NEEDED.get(n_in) or tuple([True] * n_in)
            else:
                needs = tuple([i in targets for i in range(n_in)])
        vjp = op.vjp
        if vjp is None:
            where = f"\n  in: {node.source}" if node.source else ""
            raise GraphError(f"{op.name}: this op has no gradient rule, but a gradient "
                             f"must flow through it{where}")
        if n_out == 1:
            t = node._out_refs[0]()
            if t is not None:
                if t._hooks or t._retains_grad or (wanted is not None and t in wanted):
                    if type(c) is _ndarray:
                        c = wrap(c)
                    c = _on_grad(t, c, create_graph, wanted)
            if vjp_kernels is not None:
                entry = vjp_kernels.get(op)
                if entry is not None and entry[0] is vjp and (
                        type(c) is _ndarray or type(c) is Tensor):
                    if n_in == 2:
                        in_arrays = (ins[0].array, ins[1].array)
                    elif n_in == 1:
                        in_arrays = (ins[0].array,)
                    else:
                        in_arrays = tuple([x.array for x in ins])
                    arrs = entry[1](c if type(c) is _ndarray else c.array, in_arrays,
                                    node._out_data, node.attrs, needs)
                    if arrs is not None:
                        # arrays of the inputs' dtype, kept as arrays and added up so
                        for i in targets:
                            r = arrs[i]
                            if r is None:
                                continue
                            k = keys[i]
                            if r.shape != ins[i].array.shape:
                                _add_ct(cts, k, fit_to(wrap(r), ins[i]), True)
                                continue
                            prev = get(k)
                            if prev is None:
                                cts[k] = r
                                continue
                            a = prev if type(prev) is _ndarray else prev.array
                            if type(a) is _ndarray and a.shape == r.shape and a.dtype == r.dtype:
                                r = a + r
                                cts[k] = r if type(r) is _ndarray else np.asarray(r)
                            else:
                                _add_ct(cts, k, wrap(r), True)
                        continue
            outputs = (t,) if t is not None else node.outputs
            if c is None:
                c = zeros_like(outputs[0])
            elif type(c) is _ndarray:
                c = wrap(c)
            out_cts = [c]
        else:
            outputs = node.outputs
            for j in range(n_out):
                c = out_cts[j]
                if c is not None:
                    t = node.output_tensor(j)
                    if t is not None:
                        out_cts[j] = _on_grad(t, c, create_graph, wanted)
            out_cts = [c if c is not None else zeros_like(o) for c, o in zip(out_cts, outputs)]
        in_cts = vjp(out_cts, ins, outputs, node.attrs, needs)
        for i in targets:
            ct = in_cts[i]
            if ct is None:
                continue
            x = ins[i]
            if type(ct) is Tensor:      # ``fit_to``, skipped where the arrays agree
                a, b = ct.array, x.array
                if a.shape != b.shape or (a.dtype is not b.dtype and a.dtype != b.dtype):
                    ct = fit_to(ct, x)
            else:
                ct = fit_to(ct, x)
            k = keys[i]
            prev = get(k)
            if prev is None:
                cts[k] = ct
            else:
                _add_ct(cts, k, ct, arrays_sum)
    if ready:
        for j in sorted(ready):
            for k in ready[j]:
                early(leaves[k], k, get(k))
    for k in leaves:        # a leaf's cotangent kept as an array (a vjp kernel's) leaves
        c = get(k)          # as a tensor
        if type(c) is _ndarray:
            cts[k] = wrap(c)
    return cts


def _tensor_ct(c):
    """A cotangent the walk kept as an array, as a tensor."""
    return tensor_mod._wrap(c) if type(c) is _ndarray else c


def _add_ct(cts, k, ct, arrays_sum):
    """Add ``ct`` to the cotangent under ``k``: summed on the arrays when nothing is
    recorded and they agree in type, shape and dtype, else by the ``+`` op."""
    prev = cts.get(k)
    if type(prev) is _ndarray:
        prev = tensor_mod._wrap(prev)
    if prev is None:
        cts[k] = ct
    elif arrays_sum and type(prev) is Tensor and type(ct) is Tensor:
        a, b = prev.array, ct.array
        if type(a) is _ndarray and type(b) is _ndarray and a.shape == b.shape and (
                a.dtype == b.dtype):
            r = a + b
            cts[k] = tensor_mod._wrap(r if type(r) is _ndarray else np.asarray(r))
        else:
            cts[k] = prev + ct
    else:
        cts[k] = prev + ct


_FIRST = (0,)
_SECOND = (1,)
_BOTH = (0, 1)
_FIRST_ONLY = (True, False)
_SECOND_ONLY = (False, True)
_ALL_NEEDED = {1: (True,), 2: (True, True), 3: (True, True, True)}
_FLOAT_NP = dtypes.GRAD_NP   # floats and complex
_ndarray = np.ndarray


def _accumulate(t: Tensor, ct: Tensor, create_graph: bool) -> None:
    if tensor_mod._recorders and not create_graph:
        # inside record(): accumulate with ops so the graph holds `.grad` as a value
        with grad_mode.no_grad():
            t.grad = ct + 0 if t.grad is None else t.grad + ct
        return
    if not create_graph:
        ct = Tensor._wrap(ct.array.copy() if t.grad is None else ct.array)
    if t.grad is None:
        t.grad = ct
    elif create_graph:
        t.grad = t.grad + ct
    else:
        t.grad = Tensor._wrap(t.grad.array + ct.array)


def _leaf_hooks(t: Tensor, ct):
    if t._hooks:
        for hook in list(t._hooks):
            new = hook(ct)
            if new is not None:
                ct = new
    return ct


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph: bool = False,
             inputs=None) -> None:
    """Accumulate the gradients of ``tensors`` into the ``.grad`` of every leaf (or only of
    ``inputs`` when given)."""
    if isinstance(tensors, Tensor):
        tensors = [tensors]
    if isinstance(grad_tensors, Tensor):
        grad_tensors = [grad_tensors]
    only = None if inputs is None else set(
        [inputs] if isinstance(inputs, Tensor) else inputs)
    done = set()

    def finish(t, ct):
        """A leaf's complete cotangent: its hooks, ``.grad``, its post-accumulate hooks."""
        if ct is None or (only is not None and t not in only):
            return
        if type(ct) is _ndarray:
            ct = tensor_mod._wrap(ct)
        if t._hooks:
            with grad_mode.set_grad_enabled(create_graph):
                ct = _leaf_hooks(t, ct)
        _accumulate(t, ct, create_graph)
        for hook in list(_post_accumulate.get(t, ())):
            hook(t)

    def early(t, k, ct):
        done.add(k)
        finish(t, ct)
    try:
        cts, leaves = _run(tensors, grad_tensors, retain_graph, create_graph,
                           early=early if _post_accumulate else None)
        for k, t in leaves.items():
            if k not in done:
                finish(t, cts.get(k))
    except BaseException:
        _callbacks.clear()          # (a failed backward does not finish another's work)
        raise
    _run_backward_callbacks()


# -- post-accumulate-grad hooks and end-of-backward callbacks --------------------------------
class _ByIdentity:
    """Tensor -> hooks, by identity (a tensor's ``==`` is elementwise, so no
    WeakKeyDictionary), dropped when the tensor dies."""

    def __init__(self):
        self._items: dict = {}

    def __bool__(self) -> bool:
        return bool(self._items)

    def __contains__(self, t) -> bool:
        found = self._items.get(id(t))
        return found is not None and found[0]() is t

    def get(self, t, default=None):
        found = self._items.get(id(t))
        return found[1] if found is not None and found[0]() is t else default

    def setdefault(self, t, value):
        found = self._items.get(id(t))
        if found is not None and found[0]() is t:
            return found[1]
        key = id(t)
        self._items[key] = (weakref.ref(t, lambda _, key=key: self._items.pop(key, None)),
                            value)
        return value


_post_accumulate = _ByIdentity()
_callbacks: list = []


def register_post_accumulate_grad_hook(t: Tensor, fn):
    """Call ``fn(t)`` once ``t.grad`` has received this backward's gradient: as soon as the
    walk has passed the last op that reads the leaf ``t``, while the rest of the backward is
    still to run (what DistributedDataParallel starts its all-reduces from)."""
    if t.grad_fn is not None:
        raise RuntimeError("register_post_accumulate_grad_hook: only leaf tensors have "
                           "post-accumulate-grad hooks")
    if not t.requires_grad:
        raise RuntimeError("register_post_accumulate_grad_hook() on a tensor that does not "
                           "require grad")
    hooks = _post_accumulate.setdefault(t, [])
    hooks.append(fn)
    return _HookHandle(hooks, fn)


def queue_callback(fn) -> None:
    """Run ``fn()`` once, when the backward now running has accumulated every gradient (as
    PyTorch's ``Variable._execution_engine.queue_callback``)."""
    _callbacks.append(fn)


def _run_backward_callbacks() -> None:
    while _callbacks:
        _callbacks.pop(0)()


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph: bool = False,
         allow_unused: bool = False) -> tuple:
    """Gradients of ``outputs`` with respect to ``inputs``, returned (not accumulated)."""
    if isinstance(outputs, Tensor):
        outputs = [outputs]
    single = isinstance(inputs, Tensor)
    inputs = [inputs] if single else list(inputs)
    if isinstance(grad_outputs, Tensor):
        grad_outputs = [grad_outputs]
    for i, t in enumerate(inputs):
        if not isinstance(t, Tensor) or not t.requires_grad:
            found = (type(t).__name__ if not isinstance(t, Tensor)
                     else "a tensor that does not require grad")
            raise RuntimeError(f"grad: every input must be a tensor that requires grad; "
                               f"input {i} is {found}")
    wanted = {t: None for t in inputs if t.grad_fn is not None}
    cts, leaves = _run(outputs, grad_outputs, retain_graph, create_graph, wanted)
    result = []
    for i, t in enumerate(inputs):
        if t.grad_fn is None:
            ct = cts.get(t)
            if ct is not None:
                with grad_mode.set_grad_enabled(create_graph):
                    ct = _leaf_hooks(t, ct)
        else:
            ct = wanted.get(t)
            if ct is None:
                ct = _tensor_ct(cts.get(value_key(t)))
        if ct is None and not allow_unused:
            raise RuntimeError(f"grad: input {i} was not used to compute the outputs; pass "
                               "allow_unused=True to get None for it")
        if ct is not None and not create_graph:
            ct = ct.detach()
        result.append(ct)
    return tuple(result)


# -- custom functions ------------------------------------------------------------------------
class FunctionCtx:
    """What ``forward`` hands to ``backward``: saved tensors and anything set on it."""

    def __init__(self):
        self.saved_tensors = ()
        self.needs_input_grad = ()

    def save_for_backward(self, *tensors) -> None:
        self.saved_tensors = tuple(tensors)


class Function:
    """A custom op with its own gradient, as in PyTorch:

        class Exp(dg.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                y = x.exp()
                ctx.save_for_backward(y)
                return y
            @staticmethod
            def backward(ctx, grad):
                y, = ctx.saved_tensors
                return grad * y
        y = Exp.apply(x)
    """

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("a Function subclass must define forward(ctx, ...)")

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError("a Function subclass must define backward(ctx, ...)")

    @classmethod
    def apply(cls, *args):
        ctx = FunctionCtx()
        tensor_pos = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        with grad_mode.no_grad():
            out = cls.forward(ctx, *args)
        single = not isinstance(out, tuple)
        outs = (out,) if single else out
        if not (grad_mode.is_grad_enabled() and any(ctx.needs_input_grad)):
            return out
        op = _custom_op(cls, ctx, args, tensor_pos, outs)
        results = eager_apply(op, tuple(args[i] for i in tensor_pos), {})
        results = results if isinstance(results, tuple) else (results,)
        return results[0] if single else results


def _custom_op(cls, ctx, args, tensor_pos, outs) -> OpDef:
    """A one-off op whose kernel hands back the forward's results and whose vjp calls
    ``cls.backward``."""
    n_out = len(outs)
    for o in outs:
        if not isinstance(o, Tensor):
            raise TypeError(f"{cls.__name__}.forward must return tensors, found "
                            f"{type(o).__name__}")

    def infer(types, attrs):
        return [TensorType(o.shape, o.dtype) for o in outs]

    def kernel(xp, *arrays):
        return outs[0].array if n_out == 1 else tuple(o.array for o in outs)

    def vjp(cts, ins, outs, attrs, needs):
        grads = cls.backward(ctx, *cts)
        grads = grads if isinstance(grads, tuple) else (grads,)
        if len(grads) != len(args):
            raise RuntimeError(f"{cls.__name__}.backward returned {len(grads)} gradients, "
                               f"expected {len(args)} (one per forward argument)")
        return [grads[i] for i in tensor_pos]

    return OpDef(f"{cls.__name__}", infer, kernel, vjp, multi_output=n_out > 1)


# -- gradcheck -------------------------------------------------------------------------------
class GradcheckError(RuntimeError):
    """Analytical and numerical gradients disagree."""


def gradcheck(fn, inputs, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3,
              raise_exception: bool = True) -> bool:
    """Compare autograd's Jacobian of ``fn`` with central finite differences (float64)."""
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    diff = [t for t in inputs if isinstance(t, Tensor) and t.requires_grad]
    for t in diff:
        if t.dtype != "float64":
            raise ValueError(f"gradcheck: inputs must be float64 for accurate finite "
                             f"differences, found {t.dtype}")
    if not diff:
        raise ValueError("gradcheck: no input requires grad")

    def outputs_flat():
        out = fn(*inputs)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        return [o for o in outs if isinstance(o, Tensor)]

    outs = outputs_flat()
    for oi, out in enumerate(outs):
        n_out = out.numel()
        for k, t in enumerate(diff):
            analytic = np.zeros((n_out, t.numel()))
            for j in range(n_out):
                cot = np.zeros(n_out)
                cot[j] = 1.0
                g, = grad(fn_out(fn, inputs, oi), [t],
                          [Tensor._wrap(cot.reshape(out.shape).astype(out.dtype))],
                          allow_unused=True)
                if g is not None:
                    analytic[j] = np.asarray(g.array, dtype=np.float64).reshape(-1)
            numeric = np.zeros_like(analytic)
            data = t.array          # perturbed in place (any layout: index, never reshape)
            for i in range(t.numel()):
                where = np.unravel_index(i, data.shape)
                orig = data[where].copy()
                try:
                    data[where] = orig + eps
                    with grad_mode.no_grad():
                        plus = np.asarray(fn_out(fn, inputs, oi).array, dtype=np.float64)
                    data[where] = orig - eps
                    with grad_mode.no_grad():
                        minus = np.asarray(fn_out(fn, inputs, oi).array, dtype=np.float64)
                finally:
                    data[where] = orig
                numeric[:, i] = ((plus - minus) / (2 * eps)).reshape(-1)
            if not np.allclose(analytic, numeric, atol=atol, rtol=rtol):
                if not raise_exception:
                    return False
                worst = np.unravel_index(np.argmax(np.abs(analytic - numeric)), analytic.shape)
                raise GradcheckError(
                    f"gradcheck: Jacobian of output {oi} w.r.t. input {k} differs: analytical "
                    f"{analytic[worst]:.6g} vs numerical {numeric[worst]:.6g} at "
                    f"(output {worst[0]}, input {worst[1]})\nanalytical:\n{analytic}\n"
                    f"numerical:\n{numeric}")
    return True


def fn_out(fn, inputs, index: int) -> Tensor:
    out = fn(*inputs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o for o in outs if isinstance(o, Tensor)][index]


_ = dtypes
