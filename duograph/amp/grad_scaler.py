"""``dg.amp.GradScaler`` (``torch.amp.GradScaler``): dynamic loss scaling.

Small float16 gradients underflow to zero; multiplying the loss by a large factor (the scale)
before ``backward`` keeps them representable, and dividing the gradients by it before the
optimizer's step (``unscale_``) gives the true ones. A step whose gradients hold an inf or
NaN is skipped and the scale shrinks (``backoff_factor``); after ``growth_interval`` steps
without one it grows (``growth_factor``). The arithmetic is PyTorch's: a float32 scale,
the reciprocal taken in float64 then rounded to float32, an int32 growth tracker.

One deliberate difference: ``device`` defaults to "cpu" (PyTorch's default is "cuda").
"""
from __future__ import annotations

import warnings
from enum import Enum
from typing import Optional

import numpy as np

from ..eager import Tensor


class OptState(Enum):
    READY = 0
    UNSCALED = 1
    STEPPED = 2


def _refresh_per_optimizer_state() -> dict:
    return {"stage": OptState.READY, "found_inf": None}


class GradScaler:
    """Loss scaling for mixed-precision training (``torch.amp.GradScaler``)::

        scaler = dg.amp.GradScaler()
        for x, y in data:
            opt.zero_grad()
            with dg.autocast("cpu", dtype=dg.float16):
                loss = loss_fn(model(x), y)
            scaler.scale(loss).backward()
            scaler.unscale_(opt)            # optional: to clip the true gradients
            scaler.step(opt)                # skipped when a gradient is inf or NaN
            scaler.update()
    """

    def __init__(self, device: str = "cpu", init_scale: float = 2.0 ** 16,
                 growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True):
        if not isinstance(device, str):
            device = str(device)
        self._device = device
        self._enabled = bool(enabled)
        if self._enabled:
            if not growth_factor > 1.0:
                raise AssertionError(f"The growth factor must be > 1.0 (found "
                                     f"{growth_factor}).")
            if not backoff_factor < 1.0:
                raise AssertionError(f"The backoff factor must be < 1.0 (found "
                                     f"{backoff_factor}).")
            self._init_scale = float(init_scale)
            self._scale: Optional[np.float32] = None
            self._growth_factor = float(growth_factor)
            self._backoff_factor = float(backoff_factor)
            self._growth_interval = int(growth_interval)
            self._init_growth_tracker = 0
            self._growth_tracker: Optional[int] = None
            self._per_optimizer_states: dict = {}

    # -- scale ---------------------------------------------------------------------------
    def _lazy_init(self) -> None:
        self._scale = np.float32(self._init_scale)
        self._growth_tracker = int(np.int32(self._init_growth_tracker))

    def _check_scale(self, funcname: str) -> None:
        if self._scale is None:
            raise AssertionError(f"Attempted {funcname} but _scale is None.  This may indicate "
                                 f"your script did not use scaler.scale(loss or outputs) "
                                 f"earlier in the iteration.")

    def scale(self, outputs):
        """``outputs`` (a tensor, or lists/tuples/dicts of tensors) times the scale; the
        dtype of each stays its own (the scale is a 0-d float32 tensor)."""
        if not self._enabled:
            return outputs
        if self._scale is None:
            self._lazy_init()
        factor = Tensor(np.asarray(self._scale, dtype=np.float32))

        def apply(x):
            if isinstance(x, Tensor):
                return x * factor
            if isinstance(x, (list, tuple)):
                out = [apply(v) for v in x]
                return type(x)(out) if isinstance(x, list) else tuple(out)
            if isinstance(x, dict):
                return {k: apply(v) for k, v in x.items()}
            raise ValueError(f"outputs must be a Tensor or an iterable of Tensors, found "
                             f"{type(x).__name__}")
        return apply(outputs)

    def _state_of(self, optimizer) -> dict:
        return self._per_optimizer_states.setdefault(id(optimizer),
                                                     _refresh_per_optimizer_state())

    def _unscale_grads(self, optimizer, inv_scale: np.float32, allow_fp16: bool) -> float:
        found = 0.0
        for group in optimizer.param_groups:
            for p in group["params"]:
                g = p.grad
                if g is None:
                    continue
                if not allow_fp16 and g.dtype == "float16":
                    raise ValueError("Attempting to unscale FP16 gradients.")
                arr = g.array
                wide = arr.astype(np.float32) if arr.dtype != np.float64 else arr
                if not np.isfinite(wide).all():
                    found = 1.0
                # (in place, as PyTorch's _amp_foreach_non_finite_check_and_unscale_)
                arr[...] = (wide * inv_scale).astype(arr.dtype)
        return found

    def unscale_(self, optimizer) -> None:
        """Divide ``optimizer``'s gradients by the scale, in place, and note whether any is
        inf or NaN. At most once per optimizer between ``update`` calls, and before
        ``step``."""
        if not self._enabled:
            return
        self._check_scale("unscale_")
        state = self._state_of(optimizer)
        if state["stage"] is OptState.UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since "
                               "the last update().")
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        inv_scale = np.float32(1.0 / np.float64(self._scale))
        state["found_inf"] = self._unscale_grads(optimizer, inv_scale, False)
        state["stage"] = OptState.UNSCALED

    def step(self, optimizer, *args, **kwargs):
        """``optimizer.step(*args, **kwargs)`` on unscaled gradients (``unscale_`` first
        unless it was called), or nothing when a gradient is inf or NaN. Returns what
        ``optimizer.step`` returned, or None when skipped."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is "
                               "enabled.")
        self._check_scale("step")
        state = self._state_of(optimizer)
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] is OptState.READY:
            self.unscale_(optimizer)
        if state["found_inf"] is None:
            raise AssertionError("No inf checks were recorded for this optimizer.")
        result = None
        if not state["found_inf"]:
            result = optimizer.step(*args, **kwargs)
        state["stage"] = OptState.STEPPED
        return result

    def update(self, new_scale=None) -> None:
        """Set the scale for the next iteration: ``new_scale`` if given (a float, or a
        1-element float32 tensor that does not require grad), else back off after a
        skipped step, or grow after ``growth_interval`` steps in a row without one."""
        if not self._enabled:
            return
        self._check_scale("update")
        if new_scale is not None:
            if isinstance(new_scale, Tensor):
                if new_scale.numel() != 1 or new_scale.requires_grad or \
                        new_scale.dtype != "float32":
                    raise AssertionError("new_scale should be a float or a 1-element "
                                         "FloatTensor with requires_grad=False.")
                self._scale = np.float32(new_scale.array.reshape(()))
            else:
                self._scale = np.float32(new_scale)
        else:
            found = [s["found_inf"] for s in self._per_optimizer_states.values()
                     if s["found_inf"] is not None]
            if not found:
                raise AssertionError("No inf checks were recorded prior to update.")
            if sum(found):
                self._scale = np.float32(self._scale * np.float32(self._backoff_factor))
                self._growth_tracker = 0
            else:
                successful = self._growth_tracker + 1
                if successful == self._growth_interval:
                    grown = np.float32(self._scale * np.float32(self._growth_factor))
                    if np.isfinite(grown):
                        self._scale = grown
                    self._growth_tracker = 0
                else:
                    self._growth_tracker = successful
        self._per_optimizer_states = {}

    # -- accessors -----------------------------------------------------------------------
    def get_scale(self) -> float:
        """The current scale (the initial one before the first ``scale``; 1.0 disabled)."""
        if not self._enabled:
            return 1.0
        return self._init_scale if self._scale is None else float(self._scale)

    def get_growth_factor(self) -> float:
        """The factor the scale grows by after ``growth_interval`` good steps."""
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        """Set the growth factor."""
        self._growth_factor = float(new_factor)

    def get_backoff_factor(self) -> float:
        """The factor the scale shrinks by after a skipped step."""
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        """Set the backoff factor."""
        self._backoff_factor = float(new_factor)

    def get_growth_interval(self) -> int:
        """How many good steps in a row make the scale grow."""
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        """Set the growth interval."""
        self._growth_interval = int(new_interval)

    def _get_growth_tracker(self) -> int:
        if not self._enabled:
            return 0
        return (self._init_growth_tracker if self._growth_tracker is None
                else self._growth_tracker)

    def is_enabled(self) -> bool:
        """Whether the scaler does anything (``enabled=True``)."""
        return self._enabled

    def state_dict(self) -> dict:
        """The scale, the factors, the interval and the growth tracker (empty when
        disabled), as PyTorch's keys."""
        if not self._enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval,
                "_growth_tracker": self._get_growth_tracker()}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore what ``state_dict`` returned."""
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved "
                               "from a disabled instance of GradScaler.")
        missing = [k for k in ("scale", "growth_factor", "backoff_factor", "growth_interval",
                               "_growth_tracker") if k not in state_dict]
        if missing:
            raise KeyError(f"GradScaler.load_state_dict: expected the keys of state_dict(), "
                           f"found none for {missing}")
        self._init_scale = float(state_dict["scale"])
        if self._scale is not None:
            self._scale = np.float32(self._init_scale)
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._init_growth_tracker = int(state_dict["_growth_tracker"])
        if self._growth_tracker is not None:
            self._growth_tracker = self._init_growth_tracker

    def __getstate__(self):
        state = self.__dict__.copy()
        if self._enabled:
            if self._per_optimizer_states:
                warnings.warn("GradScaler is going to be pickled mid-iteration; its "
                              "per-optimizer state is not kept", UserWarning, stacklevel=2)
            state["_per_optimizer_states"] = {}
        return state
