"""The other first-order optimizers of ``torch.optim``: RAdam, NAdam, Adadelta, Adamax, Rprop
and ASGD. Each update rule is written once with op functions (see ``optimizer.Optimizer``),
so ``step()`` runs it eagerly and ``minimize(loss)`` adds it to a training graph; each follows
PyTorch's single-tensor implementation step by step (scalars that PyTorch keeps as Python
floats or branches on, such as RAdam's rectification test, are float64 tensors and ``where``
here, so one graph serves every step)."""
from __future__ import annotations

import math

import numpy as np

from ..eager.tensors import Tensor
from ..graphlib import dtypes
from ..graphlib import functional as F
from .optimizer import Optimizer


def _check(name: str, **values) -> None:
    for what, value in values.items():
        if value < 0:
            raise ValueError(f"{name}: invalid {what} value: {value}")


def _betas(name: str, betas) -> tuple:
    b1, b2 = betas
    if not 0.0 <= b1 < 1.0:
        raise ValueError(f"{name}: invalid beta parameter at index 0: {b1}")
    if not 0.0 <= b2 < 1.0:
        raise ValueError(f"{name}: invalid beta parameter at index 1: {b2}")
    return float(b1), float(b2)


def _f64(x, like):
    """A float64 step-dependent scalar cast to the parameter's dtype."""
    return F.cast(x, like.dtype)


def _scalar_dtype() -> str:
    """PyTorch's ``_get_scalar_dtype()``: the dtype of the scalar state it keeps as tensors
    (NAdam's ``mu_product``, ASGD's ``eta`` and ``mu``): float64 when that is the default
    dtype, else float32. Kept so, their rounding matches PyTorch's."""
    return "float64" if dtypes.DEFAULT_FLOAT == "float64" else "float32"


def _scalar_slot(p: Tensor, value: float) -> Tensor:
    return Tensor._wrap(np.full_like(p.array, value, shape=(), dtype=_scalar_dtype()))


class RAdam(Optimizer):
    """Rectified Adam (Liu et al.), as ``torch.optim.RAdam``: Adam's step scaled by the
    variance rectification term once it is defined (rho_t > 5), plain momentum SGD before;
    ``decoupled_weight_decay`` gives AdamW-style decay."""

    slots = ("exp_avg", "exp_avg_sq")

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, decoupled_weight_decay: bool = False, *,
                 foreach=None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False):
        _check("RAdam", lr=lr, epsilon=eps, weight_decay=weight_decay)
        super().__init__(params, dict(lr=lr, betas=_betas("RAdam", betas), eps=eps,
                                      weight_decay=weight_decay, maximize=maximize,
                                      decoupled_weight_decay=decoupled_weight_decay))

    def rule(self, p, g, state, group, lr):
        """RAdam's update, as ``torch.optim.RAdam``; see ``Optimizer.rule``."""
        b1, b2 = group["betas"]
        wd = group["weight_decay"]
        if group["maximize"]:
            g = -g
        if wd and group["decoupled_weight_decay"]:
            p = p * (1.0 - lr * wd)
        elif wd:
            g = g + wd * p
        step = state["step"] + 1.0
        m = state["exp_avg"] + (g - state["exp_avg"]) * (1.0 - b1)
        v = state["exp_avg_sq"] * b2 + g * g * (1.0 - b2)
        bc1 = 1.0 - F.pow(b1, step)
        bc2 = 1.0 - F.pow(b2, step)
        corrected = m / _f64(bc1, p)
        rho_inf = 2.0 / (1.0 - b2) - 1.0
        rho_t = rho_inf - 2.0 * step * F.pow(b2, step) / bc2
        ok = rho_t > 5.0
        safe = F.where(ok, rho_t, 6.0)                        # keeps sqrt real off the branch
        rect = F.sqrt((safe - 4.0) * (safe - 2.0) * rho_inf
                      / ((rho_inf - 4.0) * (rho_inf - 2.0) * safe))
        adaptive = _f64(F.sqrt(bc2), p) / (F.sqrt(v) + group["eps"])
        rectified = corrected * lr * adaptive * _f64(rect, p)
        update = F.where(ok, rectified, corrected * lr)
        return p - update, {"step": step, "exp_avg": m, "exp_avg_sq": v}


class NAdam(Optimizer):
    """Adam with Nesterov momentum (Dozat), with PyTorch's momentum-decay schedule, as
    ``torch.optim.NAdam``; ``decoupled_weight_decay`` gives AdamW-style decay."""

    slots = ("exp_avg", "exp_avg_sq")

    def __init__(self, params, lr: float = 2e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum_decay: float = 4e-3,
                 decoupled_weight_decay: bool = False, *, foreach=None,
                 maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False):
        _check("NAdam", lr=lr, epsilon=eps, weight_decay=weight_decay,
               momentum_decay=momentum_decay)
        super().__init__(params, dict(lr=lr, betas=_betas("NAdam", betas), eps=eps,
                                      weight_decay=weight_decay, momentum_decay=momentum_decay,
                                      decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize))

    def _init_slots(self, p, group):
        state = super()._init_slots(p, group)
        state["mu_product"] = _scalar_slot(p, 1.0)
        return state

    def rule(self, p, g, state, group, lr):
        """NAdam's update, as ``torch.optim.NAdam``; see ``Optimizer.rule``."""
        b1, b2 = group["betas"]
        wd, md = group["weight_decay"], group["momentum_decay"]
        if group["maximize"]:
            g = -g
        if wd and group["decoupled_weight_decay"]:
            p = p * (1.0 - lr * wd)
        elif wd:
            g = g + wd * p
        step = state["step"] + 1.0
        bc2 = 1.0 - F.pow(b2, step)
        mu = b1 * (1.0 - 0.5 * F.pow(0.96, step * md))
        mu_next = b1 * (1.0 - 0.5 * F.pow(0.96, (step + 1.0) * md))
        mu_product = state["mu_product"] * F.cast(mu, state["mu_product"].dtype)
        mu_product_64 = F.cast(mu_product, "float64")
        m = state["exp_avg"] + (g - state["exp_avg"]) * (1.0 - b1)
        v = state["exp_avg_sq"] * b2 + g * g * (1.0 - b2)
        denom = F.sqrt(v / _f64(bc2, p)) + group["eps"]
        coef_g = _f64(-(1.0 - mu) / (1.0 - mu_product_64), p) * lr
        coef_m = _f64(-mu_next / (1.0 - mu_product_64 * mu_next), p) * lr
        new_p = p + (g / denom) * coef_g + (m / denom) * coef_m
        return new_p, {"step": step, "mu_product": mu_product, "exp_avg": m,
                       "exp_avg_sq": v}


class Adadelta(Optimizer):
    """Adadelta (Zeiler), as ``torch.optim.Adadelta``: steps scaled by the running RMS of past
    updates over that of the gradients, times ``lr`` (default 1)."""

    slots = ("square_avg", "acc_delta")

    def __init__(self, params, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6,
                 weight_decay: float = 0.0, foreach=None, *, capturable: bool = False,
                 maximize: bool = False, differentiable: bool = False):
        _check("Adadelta", lr=lr, epsilon=eps, weight_decay=weight_decay)
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Adadelta: invalid rho value: {rho}")
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay,
                                      maximize=maximize))

    def rule(self, p, g, state, group, lr):
        """Adadelta's update, as ``torch.optim.Adadelta``; see ``Optimizer.rule``."""
        rho, eps = group["rho"], group["eps"]
        if group["maximize"]:
            g = -g
        if group["weight_decay"]:
            g = g + group["weight_decay"] * p
        sq = state["square_avg"] * rho + g * g * (1.0 - rho)
        std = F.sqrt(sq + eps)
        delta = F.sqrt(state["acc_delta"] + eps) / std * g
        acc = state["acc_delta"] * rho + delta * delta * (1.0 - rho)
        return p - delta * lr, {"step": state["step"] + 1.0, "square_avg": sq,
                                "acc_delta": acc}


class Adamax(Optimizer):
    """Adamax (Adam with the infinity norm), as ``torch.optim.Adamax``."""

    slots = ("exp_avg", "exp_inf")

    def __init__(self, params, lr: float = 2e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, foreach=None, *, maximize: bool = False,
                 differentiable: bool = False, capturable: bool = False):
        _check("Adamax", lr=lr, epsilon=eps, weight_decay=weight_decay)
        super().__init__(params, dict(lr=lr, betas=_betas("Adamax", betas), eps=eps,
                                      weight_decay=weight_decay, maximize=maximize))

    def rule(self, p, g, state, group, lr):
        """Adamax's update, as ``torch.optim.Adamax``; see ``Optimizer.rule``."""
        b1, b2 = group["betas"]
        if group["maximize"]:
            g = -g
        if group["weight_decay"]:
            g = g + group["weight_decay"] * p
        step = state["step"] + 1.0
        m = state["exp_avg"] + (g - state["exp_avg"]) * (1.0 - b1)
        inf = F.maximum(state["exp_inf"] * b2, F.abs(g) + group["eps"])
        clr = lr / _f64(1.0 - F.pow(b1, step), p)
        return p - (m / inf) * clr, {"step": step, "exp_avg": m, "exp_inf": inf}


class Rprop(Optimizer):
    """Resilient backpropagation, as ``torch.optim.Rprop``: per-element step sizes grow by
    ``etas[1]`` while the gradient keeps its sign and shrink by ``etas[0]`` when it flips
    (that step is then skipped), clamped to ``step_sizes``."""

    slots = ("prev",)

    def __init__(self, params, lr: float = 1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50),
                 *, capturable: bool = False, foreach=None, maximize: bool = False,
                 differentiable: bool = False):
        _check("Rprop", lr=lr)
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Rprop: invalid eta values: {etas[0]}, {etas[1]}")
        super().__init__(params, dict(lr=lr, etas=tuple(etas), step_sizes=tuple(step_sizes),
                                      maximize=maximize))

    def _init_slots(self, p, group):
        state = super()._init_slots(p, group)
        state["step_size"] = Tensor._wrap(np.full_like(p.array, group["lr"]))
        return state

    def rule(self, p, g, state, group, lr):
        """Rprop's update, as ``torch.optim.Rprop``; see ``Optimizer.rule``."""
        eta_minus, eta_plus = group["etas"]
        lo, hi = group["step_sizes"]
        if group["maximize"]:
            g = -g
        trend = F.sign(g * state["prev"])
        size = state["step_size"]        # (scaled in its own dtype: a where of two Python
        size = F.where(trend > 0, size * eta_plus,        # floats would be float32)
                       F.where(trend < 0, size * eta_minus, size))
        size = F.clamp(size, lo, hi)
        g = F.where(trend < 0, 0.0, g)
        return p - F.sign(g) * size, {"step": state["step"] + 1.0, "prev": g,
                                      "step_size": size}


class ASGD(Optimizer):
    """Averaged SGD (Polyak and Juditsky), as ``torch.optim.ASGD``: ``ax`` holds the running
    average of the iterates from step ``t0`` on; ``eta`` decays as
    lr / (1 + lambd * lr * step) ** alpha."""

    slots = ("ax",)

    def __init__(self, params, lr: float = 1e-2, lambd: float = 1e-4, alpha: float = 0.75,
                 t0: float = 1e6, weight_decay: float = 0.0, foreach=None,
                 maximize: bool = False, differentiable: bool = False,
                 capturable: bool = False):
        _check("ASGD", lr=lr, weight_decay=weight_decay)
        super().__init__(params, dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0,
                                      weight_decay=weight_decay, maximize=maximize))

    def _init_slots(self, p, group):
        state = super()._init_slots(p, group)
        state["eta"] = _scalar_slot(p, group["lr"])
        state["mu"] = _scalar_slot(p, 1.0)
        return state

    def rule(self, p, g, state, group, lr):
        """ASGD's update, as ``torch.optim.ASGD``; see ``Optimizer.rule``."""
        lambd, alpha, t0 = group["lambd"], group["alpha"], group["t0"]
        if group["maximize"]:
            g = -g
        if group["weight_decay"]:
            g = g + group["weight_decay"] * p
        step = state["step"] + 1.0
        eta, mu = F.cast(state["eta"], "float64"), F.cast(state["mu"], "float64")
        new_p = p * _f64(1.0 - lambd * eta, p) - g * _f64(eta, p)
        ax = state["ax"]
        new_ax = F.where(mu != 1.0, ax + (new_p - ax) * _f64(mu, p), new_p)
        lr64 = F.cast(lr, "float64") if hasattr(lr, "dtype") else float(lr)
        new_eta = lr64 / F.pow(1.0 + lambd * lr64 * step, alpha)
        new_mu = 1.0 / F.maximum(step - t0, 1.0)
        scalar = state["eta"].dtype
        return new_p, {"step": step, "ax": new_ax, "eta": F.cast(new_eta, scalar),
                       "mu": F.cast(new_mu, scalar)}


_ = math
