"""The IR: Value, Node, Graph.

A ``Graph`` is an ordered list of ``Node``s (always a valid topological order) with named
``inputs`` (placeholders), ``state`` inputs (values that persist between runs), ``outputs``
and ``updates`` (state -> its new value). SSA: every Value has exactly one producer, a node or
the graph's input list. Nodes and Values do not need a graph: the eager tape creates them
standalone, and ``record()`` gathers them into one.
"""
from __future__ import annotations

import dis
import itertools
import struct
import sys
import threading
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import dtypes
from .errors import DTypeError, GraphError, ShapeError, located
from .methods import TensorMethods
from .types import TensorType, format_shape

# -- services of the modules above this one --------------------------------------------------
# graphlib's modules import only what is below them (the order is in graphlib/__init__'s
# docstring): dispatch, printer, verify, dot, serialize and ops sit above ir. The Graph
# methods that are conveniences over a higher module (``print(graph)``, ``graph.verify()``,
# ``to_json``...) reach it through this table, which each of those modules fills when it is
# imported (``install_service``); graphlib/__init__ imports every one of them, so the table
# is full before any user code runs.
_services: Dict[str, object] = {}


def install_service(name: str, fn) -> None:
    """Register ``fn`` as the graph service ``name`` (called by the module that defines
    it, at import time)."""
    _services[name] = fn


def _service(name: str):
    fn = _services.get(name)
    if fn is None:
        raise GraphError(f"the graph service {name!r} is not installed: import "
                         f"duograph.graphlib (its package imports every service)")
    return fn


class Value(TensorMethods):
    """A symbolic tensor: the output of a node or an input of a graph."""

    __slots__ = ("type", "node", "index", "graph", "name", "_uses", "__weakref__")

    def __init__(self, type: TensorType, node: "Optional[Node]" = None, index: int = 0,
                 graph: "Optional[Graph]" = None, name: Optional[str] = None):
        if type.__class__ is not TensorType:     # an eager tensor's callable ``t.type``
            type = TensorType(type.shape, type.dtype)
        self.type = type
        self.node = node
        self.index = index
        self.graph = graph
        self.name = name
        self._uses: Dict["Node", int] = {}    # placed node -> how many of its inputs read me

    @property
    def uses(self) -> "List[Node]":
        """The nodes of a graph that read this value, in the order they started to (kept
        up to date as nodes are placed, rewired and erased: ``replace_uses`` is O(uses))."""
        return list(self._uses)

    # -- the tensor protocol shared with eager tensors ---------------------------------------
    @property
    def shape(self):
        return self.type.shape

    @property
    def dtype(self) -> str:
        return self.type.dtype

    @property
    def ndim(self) -> int:
        return len(self.type.shape)

    def size(self, dim=None):
        """``size(dim=None)``: the shape as a tuple (ints or symbolic dims), or the size of dim
        ``dim``."""
        return self.type.shape if dim is None else self.type.shape[dim]

    # identity hash, as a C slot: engine dicts and sets keyed by Values pay no Python call
    __hash__ = object.__hash__

    def __bool__(self):
        raise GraphError(
            "a symbolic Value has no truth value while the graph is being built: use "
            "dg.where(cond, a, b) for a data-dependent choice")

    def __eq__(self, other):
        """``self == other`` builds an ``eq`` node, elementwise (as PyTorch and a JAX tracer).
        Under ``in``/``not in`` (``y in [x]``: ``list.__contains__`` compares with ``==``
        and asks the result's truth) that node could only be followed by ``__bool__``'s
        error, so the same error is raised first and the graph is left as it was."""
        if _evaluating_in():
            raise GraphError(
                "`in` on a symbolic Value compares it elementwise (==), which has no truth "
                "value while the graph is being built; to ask whether this very Value is in a "
                "collection, compare identity: any(v is x for v in values)")
        return TensorMethods.__eq__(self, other)

    def __len__(self):
        if not self.type.shape:
            raise TypeError("len() of a 0-d Value")
        d = self.type.shape[0]
        if not isinstance(d, int):
            raise TypeError(f"len() of a Value whose first dim is the symbol {d!r}")
        return d

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __array__(self, *args, **kwargs):
        raise GraphError("a symbolic Value has no data yet: compile the graph and run it "
                         "to get numpy arrays")

    def __repr__(self):
        label = self.name or (self.node.op.name if self.node is not None else "input")
        return f"Value({label}: {self.type!r})"


_CONTAINS_OP = dis.opmap["CONTAINS_OP"]


def _evaluating_in() -> bool:
    """Whether the code that called ``Value.__eq__`` is evaluating ``in``/``not in``: its
    current instruction is CONTAINS_OP (Python's membership test calls ``__eq__`` from C)."""
    try:
        frame = sys._getframe(2)
    except ValueError:          # called from C with no Python caller
        return False
    code = frame.f_code.co_code
    return frame.f_lasti < len(code) and code[frame.f_lasti] == _CONTAINS_OP


_node_uids = itertools.count()


def _add_uses(node: "Node", inputs) -> None:
    for x in inputs:
        uses = getattr(x, "_uses", None)
        if uses is not None:
            uses[node] = uses.get(node, 0) + 1


def _drop_uses(node: "Node", inputs) -> None:
    for x in inputs:
        uses = getattr(x, "_uses", None)
        if uses is not None:
            n = uses.get(node, 0) - 1
            if n > 0:
                uses[node] = n
            else:
                uses.pop(node, None)


class Node:
    """One op application: ``outputs = op(*inputs, **attrs)``, created at ``source``.

    ``graph`` is the graph the node is placed in (None until it is): only placed nodes
    count among their inputs' ``uses``, so a node a rewrite builds and then drops leaves no
    trace. Assigning ``inputs`` keeps the use lists right. Sub-graphs (a fused body, a loop
    body) live in the attributes as ``Region``s and are reached through ``regions``.
    """

    __slots__ = ("op", "_inputs", "attrs", "outputs", "source", "graph", "uid", "provenance",
                 "__weakref__")
    n_outputs = None    # len(outputs) where a subclass knows it cheaply (eager tape nodes)

    def __init__(self, op, inputs: Sequence, attrs: dict, outputs: Sequence = (),
                 source=None, provenance: Optional[Tuple[int, ...]] = None):
        self.op = op
        self._inputs = tuple(inputs)
        self.attrs = attrs
        self.outputs = tuple(outputs)
        self.source = source
        self.graph = None
        self.uid = next(_node_uids)
        # the uids of the nodes the user's code built that this node stands for: its own
        # for a new node; copies and rewrites carry their originals' (a fused node, all of
        # its members'), so a pass's result can be traced back to the program
        self.provenance = (self.uid,) if provenance is None else tuple(provenance)

    @property
    def inputs(self) -> tuple:
        return self._inputs

    @inputs.setter
    def inputs(self, values) -> None:
        values = tuple(values)
        if self.graph is not None:
            _drop_uses(self, self._inputs)
            _add_uses(self, values)
        self._inputs = values

    @property
    def regions(self) -> "Tuple[Region, ...]":
        """The sub-graphs this node carries (attributes holding a ``Region``), in attribute
        order: the one accessor that verify, print, clone, DCE, CSE, autodiff, the planner
        and the serialisers use."""
        return tuple(v for v in self.attrs.values() if isinstance(v, Region))

    def attr_key(self):
        """A hashable key of the attributes (for CSE and caches); floats count by their bits,
        so 0.0 and -0.0 (or two NaN payloads) are different attributes."""
        return tuple(sorted((k, value_key(v)) for k, v in self.attrs.items()))

    def __repr__(self):
        return f"Node({self.op.name}, {len(self.inputs)} inputs, {len(self.outputs)} outputs)"


def value_key(value):
    """``value`` as a key that tells apart what ``==`` does not: a float by its bits (0.0 and
    -0.0, NaN payloads), inside tuples too; everything else as it is."""
    if isinstance(value, float):
        return (float, struct.pack("<d", value))
    if isinstance(value, tuple):
        return tuple(value_key(v) for v in value)
    return value


class Region:
    """A sub-graph carried by a node (in one of its attributes): a ``Graph`` whose inputs are
    the region's parameters and whose outputs are its results. It is closed (it reads
    nothing but its own inputs and constants) and immutable once made, so it is hashed and
    compared by structure (two equal bodies let CSE merge their nodes) and shared between
    clones of a graph; a pass that rewrites a body makes a new region (``with_graph``).

    ``fused`` bodies, the ``call`` op and control-flow bodies are regions; every generic
    tool reaches them through ``Node.regions``.
    """

    __slots__ = ("graph", "key", "_hash", "__weakref__")

    def __init__(self, graph: "Graph"):
        self.graph = graph
        self.key = structure_key(graph)
        self._hash = hash(self.key)

    def with_graph(self, graph: "Graph") -> "Region":
        """A region of the same kind over ``graph`` (a rewritten copy of this body)."""
        return type(self)(graph)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return (type(other) is type(self)
                and (self is other or (self._hash == other._hash and self.key == other.key)))

    def infer(self, types: Sequence[TensorType], op: str = "region") -> List[TensorType]:
        """The result types for inputs of ``types``, inferred through the body (so
        ``verify`` checks a region-holding node like any other).

        Each operand must have the dtype and shape of its region input: dims equal, except
        that a plain symbolic dim of the body (``N``) stands for whatever the operand has
        there, the same wherever that symbol appears (a body traced on symbolic shapes is
        applied to values of one size). The results the body infers must have the dtypes
        and (up to those symbols) the shapes it was built with. Errors name the op, the
        body (the traced function's name) and what was expected and found; the node being
        built adds the user's line."""
        g = self.graph
        if len(types) != len(g.inputs):
            raise ShapeError(f"{op}: the region {g.name!r} takes {len(g.inputs)} inputs, "
                             f"found {len(types)}")
        env: Dict[Value, TensorType] = {}
        bound: Dict[str, object] = {}
        for k, (v, t) in enumerate(zip(g.inputs, types)):
            if t.dtype != v.dtype:
                raise DTypeError(f"{op}: region {g.name!r} input {k} ({v.name}) expects dtype "
                                 f"{v.dtype}, found {t.dtype}")
            if not _dims_fit(v.shape, t.shape, bound):
                raise ShapeError(f"{op}: region {g.name!r} input {k} ({v.name}) expects shape "
                                 f"{format_shape(v.shape)}, found {format_shape(t.shape)}")
            env[v] = t
        for node in g.nodes:
            out = node.op.infer([env[x] for x in node.inputs], node.attrs)
            for o, t in zip(node.outputs, out):
                env[o] = t
        res = [env[o] for o in g.outputs]
        for k, (o, t) in enumerate(zip(g.outputs, res)):
            if t.dtype != o.dtype:
                raise DTypeError(f"{op}: region {g.name!r} result {k} was built as dtype "
                                 f"{o.dtype}, but these operands give {t.dtype}")
            if not _dims_fit(o.shape, t.shape, bound):
                raise ShapeError(f"{op}: region {g.name!r} result {k} was built with shape "
                                 f"{format_shape(o.shape)}, but these operands give "
                                 f"{format_shape(t.shape)}")
        return res

    def text(self, indent: str = "") -> str:
        """The body as printed after its node: a nested block (``Region`` subclasses may
        print a shorter form)."""
        return "\n" + _service("to_text")(self.graph, indent=indent + "  ", keyword="region")

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {len(self.graph.nodes)} nodes>"


def _dims_fit(want, got, bound: dict) -> bool:
    """Whether shape ``got`` fits ``want`` (a region's): same rank, equal dims, except a plain
    symbol of ``want`` matches any dim, the same one wherever it appears (``bound`` holds
    what each symbol matched so far)."""
    if len(want) != len(got):
        return False
    for w, d in zip(want, got):
        if getattr(w, "is_symbol", False):
            if bound.setdefault(str(w), d) != d:
                return False
        elif w != d:
            return False
    return True


def structure_key(graph: "Graph") -> tuple:
    """What makes two closed graphs equal: input types, ops, wiring, attributes (nested
    regions by their own keys) and which values are returned."""
    index: Dict[Value, int] = {v: i for i, v in enumerate(graph.inputs)}
    nodes = []
    for node in graph.nodes:
        ins = tuple(index[x] for x in node.inputs)
        nodes.append((node.op.name, ins, node.attr_key()))
        for o in node.outputs:
            index[o] = len(index)
    return (tuple(v.type for v in graph.inputs), tuple(nodes),
            tuple(index[o] for o in graph.outputs))


class ConstArray:
    """A numpy array held in an attribute: immutable, hashable by content."""

    __slots__ = ("array", "_hash")

    def __init__(self, array):
        arr = np.array(array, copy=True)
        arr.flags.writeable = False
        self.array = arr
        self._hash = hash((arr.shape, arr.dtype.str, arr.tobytes()))

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        # equal bits (0.0 is not -0.0; equal NaNs are equal constants)
        return (isinstance(other, ConstArray) and self._hash == other._hash
                and self.array.shape == other.array.shape
                and self.array.dtype == other.array.dtype
                and self.array.tobytes() == other.array.tobytes())

    def __repr__(self):
        if self.array.size <= 6:
            return np.array2string(self.array, separator=",").replace("\n", "")
        return f"<{self.array.dtype}{list(self.array.shape)}>"




class _Local(threading.local):
    """Per-thread graph stack; the class default (None: no stack yet) spares a thread that
    never opened a graph the AttributeError a missing attribute costs on every op."""

    graphs = None


_local = _Local()
_graph_ids = itertools.count()


def _stack() -> list:
    s = _local.graphs
    if s is None:
        s = _local.graphs = []
    return s


def current_graph() -> "Optional[Graph]":
    """The graph being built by the innermost ``with graph:`` block, or None."""
    s = _local.graphs
    return s[-1] if s else None


_compiler = None


def set_compiler(fn) -> None:
    """Installed by the ``duograph`` package: graphlib itself never imports the runtime."""
    global _compiler
    _compiler = fn


class Graph:
    """A define-then-run program: build it inside ``with graph:``, then ``compile`` and run."""

    def __init__(self, name: str = "graph"):
        self.name = name
        self._nodes: List[Node] = []
        self.inputs: List[Value] = []
        self.state: List[Value] = []
        self.state_init: Dict[Value, np.ndarray] = {}  # state value -> initial array
        self.outputs: List[Value] = []
        self.updates: Dict[Value, tuple] = {}          # state -> (state, new value)
        self._names: Dict[str, Value] = {}
        self.bindings: Dict[Value, object] = {}        # state value -> live holder (.array)
        self._bound: Dict[object, Value] = {}          # holder (identity-hashed) -> its value
        self._random_streams = itertools.count()
        self._const_cache: Dict[tuple, Value] = {}
        self.id = next(_graph_ids)
        # names of passes that ran on this graph without preserving gradients (simplify
        # drops stop_gradient): autodiff refuses such a graph instead of a wrong answer
        self.gradient_blockers: List[str] = []
        # set while a control-flow body is traced into this graph (``control.Captures``):
        # values from outside that the body reads become new inputs instead of an error
        self.captures = None

    # -- building ------------------------------------------------------------------------------
    def __enter__(self) -> "Graph":
        _stack().append(self)
        return self

    def __exit__(self, *exc) -> None:
        s = _stack()
        if not s or s[-1] is not self:
            raise GraphError(f"graph {self.name!r}: `with` blocks closed out of order")
        s.pop()

    def _check_name(self, name: str, dotted: bool = False) -> None:
        """Input names are identifiers; state names may be parameter paths (``0.weight``,
        ``encoder.layers.1.bias``), as bound module parameters are named."""
        ok = isinstance(name, str) and (name.isidentifier() or dotted and all(
            p.isidentifier() or p.isdigit() for p in name.split(".")))
        if not ok:
            raise ValueError(f"graph {self.name!r}: input names must be identifiers"
                             + (" (dotted paths for state)" if dotted else "")
                             + f", found {name!r}")
        if name in self._names:
            raise GraphError(f"graph {self.name!r}: an input named {name!r} already exists")

    def add_input(self, name: str, type: TensorType) -> Value:
        """Append a placeholder input named ``name`` of ``type`` (a TensorType) and return its
        Value; ``dg.placeholder`` is the usual way. The name must be new to the graph."""
        self._check_name(name)
        v = Value(type, None, 0, self, name)
        self.inputs.append(v)
        self._names[name] = v
        return v

    def add_state(self, name: str, value) -> Value:
        """Append a state input named ``name`` (dotted names allowed) whose initial value is a
        copy of the array-like ``value``, and return its Value; ``dg.variable`` is the usual
        way."""
        arr = np.asarray(value)
        if arr.dtype.name not in dtypes.DTYPE_NAMES:
            arr = arr.astype(dtypes.infer_data_dtype(value))
        self._check_name(name, dotted=True)
        v = Value(TensorType(arr.shape, arr.dtype.name), None, 0, self, name)
        self.state.append(v)
        self.state_init[v] = np.array(arr, copy=True)
        self._names[name] = v
        return v

    def bind_state(self, holder, name: Optional[str] = None) -> Value:
        """A state input bound to a live object with an array in ``holder.array`` (an eager
        tensor or Parameter): each run reads its current data, and an ``update`` of it is
        written back into that array in place. Binding the same object twice gives the same
        Value."""
        v = self._bound.get(holder)
        if v is not None:
            return v
        arr = holder.array
        base = name or f"state{len(self.state)}"
        name, k = base, 1
        while name in self._names:
            name, k = f"{base}_{k}", k + 1
        dt = dtypes.as_dtype(arr.dtype)
        v = Value(TensorType(tuple(arr.shape), dt), None, 0, self, name)
        self.state.append(v)
        self._names[name] = v
        self.bindings[v] = holder
        self._bound[holder] = v
        return v

    def bound_value(self, holder) -> Optional[Value]:
        """The state Value bound to ``holder``, or None."""
        return self._bound.get(holder)

    def seed_state(self) -> Value:
        """An int64 state input that advances by one each run: the default seed of random
        ops that need fresh numbers every run (dropout in graph mode)."""
        v = self._names.get("rng_seed")
        if v is None:
            # drawn from eager mode's generator when installed (ops.creation's service), so
            # dg.manual_seed() makes graph-mode dropout reproducible too
            start = _service("default_seed")()
            v = self.add_state("rng_seed", np.asarray(int(start), dtype=np.int64))
            with self:
                self.update(v, v + 1)
        return v

    # -- the node list and the editing API ---------------------------------------------------
    @property
    def nodes(self) -> List[Node]:
        """The nodes in a valid topological order. Read it freely; change it through
        ``append``/``insert``/``create_node``/``erase``/``replace_uses``, or assign a whole
        new list (a reordering, or a pass's kept nodes): the use lists follow."""
        return self._nodes

    @nodes.setter
    def nodes(self, nodes) -> None:
        nodes = list(nodes)
        new = set(nodes)
        for node in self._nodes:
            if node not in new:
                self._unplace(node)
        for node in nodes:
            if node.graph is not self:
                self._place(node)
        self._nodes = nodes

    def _place(self, node: Node) -> None:
        if node.graph is not None and node.graph is not self:
            raise GraphError(f"graph {self.name!r}: node {node.op.name} is already placed in "
                             f"graph {node.graph.name!r}")
        node.graph = self
        for v in node.outputs:
            v.graph = self
        _add_uses(node, node.inputs)

    def _unplace(self, node: Node) -> None:
        _drop_uses(node, node.inputs)
        node.graph = None

    def append(self, node: Node) -> None:
        """Place ``node`` at the end of the order."""
        self._place(node)
        self._nodes.append(node)

    def insert(self, index: int, node: Node) -> None:
        """Place ``node`` at position ``index`` of the order (its inputs must come before)."""
        self._place(node)
        self._nodes.insert(index, node)

    def create_node(self, op, inputs: Sequence[Value], attrs: Optional[dict] = None, *,
                    like: Optional[Node] = None, source=None,
                    before: Optional[Node] = None) -> Node:
        """A new node ``op(*inputs, **attrs)`` with inferred output types, placed before
        ``before`` (default: at the end), with ``like``'s source location (a rewrite's new
        node points at the user code of the node it stands for)."""
        attrs = {} if attrs is None else attrs
        node = Node(op, inputs, attrs, (), like.source if like is not None else source,
                    like.provenance if like is not None else None)
        types = op.infer([x.type for x in node.inputs], attrs)
        node.outputs = tuple(Value(t, node, i, self) for i, t in enumerate(types))
        if before is None:
            self.append(node)
        else:
            self.insert(self.index_of(before), node)
        return node

    def copy_node(self, node: Node, inputs: Optional[Sequence[Value]] = None, *,
                  before: Optional[Node] = None) -> Node:
        """A copy of ``node`` (same op, attributes and source) reading ``inputs`` (default:
        the same inputs), placed like ``create_node`` places it."""
        return self.create_node(node.op, node.inputs if inputs is None else inputs,
                                dict(node.attrs), like=node, before=before)

    def index_of(self, node: Node) -> int:
        """The position of ``node`` in the graph's node order; GraphError when it is not in this
        graph. Costs O(nodes)."""
        for i, n in enumerate(self._nodes):
            if n is node:
                return i
        raise GraphError(f"graph {self.name!r}: node {node.op.name} is not in this graph")

    def replace_uses(self, old: Value, new: Value) -> None:
        """Make every reader of ``old`` (nodes, outputs, state updates) read ``new``;
        costs O(uses of ``old``), not a scan of the graph."""
        if old is new:
            return
        for node in list(old._uses):
            node.inputs = tuple(new if x is old else x for x in node.inputs)
        if any(o is old for o in self.outputs):
            self.outputs = [new if o is old else o for o in self.outputs]
        for key, (state, value) in list(self.updates.items()):
            if value is old:
                self.updates[key] = (state, new)

    def erase(self, node: Node) -> None:
        """Remove ``node`` from the graph; its outputs must have no readers left."""
        for o in node.outputs:
            if o._uses:
                raise GraphError(f"graph {self.name!r}: cannot erase {node.op.name}: its "
                                 f"output {o.index} is still read by "
                                 f"{[n.op.name for n in o._uses]}")
        self._nodes.pop(self.index_of(node))
        self._unplace(node)

    def next_random_stream(self) -> int:
        """A fresh stream number for the next random op of this graph, so that two random ops
        drawing from the same seed give independent samples."""
        return next(self._random_streams)

    def update(self, state: Value, new_value) -> None:
        """Bind ``new_value`` as the value ``state`` holds after each run of the graph."""
        if not isinstance(state, Value) or (state not in self.state_init
                                             and state not in self.bindings):
            raise GraphError(located(f"graph {self.name!r}: update() expects a state Value "
                                     f"made by dg.variable(), found {state!r}"))
        if not isinstance(new_value, Value):
            new_value = _service("as_value")(new_value, self, state.dtype)
        if new_value.graph is not self:
            raise GraphError(located(f"graph {self.name!r}: the new value of state "
                                     f"{state.name!r} belongs to another graph"))
        if new_value.type != state.type:
            raise GraphError(located(f"graph {self.name!r}: update of state {state.name!r} "
                                     f"expects {state.type!r}, found {new_value.type!r}"))
        self.updates[state] = (state, new_value)

    def __getitem__(self, name: str) -> Value:
        try:
            return self._names[name]
        except KeyError:
            raise KeyError(f"graph {self.name!r} has no input or state named {name!r}; "
                           f"it has {sorted(self._names)}") from None

    # -- running -------------------------------------------------------------------------------
    def compile(self, outputs=None, **options):
        """Build an executable returning ``outputs`` (default: ``graph.outputs``)."""
        if _compiler is None:
            raise GraphError("no runtime is installed: import duograph (not only "
                             "duograph.graphlib) to compile graphs")
        return _compiler(self, outputs, **options)

    # -- inspecting ----------------------------------------------------------------------------
    def verify(self) -> None:
        """Check the graph's invariants (topological order, SSA, types matching each op's
        inference...) and raise on the first violation. See ``graphlib.verify``."""
        _service("verify")(self)

    def to_text(self, source: bool = False, outputs=None) -> str:
        """The graph's text form, as ``print(graph)`` shows it; ``source=True`` adds each node's
        user source line, ``outputs`` prints those Values as the outputs instead of the
        graph's own."""
        return _service("to_text")(self, source=source, outputs=outputs)

    def __str__(self) -> str:
        return self.to_text()

    def to_dot(self, **options):
        """A picture of the graph as a ``pydot.Dot`` (see ``graphlib.dot``)."""
        return _service("to_dot")(self, **options)

    def render(self, path: str, **options) -> str:
        """Draw the graph to ``path`` (.svg/.png/.pdf via Graphviz, or .dot)."""
        return _service("render")(self, path, **options)

    # -- saving --------------------------------------------------------------------------------
    def to_json(self, indent: Optional[int] = None) -> str:
        """The graph as JSON text (versioned schema, lossless; arrays inline)."""
        return _service("to_json")(self, indent)

    @staticmethod
    def from_json(text) -> "Graph":
        """The graph ``to_json`` wrote; verified, and nothing in it is executed."""
        return _service("from_json")(text)

    def __reduce__(self):
        """``pickle`` and ``copy.deepcopy`` go through the lossless JSON form (never pickled
        code): the copy has the same nodes, types, attributes, regions and state values;
        state bound to a live object (an eager Parameter) becomes plain state holding that
        object's current data."""
        return (Graph.from_json, (self.to_json(),))

    def __repr__(self) -> str:
        return (f"<Graph {self.name!r}: {len(self.inputs)} inputs, {len(self.state)} state, "
                f"{len(self.nodes)} nodes>")


def describe(value: Value) -> str:
    """One-line description of a Value for error messages."""
    return f"{dtypes.SHORT_NAMES[value.dtype]}{format_shape(value.shape)}"
