"""The ONNX import handlers, one module per op family as ``graphlib/ops`` is laid out;
importing this module fills ``_import.HANDLERS`` (``_import`` itself imports none of them,
so no module of the package imports another in a circle).

    _elementwise_import   unary, binary, comparisons, logic, bitwise, casts, Where, Clip
    _shape_import         constants, shapes and creation, Reshape ... Pad, windows
    _indexing_import      Gather*, Scatter* (with reductions), NonZero, Unique
    _reduce_import        Reduce*, ArgMax/ArgMin, CumSum, CumProd, TopK
    _nn_import            MatMul, Gemm, Einsum, normalizations, softmax, losses, Attention...
    _conv_import          Conv, ConvTranspose, the pools (1-D to 3-D), Resize, Upsample
    _recurrent_import     RNN, GRU, LSTM
    _control_import       If, Loop, Scan
"""
from . import _elementwise_import  # noqa: F401
from . import _shape_import  # noqa: F401
from . import _indexing_import  # noqa: F401
from . import _reduce_import  # noqa: F401
from . import _nn_import  # noqa: F401
from . import _conv_import  # noqa: F401
from . import _recurrent_import  # noqa: F401
from . import _control_import  # noqa: F401
