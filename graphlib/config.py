"""``dg.config``: every switch of duograph in one object, read when used.

Each option has a name, a default, and an environment variable that only *seeds* the default
when the process imports duograph; after that the object is the truth. Code reads
``config.<name>`` at the moment it decides (never copies it at import), so a change takes
effect at the next call::

    import duograph as dg
    dg.config.fused_strategy = "numpy"                 # from now on
    with dg.config.override(fused_strategy="ops"):     # for this block only
        exe(x=x)
    print(dg.config)                                   # every option, its value and its variable

=====================  =========================  ========  =====================================
option                 environment variable       default   meaning
=====================  =========================  ========  =====================================
fused_strategy         DUOGRAPH_FUSED             auto      how the CPU backend runs fused
                                                            regions: auto (measured: numba where
                                                            faster, else numpy chunks), numpy,
                                                            numba, ops (op by op, the reference)
fused_threads          DUOGRAPH_FUSED_THREADS     1         threads splitting one large chunked
                                                            fused kernel on the CPU
numba                  DUOGRAPH_NUMBA             True      use numba kernels where installed
                                                            (fused regions, conv, pooling, batch
                                                            norm); False: numpy kernels only
numba_parallel         DUOGRAPH_NUMBA_PARALLEL    False     generated numba loops use prange
                                                            threads
cblas                  DUOGRAPH_CBLAS             True      call numpy's BLAS gemm in place
                                                            through ctypes (fused SGD updates)
cache_dir              DUOGRAPH_CACHE_DIR         None      where generated kernels are cached
                                                            (None: ~/.cache/duograph)
matmul_swap            DUOGRAPH_MATMUL_SWAP       exact     small-batch ``x @ W.T`` as
                                                            ``(W @ x.T).T``: exact (where timed
                                                            faster and both forms give the same
                                                            bits), off, on, or auto (the faster
                                                            form: two processes may differ in
                                                            the last bits)
capture_source         DUOGRAPH_SOURCE            False     eager ops record the user's source
                                                            line even outside ``record()``
compile_cache_limit    DUOGRAPH_COMPILE_CACHE_    8         recordings of one ``dg.compile``d
                       LIMIT                                function; after that, calls that
                                                            match no specialisation run eagerly
                                                            (warned once)
log_recompiles         DUOGRAPH_LOG_RECOMPILES    False     log why at every recompile of a
                                                            ``dg.compile``d function (logger
                                                            ``duograph.compile``, WARNING)
ddp_bucket_cap_mb      DUOGRAPH_DDP_BUCKET_CAP_MB 25        megabytes of gradients one all-reduce
                                                            carries in graph-mode DDP (the
                                                            ``ddp_buckets`` pass; PyTorch's
                                                            ``bucket_cap_mb``)
=====================  =========================  ========  =====================================

Results are bit-for-bit reproducible across processes with the defaults: the default
``matmul_swap="exact"`` times the two forms of a product but keeps the swapped one only where
both give the same bits (so the timing never shows in a result); the option whose choice can
change the last bits (``matmul_swap="auto"``) is an explicit opt-in.

The object is process-wide (not per thread), like JAX's config: ``override`` is meant for
tests and scripts, not for threads that want different settings at the same time.
"""
from __future__ import annotations

import os
import warnings
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, Mapping, Optional

_FALSE = ("", "0", "false", "no", "off")


def _as_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() not in _FALSE
    if isinstance(value, (bool, int)):
        return bool(value)
    raise TypeError(f"expected True or False, found {value!r}")


def _choice(*allowed: str, aliases: Optional[Mapping[str, str]] = None) -> Callable:
    def check(value: Any) -> str:
        text = str(value).strip().lower()
        text = (aliases or {}).get(text, text)
        if text not in allowed:
            raise ValueError(f"expected one of {', '.join(allowed)}, found {value!r}")
        return text
    return check


def _positive_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"expected a positive int, found {value!r}")
    number = int(value)
    if number < 1:
        raise ValueError(f"expected a positive int, found {value!r}")
    return number


def _positive_number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(f"expected a positive number, found {value!r}")
    number = float(value)
    if not number > 0:
        raise ValueError(f"expected a positive number, found {value!r}")
    return number


def _path_or_none(value: Any) -> Optional[str]:
    if value is None or value == "":
        return None
    return os.fspath(value)


class Option:
    """One switch: its checker (value -> normalised value, raising on a bad one), default,
    environment variable and a one-line description."""

    __slots__ = ("name", "check", "default", "env", "doc")

    def __init__(self, name: str, check: Callable, default: Any, env: str, doc: str):
        self.name, self.check, self.default, self.env, self.doc = name, check, default, env, doc


OPTIONS: Dict[str, Option] = {o.name: o for o in (
    Option("fused_strategy", _choice("auto", "numpy", "numba", "ops"), "auto",
           "DUOGRAPH_FUSED", "how the CPU backend runs fused regions"),
    Option("fused_threads", _positive_int, 1, "DUOGRAPH_FUSED_THREADS",
           "threads splitting one large chunked fused kernel"),
    Option("numba", _as_bool, True, "DUOGRAPH_NUMBA",
           "use numba kernels where numba is installed"),
    Option("numba_parallel", _as_bool, False, "DUOGRAPH_NUMBA_PARALLEL",
           "generated numba loops run prange threads"),
    Option("cblas", _as_bool, True, "DUOGRAPH_CBLAS",
           "call numpy's BLAS gemm in place through ctypes"),
    Option("cache_dir", _path_or_none, None, "DUOGRAPH_CACHE_DIR",
           "directory of the generated-kernel cache (None: ~/.cache/duograph)"),
    Option("matmul_swap", _choice("exact", "off", "on", "auto",
                                  aliases={"0": "off", "1": "on"}),
           "exact", "DUOGRAPH_MATMUL_SWAP",
           "small-batch x @ W.T as (W @ x.T).T: exact (where faster and bit-identical), "
           "off, on, auto (timed: not reproducible)"),
    Option("capture_source", _as_bool, False, "DUOGRAPH_SOURCE",
           "eager ops record the user's source line even outside record()"),
    Option("compile_cache_limit", _positive_int, 8, "DUOGRAPH_COMPILE_CACHE_LIMIT",
           "recordings of one dg.compile'd function before new cases run eagerly"),
    Option("log_recompiles", _as_bool, False, "DUOGRAPH_LOG_RECOMPILES",
           "log the reason of every recompile of a dg.compile'd function"),
    Option("ddp_bucket_cap_mb", _positive_number, 25.0, "DUOGRAPH_DDP_BUCKET_CAP_MB",
           "megabytes of gradients one graph-mode DDP all-reduce carries"),
)}


class Config:
    """The switches of duograph (see the module docstring for the table). Read an option as
    an attribute, set it by assignment (checked), or change some for a block with
    ``override(**options)``."""

    def __init__(self, environ: Optional[Mapping[str, str]] = None):
        self.reset(environ)

    def reset(self, environ: Optional[Mapping[str, str]] = None) -> None:
        """Every option back to its default, seeded from ``environ`` (``os.environ``)."""
        environ = os.environ if environ is None else environ
        for opt in OPTIONS.values():
            value = opt.default
            text = environ.get(opt.env)
            if text is not None:
                try:
                    value = opt.check(text)
                except (TypeError, ValueError) as e:
                    warnings.warn(f"duograph: ignoring {opt.env}={text!r} ({e}); using "
                                  f"{opt.name}={opt.default!r}", RuntimeWarning, stacklevel=2)
            object.__setattr__(self, opt.name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        opt = OPTIONS.get(name)
        if opt is None:
            raise AttributeError(f"dg.config has no option {name!r}; the options are "
                                 f"{', '.join(OPTIONS)}")
        try:
            value = opt.check(value)
        except (TypeError, ValueError) as e:
            raise type(e)(f"dg.config.{name}: {e}") from None
        object.__setattr__(self, name, value)

    def update(self, **options: Any) -> None:
        """Set several options at once (each checked)."""
        for name, value in options.items():
            setattr(self, name, value)

    @contextmanager
    def override(self, **options: Any) -> Iterator["Config"]:
        """Set ``options`` for the ``with`` block, then restore the previous values
        (even when the block raises)."""
        for name in options:
            if name not in OPTIONS:
                raise AttributeError(f"dg.config has no option {name!r}; the options are "
                                     f"{', '.join(OPTIONS)}")
        old = {name: getattr(self, name) for name in options}
        try:
            self.update(**options)
            yield self
        finally:
            for name, value in old.items():
                object.__setattr__(self, name, value)

    def as_dict(self) -> Dict[str, Any]:
        """The current value of every option."""
        return {name: getattr(self, name) for name in OPTIONS}

    def __repr__(self) -> str:
        rows = [f"  {o.name} = {getattr(self, o.name)!r}  ({o.env}; {o.doc})"
                for o in OPTIONS.values()]
        return "dg.config:\n" + "\n".join(rows)


config = Config()
