"""Packed sequences (nn.utils.rnn) and the recurrent layers on them, and LSTM proj_size:
equal to PyTorch (copied weights) in values and gradients, eagerly, in graph mode and under
dg.compile; the packing functions' errors."""
import numpy as np
import pytest

import duograph as dg
from duograph.nn.utils import rnn as R

torch = pytest.importorskip("torch")
TR = torch.nn.utils.rnn

LENS = [2, 3, 2, 5, 1, 4]          # unsorted, with ties (the sort must be stable, as torch's)


def _np(t):
    return t.detach().numpy()


def _same_packed(ours, theirs, exact=True):
    assert type(ours) is R.PackedSequence and ours._fields == theirs._fields
    if exact:
        np.testing.assert_array_equal(_np(ours.data), _np(theirs.data))
    else:
        np.testing.assert_allclose(_np(ours.data), _np(theirs.data), rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(ours.batch_sizes.numpy(), theirs.batch_sizes.numpy())
    assert ours.batch_sizes.dtype == dg.int64
    for a, b in zip(ours[2:], theirs[2:]):
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_array_equal(a.numpy(), b.numpy())


# -- the packing functions ------------------------------------------------------------------------
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("lengths,enforce_sorted", [([5, 4, 3, 2, 2, 1], True), (LENS, False)])
def test_pack_and_pad_equal_torch_with_gradients(batch_first, lengths, enforce_sorted):
    rng = np.random.default_rng(0)
    shape = (6, 7, 3, 2) if batch_first else (7, 6, 3, 2)    # trailing dims beyond features
    x = rng.standard_normal(shape)
    tx = torch.tensor(x, requires_grad=True)
    dx = dg.tensor(x, requires_grad=True)
    tp = TR.pack_padded_sequence(tx, torch.tensor(lengths), batch_first, enforce_sorted)
    dp = R.pack_padded_sequence(dx, dg.tensor(np.array(lengths)), batch_first, enforce_sorted)
    _same_packed(dp, tp)
    tpad, tl = TR.pad_packed_sequence(tp, batch_first, padding_value=-2.5, total_length=9)
    dpad, dl = R.pad_packed_sequence(dp, batch_first, padding_value=-2.5, total_length=9)
    np.testing.assert_array_equal(_np(dpad), _np(tpad))
    np.testing.assert_array_equal(dl.numpy(), tl.numpy())
    assert dl.dtype == dg.int64
    w = rng.standard_normal(tuple(tpad.shape))
    (tpad * torch.tensor(w)).sum().backward()
    (dpad * dg.tensor(w)).sum().backward()
    np.testing.assert_array_equal(dx.grad.numpy(), tx.grad.numpy())   # zero past each length
    tpad, _ = TR.pad_packed_sequence(tp, batch_first)
    dpad, _ = R.pad_packed_sequence(dp, batch_first)
    np.testing.assert_array_equal(_np(dpad), _np(tpad))


def test_pack_sequence_pad_sequence_unpack_and_unpad_equal_torch():
    rng = np.random.default_rng(1)
    seqs = [rng.standard_normal((n, 2)) for n in (3, 1, 4, 4)]
    ts, ds = [torch.tensor(s) for s in seqs], [dg.tensor(s) for s in seqs]
    for bf in (False, True):
        for side in ("right", "left"):
            np.testing.assert_array_equal(
                R.pad_sequence(ds, bf, 7.0, side).numpy(),
                TR.pad_sequence(ts, bf, 7.0, side).numpy())
    one_d = [rng.standard_normal(n) for n in (2, 0, 3)]           # 1-D and empty sequences
    np.testing.assert_array_equal(R.pad_sequence([dg.tensor(s) for s in one_d]).numpy(),
                                  TR.pad_sequence([torch.tensor(s) for s in one_d]).numpy())
    _same_packed(R.pack_sequence(ds, enforce_sorted=False),
                 TR.pack_sequence(ts, enforce_sorted=False))
    _same_packed(R.pack_sequence([ds[2], ds[0], ds[1]]), TR.pack_sequence([ts[2], ts[0], ts[1]]))
    unpacked = R.unpack_sequence(R.pack_sequence(ds, enforce_sorted=False))
    for a, b in zip(unpacked, seqs):
        np.testing.assert_array_equal(a.numpy(), b)
    padded = R.pad_sequence(ds, batch_first=True)
    for a, b in zip(R.unpad_sequence(padded, [3, 1, 4, 4], batch_first=True), seqs):
        np.testing.assert_array_equal(a.numpy(), b)
    perm = [2, 0, 3, 1]
    np.testing.assert_array_equal(R.invert_permutation(dg.tensor(perm)).numpy(),
                                  TR.invert_permutation(torch.tensor(perm)).numpy())
    assert R.invert_permutation(None) is None


def test_packed_sequence_is_a_namedtuple_as_torchs():
    p = R.pack_sequence([dg.ones(3, 2), dg.ones(1, 2)])
    data, batch_sizes, sorted_indices, unsorted_indices = p
    assert isinstance(p, tuple) and p._fields == TR.PackedSequence._fields
    assert sorted_indices is None and unsorted_indices is None
    q = R.PackedSequence(data, batch_sizes, dg.tensor([1, 0]))     # inverse filled in
    np.testing.assert_array_equal(q.unsorted_indices.numpy(), [1, 0])
    assert R.PackedSequence((data, batch_sizes)).batch_sizes is batch_sizes
    assert p.double().data.dtype == dg.float64 and not p.is_cuda
    assert p.to(dg.float64).batch_sizes is batch_sizes


def test_packing_errors_are_clear_and_torch_like():
    x = dg.zeros(4, 3, 2)
    with pytest.raises(RuntimeError, match="must be sorted in decreasing order when "
                                           "`enforce_sorted` is True"):
        R.pack_padded_sequence(x, [2, 3, 1])
    with pytest.raises(RuntimeError, match="has to be greater than 0"):
        R.pack_padded_sequence(x, [3, 2, 0])
    with pytest.raises(RuntimeError, match="has to be greater than 0"):
        R.pack_padded_sequence(x, [0, 2, 3], enforce_sorted=False)
    with pytest.raises(RuntimeError, match=r"Expected `len\(lengths\)` to be equal to "
                                           r"batch_size, but got 2 \(batch_size=3\)"):
        R.pack_padded_sequence(x, [3, 2])
    with pytest.raises(RuntimeError, match="should be a 1D CPU int64 tensor, but got 2D"):
        R.pack_padded_sequence(x, dg.tensor([[3, 2, 1]]))
    with pytest.raises(dg.ShapeError, match=r"length \(5\) is larger than the input's time "
                                            r"dimension \(4\)"):
        R.pack_padded_sequence(x, [5, 2, 1])              # torch reads past the end here
    with pytest.raises(dg.ShapeError, match="at least 2 dims"):
        R.pack_padded_sequence(dg.zeros(3), [3])
    with pytest.raises(TypeError, match="must hold integers"):
        R.pack_padded_sequence(x, ["a", "b", "c"])
    p = R.pack_padded_sequence(x, [3, 2, 1])
    with pytest.raises(ValueError, match="Expected total_length to be at least the length of "
                                         "the longest sequence in input, but got "
                                         "total_length=2 and max sequence length being 3"):
        R.pad_packed_sequence(p, total_length=2)
    with pytest.raises(RuntimeError, match="received an empty list of sequences"):
        R.pad_sequence([])
    with pytest.raises(RuntimeError, match="received an empty list of sequences"):
        R.pack_sequence([])
    with pytest.raises(RuntimeError, match="Expected padding_side to be one of left or right, "
                                           "but got middle"):
        R.pad_sequence([dg.ones(2)], padding_side="middle")
    with pytest.raises(dg.ShapeError, match=r"sequence 1 has shape \[3, 3\]"):
        R.pad_sequence([dg.ones(2, 2), dg.ones(3, 3)])
    g = dg.Graph("g")
    with g, pytest.raises(TypeError, match=r"must be known when the sequence is packed.*"
                                           r"lengths=lengths"):
        R.pack_padded_sequence(dg.placeholder("x", (4, 3, 2), "float64"),
                               dg.placeholder("n", (3,), "int64"))


# -- the recurrent layers on packed input ---------------------------------------------------------
CONFIGS = [
    dict(),
    dict(num_layers=2, bidirectional=True),
    dict(batch_first=True, bidirectional=True),
    dict(num_layers=2, batch_first=True, bias=False),
]
PROJ_CONFIGS = [dict(proj_size=3), dict(proj_size=2, num_layers=2, bidirectional=True)]


def _pair(cls, kw, seed=0):
    torch.manual_seed(seed)
    tm = getattr(torch.nn, cls)(4, 5, **kw).double()
    dm = getattr(dg.nn, cls)(4, 5, **kw).double()
    sd = {k: v.detach().numpy() for k, v in tm.state_dict().items()}
    assert list(sd) == [n for n, _ in dm.named_parameters()]      # PyTorch's names, in order
    assert all(tuple(getattr(dm, k).shape) == v.shape for k, v in sd.items())
    dm.load_state_dict(sd)
    return tm, dm


def _states(cls, kw, n, rng):
    d = 2 if kw.get("bidirectional") else 1
    lead = (kw.get("num_layers", 1) * d, n)
    h = rng.standard_normal(lead + (kw.get("proj_size") or 5,)) * 0.5
    c = rng.standard_normal(lead + (5,)) * 0.5
    return (h, c) if cls == "LSTM" else (h,)


def _loss(out_data, hn, lstm):
    h = hn[0] if lstm else hn
    extra = (hn[1] * hn[1]).sum() * 0.5 if lstm else 0.0
    return (out_data * out_data).sum() + (h * 1.5).sum() + extra


def _ids(kw):
    return ",".join(f"{k}={v}" for k, v in kw.items()) or "default"


def _run_packed(tm, dm, cls, kw, lengths, enforce_sorted, with_state, seed=1):
    rng = np.random.default_rng(seed)
    lstm = cls == "LSTM"
    bf = kw.get("batch_first", False)
    n, steps = len(lengths), max(lengths) + 1                  # one step of padding beyond
    x = rng.standard_normal((n, steps, 4) if bf else (steps, n, 4))
    states = _states(cls, kw, n, rng) if with_state else ()
    tx, dx = torch.tensor(x, requires_grad=True), dg.tensor(x, requires_grad=True)
    ts = [torch.tensor(s, requires_grad=True) for s in states]
    ds = [dg.tensor(s, requires_grad=True) for s in states]
    thx = (tuple(ts) if lstm else ts[0]) if with_state else None
    dhx = (tuple(ds) if lstm else ds[0]) if with_state else None
    to, th = tm(TR.pack_padded_sequence(tx, lengths, bf, enforce_sorted), thx)
    do, dh = dm(R.pack_padded_sequence(dx, lengths, bf, enforce_sorted), dhx)
    _same_packed(do, to, exact=False)
    for a, b in zip(dh if lstm else [dh], th if lstm else [th]):
        np.testing.assert_allclose(_np(a), _np(b), rtol=1e-10, atol=1e-12)
    _loss(to.data, th, lstm).backward()
    _loss(do.data, dh, lstm).backward()
    np.testing.assert_allclose(dx.grad.numpy(), tx.grad.numpy(), rtol=1e-9, atol=1e-11)
    for a, b in zip(ds, ts):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-9, atol=1e-11)
    dparams = dict(dm.named_parameters())
    for name, p in tm.named_parameters():
        np.testing.assert_allclose(dparams[name].grad.numpy(), p.grad.numpy(), rtol=1e-9,
                                   atol=1e-11, err_msg=name)


@pytest.mark.parametrize("kw", CONFIGS, ids=_ids)
@pytest.mark.parametrize("cls", ["RNN", "LSTM", "GRU"])
@pytest.mark.parametrize("enforce_sorted", [False, True], ids=["unsorted", "sorted"])
def test_packed_input_equals_torch_values_and_gradients(cls, kw, enforce_sorted):
    tm, dm = _pair(cls, kw)
    lengths = LENS if not enforce_sorted else sorted(LENS, reverse=True)
    _run_packed(tm, dm, cls, kw, lengths, enforce_sorted, with_state=True)


@pytest.mark.parametrize("cls", ["RNN", "LSTM", "GRU"])
def test_packed_input_without_initial_state(cls):
    kw = dict(num_layers=2, bidirectional=True, batch_first=True)
    tm, dm = _pair(cls, kw)
    _run_packed(tm, dm, cls, kw, LENS, False, with_state=False)


@pytest.mark.parametrize("kw", PROJ_CONFIGS, ids=_ids)
@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
def test_lstm_proj_size_equals_torch(kw, packed):
    tm, dm = _pair("LSTM", kw)
    assert repr(dm) == repr(tm)
    assert [len(g) for g in dm.all_weights] == [len(g) for g in tm.all_weights]
    if packed:
        _run_packed(tm, dm, "LSTM", kw, LENS, False, with_state=True)
        return
    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 3, 4))
    h, c = _states("LSTM", kw, 3, rng)
    tx, dx = torch.tensor(x, requires_grad=True), dg.tensor(x, requires_grad=True)
    th, tc = torch.tensor(h, requires_grad=True), torch.tensor(c, requires_grad=True)
    dh, dc = dg.tensor(h, requires_grad=True), dg.tensor(c, requires_grad=True)
    to, tn = tm(tx, (th, tc))
    do, dn = dm(dx, (dh, dc))
    assert tuple(do.shape) == tuple(to.shape)
    np.testing.assert_allclose(_np(do), _np(to), rtol=1e-10, atol=1e-12)
    for a, b in zip(dn, tn):
        assert tuple(a.shape) == tuple(b.shape)
        np.testing.assert_allclose(_np(a), _np(b), rtol=1e-10, atol=1e-12)
    _loss(to, tn, True).backward()
    _loss(do, dn, True).backward()
    for a, b in ((dx, tx), (dh, th), (dc, tc)):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-9, atol=1e-11)
    dparams = dict(dm.named_parameters())
    for name, p in tm.named_parameters():
        np.testing.assert_allclose(dparams[name].grad.numpy(), p.grad.numpy(), rtol=1e-9,
                                   atol=1e-11, err_msg=name)
    uo, (uh, uc) = dm(dg.tensor(x[:, 0]))                        # unbatched, default state
    ro, (rh, rc) = tm(torch.tensor(x[:, 0]))
    for a, b in ((uo, ro), (uh, rh), (uc, rc)):
        np.testing.assert_allclose(_np(a), _np(b), rtol=1e-10, atol=1e-12)


def test_proj_size_errors_as_torch():
    with pytest.raises(ValueError, match="proj_size has to be smaller than hidden_size"):
        dg.nn.LSTM(3, 4, proj_size=4)
    with pytest.raises(ValueError, match="proj_size should be a positive integer or zero"):
        dg.nn.LSTM(3, 4, proj_size=-1)
    with pytest.raises(TypeError, match="proj_size must be an int"):
        dg.nn.LSTM(3, 4, proj_size=2.0)
    m = dg.nn.LSTM(3, 4, proj_size=2)
    with pytest.raises(dg.ShapeError, match=r"expected hidden\[0\] size \[1, 2, 2\], got "
                                            r"\[1, 2, 4\]"):
        m(dg.zeros(5, 2, 3), (dg.zeros(1, 2, 4), dg.zeros(1, 2, 4)))
    with pytest.raises(dg.ShapeError, match=r"expected hidden\[1\] size \[1, 2, 4\], got "
                                            r"\[1, 2, 2\]"):
        m(dg.zeros(5, 2, 3), (dg.zeros(1, 2, 2), dg.zeros(1, 2, 2)))


def test_packed_input_errors():
    m = dg.nn.GRU(4, 5)
    p = R.pack_padded_sequence(dg.zeros(4, 3, 4), [3, 2, 1])
    with pytest.raises(dg.ShapeError, match=r"expected hidden size \[1, 3, 5\], got "
                                            r"\[1, 2, 5\]"):
        m(p, dg.zeros(1, 2, 5))
    with pytest.raises(dg.ShapeError, match="data must have 2 dimensions"):
        m(R.PackedSequence(dg.zeros(6, 1, 4), p.batch_sizes))
    with pytest.raises(dg.ShapeError, match="input.size\\(-1\\) must be equal to input_size"):
        m(R.pack_padded_sequence(dg.zeros(4, 3, 2), [3, 2, 1]))
    with pytest.raises(TypeError, match="a PackedSequence carries its own lengths"):
        m(p, lengths=[3, 2, 1])
    with pytest.raises(dg.ShapeError, match="lengths= needs a batched"):
        m(dg.zeros(4, 4), lengths=[3])
    with pytest.raises(dg.ShapeError, match=r"lengths must be in 0\.\.4"):
        m(dg.zeros(4, 3, 4), lengths=[5, 2, 1])
    with pytest.raises(dg.ShapeError, match=r"lengths must have shape \[3\]"):
        m(dg.zeros(4, 3, 4), lengths=dg.tensor([2, 1]))
    with pytest.raises(TypeError, match="lengths must be an integer tensor"):
        m(dg.zeros(4, 3, 4), lengths=dg.tensor([2.0, 1.0, 1.0]))


# -- lengths as a tensor: graph mode and dg.compile -----------------------------------------------
def _torch_padded(tm, x, lengths, bf, lstm):
    to, th = tm(TR.pack_padded_sequence(torch.tensor(x), lengths, bf, enforce_sorted=False))
    pad, _ = TR.pad_packed_sequence(to, bf, total_length=x.shape[1 if bf else 0])
    return [_np(pad)] + ([_np(t) for t in th] if lstm else [_np(th)])


@pytest.mark.parametrize("cls,kw", [("LSTM", dict(num_layers=2, bidirectional=True,
                                                  proj_size=3)),
                                    ("GRU", dict(batch_first=True, bidirectional=True))],
                         ids=["lstm", "gru"])
def test_lengths_tensor_in_graph_mode_and_compile_do_not_rebuild(cls, kw):
    tm, dm = _pair(cls, kw)
    lstm = cls == "LSTM"
    bf = kw.get("batch_first", False)
    rng = np.random.default_rng(3)
    shape = (6, 7, 4) if bf else (7, 6, 4)
    x = rng.standard_normal(shape)
    other = [7, 1, 3, 3, 6, 2]
    g = dg.Graph("lengths")
    with g:
        xv = dg.placeholder("x", shape, "float64")
        lv = dg.placeholder("lengths", (6,), "int64")
        out, h = dm(xv, lengths=lv)
    g.outputs = [out] + (list(h) if lstm else [h])
    for level in ("O0", "O2"):
        exe = g.compile(passes=level)
        for lengths in (LENS, other):
            got = exe(x=x, lengths=np.array(lengths))
            for a, b in zip(got, _torch_padded(tm, x, lengths, bf, lstm)):
                np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    eager = dm(dg.tensor(x), lengths=LENS)                        # a plain list works eagerly
    np.testing.assert_allclose(_np(eager[0]), _torch_padded(tm, x, LENS, bf, lstm)[0],
                               rtol=1e-10, atol=1e-12)

    @dg.compile
    def run(x, lengths):
        return dm(x, lengths=lengths)
    for lengths in (LENS, other, LENS):
        out, h = run(dg.tensor(x), dg.tensor(np.array(lengths)))
        got = [_np(out)] + ([_np(t) for t in h] if lstm else [_np(h)])
        for a, b in zip(got, _torch_padded(tm, x, lengths, bf, lstm)):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    assert len(run.specializations) == 1                # other lengths did not record again


def test_zero_length_keeps_the_initial_state():
    m = dg.nn.GRU(4, 5).double()
    x = dg.tensor(np.random.default_rng(4).standard_normal((3, 2, 4)))
    h0 = dg.tensor(np.random.default_rng(5).standard_normal((1, 2, 5)))
    out, h = m(x, h0, lengths=[0, 3])
    np.testing.assert_array_equal(_np(out)[:, 0], 0.0)
    np.testing.assert_array_equal(_np(h)[0, 0], h0.numpy()[0, 0])
    ref_out, ref_h = m(x[:, 1:], h0[:, 1:])
    np.testing.assert_allclose(_np(h)[0, 1], _np(ref_h)[0, 0], rtol=1e-12)


def test_graph_mode_packed_gradients_equal_torch():
    tm, dm = _pair("LSTM", dict(bidirectional=True, proj_size=2))
    rng = np.random.default_rng(6)
    x = rng.standard_normal((6, 6, 4))
    lengths = LENS
    g = dg.Graph("packed_grad")
    with g:
        xv = dg.placeholder("x", (6, 6, 4), "float64")
        out, (h, c) = dm(R.pack_padded_sequence(xv, lengths, enforce_sorted=False))
        loss = _loss(out.data, (h, c), True)
        gx, = dg.grad(loss, [xv])
    g.outputs = [loss, gx]
    tx = torch.tensor(x, requires_grad=True)
    to, th = tm(TR.pack_padded_sequence(tx, lengths, enforce_sorted=False))
    tloss = _loss(to.data, th, True)
    tloss.backward()
    for level in ("O0", "O2"):
        got_loss, got_gx = g.compile(passes=level)(x=x)
        np.testing.assert_allclose(got_loss, tloss.item(), rtol=1e-10)
        np.testing.assert_allclose(got_gx, tx.grad.numpy(), rtol=1e-9, atol=1e-11)


def test_packed_lstm_trains_the_same_in_eager_compile_and_graph_mode():
    kw = dict(num_layers=2, batch_first=True, proj_size=3)
    tm, _ = _pair("LSTM", kw)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((6, 6, 4))
    target = rng.standard_normal((sum(LENS), 3))
    losses = {"torch": []}
    m = torch.nn.LSTM(4, 5, **kw).double()
    m.load_state_dict(tm.state_dict())
    opt = torch.optim.SGD(m.parameters(), lr=0.3)
    for _ in range(3):
        opt.zero_grad()
        out, _ = m(TR.pack_padded_sequence(torch.tensor(x), LENS, True, False))
        loss = ((out.data - torch.tensor(target)) ** 2).mean()
        loss.backward()
        opt.step()
        losses["torch"].append(loss.item())
    for mode in ("eager", "compiled", "graph"):
        m = dg.nn.LSTM(4, 5, **kw).double()
        m.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
        opt = dg.optim.SGD(m.parameters(), lr=0.3)

        def loss_fn(xs, ts):
            out, _ = m(R.pack_padded_sequence(xs, LENS, True, False))
            return ((out.data - ts) ** 2).mean()
        losses[mode] = []
        if mode == "graph":
            g = dg.Graph("packed_train")
            with g:
                loss = loss_fn(dg.placeholder("x", x.shape, "float64"),
                               dg.placeholder("t", target.shape, "float64"))
                opt.minimize(loss)
            exe = g.compile(outputs=[loss], passes="O2")
            losses[mode] = [float(exe(x=x, t=target)[0]) for _ in range(3)]
            continue
        fn = dg.compile(loss_fn) if mode == "compiled" else loss_fn
        for _ in range(3):
            opt.zero_grad()
            loss = fn(dg.tensor(x), dg.tensor(target))
            loss.backward()
            opt.step()
            losses[mode].append(loss.item())
    for mode in ("eager", "compiled", "graph"):
        np.testing.assert_allclose(losses[mode], losses["torch"], rtol=1e-9, err_msg=mode)
    assert losses["torch"][-1] < losses["torch"][0]


def test_compiled_function_returns_a_packed_sequence_and_guards_the_lengths():
    tm, dm = _pair("GRU", dict(bidirectional=True))
    x = np.random.default_rng(8).standard_normal((6, 6, 4))

    @dg.compile
    def run(x, lengths):
        return dm(R.pack_padded_sequence(x, lengths, enforce_sorted=False))
    for lengths in (LENS, [6, 6, 1, 2, 3, 4], LENS):
        out, h = run(dg.tensor(x), dg.tensor(np.array(lengths)))
        to, th = tm(TR.pack_padded_sequence(torch.tensor(x), lengths, enforce_sorted=False))
        _same_packed(out, to, exact=False)
        np.testing.assert_allclose(_np(h), _np(th), rtol=1e-10, atol=1e-12)
    assert len(run.specializations) == 2                # other lengths: another packing


def test_lengths_tensor_exports_to_onnx_and_runs_equal_to_torch(tmp_path):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    tm, dm = _pair("LSTM", dict(bidirectional=True, proj_size=3))

    def f(x, lengths):
        out, (h, c) = dm(x, lengths=lengths)
        return out, h, c
    path = tmp_path / "lstm_lengths.onnx"
    model = dg.onnx.export(f, path, dg.onnx.Input((6, "B", 4), "float64"),
                           dg.onnx.Input(("B",), "int64"))
    onnx.checker.check_model(onnx.load(path), full_check=True)
    assert "Scan" in {n.op_type for n in model.graph.node}
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(9)
    for lengths in ([6, 2, 3], [1, 6, 5, 4]):                 # two batch sizes, one file
        x = rng.standard_normal((6, len(lengths), 4))
        got = sess.run(None, {"x": x, "lengths": np.array(lengths)})
        for a, b in zip(got, _torch_padded(tm, x, lengths, False, True)):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
