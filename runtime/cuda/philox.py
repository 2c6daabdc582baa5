"""Random ops on the device that a CUDA graph can capture: counter-based Philox4x32-10.

The ops' reference kernels seed a generator on the host from the seed operand
(``graphlib.xp.rng``: the seed is read back from the device), so a step with dropout or
noise could never be captured. Here each element is a pure function of (seed, stream,
element index), as JAX's threefry and PyTorch's CUDA Philox are: the seed stays a device
scalar that the kernel reads, the graph replays with whatever seed the step's feed holds, and
the same (seed, stream) gives the same numbers in every run, captured or not.

- bits: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11;
  the Random123 constants) on counter (index, 0, 0) and a 64-bit key mixed from the seed and
  the op's ``stream`` attribute by SplitMix64. ``philox4x32`` is the same function in numpy,
  which the tests compare with the C code compiled for the host and with the published
  known-answer vector.
- ``uniform``: 24 random bits for float32 (float16 is drawn in float32), 53 for float64, in
  [0, 1), scaled to [low, high) in the output's precision and kept below ``high`` as the
  reference kernel keeps it. ``normal``: Box-Muller on two uniforms. ``bernoulli``:
  ``u < p`` with u in p's precision. ``randint``: low + (64 random bits mod the range).

The numbers differ from the CPU's (numpy's PCG64) for the same seed, as cupy's generator
already did: a seed fixes a stream of numbers per device, as in PyTorch.
"""
from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

from .codegen import KernelSource
from .fused import elementwise_kernel

# Random123's Philox4x32 constants
M0, M1 = 0xD2511F53, 0xCD9E8D57
W0, W1 = 0x9E3779B9, 0xBB67AE85
ROUNDS = 10

PREAMBLE = r"""
#ifndef DG_PHILOX
#define DG_PHILOX
#ifndef DG_DEVICE
#define DG_DEVICE __device__ __forceinline__
#endif
#ifdef __CUDACC_RTC__
DG_DEVICE unsigned int dg_umulhi(unsigned int a, unsigned int b) { return __umulhi(a, b); }
#else
DG_DEVICE unsigned int dg_umulhi(unsigned int a, unsigned int b) {
  return (unsigned int)(((unsigned long long)a * b) >> 32);
}
#endif
struct dg_bits { unsigned int x, y, z, w; };
DG_DEVICE unsigned long long dg_splitmix64(unsigned long long z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
DG_DEVICE dg_bits dg_philox(unsigned long long counter, unsigned long long key) {
  unsigned int c0 = (unsigned int)counter, c1 = (unsigned int)(counter >> 32), c2 = 0u, c3 = 0u;
  unsigned int k0 = (unsigned int)key, k1 = (unsigned int)(key >> 32);
  for (int r = 0; r < 10; ++r) {
    if (r) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
    const unsigned int hi0 = dg_umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    const unsigned int hi1 = dg_umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    c0 = hi1 ^ c1 ^ k0; c1 = lo1; c2 = hi0 ^ c3 ^ k1; c3 = lo0;
  }
  dg_bits out = {c0, c1, c2, c3};
  return out;
}
/* the bits of element i of the stream (seed, stream) */
DG_DEVICE dg_bits dg_random_bits(long long seed, unsigned long long stream,
                                 unsigned long long i) {
  return dg_philox(i, dg_splitmix64((unsigned long long)seed ^ dg_splitmix64(stream)));
}
/* uniforms in [0, 1): 24 bits as a float, 53 bits as a double */
DG_DEVICE float dg_unit_f(unsigned int a) { return (float)(a >> 8) * (1.0f / 16777216.0f); }
DG_DEVICE double dg_unit_d(unsigned int a, unsigned int b) {
  return ((double)(a >> 5) * 67108864.0 + (double)(b >> 6)) * (1.0 / 9007199254740992.0);
}
#endif
"""


def key(seed: int, stream: int) -> Tuple[int, int]:
    """The Philox key (k0, k1) of (seed, stream), as ``dg_random_bits`` mixes it."""
    mask = (1 << 64) - 1

    def splitmix(z):
        z = (z + 0x9E3779B97F4A7C15) & mask
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        return z ^ (z >> 31)
    k = splitmix((seed & mask) ^ splitmix(stream & mask))
    return k & 0xFFFFFFFF, k >> 32


def philox4x32(counter: np.ndarray, k: Tuple[int, int]) -> np.ndarray:
    """Philox4x32-10 in numpy: ``counter`` (4, n) uint32 words, key (k0, k1) -> (4, n)
    uint32. The reference the C code is tested against."""
    c = [np.asarray(w, np.uint64) for w in counter]
    k0, k1 = np.uint64(k[0]), np.uint64(k[1])
    low = np.uint64(0xFFFFFFFF)
    for r in range(ROUNDS):
        if r:
            k0, k1 = (k0 + np.uint64(W0)) & low, (k1 + np.uint64(W1)) & low
        p0, p1 = np.uint64(M0) * c[0], np.uint64(M1) * c[2]
        c = [((p1 >> np.uint64(32)) ^ c[1] ^ k0) & low, p1 & low,
             ((p0 >> np.uint64(32)) ^ c[3] ^ k1) & low, p0 & low]
    return np.stack(c).astype(np.uint32)


# -- the operations: one ElementwiseKernel each, over the output (or p) --------------------------
# ``seed`` is a raw int64 device scalar (read as seed[0]), ``i`` the element's index.
_BITS = "const dg_bits b = dg_random_bits(seed[0], {stream}ull, (unsigned long long)i);\n"


def _unit(dtype: str) -> Tuple[str, str]:
    """(compute C type, expression of a uniform in [0, 1) from the bits ``b``)."""
    if dtype == "float64":
        return "double", "dg_unit_d(b.x, b.y)"
    return "float", "dg_unit_f(b.x)"


def _literal(value: float, ctype: str) -> str:
    return repr(float(value)) + ("f" if ctype == "float" else "")


def uniform_operation(dtype: str, low: float, high: float, stream: int) -> str:
    ctype, unit = _unit(dtype)
    lo, hi = np.asarray(low, dtype), np.asarray(high, dtype)
    top = float(np.nextafter(hi, lo))           # the largest value below high, in dtype
    value = (f"const {ctype} r = {unit} * ({_literal(high - low, ctype)}) + "
             f"{_literal(low, ctype)};\n")
    if dtype == "float16":      # round to half first, then keep below high (exact in float)
        value += "const float h = (float)(float16)r;\n"
        return (_BITS.format(stream=stream) + value +
                f"out = (float16)(h > {_literal(top, 'float')} ? "
                f"{_literal(top, 'float')} : h);")
    return (_BITS.format(stream=stream) + value +
            f"out = r > {_literal(top, ctype)} ? ({ctype}){_literal(top, ctype)} : r;")


def normal_operation(dtype: str, mean: float, std: float, stream: int) -> str:
    if dtype == "float64":
        u1, u2, ctype = "1.0 - dg_unit_d(b.x, b.y)", "dg_unit_d(b.z, b.w)", "double"
        z = "sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2)"
    else:
        u1, u2, ctype = "1.0f - dg_unit_f(b.x)", "dg_unit_f(b.y)", "float"
        z = "sqrtf(-2.0f * logf(u1)) * cosf(6.2831855f * u2)"
    cast = "(float16)" if dtype == "float16" else ""
    return (_BITS.format(stream=stream) + f"const {ctype} u1 = {u1};\n"
            f"const {ctype} u2 = {u2};\n"
            f"out = {cast}({z} * {_literal(std, ctype)} + {_literal(mean, ctype)});")


def bernoulli_operation(dtype: str, stream: int) -> str:
    ctype, unit = _unit(dtype)
    cast = "(float16)" if dtype == "float16" else f"({ctype})"
    return (_BITS.format(stream=stream) +
            f"out = {unit} < ({ctype})p ? {cast}1 : {cast}0;")


def randint_operation(dtype: str, low: int, high: int, stream: int) -> str:
    span = int(high) - int(low)
    return (_BITS.format(stream=stream) +
            "const unsigned long long r = ((unsigned long long)b.x << 32) | b.y;\n"
            f"out = ({_C_INT[dtype]})({int(low)}LL + (long long)(r % {span}ull));")


_C_INT = {"int8": "signed char", "int16": "short", "int32": "int", "int64": "long long",
          "uint8": "unsigned char", "bool": "bool"}
_FLOATS = ("float16", "float32", "float64")


def _source(name: str, in_params: str, out_dtype: str, operation: str) -> KernelSource:
    return KernelSource(in_params, f"{out_dtype} out", operation, name, PREAMBLE)


_sources: Dict[tuple, KernelSource] = {}


def _kernel(key_: tuple, make):
    src = _sources.get(key_)
    if src is None:
        src = _sources[key_] = make()
    return elementwise_kernel(src)


def _device_seed(xp, seed):
    """The seed as a device int64 scalar (a device array is used as it is: no copy)."""
    if isinstance(seed, xp.ndarray) and seed.dtype == np.int64:
        return seed.reshape(())
    return xp.asarray(np.asarray(seed.get() if hasattr(seed, "get") else seed,
                                 np.int64).reshape(()))


def uniform_kernel(xp, seed, shape, low, high, dtype, stream):
    stream = int(stream or 0)
    k = _kernel(("uniform", dtype, float(low), float(high), stream), lambda: _source(
        "dg_uniform", "raw int64 seed", dtype, uniform_operation(dtype, low, high, stream)))
    return k(_device_seed(xp, seed), xp.empty(tuple(shape), dtype))


def normal_kernel(xp, seed, shape, mean, std, dtype, stream):
    stream = int(stream or 0)
    k = _kernel(("normal", dtype, float(mean), float(std), stream), lambda: _source(
        "dg_normal", "raw int64 seed", dtype, normal_operation(dtype, mean, std, stream)))
    return k(_device_seed(xp, seed), xp.empty(tuple(shape), dtype))


def bernoulli_kernel(xp, p, seed, stream):
    stream = int(stream or 0)
    dtype = p.dtype.name
    k = _kernel(("bernoulli", dtype, stream), lambda: _source(
        "dg_bernoulli", f"{dtype} p, raw int64 seed", dtype,
        bernoulli_operation(dtype, stream)))
    return k(p, _device_seed(xp, seed), xp.empty(p.shape, dtype))


def randint_kernel(xp, seed, shape, low, high, dtype, stream):
    stream = int(stream or 0)
    k = _kernel(("randint", dtype, int(low), int(high), stream), lambda: _source(
        "dg_randint", "raw int64 seed", dtype, randint_operation(dtype, low, high, stream)))
    return k(_device_seed(xp, seed), xp.empty(tuple(shape), dtype))


def table(get_op) -> dict:
    """op -> device kernel for the four random ops (float dtypes for the float ones, the
    integer dtypes ``_C_INT`` names for randint; the reference kernel otherwise)."""
    def guard(op, kernel, ok):
        reference = op.kernel

        def run(xp, *args, **attrs):
            return kernel(xp, *args, **attrs) if ok(args, attrs) else \
                reference(xp, *args, **attrs)
        run.__name__ = f"cuda_{op.name}"
        run.reference = reference
        return run
    def floats(args, attrs):
        return attrs["dtype"] in _FLOATS
    return {
        get_op("uniform"): guard(get_op("uniform"), uniform_kernel, floats),
        get_op("normal"): guard(get_op("normal"), normal_kernel, floats),
        get_op("bernoulli"): guard(get_op("bernoulli"), bernoulli_kernel,
                                   lambda args, attrs: args[0].dtype.name in _FLOATS),
        get_op("randint"): guard(get_op("randint"), randint_kernel,
                                 lambda args, attrs: attrs["dtype"] in _C_INT and
                                 attrs["dtype"] != "bool" and
                                 0 < attrs["high"] - attrs["low"] < 2 ** 63),
    }
