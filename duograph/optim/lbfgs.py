"""``LBFGS``: limited-memory BFGS with an optional strong-Wolfe line search, as
``torch.optim.LBFGS`` (a port of its algorithm, step by step, over duograph tensors).

Like PyTorch's it works on all parameters flattened into one vector, needs a ``closure``
that re-evaluates the loss (and its gradients) and takes one parameter group. It is an
eager-mode optimizer: each step runs the closure a data-dependent number of times, so there
is no ``minimize`` form for graphs (refused with a clear error).
"""
from __future__ import annotations

from typing import Optional

from ..eager import grad_mode
from ..eager.tensors import Tensor
from ..graphlib import functional as F
from ..graphlib.errors import GraphError
from .optimizer import Optimizer


def _float(x) -> float:
    return float(x.item()) if isinstance(x, Tensor) else float(x)


def _cubic_interpolate(x1, f1, g1, x2, f2, g2, bounds=None):
    """The minimiser of the cubic through (x1, f1, g1) and (x2, f2, g2), clamped to
    ``bounds`` (minFunc's ``polyinterp`` for two points, as PyTorch's)."""
    if bounds is not None:
        xmin_bound, xmax_bound = bounds
    else:
        xmin_bound, xmax_bound = (x1, x2) if x1 <= x2 else (x2, x1)
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1 ** 2 - g1 * g2
    if d2_square >= 0:
        d2 = d2_square ** 0.5
        if x1 <= x2:
            min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
        else:
            min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
        return min(max(min_pos, xmin_bound), xmax_bound)
    return (xmin_bound + xmax_bound) / 2.0


def _strong_wolfe(obj_func, x, t, d, f, g, gtd, c1=1e-4, c2=0.9, tolerance_change=1e-9,
                  max_ls=25):
    """A line search along ``d`` satisfying the strong Wolfe conditions (bracketing, then
    zooming by cubic interpolation), as PyTorch's ``_strong_wolfe``. Returns
    ``(f_new, g_new, t, evaluations)``."""
    d_norm = _float(F.amax(F.abs(d)))
    f_new, g_new = obj_func(x, t, d)
    ls_func_evals = 1
    gtd_new = _float(F.sum(g_new * d))
    t_prev, f_prev, g_prev, gtd_prev = 0, f, g, gtd
    done = False
    ls_iter = 0
    bracket_gtd = None
    while ls_iter < max_ls:
        if f_new > (f + c1 * t * gtd) or (ls_iter > 1 and f_new >= f_prev):
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new], [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket, bracket_f, bracket_g = [t], [f_new], [g_new]
            done = True
            break
        if gtd_new >= 0:
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new], [gtd_prev, gtd_new]
            break
        min_step = t + 0.01 * (t - t_prev)
        max_step = t * 10
        tmp = t
        t = _cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new,
                               bounds=(min_step, max_step))
        t_prev, f_prev, g_prev, gtd_prev = tmp, f_new, g_new, gtd_new
        f_new, g_new = obj_func(x, t, d)
        ls_func_evals += 1
        gtd_new = _float(F.sum(g_new * d))
        ls_iter += 1
    if ls_iter == max_ls:
        bracket, bracket_f, bracket_g = [0, t], [f, f_new], [g, g_new]
    insuf_progress = False
    low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[-1] else (1, 0)
    while not done and ls_iter < max_ls:
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = _cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0], bracket[1],
                               bracket_f[1], bracket_gtd[1])
        eps = 0.1 * (max(bracket) - min(bracket))
        if min(max(bracket) - t, t - min(bracket)) < eps:
            if insuf_progress or t >= max(bracket) or t <= min(bracket):
                if abs(t - max(bracket)) < abs(t - min(bracket)):
                    t = max(bracket) - eps
                else:
                    t = min(bracket) + eps
                insuf_progress = False
            else:
                insuf_progress = True
        else:
            insuf_progress = False
        f_new, g_new = obj_func(x, t, d)
        ls_func_evals += 1
        gtd_new = _float(F.sum(g_new * d))
        ls_iter += 1
        if f_new > (f + c1 * t * gtd) or f_new >= bracket_f[low_pos]:
            bracket[high_pos], bracket_f[high_pos] = t, f_new
            bracket_g[high_pos], bracket_gtd[high_pos] = g_new, gtd_new
            low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high_pos] - bracket[low_pos]) >= 0:
                bracket[high_pos] = bracket[low_pos]
                bracket_f[high_pos] = bracket_f[low_pos]
                bracket_g[high_pos] = bracket_g[low_pos]
                bracket_gtd[high_pos] = bracket_gtd[low_pos]
            bracket[low_pos], bracket_f[low_pos] = t, f_new
            bracket_g[low_pos], bracket_gtd[low_pos] = g_new, gtd_new
    return bracket_f[low_pos], bracket_g[low_pos], bracket[low_pos], ls_func_evals


class LBFGS(Optimizer):
    """Limited-memory BFGS, as ``torch.optim.LBFGS(params, lr=1, max_iter=20,
    max_eval=None, tolerance_grad=1e-7, tolerance_change=1e-9, history_size=100,
    line_search_fn=None)``; ``line_search_fn='strong_wolfe'`` searches each step.
    ``step(closure)`` needs the closure (it zeroes the gradients, computes the loss, calls
    ``backward()`` and returns the loss)."""

    def __init__(self, params, lr: float = 1, max_iter: int = 20,
                 max_eval: Optional[int] = None, tolerance_grad: float = 1e-7,
                 tolerance_change: float = 1e-9, history_size: int = 100,
                 line_search_fn: Optional[str] = None):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if line_search_fn not in (None, "strong_wolfe"):
            raise ValueError(f"LBFGS: line_search_fn must be None or 'strong_wolfe', found "
                             f"{line_search_fn!r}")
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        super().__init__(params, dict(lr=lr, max_iter=max_iter, max_eval=max_eval,
                                      tolerance_grad=tolerance_grad,
                                      tolerance_change=tolerance_change,
                                      history_size=history_size,
                                      line_search_fn=line_search_fn))
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._params = self.param_groups[0]["params"]

    # -- the flat view of the parameters -------------------------------------------------------
    def _gather_flat_grad(self) -> Tensor:
        views = [F.zeros(p.numel(), dtype=p.dtype) if p.grad is None
                 else p.grad.detach().reshape(-1) for p in self._params]
        return F.cat(views, 0)

    def _add_grad(self, step_size, update: Tensor) -> None:
        offset = 0
        for p in self._params:
            n = p.numel()
            p.add_(update[offset:offset + n].reshape(p.shape) * step_size)
            offset += n

    def _clone_param(self) -> list:
        return [p.detach().clone() for p in self._params]

    def _set_param(self, params_data) -> None:
        for p, data in zip(self._params, params_data):
            p.copy_(data)

    def _directional_evaluate(self, closure, x, t, d):
        self._add_grad(t, d)
        with grad_mode.enable_grad():
            loss = _float(closure())
        flat_grad = self._gather_flat_grad()
        self._set_param(x)
        return loss, flat_grad

    def minimize(self, loss) -> None:
        raise GraphError("LBFGS.minimize: L-BFGS evaluates the loss a data-dependent number of "
                         "times per step, so it has no graph form; call step(closure) eagerly")

    def step(self, closure=None):
        """One optimisation step (up to ``max_iter`` iterations); returns the closure's first
        loss, as PyTorch's."""
        if closure is None:
            raise RuntimeError("LBFGS.step: a closure that re-evaluates the model and returns "
                               "the loss is required")
        with grad_mode.no_grad():
            return self._step(closure)

    def _step(self, closure):
        group = self.param_groups[0]
        lr, max_iter, max_eval = float(group["lr"]), group["max_iter"], group["max_eval"]
        tolerance_grad, tolerance_change = group["tolerance_grad"], group["tolerance_change"]
        line_search_fn, history_size = group["line_search_fn"], group["history_size"]
        state = self.state.setdefault(self._params[0], {})
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)
        with grad_mode.enable_grad():
            orig_loss = closure()
        loss = _float(orig_loss)
        current_evals = 1
        state["func_evals"] += 1
        flat_grad = self._gather_flat_grad()
        if _float(F.amax(F.abs(flat_grad))) <= tolerance_grad:
            return orig_loss
        d, t = state.get("d"), state.get("t")
        old_dirs, old_stps, ro = state.get("old_dirs"), state.get("old_stps"), state.get("ro")
        h_diag = state.get("H_diag")
        prev_flat_grad, prev_loss = state.get("prev_flat_grad"), state.get("prev_loss")
        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1
            if state["n_iter"] == 1:
                d = -flat_grad
                old_dirs, old_stps, ro = [], [], []
                h_diag = 1
            else:
                y = flat_grad - prev_flat_grad
                s = d * t
                ys = F.sum(y * s)
                if _float(ys) > 1e-10:
                    if len(old_dirs) == history_size:
                        old_dirs.pop(0)
                        old_stps.pop(0)
                        ro.pop(0)
                    old_dirs.append(y)
                    old_stps.append(s)
                    ro.append(1.0 / ys)
                    h_diag = ys / F.sum(y * y)
                num_old = len(old_dirs)
                al = state.setdefault("al", [None] * history_size)
                q = -flat_grad
                for i in range(num_old - 1, -1, -1):
                    al[i] = F.sum(old_stps[i] * q) * ro[i]
                    q = q - old_dirs[i] * al[i]
                d = r = q * h_diag
                for i in range(num_old):
                    be_i = F.sum(old_dirs[i] * r) * ro[i]
                    r = r + old_stps[i] * (al[i] - be_i)
                d = r
            prev_flat_grad = flat_grad.clone()
            prev_loss = loss
            if state["n_iter"] == 1:
                t = min(1.0, 1.0 / _float(F.sum(F.abs(flat_grad)))) * lr
            else:
                t = lr
            gtd = _float(F.sum(flat_grad * d))
            if gtd > -tolerance_change:
                break
            ls_func_evals = 0
            if line_search_fn is not None:
                x_init = self._clone_param()

                def obj_func(x, t, d):
                    return self._directional_evaluate(closure, x, t, d)
                loss, flat_grad, t, ls_func_evals = _strong_wolfe(
                    obj_func, x_init, t, d, loss, flat_grad, gtd,
                    max_ls=max_eval - current_evals)
                self._add_grad(t, d)
                opt_cond = _float(F.amax(F.abs(flat_grad))) <= tolerance_grad
            else:
                self._add_grad(t, d)
                opt_cond = False
                if n_iter != max_iter:
                    with grad_mode.enable_grad():
                        loss = _float(closure())
                    flat_grad = self._gather_flat_grad()
                    opt_cond = _float(F.amax(F.abs(flat_grad))) <= tolerance_grad
                    ls_func_evals = 1
            current_evals += ls_func_evals
            state["func_evals"] += ls_func_evals
            if n_iter == max_iter or current_evals >= max_eval or opt_cond:
                break
            if _float(F.amax(F.abs(d * t))) <= tolerance_change:
                break
            if abs(loss - prev_loss) < tolerance_change:
                break
        state.update(d=d, t=t, old_dirs=old_dirs, old_stps=old_stps, ro=ro, H_diag=h_diag,
                     prev_flat_grad=prev_flat_grad, prev_loss=prev_loss)
        return orig_loss

    def state_dict(self) -> dict:
        """{"state": {0: the L-BFGS history}, "param_groups": [...]}, as PyTorch's."""
        groups = [{**{k: v for k, v in self.param_groups[0].items() if k != "params"},
                   "params": list(range(len(self._params)))}]
        state = self.state.get(self._params[0])
        return {"state": {0: dict(state)} if state else {}, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore the settings and the L-BFGS history from ``state_dict()``."""
        for k, v in state_dict["param_groups"][0].items():
            if k != "params":
                self.param_groups[0][k] = v
        saved = state_dict["state"].get(0)
        if saved:
            self.state[self._params[0]] = dict(saved)
