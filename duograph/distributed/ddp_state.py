"""Which parameters a ``DistributedDataParallel`` wraps, for code that must treat their
gradients as the group's (``optimizer.minimize`` in graph mode puts their all-reduce into the
step graph). Filled by ``nn.parallel.DistributedDataParallel`` at construction."""
from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Dict, Iterable, Optional, Tuple

from .process_group import ProcessGroup


@dataclass
class DDPInfo:
    """What a wrapped parameter's gradient needs: the group that averages it, the bucket
    size (bytes) its all-reduce is grouped by, and whether gradient sync is on
    (``no_sync`` turns it off)."""
    group: ProcessGroup
    bucket_bytes: int
    wrapper: object                 # the DistributedDataParallel (its require_sync flag)

    @property
    def sync(self) -> bool:
        return bool(getattr(self.wrapper, "require_backward_grad_sync", True))


# id(param) -> (weak reference to it, info). Not a WeakKeyDictionary: its lookups compare
# parameters with ``==``, which for tensors is elementwise (and symbolic inside a graph).
_params: Dict[int, Tuple["weakref.ref", DDPInfo]] = {}


def register(params: Iterable, info: DDPInfo) -> None:
    for p in params:
        key = id(p)
        _params[key] = (weakref.ref(p, lambda _, key=key: _params.pop(key, None)), info)


def info(param) -> Optional[DDPInfo]:
    """The DDP facts of ``param`` (a Parameter), or None when no DDP wraps it."""
    entry = _params.get(id(param))
    if entry is None or entry[0]() is not param:
        return None
    return entry[1]
