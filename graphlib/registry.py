"""The op registry: every op is one ``OpDef`` holding everything about it.

- ``infer(types, attrs) -> [TensorType]``: shape/dtype inference; raises ShapeError/DTypeError
  with a message that says what was expected and what was found.
- ``kernel(xp, *arrays, **attrs)``: reference implementation over the array module ``xp``
  (numpy or cupy); returns one array, or a tuple for multi-output ops. No fast paths and no
  backend branches: a backend (``runtime/``) registers its own faster kernels and ``out=``
  forms in tables keyed by the OpDef, and falls back to this one.
- ``vjp(cts, inputs, outputs, attrs, needs) -> [cotangent or None per input]``: the gradient
  rule (``needs[i]`` says whether input i wants a cotangent; skip the work when not),
  written with the public op functions so it serves graph mode, the eager tape and higher
  orders alike. Broadcasting and dtype are undone centrally (``autodiff``), not per rule.
- ``expr``: for elementwise ops, a scalar expression template over ``{0}``, ``{1}``... used by
  fusion code generators.
- ``attrs``: the attribute schema (``attrs.Attrs``: each attribute's kind, default and
  constraints), checked whenever a node is built (``dispatch.apply``). Every registered op
  declares one (``Attrs()`` when it takes none); None leaves an ad-hoc op unchecked.

Traits: every fact about an op that a pass, the eager tape or the memory planner needs is a
keyword of its OpDef, never a set of op names kept elsewhere:

- ``view``: the output may be a view of input 0 (shares its memory): eager outputs share
  input 0's version counter, in-place ops through them are refused while autograd tracks
  them, and the planner gives them no arena bytes (it keeps the viewed buffer alive instead).
- ``returns_input``: the kernel may return input 0 itself (``True``, or a predicate
  ``(node) -> bool``, e.g. a cast to the same dtype); the planner treats such outputs as
  views. Unlike ``view`` it does not make eager tensors share version counters.
- ``vjp_reads_output``: the vjp reads the output's data (``y = exp(x)``: ``dx = g * y``),
  so eager autograd saves the output's version too.
- ``saves_no_data``: the vjp reads no input or output *data*, only shapes and dtypes (it
  runs on placeholders): in-place changes to the operands cannot corrupt its gradient.
- ``inplace_pairs``: ``(node) -> [(output index, input index)]``, the pairs whose bytes the
  kernel may share (it finishes reading each element before writing it); by default every
  input of a single-output elementwise op, and none for other ops.
- ``epilogue_host``: elementwise consumers may be fused after it (the fused kernel runs
  this op's kernel first, then the chain on its result).
- ``cheap``: about as cheap to recompute as to read (rematerialisation may recompute it);
  defaults to ``elementwise``.
- ``external``: outputs are prepared once outside the memory arena and never written.
- ``constant``: the op is the constant op (its value is ``attrs["value"]``).
- ``random``: it reads a seed: never merged or dropped by passes.
- ``ufunc``: for elementwise ops that are one array-module ufunc over their operands in
  order, its name in numpy (cupy mirrors numpy's names): ``"add"``, ``"true_divide"``. The
  bare ufunc computes exactly what the kernel does where every operand already has the
  output's dtype, or, with ``ufunc_mixed``, on operands of any dtypes (the kernel promotes
  nothing first: comparisons, logic; ``ops._common``'s helpers set it). Backends build their
  ufunc tables from it.
- ``compare``: for comparisons, the operator as C and Python spell it (``"<"``, ``"=="``).
- ``complex_ok``: the op takes complex64/complex128 operands (its kernel computes them and
  its vjp follows PyTorch's convention: the conjugate Wirtinger derivative); every other op
  refuses complex operands when a node is built, naming the op (``dispatch.infer_types``).
- ``storage_ok``: the op takes operands of the storage dtypes (float8, float4, int4, int2:
  ``dtypes.STORAGE_DTYPES``): it only moves, selects or converts their data (casts, shape
  and indexing ops); every other op refuses them when a node is built, naming the op.
- ``fills``: every element of the output is the ``fill_value`` attribute (``full``,
  ``full_like``): autodiff knows a zero cotangent by it.
- ``promote``: its operands (``True``: all; a tuple: those indices) promote together as
  PyTorch's do: Python numbers weakly, 0-d tensors in their own category (``dtypes``);
  ``dispatch`` casts what that decides before the node is built.
- ``float_compute``: integer or bool operands compute in the default float dtype (true
  division, atan2): a 0-d operand that promotion casts goes straight to it, as in PyTorch.
- ``ordered``: an ordered side effect (a collective: every rank must run the same ones in
  the same order): no pass merges, folds, drops or reorders such nodes with respect to each
  other; each carries a ``seq`` attribute (numbered when built) that ``verify`` checks
  increases along the graph's order.
- ``static_region``: ``(node, consts) -> (region, inputs) or None``, for region ops whose
  constant inputs (``consts[i]``: a numpy array, or None when input i is not constant)
  decide that the node is one of its regions applied to some of its inputs (a ``cond``
  with a constant predicate): constant folding inlines that region in place of the node.
- ``loop_invariant_from``: ``(node) -> int``, for loop ops: the node's inputs from that
  index on reach every region at the same positions, unchanged on every iteration, and
  inputs appended at the end are more such values (loop-invariant code motion hoists body
  nodes that read only them).
- ``region_kernel``: for ops with regions, the kernel written against its bodies:
  ``region_kernel(xp, bodies, *arrays, out=None, **attrs) -> tuple``. ``bodies(region,
  arrays)`` prepares ``region`` once for inputs shaped like ``arrays`` and returns a body:
  ``body.types`` (a ``(shape, numpy dtype)`` per result) and ``body(arrays, out=None)``,
  which writes the results into ``out`` (one array per result, sharing no memory with
  ``arrays``) or into fresh arrays, and returns them. ``out`` of the region kernel is the
  node's own output buffers. The op's ``kernel`` is this with bodies run op by op (the
  reference); a runtime passes bodies it compiled once (kernels resolved, buffers planned),
  which a loop calls on every iteration, writing each step's results into buffers it owns.
- ``autocast``: the precision the op runs in under ``dg.autocast`` (``graphlib.autocast``):
  ``"lower"`` (the autocast dtype: matmul, conv), ``"fp32"`` (float32: decompositions,
  ``prod``), ``"promote"`` (the widest float operand: ``cat``), or a callable ``(attrs) ->
  policy or None``; None runs the op in the dtypes it is given.
- ``batch``: how the op maps a batched dim (vmap): ``batch(op, args, batched, attrs, size)``
  returns the op's result for ``args`` whose ``batched[i]`` ones carry the batch (of
  ``size``) as their dim 0, every output with the batch at dim 0; written with the op
  functions, so one rule serves eager vmap and graphs. None: ``graphlib.batching`` derives
  one from the other traits (elementwise, a ``dim`` attribute) or runs the op per example.
"""
from __future__ import annotations

from typing import Callable, Dict, Optional, Union

REGISTRY: Dict[str, "OpDef"] = {}


class OpDef:
    """Definition of one op. Calling it applies the op to Values, tensors or numbers."""

    __slots__ = ("name", "infer", "kernel", "vjp", "expr", "elementwise", "promote",
                 "float_compute", "nondiff_inputs", "random", "ordered", "multi_output",
                 "view", "returns_input", "vjp_reads_output", "saves_no_data",
                 "inplace_pairs", "epilogue_host", "cheap", "external", "constant",
                 "static_region", "loop_invariant_from", "region_kernel", "attrs", "doc",
                 "ufunc", "ufunc_mixed", "compare", "fills", "batch", "__weakref__",
                 "autocast", "complex_ok", "storage_ok")

    def __init__(self, name: str, infer: Callable, kernel: Callable,
                 vjp: Optional[Callable] = None, *, expr: Optional[str] = None,
                 elementwise: bool = False, promote: bool = False,
                 float_compute: bool = False, nondiff_inputs: tuple = (),
                 random: bool = False, ordered: bool = False, multi_output: bool = False,
                 view: bool = False, returns_input: Union[bool, Callable, None] = None,
                 vjp_reads_output: bool = False, saves_no_data: bool = False,
                 inplace_pairs: Optional[Callable] = None, epilogue_host: bool = False,
                 cheap: Optional[bool] = None, external: bool = False, constant: bool = False,
                 static_region: Optional[Callable] = None,
                 loop_invariant_from: Optional[Callable] = None,
                 region_kernel: Optional[Callable] = None, attrs=None, doc: str = "",
                 ufunc: Optional[str] = None, ufunc_mixed: bool = False,
                 compare: Optional[str] = None, fills: bool = False,
                 batch: Optional[Callable] = None,
                 autocast: Union[str, Callable, None] = None,
                 complex_ok: bool = False, storage_ok: bool = False):
        self.name = name
        self.infer = infer
        self.kernel = kernel
        self.vjp = vjp
        self.expr = expr
        self.elementwise = elementwise
        self.promote = promote          # operands promote as PyTorch's (see the traits)
        self.float_compute = float_compute
        self.nondiff_inputs = tuple(nondiff_inputs)
        self.random = random            # reads a seed: never merged or dropped by passes
        self.ordered = ordered          # an ordered side effect (collectives)
        self.multi_output = multi_output  # always returns a tuple, even of one output
        # traits (see the module docstring)
        self.view = view
        self.returns_input = (lambda node: True) if returns_input is True else (
            returns_input or None)
        self.vjp_reads_output = vjp_reads_output
        self.saves_no_data = saves_no_data
        self.inplace_pairs = inplace_pairs
        self.epilogue_host = epilogue_host
        self.cheap = elementwise if cheap is None else cheap
        self.external = external
        self.constant = constant
        self.static_region = static_region
        self.loop_invariant_from = loop_invariant_from
        self.region_kernel = region_kernel
        self.attrs = attrs              # the attribute schema (attrs.Attrs), or None
        self.doc = doc
        self.ufunc = ufunc              # the numpy/cupy ufunc it is (see the traits)
        self.ufunc_mixed = ufunc_mixed
        self.compare = compare          # a comparison's operator: "<", "==" ...
        self.fills = fills              # the output is attrs["fill_value"] everywhere
        self.autocast = autocast        # the precision under autocast (see the traits)
        self.batch = batch              # vmap's rule (see the traits)
        self.complex_ok = complex_ok    # takes complex operands (see the traits)
        self.storage_ok = storage_ok    # takes float8/int4... operands (see the traits)

    def __call__(self, *inputs, **attrs):
        return _apply(self, inputs, attrs)

    def __repr__(self):
        return f"<op {self.name}>"


def _apply(op, inputs, attrs):
    """Replaced by ``dispatch.apply`` when dispatch is imported (``set_dispatcher``): dispatch
    sits above this module, which imports nothing of graphlib."""
    raise RuntimeError(f"{op.name}: no dispatcher is installed: import duograph.graphlib")


def set_dispatcher(apply: Callable) -> None:
    """Install ``apply(op, inputs, attrs)`` as what calling an OpDef does (dispatch's hook)."""
    global _apply
    _apply = apply


def may_view_input(node) -> bool:
    """Whether ``node``'s outputs may share their first input's memory: its op's ``view``
    trait, or ``returns_input`` (the kernel may return the input itself) holds for it."""
    if not node.inputs:
        return False
    op = node.op
    if op.view:
        return True
    return op.returns_input is not None and bool(op.returns_input(node))


def register(op: OpDef) -> OpDef:
    if op.name in REGISTRY:
        raise ValueError(f"op {op.name!r} is already registered")
    REGISTRY[op.name] = op
    return op


def get_op(name: str) -> OpDef:
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"no op named {name!r} is registered") from None
