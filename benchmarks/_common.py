"""What the benchmarks share: the repository on ``sys.path``, the CPU model, the GEMM rate,
the load and thread settings, timing in alternating rounds and the JSON figures.

A benchmark imports it as a sibling (``import _common``: a script's own folder is first on
``sys.path``); importing it puts the repository root on ``sys.path`` too, so ``import
duograph`` finds this checkout.

Timers: ``wall`` is the wall clock (``time.perf_counter``); ``cpu`` is this process's CPU time
(``time.process_time``, every thread of it): on a machine shared with other work it leaves
out the time the cores were given to other processes. Use it with one thread everywhere
(BLAS, PyTorch, XLA), where CPU time and the time of the call are the same thing.
"""
from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
from typing import Callable, Dict, List, Optional

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

TIMERS = {"wall": time.perf_counter, "cpu": time.process_time}


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` says."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def cpu_isa() -> str:
    """The widest x86 vector extension the CPU lists: "AVX-512", "AVX2" or "no AVX2"."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        flags = ""
    return "AVX-512" if " avx512f" in flags else ("AVX2" if " avx2" in flags else "no AVX2")


def load() -> tuple:
    """The 1, 5 and 15 minute load averages."""
    return os.getloadavg()


def blas_threads() -> str:
    """``OPENBLAS_NUM_THREADS`` as set, or "default"."""
    return os.environ.get("OPENBLAS_NUM_THREADS", "default")


def alternate(cands: Dict[str, Callable], rounds: int, number: Optional[int] = None,
              min_round_s: float = 0.05, max_number: int = 2000,
              timer: Callable[[], float] = time.perf_counter,
              warm: bool = True) -> Dict[str, List[float]]:
    """Seconds per call of each contender in each round, the contenders alternating round by
    round. Each round calls a contender ``number`` times, or (``number`` None) as often as
    ``min_round_s`` of work takes, at most ``max_number``, from one timed call after the
    warm-up call."""
    calls = {}
    for name, fn in cands.items():
        if warm:
            fn()
        if number is not None:
            calls[name] = number
            continue
        t0 = timer()
        fn()
        once = timer() - t0
        calls[name] = max(1, min(max_number, math.ceil(min_round_s / max(once, 1e-7))))
    samples: Dict[str, List[float]] = {k: [] for k in cands}
    for _ in range(rounds):
        for name, fn in cands.items():
            k = calls[name]
            t0 = timer()
            for _ in range(k):
                fn()
            samples[name].append((timer() - t0) / k)
    return samples


def best(samples: Dict[str, List[float]]) -> Dict[str, float]:
    """The best (smallest) figure of each contender's rounds."""
    return {k: min(v) for k, v in samples.items()}


def gemm_rate(rounds: int, min_round_s: float = 0.05,
              timer: Callable[[], float] = time.perf_counter) -> float:
    """numpy's float32 GEMM rate (FLOP/s): 512x512x512 into a preallocated output, best of
    the rounds."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((512, 512)).astype(np.float32) for _ in range(2))
    out = np.empty((512, 512), np.float32)
    seconds = min(alternate({"gemm": lambda: np.matmul(a, b, out=out)}, rounds,
                            min_round_s=min_round_s, timer=timer)["gemm"])
    return 2 * 512 ** 3 / seconds


def write_json(path: Optional[str], result) -> None:
    """Write ``result`` to ``path`` as indented JSON (nothing when ``path`` is None)."""
    if path:
        with open(path, "w") as f:
            json.dump(result, f, indent=1)
