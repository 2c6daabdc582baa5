"""duograph: one IR for define-then-run graphs and define-by-run eager tensors.

    import duograph as dg
    g = dg.Graph("mlp")
    with g:
        x = dg.placeholder("x", shape=("N", 4))
        w = dg.placeholder("w", shape=(4, 3))
        loss = dg.mean(dg.relu(x @ w) ** 2)
        gw, = dg.grad(loss, [w])
    exe = g.compile(outputs=[loss, gw])
    loss_v, gw_v = exe(x=x_np, w=w_np)
"""
from . import graphlib, passes, runtime  # noqa: F401
from .graphlib import dtypes  # noqa: F401
from .graphlib.autodiff import grad
from .graphlib.config import config
from .graphlib.builder import assign, placeholder, variable
from .graphlib.errors import (DimError, DTypeError, DuographError, FeedError, GraphError,
                              IndexBoundsError, KernelError, ShapeError,
                              UnsupportedDTypeError)
from .graphlib.functional import *  # noqa: F401,F403
from .graphlib.functional import max, min, pow, sum, abs  # noqa: F401  (shadow builtins here)
from .graphlib.ir import Graph, Node, Value
from .graphlib.ops.control import cond, fori_loop, scan, while_loop
from .graphlib.source import set_capture_source
from .graphlib.types import TensorType
from .runtime import Executable, compile_graph
from . import eager  # noqa: E402  (after the graph API: eager builds on it)
from .eager.device import set_backend_provider as _set_backend_provider  # noqa: E402
from .runtime.backends import backend_for_device as _backend_for_device  # noqa: E402

# eager dispatch gets its kernels from the runtime's backends through this documented hook
# (eager never imports the runtime)
_set_backend_provider(_backend_for_device)
from .eager import compile  # noqa: F401
from .eager import (Tensor, arange, as_tensor, empty, empty_like, enable_grad, eye,  # noqa
                    from_numpy, full, full_like, is_grad_enabled, linspace, manual_seed,
                    no_grad, ones, ones_like, rand, rand_like, randint, randint_like, randn,
                    randn_like, record, set_grad_enabled, tensor, zeros, zeros_like)

from .eager import from_dlpack  # noqa: E402,F401
from .compiler import compile as _compile_with_passes  # noqa: E402

graphlib.set_compiler(_compile_with_passes)

float16, float32, float64 = "float16", "float32", "float64"
bfloat16, int8, int16 = "bfloat16", "int8", "int16"
complex64, complex128 = cfloat, cdouble = "complex64", "complex128"
int32, int64, uint8 = "int32", "int64", "uint8"
bool_ = "bool"
uint16, uint32, uint64 = "uint16", "uint32", "uint64"
float8_e4m3fn, float8_e5m2, float8_e8m0fnu = "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu"
float8_e4m3fnuz, float8_e5m2fnuz = "float8_e4m3fnuz", "float8_e5m2fnuz"
int4, uint4, int2, uint2 = "int4", "uint4", "int2", "uint2"

__version__ = "0.1.0"
from . import nn, optim  # noqa: E402
from .nn.compiled import compile  # noqa: E402,F811  (a module compiles to a module)
from . import data, io  # noqa: E402
from . import distributed  # noqa: E402,F401  (imports no MPI until init_process_group)
from . import onnx  # noqa: E402
from .io import save, load  # noqa: E402
from .graphlib.serialize import GraphFormatError, load_graph, save_graph  # noqa: E402
from . import models  # noqa: E402
from .comparison import Comparison, compare  # noqa: E402

# PyTorch's names for the same things (dtype aliases, device objects, dg.cuda, Variable)
from .compat import bool, cuda, device, double, float, half, int, long, short  # noqa: E402,A004
from .eager.grad_mode import inference_mode  # noqa: E402
from .eager.legacy import (BFloat16Tensor, BoolTensor, ByteTensor, CharTensor,  # noqa: E402
                           DoubleTensor, FloatTensor, HalfTensor, IntTensor, LongTensor,
                           ShortTensor)
from . import compat, utils  # noqa: E402  (dg.utils.data is duograph.data)
from . import linalg  # noqa: E402
from . import fft  # noqa: E402
from . import autograd  # noqa: E402  (the package: torch.autograd's names)

# The public names, explicitly: the op functions (graphlib.functional.__all__) and these.
__all__ = list(graphlib.functional.__all__) + [
    # modules
    "autograd", "data", "dtypes", "io", "nn", "onnx", "optim", "passes", "runtime",
    # the IR and graph mode
    "Graph", "Node", "Value", "TensorType", "Executable", "compile_graph", "placeholder",
    "variable", "assign", "grad", "set_capture_source",
    # errors
    "DuographError", "DTypeError", "FeedError", "GraphError", "KernelError", "ShapeError",
    # eager
    "Tensor", "tensor", "as_tensor", "from_numpy", "empty", "empty_like", "eye", "full",
    "full_like", "ones", "ones_like", "zeros", "zeros_like", "arange", "linspace", "rand",
    "rand_like", "randn", "randn_like", "randint", "randint_like", "manual_seed", "no_grad",
    "enable_grad", "set_grad_enabled", "is_grad_enabled", "record", "compile",
    # checkpoints and graph files
    "save", "load", "save_graph", "load_graph", "GraphFormatError",
    # comparing the paradigms
    "compare", "Comparison", "models",
    # dtype names
    "float16", "float32", "float64", "int32", "int64", "uint8", "bool_", "bfloat16", "int8",
    "int16", "short", "complex64", "complex128", "cfloat", "cdouble", "uint16", "uint32",
    "uint64", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "float8_e4m3fnuz",
    "float8_e5m2fnuz", "int4", "uint4", "int2", "uint2",
    # PyTorch's aliases
    "long", "int", "float", "double", "half", "bool", "device", "cuda", "utils",
    "inference_mode",
    "DimError", "IndexBoundsError", "UnsupportedDTypeError",
    # PyTorch's legacy typed constructors
    "FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor", "ByteTensor", "CharTensor",
    "ShortTensor", "IntTensor", "LongTensor", "BoolTensor",
    # torch.linalg's names
    "linalg", "fft",
    # control flow (ops with regions)
    "cond", "scan", "while_loop", "fori_loop",
    # DLPack interop
    "from_dlpack",
]
from . import amp  # noqa: E402
from .amp import autocast, get_autocast_dtype, is_autocast_enabled  # noqa: E402
__all__ += ["amp", "autocast", "is_autocast_enabled", "get_autocast_dtype"]
__all__ = list(dict.fromkeys(__all__))

# duograph.func (torch.func); torch.autograd.functional is duograph.autograd.functional
from . import func  # noqa: E402
from .autograd import functional as _autograd_functional  # noqa: E402,F401
__all__.append("func")
from . import pictures  # noqa: E402,F401  (render() without Graphviz; view() in Netron)
# PyTorch's module-level in-place functions (dg.sqrt_, F.relu_...)
import sys as _sys  # noqa: E402
from . import inplace_functions as _inplace_functions  # noqa: E402
_inplace_functions.install(_sys.modules[__name__], nn.functional)
__all__ += list(_inplace_functions.FUNCTIONS) + list(_inplace_functions.MODULE_LEVEL_ACTIVATIONS)

# PyTorch's process settings, type tests and eager-only counting
from .settings import (get_default_dtype, get_num_threads, get_rng_state,  # noqa: E402
                       is_floating_point, is_tensor, seed, set_default_dtype,
                       set_num_threads, set_printoptions, set_rng_state)
from .settings import finfo, iinfo  # noqa: E402
from .counting import bincount  # noqa: E402
__all__ += ["finfo", "iinfo"]
__all__ += ["get_default_dtype", "set_default_dtype", "get_num_threads", "set_num_threads",
            "is_tensor", "is_floating_point", "bincount", "seed", "get_rng_state",
            "set_rng_state", "set_printoptions"]
# torch's top-level linear-algebra names (torch.det, torch.cholesky_solve, torch.svd...)
from . import linalg_names as _linalg_names  # noqa: E402
_linalg_names.install(_sys.modules[__name__])
__all__ += list(_linalg_names.FUNCTIONS)
# torch's float constants (torch.nan, torch.inf, torch.pi, torch.e)
import math as _math  # noqa: E402
nan, inf, pi, e = _math.nan, _math.inf, _math.pi, _math.e
__all__ += ["nan", "inf", "pi", "e"]
from .settings import (is_complex, is_conj, is_neg, is_nonzero, is_same_size,  # noqa: E402
                       resolve_conj, resolve_neg)
__all__ += ["is_complex", "is_conj", "is_neg", "is_nonzero", "is_same_size", "resolve_conj",
            "resolve_neg"]
