"""duograph.nn: modules, layers, losses and initialisers that work in both modes."""
from ..eager.tensors import Parameter
from . import functional, init, utils
from .layers import (AdaptiveAvgPool2d, AvgPool2d, BatchNorm1d, BatchNorm2d, BCELoss,
                     BCEWithLogitsLoss, Conv2d, CrossEntropyLoss, Dropout, Embedding, Flatten,
                     GELU, Identity, KLDivLoss, L1Loss, LayerNorm, LeakyReLU, Linear,
                     LogSigmoid, LogSoftmax, MaxPool2d, ModuleDict, ModuleList, MSELoss,
                     MultiheadAttention, NLLLoss, ReLU, Sequential, Sigmoid, Softmax, Tanh,
                     TransformerBlock)
from .layers import (CELU, ELU, GLU, SELU, Hardsigmoid, Hardswish, Hardtanh, Mish,  # noqa
                     PReLU, ReLU6, SiLU, Softmin, Softsign, Tanhshrink, Threshold)
from .module import Module, StateDictError
from .misc_layers import (Bilinear, EmbeddingBag, GroupNorm, InstanceNorm1d,  # noqa: E402
                          InstanceNorm2d, InstanceNorm3d, Unflatten)
from .transformer import (Transformer, TransformerDecoder,  # noqa: E402
                          TransformerDecoderLayer, TransformerEncoder,
                          TransformerEncoderLayer)
from .conv_layers import *  # noqa: F401,F403,E402
from . import conv_layers as _conv_layers  # noqa: E402
from .rnn import GRU, LSTM, RNN, RNNBase  # noqa: E402

__all__ = [
    "Module", "Parameter", "StateDictError", "Sequential", "ModuleList", "ModuleDict",
    "Identity", "Linear", "Conv2d", "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d",
    "BatchNorm1d", "BatchNorm2d", "LayerNorm", "Dropout", "Embedding", "Flatten", "ReLU",
    "LeakyReLU", "GELU", "Sigmoid", "LogSigmoid", "Tanh", "Softmax", "LogSoftmax",
    "MultiheadAttention",
    "SiLU", "Mish", "ELU", "SELU", "CELU", "Hardtanh", "ReLU6", "Hardsigmoid", "Hardswish",
    "Softsign", "Tanhshrink", "Threshold", "GLU", "Softmin", "PReLU",
    "TransformerBlock", "MSELoss", "L1Loss", "CrossEntropyLoss", "NLLLoss", "BCELoss",
    "BCEWithLogitsLoss", "KLDivLoss", "functional", "init", "utils",
    "TransformerEncoderLayer", "TransformerEncoder", "TransformerDecoderLayer",
    "TransformerDecoder", "Transformer", "GroupNorm", "InstanceNorm1d", "InstanceNorm2d",
    "InstanceNorm3d", "EmbeddingBag", "Bilinear", "Unflatten",
    "RNNBase", "RNN", "LSTM", "GRU",
] + list(_conv_layers.__all__)
from . import parallel  # noqa: E402,F401  (DistributedDataParallel)
from .sync_batchnorm import SyncBatchNorm  # noqa: E402,F401  (uses duograph.distributed)

__all__.append("SyncBatchNorm")
from .param_containers import ParameterDict, ParameterList  # noqa: E402

__all__ += ["ParameterList", "ParameterDict"]
from .cells import GRUCell, LSTMCell, RNNCell, RNNCellBase  # noqa: E402
from .simple_layers import (CosineSimilarity, Dropout1d, Dropout2d, Dropout3d,  # noqa: E402
                            HuberLoss, PairwiseDistance, RMSNorm, SmoothL1Loss, Softplus)
from .simple_layers import (AlphaDropout, BatchNorm3d, ChannelShuffle,  # noqa: E402
                            CosineEmbeddingLoss, GaussianNLLLoss, Hardshrink,
                            HingeEmbeddingLoss, LocalResponseNorm, MarginRankingLoss,
                            PoissonNLLLoss, SoftMarginLoss, Softshrink, TripletMarginLoss)
from .compiled import OptimizedModule  # noqa: E402,F401  (what dg.compile(module) returns)

__all__ += ["RNNCellBase", "RNNCell", "LSTMCell", "GRUCell", "SmoothL1Loss", "HuberLoss",
            "CosineSimilarity", "PairwiseDistance", "RMSNorm", "Dropout1d", "Dropout2d",
            "Dropout3d", "Softplus", "BatchNorm3d", "AlphaDropout", "MarginRankingLoss",
            "CosineEmbeddingLoss", "HingeEmbeddingLoss", "SoftMarginLoss", "TripletMarginLoss",
            "PoissonNLLLoss", "GaussianNLLLoss", "Hardshrink", "Softshrink",
            "LocalResponseNorm", "ChannelShuffle"]
