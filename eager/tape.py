"""The autograd tape's node: ``EagerNode``, an IR ``Node`` over tensors.

Eager dispatch makes one per op call that needs a gradient or an open ``record()`` block; its
inputs are the tensors themselves, so the registry's vjp rules run on them unchanged and
``record()`` turns the nodes into a ``Graph``. ``autograd`` walks them.
"""
from __future__ import annotations

import weakref

from ..graphlib.ir import Node
from .tensors import Tensor

_weakref = weakref.ref


def _input_links(inputs) -> tuple:
    """A tape node's ``(input_keys, next_nodes)`` for any number of inputs: a key is the
    producing node and output index, or the leaf tensor itself (one- and two-input nodes
    unroll this on the hot path)."""
    keys, nexts = [], []
    for x in inputs:
        fn = x.grad_fn
        if fn is not None:
            keys.append((fn, x._index))
            nexts.append(fn)
        else:
            keys.append(x)
            nexts.append(None)
    return tuple(keys), tuple(nexts)


class EagerNode(Node):
    """An IR node recorded by eager execution.

    Its inputs are the tensors themselves (saved for backward). Outputs are held weakly (a
    node referencing its outputs strongly would make every result a reference cycle); a dead
    output is rebuilt from its saved array when a vjp rule needs it. ``input_keys`` and
    ``next_nodes`` capture where each input came from when the node was made, so a later
    in-place op on an input does not reroute gradients.
    """

    # a plain ``inputs`` slot (no use lists: a tape node is never placed in a graph)
    __slots__ = ("inputs", "_out_refs", "_out_data", "input_keys", "next_nodes",
                 "saved_versions", "freed", "for_grad", "n_outputs")
    graph = None

    def __init__(self, op, inputs, attrs, outputs, source, for_grad):
        self.op = op
        self.inputs = inputs
        self.attrs = attrs
        self.source = source
        self.for_grad = for_grad
        self.freed = False
        if len(outputs) == 1:
            o = outputs[0]
            self._out_refs = (_weakref(o),)
            self._out_data = (o.array,)
            self.n_outputs = 1
        else:
            self._out_refs = tuple([_weakref(o) for o in outputs])
            self._out_data = tuple([o.array for o in outputs])
            self.n_outputs = len(outputs)
        if len(inputs) == 2:        # (the general loop below, unrolled for binary ops)
            x, y = inputs
            fx, fy = x.grad_fn, y.grad_fn
            self.input_keys = (x if fx is None else (fx, x._index),
                               y if fy is None else (fy, y._index))
            self.next_nodes = (fx, fy)
        else:
            self.input_keys, self.next_nodes = _input_links(inputs)
        # a view's gradient path assumes its base is unchanged: views save versions too
        # (the op's traits: ``view``, ``saves_no_data``, ``vjp_reads_output``)
        if for_grad and (not op.saves_no_data or op.view):
            saved = [x._version[0] for x in inputs]
            if op.vjp_reads_output:
                saved += [o._version[0] for o in outputs]
            self.saved_versions = tuple(saved)
        else:
            self.saved_versions = None

    @property
    def outputs(self):
        refs = self._out_refs
        if len(refs) == 1:
            t = refs[0]()
            if t is not None:
                return (t,)
        outs = []
        for i, ref in enumerate(self._out_refs):
            t = ref()
            if t is None:
                t = Tensor._wrap(self._out_data[i], True)
                t.grad_fn, t._index = self, i
            outs.append(t)
        return tuple(outs)

    @outputs.setter
    def outputs(self, value):
        raise AttributeError("the outputs of an eager node are fixed when it is recorded")

    def output_tensor(self, i: int):
        """The live output tensor ``i`` (None when the user dropped it)."""
        return self._out_refs[i]()

    def _rebind(self, i: int, tensor: "Tensor") -> None:
        refs = list(self._out_refs)
        refs[i] = weakref.ref(tensor)
        self._out_refs = tuple(refs)
        data = list(self._out_data)
        data[i] = tensor.array
        self._out_data = tuple(data)
        # an in-place op's result now lives in ``tensor`` (at its new version): a vjp that
        # reads this output (``vjp_reads_output``) reads exactly that
        saved = self.saved_versions
        if saved is not None and len(saved) > len(self.inputs) + i:
            saved = list(saved)
            saved[len(self.inputs) + i] = tensor._version[0]
            self.saved_versions = tuple(saved)

    def release(self) -> None:
        """Free the saved tensors (after a backward without retain_graph)."""
        self.freed = True
        self.inputs = ()
        self._out_data = ()

    def __repr__(self):
        return f"<EagerNode {self.op.name}>"
