"""The cuda backend's own code run on the CPU: ``CUDABackend(numpy)`` with its generated
ElementwiseKernels built by the host C++ compiler instead of NVRTC.

``HostKernel`` compiles a generated ``KernelSource`` (the very operation and preamble cupy
would compile) into a shared library and calls it over broadcast, flattened numpy arrays,
as ``cupy.ElementwiseKernel`` calls it over device arrays. Everything else is the backend's
real code: the fused compiler's split into prologue and region, output placement into the
planned runtime's buffers (``out=``, in place over an input), the generated single-op
kernels and the device softmax-cross-entropy. Training-step graphs at O2 through this backend
must give the CPU backend's results. What this cannot check is cupy itself (NVRTC, launch,
broadcasting of device arrays): that is ``test_gpu.py``'s job.
"""
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import duograph as dg
import duograph.nn as nn
from duograph.passes.memory import plan_memory
from duograph.runtime.cpu import cpu_backend
from duograph.runtime.cuda import CUDABackend, codegen
from duograph.runtime.cuda import fused as cuda_fused

CXX = shutil.which("g++") or shutil.which("clang++")
pytestmark = pytest.mark.skipif(CXX is None, reason="no host C++ compiler")

_CTYPES = {"float32": ctypes.c_float, "float64": ctypes.c_double, "bool": ctypes.c_bool}


class HostKernel:
    """A generated KernelSource compiled for the host, called like an ElementwiseKernel."""

    _tmp = tempfile.mkdtemp(prefix="dg_hostkernel_")

    def __init__(self, src: codegen.KernelSource):
        self.ins = [p.split()[0] for p in src.in_params.split(",")]
        self.outs = [p.split()[0] for p in src.out_params.split(",")]
        args = [f"const {codegen.C_TYPES[d]}* x{j}" for j, d in enumerate(self.ins)]
        args += [f"{codegen.C_TYPES[d]}* o{k}" for k, d in enumerate(self.outs)]
        call = [f"x{j}[i]" for j in range(len(self.ins))]
        call += [f"o{k}[i]" for k in range(len(self.outs))]
        code = (codegen.HOST_SHIM + src.preamble + "\n" + codegen.host_function(src)
                + f'extern "C" void run(long n, {", ".join(args)}) {{\n'
                + f"  for (long i = 0; i < n; ++i) {src.name}({', '.join(call)});\n}}\n")
        path = os.path.join(self._tmp, src.name)
        with open(path + ".cpp", "w") as f:
            f.write(code)
        res = subprocess.run([CXX, "-std=c++14", "-O1", "-shared", "-fPIC", "-o", path + ".so",
                              path + ".cpp"], capture_output=True, text=True)
        assert res.returncode == 0, res.stderr[:3000]
        self.lib = ctypes.CDLL(path + ".so")
        self.calls = 0

    def __call__(self, *arrays):
        self.calls += 1
        ins = [np.asarray(a) for a in arrays[:len(self.ins)]]
        given = list(arrays[len(self.ins):])
        full = np.broadcast_shapes(*[a.shape for a in ins]) if ins else ()
        if given:
            full = np.broadcast_shapes(full, *[o.shape for o in given])
        flat = [np.ascontiguousarray(np.broadcast_to(a.astype(d, copy=False), full))
                for a, d in zip(ins, self.ins)]
        outs = [np.empty(full, d) for d in self.outs]
        ptrs = [a.ctypes.data_as(ctypes.POINTER(_CTYPES[d])) for a, d in zip(flat, self.ins)]
        ptrs += [o.ctypes.data_as(ctypes.POINTER(_CTYPES[d])) for o, d in zip(outs, self.outs)]
        self.lib.run(ctypes.c_long(int(np.prod(full))), *ptrs)
        if given:
            for g, o in zip(given, outs):
                g[...] = o
            outs = given
        return outs[0] if len(outs) == 1 else tuple(outs)


@pytest.fixture
def host_backend(monkeypatch):
    """CUDABackend over numpy, its ElementwiseKernels compiled for the host."""
    made = {}

    def kernel(src):
        if src not in made:
            made[src] = HostKernel(src)
        return made[src]
    monkeypatch.setattr(cuda_fused, "elementwise_kernel", kernel)
    from duograph.runtime.cuda import kernels as cuda_kernels
    monkeypatch.setattr(cuda_kernels, "elementwise_kernel", kernel)
    backend = CUDABackend(np)
    backend.host_kernels = made
    return backend


def _step_graph(kind: str):
    dg.manual_seed(0)
    if kind == "mlp":
        model = nn.Sequential(nn.Linear(12, 16), nn.GELU(approximate="tanh"), nn.Linear(16, 16),
                              nn.Sigmoid(), nn.Linear(16, 4))
        x_shape = (6, 12)
    else:
        model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Flatten(), nn.Linear(4 * 4 * 4, 4))
        x_shape = (6, 1, 8, 8)
    opt = dg.optim.Adam(model.parameters(), lr=0.01)
    g = dg.Graph(f"{kind}_step")
    with g:
        x = dg.placeholder("x", x_shape)
        y = dg.placeholder("y", (6,), "int64")
        loss = nn.functional.cross_entropy(model(x), y)
        opt.minimize(loss)
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32),
             "y": rng.integers(0, 4, 6).astype(np.int64)}
    return g, loss, feeds, model


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
@pytest.mark.parametrize("planned", [False, True])
def test_training_steps_through_the_cuda_backend_equal_the_cpu(host_backend, kind, planned):
    """Three Adam steps at O2 (fused epilogues, fused optimizer updates) through the cuda
    backend's fused compiler and kernels: the CPU backend's losses and parameters."""
    results = {}
    for name, backend in (("cpu", cpu_backend), ("cuda", host_backend)):
        g, loss, feeds, model = _step_graph(kind)
        exe = g.compile(outputs=[loss], passes="O2", backend=backend, plan=planned)
        assert exe.planned == planned and exe.runner is backend
        losses = [float(exe(**feeds)[0]) for _ in range(3)]
        results[name] = (losses, [p.detach().numpy().copy() for p in model.parameters()])
    np.testing.assert_allclose(results["cuda"][0], results["cpu"][0], rtol=1e-5)
    for a, b in zip(results["cuda"][1], results["cpu"][1]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert host_backend.host_kernels, "no generated kernel ran"
    assert sum(k.calls for k in host_backend.host_kernels.values()) > 0


def test_fused_gelu_and_epilogue_run_one_generated_kernel_each(host_backend):
    g = dg.Graph("epi")
    with g:
        x = dg.placeholder("x", (5, 7))
        w = dg.placeholder("w", (7, 3))
        b = dg.placeholder("b", (3,))
        h = x @ w + b
        y = 0.5 * h * (1.0 + dg.tanh(0.7978845608028654 * (h + 0.044715 * h * h * h)))
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((5, 7)).astype(np.float32),
             "w": rng.standard_normal((7, 3)).astype(np.float32),
             "b": rng.standard_normal(3).astype(np.float32)}
    want = g.compile(outputs=[y])(**feeds)[0]
    opt = g.compile(outputs=[y], passes="O2")
    fused = [n for n in opt.nodes if n.op.name == "fused"]
    assert fused
    for planner in (None, plan_memory):
        exe = dg.compile_graph(opt.graph, opt.outputs, backend=host_backend, planner=planner)
        np.testing.assert_allclose(exe(**feeds)[0], want, rtol=1e-5, atol=1e-6)
    assert len(host_backend.host_kernels) >= len(fused)


def test_generated_single_op_kernels_and_fallbacks(host_backend):
    from duograph.graphlib.registry import REGISTRY
    x = np.linspace(-3, 3, 13).astype(np.float32)
    for name, attrs in (("gelu", {"approximate": "none"}), ("gelu", {"approximate": "tanh"}),
                        ("sigmoid", {}), ("logsigmoid", {}),
                        ("leaky_relu", {"negative_slope": 0.2})):
        op = REGISTRY[name]
        got = host_backend.kernel(op)(np, x, **attrs)
        np.testing.assert_allclose(got, op.kernel(np, x, **attrs), rtol=2e-6, atol=1e-7,
                                   err_msg=name)
    lerp = REGISTRY["lerp"]
    a, b, wt = x, x[::-1].copy(), np.float32(0.3) * np.ones_like(x)
    np.testing.assert_allclose(host_backend.kernel(lerp)(np, a, b, wt),
                               lerp.kernel(np, a, b, wt), rtol=1e-6)
    # float64 and float16: float64 is generated, float16 falls back to the reference
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(host_backend.kernel(REGISTRY["sigmoid"])(np, x64),
                               REGISTRY["sigmoid"].kernel(np, x64), rtol=1e-13)
    x16 = x.astype(np.float16)
    np.testing.assert_array_equal(host_backend.kernel(REGISTRY["sigmoid"])(np, x16),
                                  REGISTRY["sigmoid"].kernel(np, x16))


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_every_fused_body_of_an_adam_step_gets_a_kernel(kind):
    """Adam's float64 step counter mixes with float32 slots in one body: each node computes
    in its own dtype, so every fused body of the step has a generated kernel."""
    from duograph.runtime.cuda.fused import Layout
    g, loss, _, _ = _step_graph(kind)
    exe = g.compile(outputs=[loss], passes="O2")
    bodies = [n.attrs["sub"] for n in exe.nodes if n.op.name == "fused"]
    assert bodies
    missing = [b.body_text()[:120] for b in bodies if Layout(b.graph).source is None]
    assert not missing, missing


def test_cupy_maximum_minimum_at_is_numpys_exactly(monkeypatch):
    """The cuda backend's unbuffered maximum/minimum.at (runtime/backends.py; on a GPU,
    cupy's own rounded float64 to float32) run here over numpy standing in for cupy: equal
    to numpy's ufunc.at with repeated places, negative indices, broadcast index grids and
    NaNs."""
    import types

    from duograph.runtime.backends import _cupy_ufunc_at
    fake = types.ModuleType("cupy")
    for name in ("asarray", "zeros", "int64", "broadcast_to", "concatenate", "ones", "isnan",
                 "nan", "maximum", "minimum"):
        setattr(fake, name, getattr(np, name))
    fake.argsort = lambda a: np.argsort(a, kind="stable")      # cupy's sorts are stable
    monkeypatch.setitem(sys.modules, "cupy", fake)
    rng = np.random.default_rng(0)
    for trial in range(100):
        for name in ("maximum", "minimum"):
            target = rng.standard_normal((3, 4))
            index = (rng.integers(-3, 3, (5, 4)), np.arange(4)[None, :])
            values = rng.standard_normal((5, 4))
            if trial % 7 == 0:
                values[rng.integers(0, 5), rng.integers(0, 4)] = np.nan
            want = target.copy()
            getattr(np, name).at(want, index, values)
            assert _cupy_ufunc_at(name, target, index, values)
            np.testing.assert_array_equal(target, want, err_msg=f"{name}, trial {trial}")
    assert not _cupy_ufunc_at("multiply", target, index, values)


def test_contiguous_kernel_source_equals_the_elementwise_kernel(tmp_path):
    """``codegen.contiguous_source`` (the grid-stride RawKernel fused regions run as on
    C-contiguous arrays) compiled for the host, one block of one thread, gives the
    ElementwiseKernel's results for a fused region with a full input, a one-element input
    and two outputs."""
    if CXX is None:
        pytest.skip("no host C++ compiler")
    g = dg.Graph("two")
    with g:
        x = dg.placeholder("x", (50,), "float64")
        s = dg.placeholder("s", (), "float64")
        y = dg.tanh(x * s) + 1.0
        z = y * y - x
    exe = g.compile(outputs=[y, z], passes="O2")
    fused_nodes = [n for n in exe.graph.nodes if n.op.name == "fused"]
    assert len(fused_nodes) == 1
    body = fused_nodes[0].attrs["sub"]
    lay = cuda_fused.layout(body)
    outer = dict(zip(body.graph.inputs, fused_nodes[0].inputs))
    names = [outer[v].name for v in lay.region_inputs]
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal(50), "s": np.array(0.7)}
    ins = [feeds[n] for n in names]
    want = HostKernel(lay.source)(*ins)
    name, code = codegen.contiguous_source(lay.source, [a.shape != (50,) for a in ins])
    shim = ("#define __global__\n#define __restrict__\n"
            "struct dg_dim { unsigned int x; };\n"
            "static const dg_dim blockIdx = {0}, threadIdx = {0}, blockDim = {1}, "
            "gridDim = {1};\n")
    src = tmp_path / "k.cpp"
    src.write_text(codegen.HOST_SHIM + shim + code)
    lib = tmp_path / "k.so"
    res = subprocess.run([CXX, "-std=c++14", "-O1", "-shared", "-fPIC", "-o", str(lib),
                          str(src)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[:3000]
    fn = getattr(ctypes.CDLL(str(lib)), name)
    outs = [np.empty(50), np.empty(50)]
    dbl = ctypes.POINTER(ctypes.c_double)
    fn(*[np.ascontiguousarray(a).ctypes.data_as(dbl) for a in ins],
       *[o.ctypes.data_as(dbl) for o in outs], ctypes.c_longlong(50))
    for got, w in zip(outs, want):
        np.testing.assert_array_equal(got, w)
    np.testing.assert_allclose(outs[-1], (np.tanh(feeds["x"] * 0.7) + 1) ** 2 - feeds["x"])
