"""Activation checkpointing while a graph is built (graph mode, ``record()``, ``dg.compile``):
the region ``checkpoint`` marks is made again for backward by the O2 ``remat`` pass, its
interior values are no longer kept from the forward to the backward, the planned peak drops
by at least what the shapes say it must, and the gradients equal the unmarked graph's (dropout
included: the copies read the same seeds): bit for bit where both graphs run the same
kernels (O2 without fusion), within float32 rounding under O2 (fusion groups the copies with
backward ops, and a fused kernel rounds like the fused kernel, not like the plain one)."""
import numpy as np
import pytest

import duograph as dg
from duograph import nn
from duograph.passes import remat
from duograph.passes.manager import PIPELINES, Pipeline
from duograph.utils.checkpoint import checkpoint, checkpoint_sequential

B, H, WIDE, LAYERS = 256, 16, 64, 4
ACTIVATION_BYTES = B * WIDE * 4      # one block's tanh output, float32: what backward reads


def _blocks(dropout: float = 0.0):
    dg.manual_seed(0)
    layers = []
    for _ in range(LAYERS):
        inner = [nn.Linear(H, WIDE), nn.Tanh()] + ([nn.Dropout(dropout)] if dropout else [])
        layers.append(nn.Sequential(*inner, nn.Linear(WIDE, H)))
    return layers


def _graph_step(marked: bool, dropout: float = 0.0, sequential: bool = False):
    blocks = _blocks(dropout)
    params = [p for b in blocks for p in b.parameters()]
    with dg.Graph("step") as g:
        x = dg.placeholder("x", (B, H))
        if sequential and marked:
            h = checkpoint_sequential(blocks, LAYERS, x, use_reentrant=False)
        else:
            h = x
            for b in blocks:
                h = checkpoint(b, h, use_reentrant=False) if marked else b(h)
        loss = dg.sum(h * h)
        grads = dg.grad(loss, [g.bind_state(p) for p in params])
    g.outputs = [loss] + list(grads)
    return g


def _feeds():
    return {"x": np.random.default_rng(0).standard_normal((B, H)).astype(np.float32)}


NO_FUSE = Pipeline([p for p in PIPELINES["O2"] if p != "fuse"], plan=True)
NO_REMAT = Pipeline([p for p in PIPELINES["O2"] if p != "remat"], plan=True)


def _assert_same(ref, got, exact: bool):
    for a, b in zip(ref, got):
        if exact:
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        else:
            np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dropout", [0.0, 0.25])
def test_graph_mode_planned_peak_drops_by_the_kept_activations_with_equal_gradients(dropout):
    feeds = _feeds()
    ref = _graph_step(False, dropout).compile(passes=NO_REMAT).run(feeds)
    _assert_same(_graph_step(False, dropout).compile(passes=NO_FUSE).run(feeds),
                 _graph_step(True, dropout).compile(passes=NO_FUSE).run(feeds), exact=True)
    plain_exe = _graph_step(False, dropout).compile(passes="O2")
    marked_exe = _graph_step(True, dropout).compile(passes="O2")
    for exe in (plain_exe, marked_exe):
        _assert_same(ref, exe.run(feeds), exact=False)
    plain = plain_exe.memory_plan.lower_bound_bytes
    marked = marked_exe.memory_plan.lower_bound_bytes
    # unmarked, backward starts with every block's tanh output (and, with dropout, the
    # dropped output the second Linear's weight gradient reads) alive; marked, one block's
    # made again at a time, with its gradient: at least LAYERS - 2 blocks' worth fewer
    kept_per_block = ACTIVATION_BYTES * (2 if dropout else 1)
    assert plain - marked >= (LAYERS - 2) * kept_per_block, (plain, marked)
    assert marked_exe.memory_plan.arena_bytes < plain_exe.memory_plan.arena_bytes


def test_checkpoint_sequential_in_a_graph_marks_all_but_the_last_segment():
    feeds = _feeds()
    ref = _graph_step(False).compile(passes="O2")
    seq = _graph_step(True, sequential=True).compile(passes="O2")
    _assert_same(ref.run(feeds), seq.run(feeds), exact=False)
    drop = ref.memory_plan.lower_bound_bytes - seq.memory_plan.lower_bound_bytes
    assert drop >= (LAYERS - 3) * ACTIVATION_BYTES, drop     # the last segment is not marked


def test_the_region_interior_is_read_only_inside_the_region_after_remat():
    g = _graph_step(True)
    marked = [n for n in g.nodes if remat.region_of(n) is not None]
    result = remat.recompute_checkpointed(g)
    g.verify()
    assert result.changed and "checkpointed regions" in result.notes[0]
    copies = [n for n in g.nodes if n.uid in remat._RECOMPUTED]
    assert copies and all(remat.region_of(n) is None for n in copies)
    first_copy = min(g.nodes.index(n) for n in copies)
    last_marked = max(g.nodes.index(n) for n in marked)
    assert first_copy > last_marked                 # made again in the backward part
    for n in marked:
        region = remat.region_of(n)
        for v in n.outputs:
            outside = [u for u in v.uses if remat.region_of(u) != region]
            if outside:     # only a region's outputs are read outside it (the next block)
                assert remat._region_output(v, remat._REGION_OUTPUTS[region]), n
    # a second run finds nothing more to do (copies belong to no region)
    assert not remat.recompute_checkpointed(g).changed


def test_unmarked_graph_is_left_alone_by_the_region_rewrite():
    g = _graph_step(False)
    assert not remat.recompute_checkpointed(g).changed


def _eager_blocks_step(marked: bool, dropout: float):
    blocks = _blocks(dropout)
    x = dg.tensor(_feeds()["x"])

    def loss_fn(t):
        h = t
        for b in blocks:
            h = checkpoint(b, h, use_reentrant=False) if marked else b(h)
        return (h * h).sum()
    return blocks, x, loss_fn


def test_record_marks_the_region_and_o2_recomputes_it():
    peaks, grads = {}, {}
    for marked in (False, True):
        blocks, x, loss_fn = _eager_blocks_step(marked, 0.0)
        params = [p for b in blocks for p in b.parameters()]
        with dg.record() as rec:
            loss = loss_fn(x)
            loss.backward()
        outs = [rec.value(loss)] + [rec.value(p.grad) for p in params]
        eager = [loss.detach().numpy()] + [p.grad.numpy() for p in params]
        exe = rec.graph.compile(outputs=outs, passes="O2")
        _assert_same(eager, exe.run(rec.feeds()), exact=False)
        peaks[marked] = exe.memory_plan.lower_bound_bytes
        got = rec.graph.compile(outputs=outs, passes=NO_FUSE).run(rec.feeds())
        grads[marked] = [np.asarray(a) for a in got]
    for a, b in zip(grads[False], grads[True]):
        np.testing.assert_array_equal(a, b)
    assert peaks[False] - peaks[True] >= (LAYERS - 2) * ACTIVATION_BYTES, peaks


def _saved_bytes(fn) -> int:
    """Bytes the forward executable of the last call hands to the backward one."""
    s = fn._last
    start = s.n_out + s.n_dec
    saved = s.forward.outputs[start:start + s.n_saved]
    return sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in saved)


@pytest.mark.parametrize("dropout,passes", [(0.25, "O1"), (0.0, "O2")])
def test_compile_recomputes_the_region_in_the_backward_executable(dropout, passes):
    saved, grads = {}, {}
    for marked in (False, True):
        blocks, x, loss_fn = _eager_blocks_step(marked, dropout)
        f = dg.compile(loss_fn, passes=passes)
        for step in range(2):        # the second call replays the compiled executables
            for b in blocks:
                for p in b.parameters():
                    p.grad = None
            dg.manual_seed(7 + step)
            f(x).backward()
        grads[marked] = [p.grad.numpy().copy() for b in blocks for p in b.parameters()]
        saved[marked] = _saved_bytes(f)
        weights = sum(p.numel() * 4 for b in blocks for p in b.parameters())
    _assert_same(grads[False], grads[True], exact=passes == "O1")
    # unmarked, each block hands its tanh output (with dropout: the dropped output too) to
    # the backward; marked, only the blocks' inputs and outputs cross, and the weights the
    # copies read (at most all of them)
    kept_per_block = ACTIVATION_BYTES * (2 if dropout else 1)
    assert saved[False] - saved[True] >= LAYERS * kept_per_block - weights, saved


def _transformer_step(marked: bool):
    dg.manual_seed(0)
    blocks = [nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, batch_first=True)
              for _ in range(2)]
    params = [p for b in blocks for p in b.parameters()]
    with dg.Graph("step") as g:
        x = dg.placeholder("x", (4, 32, 32))
        h = x
        for b in blocks:
            h = checkpoint(b, h, use_reentrant=False) if marked else b(h)
        grads = dg.grad(dg.sum(h * h), [g.bind_state(p) for p in params])
    g.outputs = list(grads)
    return g


@pytest.mark.slow
def test_o2_policy_on_an_unmarked_transformer_never_adds_memory_or_kernels():
    feeds = {"x": np.random.default_rng(0).standard_normal((4, 32, 32)).astype(np.float32)}
    without = _transformer_step(False).compile(passes=NO_REMAT)
    plain = _transformer_step(False).compile(passes="O2")
    marked = _transformer_step(True).compile(passes="O2")
    ref = without.run(feeds)
    for exe in (plain, marked):
        _assert_same(ref, exe.run(feeds), exact=False)      # dropout masks included
    assert plain.kernel_count == without.kernel_count
    assert plain.memory_plan.lower_bound_bytes <= without.memory_plan.lower_bound_bytes
    # the checkpointed layers keep neither their attention probabilities nor their
    # feed-forward activations for backward: at least one layer's (batch 4, 4 heads,
    # 32x32 probabilities, 32x64 feed-forward hidden values) fewer at the peak
    one_layer = 4 * (4 * 32 * 32 + 32 * 64) * 4
    drop = plain.memory_plan.lower_bound_bytes - marked.memory_plan.lower_bound_bytes
    assert drop >= one_layer, (drop, one_layer)


def _sgd_step(marked: bool, layers: int, hidden: int, batch: int, per_block: int):
    """The benchmark's deep MLP as one graph-mode training step (``opt.minimize``, SGD):
    blocks of ``per_block`` Linear(hidden, hidden) + tanh, each checkpointed when marked."""
    dg.manual_seed(0)
    blocks = [nn.Sequential(*[m for _ in range(per_block)
                              for m in (nn.Linear(hidden, hidden), nn.Tanh())])
              for _ in range(layers // per_block)]
    opt = dg.optim.SGD([p for b in blocks for p in b.parameters()], lr=1e-3)
    with dg.Graph("step") as g:
        h = dg.placeholder("x", (batch, hidden))
        for b in blocks:
            h = checkpoint(b, h, use_reentrant=False) if marked else b(h)
        loss = dg.sum(h * h)
        opt.minimize(loss)
    g.outputs = [loss]
    return g


def test_graph_mode_training_step_real_peak_drops_with_checkpointing():
    """What numpy really allocates (tracemalloc) in a graph-mode O2 training step follows the
    planned buffers: a later run allocates less than one activation outside the arena, the
    CPU backend's shared scratch for fused kernels' temporaries holds a few activations (not
    one per kernel), and checkpointing lowers the first run's real peak (arena and scratch
    included) by at least half the activations the shapes say it drops: per block but the
    last, the outputs of its first ``per_block - 1`` tanh layers."""
    import tracemalloc

    from duograph.runtime.cpu import workspace
    layers, hidden, batch, per_block = 16, 64, 1024, 4
    act = batch * hidden * 4
    feeds = {"x": np.random.default_rng(0).standard_normal((batch, hidden))
             .astype(np.float32)}
    first, later, scratch, outs = {}, {}, {}, {}
    for marked in (False, True):
        _sgd_step(marked, layers, hidden, batch, per_block).compile(passes="O2").run(feeds)
        exe = _sgd_step(marked, layers, hidden, batch, per_block).compile(passes="O2")
        workspace.release()
        tracemalloc.start()
        try:
            for peaks in (first, later):
                base = tracemalloc.get_traced_memory()[0]
                tracemalloc.reset_peak()
                outs[marked] = exe.run(feeds)
                peaks[marked] = tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()
        scratch[marked] = workspace.workspace_bytes()
        assert later[marked] < act, (marked, later[marked], act)
        assert scratch[marked] <= 4 * act, (marked, scratch[marked], act)
    np.testing.assert_allclose(outs[True][0], outs[False][0], rtol=1e-5)
    dropped = (layers // per_block - 1) * (per_block - 1) * act
    assert first[False] - first[True] >= dropped / 2, (first, dropped)
