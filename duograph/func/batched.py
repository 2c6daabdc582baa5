"""The machinery under duograph.func: transform levels, batched tensors, logical tape nodes.

Every transform in progress has a level on this thread's stack (``push``/``pop``): a vmap
level (its batch size and randomness mode) or a grad level. A vmap level batches values as
``BatchedTensor``s: a level-tagged wrapper around the value one level down (a tensor, a
graph Value or a ``BatchedTensor`` of an outer vmap) whose dim 0 is the batch; user code
sees the per-example shape. Each vmap level installs a dispatch interceptor
(``duograph.eager.intercept``) that unwraps its own level's operands, applies the op's batching
rule (``graphlib.batching``: the ``batch`` trait) and wraps the results.

Gradients inside vmap (``vmap(grad(f))``) differentiate per example: when a grad level
started inside a vmap level, that vmap's interceptor puts a ``LogicalNode`` (the op on the
batched operands) on the tape, so the backward pass runs the op's vjp rule on batched values
through the same interceptor. A grad level outside the vmap (``grad(vmap(f))``) sees the
batched computation as the plain tensor ops it runs, which the eager tape records as usual.
"""
from __future__ import annotations

import itertools
import threading
import warnings

from ..eager import grad_mode
from ..eager.dispatch import eager_apply, intercept
from ..eager.tensors import Tensor
from ..graphlib import batching
from ..graphlib.dispatch import register_handler
from ..graphlib.errors import DuographError
from ..graphlib.ir import Value
from ..graphlib.methods import TensorMethods
from ..graphlib.registry import get_op

_local = threading.local()
_counter = itertools.count(1)
_warned: set = set()
# ops that fell back to the per-example loop since the process started (tests read it)
FALLBACK_OPS: set = set()


class Level:
    __slots__ = ("kind", "level", "size", "randomness")

    def __init__(self, kind: str, size=None, randomness=None):
        self.kind, self.level = kind, next(_counter)
        self.size, self.randomness = size, randomness


def stack() -> list:
    s = getattr(_local, "stack", None)
    if s is None:
        s = _local.stack = []
    return s


def push(kind: str, size=None, randomness=None) -> Level:
    entry = Level(kind, size, randomness)
    stack().append(entry)
    return entry


def pop(entry: Level) -> None:
    s = stack()
    if s and s[-1] is entry:
        s.pop()
    else:
        s.remove(entry)


def is_live(level: int) -> bool:
    return any(e.level == level for e in stack())


def grad_level_above(level: int) -> bool:
    """Whether a grad transform started inside vmap level ``level`` is in progress."""
    return any(e.kind == "grad" and e.level > level for e in stack())


def grad_level_active() -> bool:
    return any(e.kind == "grad" for e in stack())


class BatchedTensor(TensorMethods):
    """A value batched by one vmap level: ``value`` holds every example, the batch at dim 0;
    ``shape``, ``ndim`` and the methods are those of one example (as torch.func's
    BatchedTensor). ``requires_grad``/``grad_fn`` are its place on the logical tape."""

    __slots__ = ("value", "level", "requires_grad", "grad_fn", "_index", "__weakref__")

    def __init__(self, value, level: int):
        self.value = value
        self.level = level
        self.requires_grad = False
        self.grad_fn = None
        self._index = 0

    # the value protocol of graphlib.autodiff (value_key)
    @property
    def node(self):
        return self.grad_fn

    @property
    def index(self) -> int:
        return self._index

    @property
    def shape(self) -> tuple:
        return tuple(self.value.shape[1:])

    @property
    def dtype(self) -> str:
        return self.value.dtype

    @property
    def ndim(self) -> int:
        return len(self.value.shape) - 1

    @property
    def device(self):
        return getattr(self.value, "device", "cpu")

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def grad(self):
        return None

    def dim(self) -> int:
        return self.ndim

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= int(d)
        return n

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        return iter([self[i] for i in range(len(self))])

    def _data_dependent(self, what: str):
        raise RuntimeError(
            f"vmap: It looks like you're calling {what} on a Tensor inside vmap. vmap runs the "
            "function once for the whole batch, so a value that differs per example cannot "
            "become one Python value; compute with tensor ops instead (dg.where for control "
            "flow), or move the call out of vmap")

    def item(self):
        self._data_dependent(".item()")

    def tolist(self):
        self._data_dependent(".tolist()")

    def numpy(self):
        self._data_dependent(".numpy()")

    def __bool__(self):
        self._data_dependent("bool() (data-dependent control flow)")

    def __float__(self):
        self._data_dependent("float()")

    def __int__(self):
        self._data_dependent("int()")

    def __index__(self):
        self._data_dependent("__index__")

    def __array__(self, dtype=None, copy=None):
        self._data_dependent("numpy.asarray()")

    def detach(self) -> "BatchedTensor":
        value = self.value.detach() if hasattr(self.value, "detach") else self.value
        return BatchedTensor(value, self.level)

    def requires_grad_(self, requires_grad: bool = True) -> "BatchedTensor":
        if self.grad_fn is not None and not requires_grad:
            raise RuntimeError("requires_grad_: only leaf tensors can stop requiring grad")
        self.requires_grad = bool(requires_grad)
        return self

    def clone(self) -> "BatchedTensor":
        return get_op("reshape")(self, shape=self.shape)

    def contiguous(self) -> "BatchedTensor":
        return self

    def to(self, *args, dtype=None, **kwargs):
        if args and dtype is None and not isinstance(args[0], str):
            dtype = args[0]
        return self if dtype is None else get_op("cast")(self, dtype=dtype)

    def float(self):
        return self.to(dtype="float32")

    def double(self):
        return self.to(dtype="float64")

    def __repr__(self):
        return f"BatchedTensor(lvl={self.level}, bdim=0, value=\n{self.value!r})"

    # in-place methods: the result of the out-of-place op becomes this tensor's value (its
    # place on the logical tape too), as an in-place op on a non-leaf does eagerly
    def _become(self, result) -> "BatchedTensor":
        if type(result) is not BatchedTensor or result.level != self.level:
            raise RuntimeError("vmap: an in-place operation on a batched tensor must give a "
                               "batched result of the same vmap")
        if self.requires_grad and self.grad_fn is None:
            raise RuntimeError("a leaf Variable that requires grad is being used in an "
                               "in-place operation.")
        self.value, self.requires_grad = result.value, result.requires_grad
        self.grad_fn, self._index = result.grad_fn, result._index
        return self

    def __setitem__(self, index, value):
        raise RuntimeError("vmap: assigning into a batched tensor (x[index] = value) is not "
                           "supported inside duograph.func.vmap; build the new value instead: "
                           "dg.where(mask, value, x), dg.index_put or dg.scatter")

    def add_(self, other, *, alpha=1):
        return self._become(self + (other if alpha == 1 else other * alpha))

    def sub_(self, other, *, alpha=1):
        return self._become(self - (other if alpha == 1 else other * alpha))

    def mul_(self, other):
        return self._become(self * other)

    def div_(self, other):
        return self._become(self / other)

    def clamp_(self, min=None, max=None):
        return self._become(self.clamp(min, max))

    def zero_(self):
        return self._become(self * 0)

    def fill_(self, value):
        return self._become(self * 0 + value)

    def copy_(self, src):
        return self._become(self * 0 + src)


def _handle(op, inputs, attrs):
    """The dispatch handler of BatchedTensor operands: they run through eager dispatch,
    whose interceptors (the vmap levels) unwrap them; one whose vmap has ended escaped."""
    for x in inputs:
        if type(x) is BatchedTensor and not is_live(x.level):
            raise RuntimeError(
                f"{op.name}: a batched tensor of a vmap that has returned was used (it "
                "escaped through a closure, a global or a side output); return it from the "
                "vmapped function instead")
    return eager_apply(op, inputs, attrs)


register_handler(BatchedTensor, _handle)


def _snapshot(x: BatchedTensor) -> BatchedTensor:
    y = BatchedTensor(x.value, x.level)
    y.requires_grad, y.grad_fn, y._index = x.requires_grad, x.grad_fn, x._index
    return y


class LogicalNode:
    """A tape node over batched operands (see the module docstring): what
    ``graphlib.autodiff.backward_pass`` needs of a node."""

    __slots__ = ("op", "inputs", "attrs", "outputs", "n_outputs", "input_keys", "source",
                 "__weakref__")

    def __init__(self, op, inputs, attrs, outputs):
        self.op, self.attrs = op, attrs
        # (outputs too: a vjp that reads its output reads the value made here)
        self.outputs = tuple(_snapshot(o) for o in outputs)
        self.n_outputs, self.source = len(outputs), None
        self.input_keys = tuple(
            (x.grad_fn, x._index) if getattr(x, "grad_fn", None) is not None else x
            for x in inputs)
        # batched inputs as they are now: an in-place method rebinds a BatchedTensor's
        # value later, and the vjp must read the value this op read
        # (a leaf that requires grad is never rebound, and its identity is its key: kept)
        self.inputs = tuple(_snapshot(x) if type(x) is BatchedTensor and not (
            x.requires_grad and x.grad_fn is None) else x for x in inputs)

    def __repr__(self):
        return f"<LogicalNode {self.op.name}>"


def predecessors(node) -> list:
    nexts = getattr(node, "next_nodes", None)
    if nexts is not None:
        return [n for n in nexts if n is not None]
    return [k[0] for k in node.input_keys if type(k) is tuple]


def collect(roots) -> list:
    """The tape nodes (eager and logical) the values ``roots`` depend on, in topological
    order (an explicit stack: deep tapes do not hit the recursion limit)."""
    order, seen = [], set()
    todo = [(r.grad_fn, False) for r in roots if getattr(r, "grad_fn", None) is not None]
    while todo:
        node, done = todo.pop()
        if done:
            order.append(node)
            continue
        if node in seen:
            continue
        seen.add(node)
        if getattr(node, "freed", False):
            raise RuntimeError(
                f"{node.op.name}: the tape of this value was freed by an earlier backward(); "
                "pass retain_graph=True there, or compute it again")
        todo.append((node, True))
        todo.extend((p, False) for p in predecessors(node) if p not in seen)
    return order


def _wants_grad(x) -> bool:
    return bool(getattr(x, "requires_grad", False))


def _warn_fallback(op) -> None:
    FALLBACK_OPS.add(op.name)
    if op.name not in _warned:
        _warned.add(op.name)
        warnings.warn(f"vmap: {op.name} has no batching rule (no `batch` trait on its OpDef "
                      "and none derived from its traits); running it once per example, which "
                      "is slow", RuntimeWarning, stacklevel=4)


batching.set_fallback_hook(lambda op: _warn_fallback(op))   # ops a batched region loops


def _random(entry: Level, op, inputs, batched, attrs, proceed):
    mode = entry.randomness
    if mode == "error":
        raise RuntimeError(
            f"vmap: called random operation {op.name} while in randomness error mode. Please "
            "either use the 'same' or 'different' randomness flags on vmap or perform the "
            "randomness operation out of vmap")
    size = entry.size
    if "shape" in attrs:
        if mode == "same":
            return proceed(op, inputs, attrs)
        return BatchedTensor(proceed(op, inputs, dict(attrs, shape=(size,) + tuple(
            attrs["shape"]))), entry.level)
    # ops drawing one number per element of an operand (bernoulli's probabilities)
    args = [x.value if b else x for x, b in zip(inputs, batched)]
    if mode == "different":
        args[0] = batching.ensure_batched(args[0], batched[0], size)
        return BatchedTensor(op(*args, **attrs), entry.level)
    if any(batched[1:]):
        raise RuntimeError(f"vmap: {op.name} with randomness='same' and a batched seed is "
                           "not supported: pass the seed with in_dims=None")
    if batched[0]:
        # one draw shared by the batch: uniform numbers of one example's shape, compared
        # with every example's probabilities (what the kernel does per element)
        p = args[0]
        u = get_op("uniform")(*args[1:], shape=tuple(p.shape[1:]), low=0.0, high=1.0,
                              dtype=p.dtype, **{k: v for k, v in attrs.items()
                                                if k == "stream"})
        drawn = get_op("cast")(get_op("lt")(u, p), dtype=p.dtype)
        return BatchedTensor(drawn, entry.level)
    return proceed(op, inputs, attrs)


def make_interceptor(entry: Level):
    """The dispatch interceptor of vmap level ``entry``."""
    level, size = entry.level, entry.size

    def batch(op, inputs, attrs, proceed):
        batched = tuple(type(x) is BatchedTensor and x.level == level for x in inputs)
        if op.random:
            return _random(entry, op, inputs, batched, attrs, proceed)
        if True not in batched:
            return proceed(op, inputs, attrs)
        args = [x.value if b else x for x, b in zip(inputs, batched)]
        out, fell_back = batching.apply_rule(op, args, batched, attrs, size)
        if fell_back:
            _warn_fallback(op)
        multi = isinstance(out, (tuple, list))
        outs = tuple(BatchedTensor(o, level) for o in (out if multi else (out,)))
        if grad_mode.is_grad_enabled() and grad_level_above(level) and any(
                _wants_grad(x) for x in inputs):
            node = LogicalNode(op, inputs, attrs, outs)
            for i, o in enumerate(outs):
                if o.dtype.startswith(("float", "bfloat")):
                    for t in (o, node.outputs[i]):
                        t.requires_grad, t.grad_fn, t._index = True, node, i
        return outs if multi or op.multi_output else outs[0]
    return batch


class vmap_level:
    """``with vmap_level(size, randomness) as level:`` a vmap level and its interceptor."""

    def __init__(self, size: int, randomness: str):
        self.size, self.randomness = size, randomness

    def __enter__(self) -> Level:
        self.entry = push("vmap", self.size, self.randomness)
        self.block = intercept(make_interceptor(self.entry))
        self.block.__enter__()
        return self.entry

    def __exit__(self, *exc):
        self.block.__exit__(*exc)
        pop(self.entry)


def is_tensor(x) -> bool:
    return isinstance(x, (Tensor, BatchedTensor, Value))


__all__ = ["BatchedTensor", "LogicalNode", "collect", "vmap_level", "push", "pop",
           "grad_level_active", "FALLBACK_OPS", "DuographError"]
