"""``dg.config``: every switch of duograph in one object, read when used.

Each option has a name, a default, and an environment variable that only *seeds* the default
when the process imports duograph; after that the object is the truth. Code reads
``config.<name>`` at the moment it decides (never copies it at import), so a change takes
effect at the next call::

    import duograph as dg
    dg.config.cpu.fused_strategy = "numpy"             # from now on
    dg.config.fused_strategy = "numpy"                 # the same option, by its short name
    with dg.config.override(fused_strategy="ops"):     # for this block only
        exe(x=x)
    print(dg.config)                                   # every option, its value and its variable

The options of duograph itself are declared here:

=====================  =========================  ========  =====================================
option                 environment variable       default   meaning
=====================  =========================  ========  =====================================
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
collective_wait        DUOGRAPH_COLLECTIVE_WAIT   spin      how a rank waits for a non-blocking
                                                            collective (graph-mode DDP, eager
                                                            DDP, ``Work.wait``): spin (MPI's
                                                            Wait, which busy-polls its core) or
                                                            sleep (MPI tests, sleeping 50 us
                                                            between them after 100 us: the core
                                                            goes to other processes, such as a
                                                            lagging rank on a shared machine)
=====================  =========================  ========  =====================================

A backend registers its own options under its name (``register_options``): the CPU
backend's are ``dg.config.cpu.fused_strategy``, ``.fused_threads``, ``.numba``,
``.numba_parallel``, ``.cblas``, ``.cache_dir``, ``.matmul_swap`` and ``.conv_algorithm``
(their table is in ``runtime/cpu/options.py``), each also reachable by its documented short name
(``dg.config.numba``, ``override(numba=False)``) and seeded by its environment variable
(``DUOGRAPH_NUMBA``...) like every option. This module knows no backend.

Results are bit-for-bit reproducible across processes with the defaults: the default
``matmul_swap="exact"`` times the two forms of a product but keeps the swapped one only where
both give the same bits (so the timing never shows in a result); the options whose choice can
change the last bits (``matmul_swap="auto"``, ``conv_algorithm="benchmark"``) are explicit
opt-ins.

The object is process-wide (not per thread), like JAX's config: ``override`` is meant for
tests and scripts, not for threads that want different settings at the same time.
"""
from __future__ import annotations

import os
import warnings
import weakref
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

_FALSE = ("", "0", "false", "no", "off")


def as_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() not in _FALSE
    if isinstance(value, (bool, int)):
        return bool(value)
    raise TypeError(f"expected True or False, found {value!r}")


def choice(*allowed: str, aliases: Optional[Mapping[str, str]] = None) -> Callable:
    def check(value: Any) -> str:
        text = str(value).strip().lower()
        text = (aliases or {}).get(text, text)
        if text not in allowed:
            raise ValueError(f"expected one of {', '.join(allowed)}, found {value!r}")
        return text
    return check


def positive_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"expected a positive int, found {value!r}")
    number = int(value)
    if number < 1:
        raise ValueError(f"expected a positive int, found {value!r}")
    return number


def positive_number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(f"expected a positive number, found {value!r}")
    number = float(value)
    if not number > 0:
        raise ValueError(f"expected a positive number, found {value!r}")
    return number


def path_or_none(value: Any) -> Optional[str]:
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
    Option("capture_source", as_bool, False, "DUOGRAPH_SOURCE",
           "eager ops record the user's source line even outside record()"),
    Option("compile_cache_limit", positive_int, 8, "DUOGRAPH_COMPILE_CACHE_LIMIT",
           "recordings of one dg.compile'd function before new cases run eagerly"),
    Option("log_recompiles", as_bool, False, "DUOGRAPH_LOG_RECOMPILES",
           "log the reason of every recompile of a dg.compile'd function"),
    Option("ddp_bucket_cap_mb", positive_number, 25.0, "DUOGRAPH_DDP_BUCKET_CAP_MB",
           "megabytes of gradients one graph-mode DDP all-reduce carries"),
    Option("collective_wait", choice("spin", "sleep"), "spin", "DUOGRAPH_COLLECTIVE_WAIT",
           "how a rank waits for a non-blocking collective: spin (MPI's Wait) or sleep"),
)}
# a backend's own options, registered by the backend (``register_options``): section name ->
# {option name -> Option}; OPTIONS holds them too, under "section.name"
SECTIONS: Dict[str, Dict[str, Option]] = {}
# documented short names of section options (``config.numba`` is ``config.cpu.numba``)
ALIASES: Dict[str, Tuple[str, str]] = {}
_configs: "weakref.WeakSet[Config]" = weakref.WeakSet()


def register_options(section: str, options: Sequence[Option], aliases: bool = True) -> None:
    """Add a backend's options to ``dg.config`` under ``section`` (its name): read and set as
    ``config.<section>.<option>``, seeded from their environment variables like every
    option (in every ``Config``, including ones made before). ``aliases``: each option is
    also ``config.<option>`` (the documented short name), unless another owns that name."""
    if not section.isidentifier() or section in OPTIONS or section in _CONFIG_NAMES:
        raise ValueError(f"dg.config: {section!r} cannot name a section of options")
    table = SECTIONS.setdefault(section, {})
    for opt in options:
        full = f"{section}.{opt.name}"
        if opt.name in table:
            raise ValueError(f"dg.config: option {full!r} is registered twice")
        table[opt.name] = opt
        OPTIONS[full] = opt
        if aliases and opt.name not in OPTIONS and opt.name not in ALIASES:
            ALIASES[opt.name] = (section, opt.name)
    for cfg in list(_configs):
        cfg._seed_section(section)


class Section:
    """One backend's options in a ``Config`` (``dg.config.cpu``): read an option as an
    attribute, set it by assignment (checked), or change some for a block with
    ``override(**options)``. The object stays the same for the life of its ``Config``
    (``reset`` and ``override`` change its values), so a backend may hold it."""

    def __init__(self, name: str):
        object.__setattr__(self, "_name", name)

    def _option(self, name: str) -> Option:
        opt = SECTIONS[self._name].get(name)
        if opt is None:
            raise AttributeError(f"dg.config.{self._name} has no option {name!r}; the "
                                 f"options are {', '.join(SECTIONS[self._name])}")
        return opt

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, _checked(f"{self._name}.{name}", self._option(name),
                                                value))

    def __getattr__(self, name: str) -> Any:          # (only for names never set)
        if name.startswith("_"):
            raise AttributeError(name)
        self._option(name)
        raise AttributeError(f"dg.config.{self._name}.{name} is not set")

    @contextmanager
    def override(self, **options: Any) -> Iterator["Section"]:
        """Set ``options`` of this section for the ``with`` block, then restore them."""
        for name in options:
            self._option(name)
        old = {name: getattr(self, name) for name in options}
        try:
            for name, value in options.items():
                setattr(self, name, value)
            yield self
        finally:
            for name, value in old.items():
                object.__setattr__(self, name, value)

    def as_dict(self) -> Dict[str, Any]:
        return {name: getattr(self, name) for name in SECTIONS[self._name]}

    def __repr__(self) -> str:
        rows = [f"  {self._name}.{name} = {getattr(self, name)!r}  ({o.env}; {o.doc})"
                for name, o in SECTIONS[self._name].items()]
        return f"dg.config.{self._name}:\n" + "\n".join(rows)


def _checked(full: str, opt: Option, value: Any) -> Any:
    try:
        return opt.check(value)
    except (TypeError, ValueError) as e:
        raise type(e)(f"dg.config.{full}: {e}") from None


def _seeded(opt: Option, full: str, environ: Mapping[str, str]) -> Any:
    text = environ.get(opt.env)
    if text is None:
        return opt.default
    try:
        return opt.check(text)
    except (TypeError, ValueError) as e:
        warnings.warn(f"duograph: ignoring {opt.env}={text!r} ({e}); using "
                      f"{full}={opt.default!r}", RuntimeWarning, stacklevel=3)
        return opt.default


class Config:
    """The switches of duograph (see the module docstring for the table). Read an option as
    an attribute, set it by assignment (checked), or change some for a block with
    ``override(**options)``. A backend's options are a section (``config.cpu.numba``),
    also reachable by their short names (``config.numba``)."""

    def __init__(self, environ: Optional[Mapping[str, str]] = None):
        self.reset(environ)
        _configs.add(self)

    def reset(self, environ: Optional[Mapping[str, str]] = None) -> None:
        """Every option back to its default, seeded from ``environ`` (``os.environ``)."""
        environ = os.environ if environ is None else environ
        seed = {k: v for k, v in environ.items() if k.startswith("DUOGRAPH_")}
        object.__setattr__(self, "_environ", seed)
        for name, opt in OPTIONS.items():
            if "." not in name:
                object.__setattr__(self, name, _seeded(opt, name, seed))
        for section in SECTIONS:
            self._seed_section(section)

    def _seed_section(self, section: str) -> None:
        holder = self.__dict__.get(section)
        if holder is None:
            holder = Section(section)
            object.__setattr__(self, section, holder)
        for name, opt in SECTIONS[section].items():
            object.__setattr__(holder, name, _seeded(opt, f"{section}.{name}",
                                                     self._environ))

    def _resolve(self, name: str) -> Tuple[Any, str]:
        """(the object holding option ``name``, its name there): this config for its own
        options, a section for ``section.option`` or a short name."""
        if name in OPTIONS and "." not in name:
            return self, name
        if name in ALIASES:
            section, short = ALIASES[name]
            return self.__dict__[section], short
        section, _, short = name.partition(".")
        if section in SECTIONS and short in SECTIONS[section]:
            return self.__dict__[section], short
        raise AttributeError(f"dg.config has no option {name!r}; the options are "
                             f"{', '.join(self._names())}")

    @staticmethod
    def _names() -> List[str]:
        return [n for n in OPTIONS if "." not in n] + list(ALIASES) + \
            [n for n in OPTIONS if "." in n]

    def __getattr__(self, name: str) -> Any:          # (short names of section options)
        if name.startswith("_"):
            raise AttributeError(name)
        holder, short = self._resolve(name)
        return getattr(holder, short)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in SECTIONS:
            raise AttributeError(f"dg.config.{name} is a section: set its options "
                                 f"(dg.config.{name}.<option> = ...)")
        holder, short = self._resolve(name)
        if holder is self:
            object.__setattr__(self, name, _checked(name, OPTIONS[name], value))
        else:
            setattr(holder, short, value)

    def update(self, **options: Any) -> None:
        """Set several options at once (each checked)."""
        for name, value in options.items():
            setattr(self, name, value)

    @contextmanager
    def override(self, **options: Any) -> Iterator["Config"]:
        """Set ``options`` for the ``with`` block, then restore the previous values
        (even when the block raises). Names are this object's options, short names of
        section options, or ``section.option`` (``**{"cpu.numba": False}``)."""
        places = {name: self._resolve(name) for name in options}
        old = {name: getattr(holder, short) for name, (holder, short) in places.items()}
        try:
            self.update(**options)
            yield self
        finally:
            for name, value in old.items():
                holder, short = places[name]
                object.__setattr__(holder, short, value)

    def as_dict(self) -> Dict[str, Any]:
        """The current value of every option (section options as ``section.option``)."""
        out = {}
        for name in OPTIONS:
            holder, short = self._resolve(name)
            out[name] = getattr(holder, short)
        return out

    def __repr__(self) -> str:
        rows = []
        for name, o in OPTIONS.items():
            holder, short = self._resolve(name)
            alias = f", also {short}" if "." in name and ALIASES.get(short) == \
                tuple(name.split(".", 1)) else ""
            rows.append(f"  {name} = {getattr(holder, short)!r}  ({o.env}{alias}; {o.doc})")
        return "dg.config:\n" + "\n".join(rows)


# names a section may not take (the Config object's own attributes)
_CONFIG_NAMES = frozenset(n for n in dir(Config) if not n.startswith("__"))


config = Config()
