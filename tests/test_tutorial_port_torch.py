"""PyTorch tutorial-style programs run unchanged with ``import duograph as torch``: each
program is written once, as a function of the module it is given (``torch`` or
``duograph``), runs with both from the same initial weights, and must give PyTorch's numbers.

- a transformer encoder text classifier (Embedding, a sinusoidal positional encoding built
  with slice assignment, TransformerEncoder with a key padding mask, label-smoothed
  cross-entropy, AdamW, gradient clipping) trained with a OneCycleLR schedule;
- a training loop over a DataLoader with ``pin_memory=True``, ``persistent_workers=True`` and
  two workers (SGD with momentum, StepLR, an eval pass under ``no_grad``);
- a small segmentation-style CNN (strided conv, GroupNorm, bilinear ``interpolate`` back to
  the skip connection's size, ``cat``, per-pixel cross-entropy, Adam) and a nearest-neighbour
  upsampling of its output.

The data are not shuffled and dropout is 0: random streams are the one thing the two
frameworks do not share.
"""
import numpy as np
import pytest

import duograph

torch_ = pytest.importorskip("torch")


# -- program 1: a transformer encoder classifier with OneCycleLR ---------------------------------
def make_classifier(torch, ntoken=20, d_model=16, nhead=2, d_hid=32, nlayers=2, nclass=3):
    import math

    nn = torch.nn

    class PositionalEncoding(nn.Module):
        def __init__(self, d_model, max_len=32):
            super().__init__()
            position = torch.arange(max_len).unsqueeze(1)
            div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
            pe = torch.zeros(1, max_len, d_model)
            pe[0, :, 0::2] = torch.sin(position * div_term)
            pe[0, :, 1::2] = torch.cos(position * div_term)
            self.register_buffer("pe", pe)

        def forward(self, x):
            return x + self.pe[:, :x.size(1)]

    class TransformerClassifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(ntoken, d_model, padding_idx=0)
            self.pos_encoder = PositionalEncoding(d_model)
            layer = nn.TransformerEncoderLayer(d_model, nhead, d_hid, dropout=0.0,
                                               batch_first=True)
            self.transformer_encoder = nn.TransformerEncoder(layer, nlayers,
                                                             enable_nested_tensor=False)
            self.classifier = nn.Linear(d_model, nclass)
            self.d_model = d_model

        def forward(self, src, src_key_padding_mask=None):
            x = self.embedding(src) * math.sqrt(self.d_model)
            x = self.pos_encoder(x)
            x = self.transformer_encoder(x, src_key_padding_mask=src_key_padding_mask)
            keep = (~src_key_padding_mask).unsqueeze(-1).float()
            pooled = (x * keep).sum(dim=1) / keep.sum(dim=1)
            return self.classifier(pooled)

    return TransformerClassifier()


def train_classifier(torch, model, batches, steps):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.01, total_steps=steps,
                                                    pct_start=0.3)
    criterion = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
    model.train()
    losses, lrs = [], []
    for step in range(steps):
        tokens, labels = batches[step % len(batches)]
        src = torch.tensor(tokens)
        target = torch.tensor(labels)
        mask = src == 0
        optimizer.zero_grad()
        output = model(src, src_key_padding_mask=mask)
        loss = criterion(output, target)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
        lrs.append(scheduler.get_last_lr()[0])
    model.eval()
    with torch.no_grad():
        tokens, labels = batches[0]
        src = torch.tensor(tokens)
        predictions = model(src, src_key_padding_mask=src == 0).argmax(dim=1)
    return losses, lrs, predictions.tolist()


def _token_batches(rng, n_batches=3, batch=6, length=7):
    batches = []
    for _ in range(n_batches):
        tokens = rng.integers(1, 20, size=(batch, length))
        lengths = rng.integers(3, length + 1, size=batch)
        tokens[np.arange(length)[None, :] >= lengths[:, None]] = 0     # right padding
        labels = (tokens.sum(1) % 3).astype(np.int64)
        batches.append((tokens.astype(np.int64), labels))
    return batches


def _same_weights(ours, theirs):
    ours.load_state_dict({k: v.detach().numpy().copy() for k, v in theirs.state_dict().items()})
    assert list(ours.state_dict()) == list(theirs.state_dict())


def test_transformer_classifier_with_one_cycle_gets_pytorchs_numbers():
    batches = _token_batches(np.random.default_rng(0))
    torch_.manual_seed(0)
    theirs = make_classifier(torch_)
    ours = make_classifier(duograph)
    _same_weights(ours, theirs)
    steps = 8
    t_losses, t_lrs, t_pred = train_classifier(torch_, theirs, batches, steps)
    d_losses, d_lrs, d_pred = train_classifier(duograph, ours, batches, steps)
    np.testing.assert_allclose(d_lrs, t_lrs, rtol=1e-12)
    np.testing.assert_allclose(d_losses, t_losses, rtol=2e-5, atol=1e-6)
    assert d_pred == t_pred
    assert t_losses[-1] < t_losses[0]                     # it learnt something
    for name, p in theirs.named_parameters():
        got, want = ours.state_dict()[name].numpy(), p.detach().numpy()
        if name.endswith("in_proj_bias"):
            # the key bias adds the same amount to every score of a query, so its gradient is
            # 0 up to rounding; Adam scales that noise up to full steps in both frameworks
            got, want = np.delete(got, np.s_[16:32]), np.delete(want, np.s_[16:32])
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=2e-5, err_msg=name)


# -- program 2: a DataLoader with pin_memory and persistent workers ------------------------------
def make_mlp(torch):
    nn = torch.nn
    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))


def train_with_loader(torch, model, features, labels, epochs=3):
    # (attribute access, not ``from torch.utils.data import``: an import statement names the
    # installed module, not this function's parameter)
    DataLoader, TensorDataset = torch.utils.data.DataLoader, torch.utils.data.TensorDataset
    dataset = TensorDataset(torch.tensor(features), torch.tensor(labels))
    loader = DataLoader(dataset, batch_size=16, shuffle=False, num_workers=2,
                        pin_memory=True, persistent_workers=True, prefetch_factor=2)
    loss_fn = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    losses = []
    for epoch in range(epochs):
        model.train()
        for xb, yb in loader:
            xb, yb = xb.to("cpu"), yb.to("cpu")
            optimizer.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        scheduler.step()
    model.eval()
    correct = 0
    with torch.no_grad():
        for xb, yb in loader:
            correct += (model(xb).argmax(dim=1) == yb).sum().item()
    return losses, correct


def test_dataloader_training_loop_with_persistent_pinned_workers_gets_pytorchs_numbers():
    rng = np.random.default_rng(1)
    features = rng.standard_normal((40, 4)).astype(np.float32)
    labels = (features[:, 0] + features[:, 1] > 0).astype(np.int64) + (features[:, 2] > 1)
    torch_.manual_seed(0)
    theirs = make_mlp(torch_)
    ours = make_mlp(duograph)
    _same_weights(ours, theirs)
    t_losses, t_correct = train_with_loader(torch_, theirs, features, labels)
    d_losses, d_correct = train_with_loader(duograph, ours, features, labels)
    assert len(d_losses) == len(t_losses) == 9
    np.testing.assert_allclose(d_losses, t_losses, rtol=1e-5, atol=1e-6)
    assert d_correct == t_correct


# -- program 3: a small segmentation-style CNN with GroupNorm and interpolate ---------------------
def make_cnn(torch):
    nn = torch.nn
    F = torch.nn.functional

    class TinyUNet(nn.Module):
        """Down (strided conv + GroupNorm), up (bilinear interpolate), a skip connection,
        then a 1x1 conv to per-pixel class scores: the shape of many tutorial models."""

        def __init__(self, classes=3):
            super().__init__()
            self.stem = nn.Conv2d(1, 8, 3, padding=1)
            self.norm1 = nn.GroupNorm(2, 8)
            self.down = nn.Conv2d(8, 16, 3, stride=2, padding=1)
            self.norm2 = nn.GroupNorm(4, 16)
            self.fuse = nn.Conv2d(16 + 8, 8, 3, padding=1)
            self.head = nn.Conv2d(8, classes, 1)

        def forward(self, x):
            skip = F.relu(self.norm1(self.stem(x)))
            h = F.relu(self.norm2(self.down(skip)))
            h = F.interpolate(h, size=skip.shape[-2:], mode="bilinear", align_corners=False)
            h = F.relu(self.fuse(torch.cat([h, skip], dim=1)))
            return self.head(h)

    return TinyUNet()


def train_cnn(torch, model, images, masks, steps=5):
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for step in range(steps):
        x = torch.tensor(images)
        y = torch.tensor(masks)
        optimizer.zero_grad()
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits, y)     # per-pixel, (N, C, H, W)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.item()))
    with torch.no_grad():
        up = torch.nn.functional.interpolate(model(torch.tensor(images)), scale_factor=2,
                                             mode="nearest")
    return losses, up.numpy()


def test_cnn_with_group_norm_and_interpolate_gets_pytorchs_numbers():
    rng = np.random.default_rng(3)
    images = rng.standard_normal((4, 1, 8, 8)).astype(np.float32)
    masks = (images[:, 0] > 0).astype(np.int64) + (images[:, 0] > 1).astype(np.int64)
    torch_.manual_seed(0)
    theirs = make_cnn(torch_)
    ours = make_cnn(duograph)
    _same_weights(ours, theirs)
    want_losses, want_up = train_cnn(torch_, theirs, images, masks)
    got_losses, got_up = train_cnn(duograph, ours, images, masks)
    np.testing.assert_allclose(got_losses, want_losses, rtol=2e-5)
    assert got_up.shape == (4, 3, 16, 16)
    np.testing.assert_allclose(got_up, want_up, rtol=1e-4, atol=1e-5)
