"""How much of PyTorch's public surface duograph spells the same way (``hasattr`` only).

    python benchmarks/api_coverage.py [--missing] [--json FILE]

Counts, against the installed PyTorch (2.13 when the README's figures were taken):

- torch functions: public, non-class callables of ``torch`` (``torch.tensor``, ``torch.cat``);
- nn modules: ``torch.nn`` classes that subclass ``nn.Module``;
- nn.functional: public callables defined in ``torch.nn.functional``;
- Tensor methods: public callables of ``torch.Tensor``;
- optim: ``torch.optim`` classes that subclass ``Optimizer``;
- linalg: public callables of ``torch.linalg``;

each name present in duograph's counterpart (``duograph``, ``duograph.nn``,
``duograph.nn.functional``, ``duograph.Tensor``, ``duograph.optim``, ``duograph.linalg``)
counts, whatever it does (names, not behaviour: the op tests check that). Then the same for
``TUTORIAL_NAMES``, the names that PyTorch's tutorials and reference examples use most
(written out below, from the beginner tutorials, the "learn the basics" series, the examples
repository's MNIST/word-language-model/DCGAN/VAE/reinforcement-learning scripts and the
recipes); ``--missing`` lists what duograph lacks of each.
"""
from __future__ import annotations

import argparse
import inspect
import json
import sys

import duograph as dg

# Names tutorials use, by where they live: "torch.X" (a function or class of torch), "nn.X",
# "F.X" (torch.nn.functional), "Tensor.X" (a method or property), "optim.X",
# "lr_scheduler.X", "linalg.X", "init.X" (torch.nn.init), "data.X" (torch.utils.data),
# "autograd.X".
TUTORIAL_NAMES = """
torch.tensor torch.as_tensor torch.from_numpy torch.zeros torch.ones torch.empty torch.full
torch.zeros_like torch.ones_like torch.empty_like torch.full_like torch.rand torch.randn
torch.randint torch.rand_like torch.randn_like torch.randint_like torch.randperm
torch.arange torch.linspace torch.logspace torch.eye torch.manual_seed torch.seed
torch.cat torch.concat torch.stack torch.split torch.chunk torch.reshape torch.flatten
torch.squeeze torch.unsqueeze torch.transpose torch.permute torch.t torch.gather
torch.scatter torch.index_select torch.masked_select torch.where torch.nonzero
torch.argwhere torch.tile torch.flip torch.roll torch.narrow torch.meshgrid torch.tril
torch.triu torch.diag torch.diagonal torch.trace torch.outer torch.einsum torch.matmul
torch.mm torch.bmm torch.addmm torch.dot torch.mv torch.cross torch.kron torch.sum
torch.mean torch.std torch.var torch.std_mean torch.var_mean torch.prod torch.max
torch.min torch.amax torch.amin torch.argmax torch.argmin torch.median torch.mode
torch.sort torch.argsort torch.topk torch.kthvalue torch.cumsum torch.cumprod
torch.logsumexp torch.norm torch.dist torch.cdist torch.abs torch.sqrt torch.rsqrt
torch.exp torch.log torch.log2 torch.log10 torch.log1p torch.expm1 torch.pow torch.sin
torch.cos torch.tan torch.tanh torch.sigmoid torch.relu torch.softmax torch.log_softmax
torch.clamp torch.clip torch.floor torch.ceil torch.round torch.trunc torch.frac
torch.sign torch.neg torch.reciprocal torch.add torch.sub torch.mul torch.div
torch.true_divide torch.floor_divide torch.remainder torch.fmod torch.maximum
torch.minimum torch.eq torch.ne torch.gt torch.ge torch.lt torch.le torch.isclose
torch.allclose torch.equal torch.isnan torch.isinf torch.isfinite torch.logical_and
torch.logical_or torch.logical_not torch.logical_xor torch.any torch.all torch.unique
torch.bincount torch.histc torch.multinomial torch.bernoulli torch.normal torch.numel
torch.is_tensor torch.is_floating_point torch.no_grad torch.enable_grad
torch.set_grad_enabled torch.is_grad_enabled torch.inference_mode torch.save torch.load
torch.device torch.compile torch.set_num_threads torch.get_num_threads
torch.set_default_dtype torch.get_default_dtype torch.set_printoptions torch.from_dlpack
torch.broadcast_to torch.broadcast_tensors torch.repeat_interleave torch.searchsorted
torch.nansum torch.nanmean torch.lerp torch.erf torch.atan2 torch.hypot torch.square
torch.addcmul torch.addcdiv torch.cosine_similarity torch.count_nonzero torch.masked_fill
torch.sinh torch.cosh torch.asin torch.acos torch.atan torch.logaddexp torch.xlogy
torch.diff torch.cummax torch.clamp_min torch.clamp_max torch.vstack torch.hstack
torch.column_stack torch.dstack torch.swapaxes torch.movedim torch.unbind torch.take
torch.take_along_dim torch.rot90 torch.Generator torch.Tensor torch.FloatTensor
torch.LongTensor torch.get_rng_state torch.set_rng_state
nn.Module nn.Sequential nn.ModuleList nn.ModuleDict nn.Parameter nn.ParameterList
nn.ParameterDict nn.Linear nn.Bilinear nn.Identity nn.Flatten nn.Unflatten nn.Conv1d
nn.Conv2d nn.Conv3d nn.ConvTranspose1d nn.ConvTranspose2d nn.ConvTranspose3d
nn.MaxPool1d nn.MaxPool2d nn.MaxPool3d nn.AvgPool1d nn.AvgPool2d nn.AvgPool3d
nn.AdaptiveAvgPool1d nn.AdaptiveAvgPool2d nn.AdaptiveMaxPool2d nn.BatchNorm1d
nn.BatchNorm2d nn.BatchNorm3d nn.LayerNorm nn.GroupNorm nn.InstanceNorm2d nn.RMSNorm
nn.LocalResponseNorm nn.Dropout nn.Dropout2d nn.Dropout1d nn.AlphaDropout nn.Embedding
nn.EmbeddingBag nn.RNN nn.LSTM nn.GRU nn.RNNCell nn.LSTMCell nn.GRUCell nn.Transformer
nn.TransformerEncoder nn.TransformerEncoderLayer nn.TransformerDecoder
nn.TransformerDecoderLayer nn.MultiheadAttention nn.ReLU nn.ReLU6 nn.LeakyReLU nn.PReLU
nn.ELU nn.SELU nn.CELU nn.GELU nn.SiLU nn.Mish nn.Sigmoid nn.Tanh nn.Softmax
nn.LogSoftmax nn.Softmin nn.Softplus nn.Softsign nn.Hardtanh nn.Hardswish
nn.Hardsigmoid nn.LogSigmoid nn.Threshold nn.GLU nn.Tanhshrink nn.Upsample
nn.UpsamplingNearest2d nn.PixelShuffle nn.ZeroPad2d nn.ConstantPad2d
nn.ReflectionPad2d nn.ReplicationPad2d nn.MSELoss nn.L1Loss nn.SmoothL1Loss
nn.HuberLoss nn.CrossEntropyLoss nn.NLLLoss nn.BCELoss nn.BCEWithLogitsLoss
nn.KLDivLoss nn.CosineEmbeddingLoss nn.MarginRankingLoss nn.TripletMarginLoss
nn.CTCLoss nn.PoissonNLLLoss nn.GaussianNLLLoss nn.CosineSimilarity
nn.PairwiseDistance nn.Fold nn.Unfold nn.ChannelShuffle nn.SyncBatchNorm
F.relu F.relu_ F.leaky_relu F.elu F.selu F.gelu F.silu F.mish F.sigmoid F.tanh
F.softmax F.log_softmax F.softmin F.softplus F.hardtanh F.relu6 F.glu F.logsigmoid
F.linear F.bilinear F.conv1d F.conv2d F.conv3d F.conv_transpose2d F.max_pool1d
F.max_pool2d F.avg_pool2d F.adaptive_avg_pool2d F.adaptive_max_pool2d F.dropout
F.dropout2d F.embedding F.one_hot F.pad F.interpolate F.upsample F.grid_sample
F.affine_grid F.pixel_shuffle F.unfold F.fold F.normalize F.layer_norm F.batch_norm
F.group_norm F.instance_norm F.rms_norm F.mse_loss F.l1_loss F.smooth_l1_loss
F.huber_loss F.cross_entropy F.nll_loss F.binary_cross_entropy
F.binary_cross_entropy_with_logits F.kl_div F.cosine_similarity F.pairwise_distance
F.triplet_margin_loss F.margin_ranking_loss F.scaled_dot_product_attention
F.multi_head_attention_forward F.gumbel_softmax
Tensor.size Tensor.shape Tensor.dim Tensor.ndim Tensor.numel Tensor.dtype Tensor.device
Tensor.view Tensor.view_as Tensor.reshape Tensor.reshape_as Tensor.flatten
Tensor.squeeze Tensor.unsqueeze Tensor.transpose Tensor.permute Tensor.t Tensor.T
Tensor.mT Tensor.contiguous Tensor.expand Tensor.expand_as Tensor.repeat
Tensor.chunk Tensor.split Tensor.unbind Tensor.narrow Tensor.gather Tensor.scatter
Tensor.scatter_ Tensor.scatter_add_ Tensor.index_select Tensor.index_add_
Tensor.index_fill_ Tensor.masked_fill Tensor.masked_fill_ Tensor.masked_select
Tensor.nonzero Tensor.where Tensor.clone Tensor.detach Tensor.detach_ Tensor.numpy
Tensor.tolist Tensor.item Tensor.to Tensor.cpu Tensor.cuda Tensor.float Tensor.double
Tensor.half Tensor.bfloat16 Tensor.long Tensor.int Tensor.bool Tensor.byte Tensor.type
Tensor.type_as Tensor.new_zeros Tensor.new_ones Tensor.new_full Tensor.new_tensor
Tensor.new_empty Tensor.zero_ Tensor.fill_ Tensor.copy_ Tensor.normal_ Tensor.uniform_
Tensor.random_ Tensor.bernoulli_ Tensor.requires_grad Tensor.requires_grad_
Tensor.grad Tensor.grad_fn Tensor.is_leaf Tensor.backward Tensor.register_hook
Tensor.retain_grad Tensor.data Tensor.sum Tensor.mean Tensor.std Tensor.var
Tensor.prod Tensor.max Tensor.min Tensor.amax Tensor.argmax Tensor.argmin
Tensor.topk Tensor.sort Tensor.argsort Tensor.cumsum Tensor.norm Tensor.abs
Tensor.sqrt Tensor.exp Tensor.log Tensor.pow Tensor.clamp Tensor.clamp_
Tensor.clip Tensor.round Tensor.floor Tensor.ceil Tensor.sign Tensor.neg
Tensor.sigmoid Tensor.tanh Tensor.relu Tensor.softmax Tensor.log_softmax
Tensor.add Tensor.add_ Tensor.sub Tensor.sub_ Tensor.mul Tensor.mul_ Tensor.div
Tensor.div_ Tensor.matmul Tensor.mm Tensor.bmm Tensor.dot Tensor.eq Tensor.ne
Tensor.gt Tensor.lt Tensor.ge Tensor.le Tensor.all Tensor.any Tensor.isnan
Tensor.logical_not Tensor.unique Tensor.is_floating_point Tensor.is_contiguous
Tensor.stride Tensor.element_size Tensor.nelement Tensor.storage_offset
Tensor.data_ptr Tensor.pin_memory Tensor.share_memory_ Tensor.apply_ Tensor.map_
Tensor.unfold Tensor.flip Tensor.roll Tensor.diag Tensor.tril Tensor.triu
Tensor.multinomial Tensor.float_power Tensor.lerp Tensor.addmm Tensor.squeeze_
Tensor.unsqueeze_ Tensor.t_ Tensor.transpose_ Tensor.resize_ Tensor.masked_scatter_
Tensor.index_put_ Tensor.put_ Tensor.sum_to_size Tensor.is_cuda Tensor.get_device
optim.SGD optim.Adam optim.AdamW optim.RMSprop optim.Adagrad optim.Adadelta
optim.Adamax optim.NAdam optim.RAdam optim.LBFGS optim.Rprop optim.ASGD
optim.SparseAdam optim.Optimizer lr_scheduler.StepLR lr_scheduler.MultiStepLR
lr_scheduler.ExponentialLR lr_scheduler.CosineAnnealingLR lr_scheduler.ReduceLROnPlateau
lr_scheduler.OneCycleLR lr_scheduler.LambdaLR lr_scheduler.CyclicLR
lr_scheduler.CosineAnnealingWarmRestarts lr_scheduler.LinearLR lr_scheduler.SequentialLR
lr_scheduler.ConstantLR lr_scheduler.PolynomialLR
linalg.norm linalg.vector_norm linalg.matrix_norm linalg.inv linalg.solve linalg.det
linalg.slogdet linalg.cholesky linalg.qr linalg.eigh linalg.eig linalg.svd
linalg.svdvals linalg.lstsq linalg.pinv linalg.matrix_rank linalg.eigvalsh
init.xavier_uniform_ init.xavier_normal_ init.kaiming_uniform_ init.kaiming_normal_
init.normal_ init.uniform_ init.zeros_ init.ones_ init.constant_ init.orthogonal_
init.trunc_normal_ init.eye_ init.calculate_gain
data.Dataset data.DataLoader data.TensorDataset data.random_split data.Subset
data.ConcatDataset data.IterableDataset data.Sampler data.RandomSampler
data.SequentialSampler data.BatchSampler data.WeightedRandomSampler
data.default_collate data.get_worker_info
autograd.grad autograd.backward autograd.Function autograd.Variable
autograd.gradcheck autograd.gradgradcheck
""".split()


def _torch_surface(torch) -> dict:
    """Category -> sorted public names of PyTorch's surface (see the module docstring)."""
    import torch.nn.functional as TF

    def callables(obj, keep=lambda name, v: True):
        names = []
        for name in dir(obj):
            if name.startswith("_"):
                continue
            try:
                value = getattr(obj, name)
            except Exception:
                continue
            if callable(value) and not inspect.ismodule(value) and keep(name, value):
                names.append(name)
        return sorted(set(names))

    return {
        "torch functions": callables(torch, lambda n, v: not inspect.isclass(v)),
        "nn modules": callables(torch.nn, lambda n, v: inspect.isclass(v)
                                and issubclass(v, torch.nn.Module)),
        "nn.functional": callables(TF, lambda n, v: not inspect.isclass(v)
                                   and getattr(v, "__module__", "") is not None
                                   and str(getattr(v, "__module__", "")).startswith("torch")),
        "Tensor methods": callables(torch.Tensor),
        "optim": callables(torch.optim, lambda n, v: inspect.isclass(v)
                           and issubclass(v, torch.optim.Optimizer)),
        "linalg": callables(torch.linalg),
    }


def _duograph_objects() -> dict:
    return {"torch functions": dg, "nn modules": dg.nn, "nn.functional": dg.nn.functional,
            "Tensor methods": dg.Tensor, "optim": dg.optim, "linalg": dg.linalg}


_PREFIX = {"torch": dg, "nn": dg.nn, "F": dg.nn.functional, "Tensor": dg.Tensor,
           "optim": dg.optim, "lr_scheduler": dg.optim.lr_scheduler, "linalg": dg.linalg,
           "init": dg.nn.init, "data": dg.data, "autograd": dg.autograd}


def _has(qualified: str) -> bool:
    where, _, name = qualified.partition(".")
    return hasattr(_PREFIX[where], name)


def measure() -> dict:
    """The counts: per category ``(found, total, missing names)``, overall and the tutorial
    list."""
    try:
        import torch
    except ImportError:
        raise SystemExit("api_coverage: PyTorch is the reference; install it to count")
    surface = _torch_surface(torch)
    ours = _duograph_objects()
    result = {"torch_version": torch.__version__, "categories": {}}
    found_all = total_all = 0
    for category, names in surface.items():
        missing = [n for n in names if not hasattr(ours[category], n)]
        found = len(names) - len(missing)
        result["categories"][category] = {"found": found, "total": len(names),
                                          "missing": missing}
        found_all += found
        total_all += len(names)
    result["overall"] = {"found": found_all, "total": total_all}
    names = list(dict.fromkeys(TUTORIAL_NAMES))
    missing = [n for n in names if not _has(n)]
    result["tutorial"] = {"found": len(names) - len(missing), "total": len(names),
                          "missing": missing}
    return result


def _pct(d: dict) -> str:
    return f"{d['found']:4d} / {d['total']:4d}  {100.0 * d['found'] / d['total']:5.1f}%"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--missing", action="store_true", help="list the missing names")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    result = measure()
    print(f"duograph {dg.__version__} against PyTorch {result['torch_version']} "
          f"(hasattr only)")
    for category, d in result["categories"].items():
        print(f"  {category:16s} {_pct(d)}")
    print(f"  {'overall':16s} {_pct(result['overall'])}")
    print(f"  {'tutorial list':16s} {_pct(result['tutorial'])}")
    if args.missing:
        for category, d in list(result["categories"].items()) + [("tutorial list",
                                                                    result["tutorial"])]:
            print(f"\nmissing, {category}: {' '.join(d['missing'])}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
