"""The device random ops' generator (runtime/cuda/philox.py) on the CPU: the numpy Philox
against the published known-answer vector, and the very C code cupy compiles (the preamble
and each op's operation) built by the host C++ compiler against the numpy reference,
bit for bit for the bits and within rounding for the values; the distributions' moments.
On a GPU, tests/test_gpu.py runs the kernels themselves and captures them in a CUDA graph."""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile

import numpy as np
import pytest

from duograph.runtime.cuda import philox
from duograph.runtime.cuda.codegen import HOST_SHIM

CXX = shutil.which("g++") or shutil.which("clang++")


def test_numpy_philox_gives_the_published_known_answer():
    """Random123's kat_vectors: philox4x32-10, counter 0 and key 0."""
    got = philox.philox4x32(np.zeros((4, 1), np.uint32), (0, 0))[:, 0]
    assert [f"{int(w):08x}" for w in got] == ["6627e8d5", "e169c58d", "bc57ac4c", "9b00dbd8"]


_CTYPES = {"float32": ctypes.c_float, "float64": ctypes.c_double,
           "int64": ctypes.c_longlong, "int32": ctypes.c_int, "uint8": ctypes.c_ubyte}
_CNAMES = {"float32": "float", "float64": "double", "int64": "long long", "int32": "int",
           "uint8": "unsigned char"}


def _host(operations: dict) -> ctypes.CDLL:
    """The preamble and ``name -> (dtype, operation)`` compiled for the host, each as
    ``name(n, seed, p, out)`` looping over the elements as the ElementwiseKernel does."""
    code = [HOST_SHIM, philox.PREAMBLE,
            'extern "C" void bits(long n, long long seed, unsigned long long stream, '
            "unsigned int* out) {\n  for (long i = 0; i < n; ++i) {\n"
            "    dg_bits b = dg_random_bits(seed, stream, (unsigned long long)i);\n"
            "    out[4*i] = b.x; out[4*i+1] = b.y; out[4*i+2] = b.z; out[4*i+3] = b.w;\n"
            "  }\n}\n"]
    for name, (dtype, op) in operations.items():
        t = _CNAMES[dtype]
        code.append(f'extern "C" void {name}(long n, const long long* seed, const {t}* pin, '
                    f"{t}* outp) {{\n  for (long i = 0; i < n; ++i) {{\n"
                    f"    {t}& out = outp[i]; const {t} p = pin ? pin[i] : ({t})0; (void)p;\n"
                    f"    {op}\n  }}\n}}\n")
    tmp = tempfile.mkdtemp(prefix="dg_philox_")
    src, lib = os.path.join(tmp, "p.cpp"), os.path.join(tmp, "p.so")
    with open(src, "w") as f:
        f.write("".join(code))
    res = subprocess.run([CXX, "-std=c++14", "-O1", "-ffp-contract=off", "-shared", "-fPIC",
                          "-o", lib, src], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[:3000]
    return ctypes.CDLL(lib)


def _call(lib, name, dtype, n, seed, p=None):
    out = np.empty(n, dtype)
    ptr = ctypes.POINTER(_CTYPES[dtype])
    s = np.array([seed], np.int64)
    getattr(lib, name)(ctypes.c_long(n), s.ctypes.data_as(ctypes.POINTER(ctypes.c_longlong)),
                       None if p is None else p.ctypes.data_as(ptr), out.ctypes.data_as(ptr))
    return out


def _reference_bits(seed, stream, n):
    i = np.arange(n, dtype=np.uint64)
    counter = np.stack([i & np.uint64(0xFFFFFFFF), i >> np.uint64(32),
                        np.zeros(n, np.uint64), np.zeros(n, np.uint64)]).astype(np.uint32)
    return philox.philox4x32(counter, philox.key(seed, stream))


@pytest.mark.skipif(CXX is None, reason="no host C++ compiler")
def test_the_c_generator_and_ops_equal_the_numpy_reference():
    n = 4096
    lib = _host({
        "u32": ("float32", philox.uniform_operation("float32", -2.0, 3.0, 7)),
        "u64": ("float64", philox.uniform_operation("float64", -2.0, 3.0, 7)),
        "n32": ("float32", philox.normal_operation("float32", 1.5, 2.0, 3)),
        "n64": ("float64", philox.normal_operation("float64", 1.5, 2.0, 3)),
        "b64": ("float64", philox.bernoulli_operation("float64", 0)),
        "ri": ("int64", philox.randint_operation("int64", -5, 9, 2)),
        "ru8": ("uint8", philox.randint_operation("uint8", 0, 255, 2)),
        "unit": ("float32", philox.uniform_operation("float32", 0.0, 1.0, 0))})
    for seed, stream in ((0, 0), (123456789, 7), (-1, 3), (2 ** 62 + 5, 2)):
        words = np.empty(4 * n, np.uint32)
        lib.bits(ctypes.c_long(n), ctypes.c_longlong(seed), ctypes.c_ulonglong(stream),
                 words.ctypes.data_as(ctypes.POINTER(ctypes.c_uint)))
        np.testing.assert_array_equal(words.reshape(n, 4).T, _reference_bits(seed, stream, n))
    seed = 42
    b = _reference_bits(seed, 7, n).astype(np.float64)
    u32 = np.float32((b[0].astype(np.uint32) >> 8) * 2.0 ** -24)
    np.testing.assert_allclose(_call(lib, "u32", "float32", n, seed),
                               (u32 * np.float32(5.0) + np.float32(-2.0)).astype(np.float32),
                               rtol=1e-6, atol=1e-6)
    u64 = ((b[0].astype(np.uint64) >> 5) * 2.0 ** 26 + (b[1].astype(np.uint64) >> 6)) \
        * 2.0 ** -53
    np.testing.assert_allclose(_call(lib, "u64", "float64", n, seed), u64 * 5.0 - 2.0,
                               rtol=1e-15, atol=1e-15)
    b = _reference_bits(seed, 3, n).astype(np.uint64)
    u1 = 1.0 - ((b[0] >> 5) * 2.0 ** 26 + (b[1] >> 6)) * 2.0 ** -53
    u2 = ((b[2] >> 5) * 2.0 ** 26 + (b[3] >> 6)) * 2.0 ** -53
    want = np.sqrt(-2 * np.log(u1)) * np.cos(2 * np.pi * u2) * 2.0 + 1.5
    np.testing.assert_allclose(_call(lib, "n64", "float64", n, seed), want, rtol=1e-12,
                               atol=1e-12)
    b = _reference_bits(seed, 2, n).astype(np.uint64)
    r = (b[0] << np.uint64(32)) | b[1]
    np.testing.assert_array_equal(_call(lib, "ri", "int64", n, seed),
                                  (r % np.uint64(14)).astype(np.int64) - 5)
    # the moments, and the ranges each op promises
    big = 200_000
    u = _call(lib, "unit", "float32", big, 9)
    assert u.min() >= 0.0 and u.max() < 1.0 and abs(u.mean() - 0.5) < 0.005
    assert abs(u.var() - 1 / 12) < 0.002
    z = _call(lib, "n32", "float32", big, 9)
    assert abs(z.mean() - 1.5) < 0.02 and abs(z.std() - 2.0) < 0.02
    p = np.linspace(0, 1, big)
    hits = _call(lib, "b64", "float64", big, 9, p)
    assert set(np.unique(hits)) <= {0.0, 1.0} and abs(hits.mean() - 0.5) < 0.005
    assert hits[p == 0.0].sum() == 0 and hits[p == 1.0].all()
    ints = _call(lib, "ri", "int64", big, 9)
    assert ints.min() == -5 and ints.max() == 8
    counts = np.bincount(_call(lib, "ru8", "uint8", big, 9), minlength=256)
    assert counts[255] == 0 and counts[:255].min() > 0.8 * big / 255
    # other seeds and streams give other numbers; the same give the same
    assert not np.array_equal(_call(lib, "unit", "float32", 64, 1),
                              _call(lib, "unit", "float32", 64, 2))
    np.testing.assert_array_equal(_call(lib, "unit", "float32", 64, 1),
                                  _call(lib, "unit", "float32", 64, 1))


def test_uniform_stays_below_high_where_rounding_reaches_it():
    """float32 rounding of u * (high - low) + low can reach high: the operation keeps the
    value at the float just below it, as the reference kernel does."""
    op = philox.uniform_operation("float32", 0.0, 1.0, 0)
    top = np.nextafter(np.float32(1.0), np.float32(0.0))
    assert repr(float(top)) in op
    assert "float16" in philox.uniform_operation("float16", 0.0, 1.0, 0)
