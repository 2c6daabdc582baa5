"""The CPU backend's switches, registered into ``dg.config`` under its name: ``dg.config.cpu``.

Each is also reachable by its documented short name (``dg.config.numba`` is
``dg.config.cpu.numba``) and seeded by its environment variable when duograph is imported.
Every CPU module reads ``options.<name>`` when it decides (never a copy made at import).

=====================  =========================  ========  =====================================
option                 environment variable       default   meaning
=====================  =========================  ========  =====================================
cpu.fused_strategy     DUOGRAPH_FUSED             auto      how fused regions run: auto
                                                            (measured: numba where faster, else
                                                            numpy chunks), numpy, numba, ops
                                                            (op by op, the reference)
cpu.fused_threads      DUOGRAPH_FUSED_THREADS     1         threads splitting one large chunked
                                                            fused kernel
cpu.numba              DUOGRAPH_NUMBA             True      use numba kernels where installed
                                                            (fused regions, conv, pooling, batch
                                                            norm); False: numpy kernels only
cpu.numba_parallel     DUOGRAPH_NUMBA_PARALLEL    False     generated numba loops use prange
                                                            threads
cpu.numba_small_after  DUOGRAPH_NUMBA_SMALL      16        a small fused region (4 ops or more)
                                                            of a planned (O2) program: at its
                                                            N-th call a numba kernel for it is
                                                            compiled on a background thread
                                                            while numpy's ufuncs go on serving;
                                                            calls switch to it once it is
                                                            ready. 1: compiled synchronously at
                                                            the first call (deterministic, for
                                                            tests); 0: never. See ``fused.bind``
cpu.cblas              DUOGRAPH_CBLAS             True      call numpy's BLAS gemm in place
                                                            through ctypes (fused SGD updates)
cpu.cache_dir          DUOGRAPH_CACHE_DIR         None      where generated kernels are cached
                                                            (None: ~/.cache/duograph)
cpu.matmul_swap        DUOGRAPH_MATMUL_SWAP       exact     small-batch ``x @ W.T`` as
                                                            ``(W @ x.T).T``: exact (where timed
                                                            faster and both forms give the same
                                                            bits), off, on, or auto (the faster
                                                            form: two processes may differ in
                                                            the last bits)
cpu.conv_algorithm     DUOGRAPH_CONV_ALGORITHM    auto      conv2d and its gradients: auto (a
                                                            fixed rule per shape, see
                                                            ``autotune.py``), benchmark (timed
                                                            once per shape: two processes may
                                                            differ in the last bits), direct,
                                                            gemm or winograd (forced where it
                                                            applies)
=====================  =========================  ========  =====================================
"""
from __future__ import annotations

from ...graphlib.config import (Option, as_bool, choice, config, path_or_none, positive_int,
                                register_options)


def non_negative_int(value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"expected an int >= 0, found {value!r}")
    number = int(value)
    if number < 0:
        raise ValueError(f"expected an int >= 0, found {value!r}")
    return number


NAME = "cpu"

register_options(NAME, (
    Option("fused_strategy", choice("auto", "numpy", "numba", "ops"), "auto",
           "DUOGRAPH_FUSED", "how the CPU backend runs fused regions"),
    Option("fused_threads", positive_int, 1, "DUOGRAPH_FUSED_THREADS",
           "threads splitting one large chunked fused kernel"),
    Option("numba", as_bool, True, "DUOGRAPH_NUMBA",
           "use numba kernels where numba is installed"),
    Option("numba_parallel", as_bool, False, "DUOGRAPH_NUMBA_PARALLEL",
           "generated numba loops run prange threads"),
    Option("numba_small_after", non_negative_int, 16, "DUOGRAPH_NUMBA_SMALL",
           "a small planned fused region compiles one numba call in the background from "
           "its N-th call on, numpy serving until it is ready (1: synchronously at the "
           "first call; 0: never)"),
    Option("cblas", as_bool, True, "DUOGRAPH_CBLAS",
           "call numpy's BLAS gemm in place through ctypes"),
    Option("cache_dir", path_or_none, None, "DUOGRAPH_CACHE_DIR",
           "directory of the generated-kernel cache (None: ~/.cache/duograph)"),
    Option("matmul_swap", choice("exact", "off", "on", "auto", aliases={"0": "off", "1": "on"}),
           "exact", "DUOGRAPH_MATMUL_SWAP",
           "small-batch x @ W.T as (W @ x.T).T: exact (where faster and bit-identical), "
           "off, on, auto (timed: not reproducible)"),
    Option("conv_algorithm", choice("auto", "benchmark", "direct", "gemm", "winograd"),
           "auto",
           "DUOGRAPH_CONV_ALGORITHM",
           "conv2d kernels: auto (fixed rule), benchmark (timed per shape), direct, gemm, "
           "winograd"),
))

# the section of the process-wide config (the same object for the life of the process)
options = getattr(config, NAME)
