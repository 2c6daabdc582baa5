"""``functional_call`` and ``stack_module_state``: modules as functions of their state."""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple

from ..eager import grad_mode
from ..graphlib.registry import get_op


def _stores(module) -> Dict[str, Tuple[Any, str, str]]:
    """Every parameter and buffer name (tied ones under each of their names) -> (owning
    module, "_parameters" or "_buffers", attribute name)."""
    found = {}
    for prefix, mod in module.named_modules(remove_duplicate=False):
        for store in ("_parameters", "_buffers"):
            for k, v in getattr(mod, store).items():
                if v is not None:
                    found[f"{prefix}.{k}" if prefix else k] = (mod, store, k)
    return found


def _untie(module, given: dict) -> dict:
    """``given`` with each tensor that is tied to others in ``module`` (one object under
    several names) given under all of its names."""
    by_object: Dict[int, set] = {}
    for name, (mod, store, k) in _stores(module).items():
        by_object.setdefault(id(getattr(mod, store)[k]), set()).add(name)
    out = dict(given)
    for names in by_object.values():
        if len(names) < 2:
            continue
        present = sorted(n for n in names if n in given)
        if len({id(given[n]) for n in present}) > 1:
            raise ValueError(f"functional_call got multiple values for keys {sorted(names)}, "
                             "which are tied. Consider using tie_weights=False")
        if present:
            for n in names:
                out[n] = given[present[0]]
    return out


def functional_call(module, parameter_and_buffer_dicts, args=None, kwargs: Optional[dict] = None,
                    *, tie_weights: bool = True, strict: bool = False):
    """``torch.func.functional_call``: ``module(*args, **kwargs)`` with the parameters and
    buffers named in ``parameter_and_buffer_dicts`` (a dict, or a tuple/list of dicts with
    distinct keys) in place of its own, which are put back afterwards. ``tie_weights``:
    a value given for one name of a tied tensor serves all its names. ``strict``: every
    parameter and buffer must be given, and no other name."""
    if isinstance(parameter_and_buffer_dicts, dict):
        given = dict(parameter_and_buffer_dicts)
    elif isinstance(parameter_and_buffer_dicts, Sequence):
        if not all(isinstance(d, dict) for d in parameter_and_buffer_dicts):
            raise ValueError("Expected all elements of parameter_and_buffer_dicts to be "
                             "dictionaries")
        keys = [k for d in parameter_and_buffer_dicts for k in d]
        repeated = sorted({k for k in keys if keys.count(k) > 1})
        if repeated:
            raise ValueError(f"{repeated} appeared in multiple dictionaries; behavior of "
                             "functional call is ambiguous")
        given = {k: v for d in parameter_and_buffer_dicts for k, v in d.items()}
    else:
        raise ValueError(f"Expected parameter_and_buffer_dicts to be a dict, or a list/tuple "
                         f"of dicts, but got {type(parameter_and_buffer_dicts)}")
    if tie_weights:
        given = _untie(module, given)
    stores = _stores(module)
    if strict:
        unexpected = [k for k in given if k not in stores]
        missing = [k for k in stores if k not in given]
        msgs = []
        if unexpected:
            msgs.append(f"Unexpected key(s): {', '.join(map(repr, unexpected))}.")
        if missing:
            msgs.append(f"Missing key(s): {', '.join(map(repr, missing))}.")
        if msgs:
            raise RuntimeError(f"Error(s) in reparametrizing for {type(module).__name__}:\n\t"
                               + "\n\t".join(msgs))
    for k in given:
        if k not in stores:
            raise AttributeError(f"functional_call: {type(module).__name__} has no parameter "
                                 f"or buffer named {k!r}")
    saved = []
    try:
        for name, value in given.items():
            mod, store, k = stores[name]
            table = getattr(mod, store)
            saved.append((table, k, table[k]))
            table[k] = value
        if args is None:
            args = ()
        elif not isinstance(args, tuple):
            args = (args,)
        return module(*args, **(kwargs or {}))
    finally:
        for table, k, old in reversed(saved):
            table[k] = old


def stack_module_state(models) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """``torch.func.stack_module_state``: the parameters and the buffers of ``models`` (of
    one class, all in training or all in eval mode), each stacked along a new dim 0; stacked
    parameters are new leaves that require grad when the originals do."""
    models = list(models)
    if not models:
        raise RuntimeError("stack_module_state: Expected at least one model, got 0.")
    if not (all(m.training for m in models) or all(not m.training for m in models)):
        raise RuntimeError("stack_module_state: Expected all models to have the same "
                           "training/eval mode.")
    if not all(type(m) is type(models[0]) for m in models):
        raise RuntimeError("stack_module_state: Expected all models to be of the same class.")

    def stacked(tensors, name):
        grads = {bool(t.requires_grad) for t in tensors}
        if len(grads) > 1:
            raise RuntimeError(f"Expected {name} from each model to have the same "
                               ".requires_grad")
        with grad_mode.no_grad():
            parts = [get_op("reshape")(t.detach(), shape=(1,) + tuple(t.shape))
                     for t in tensors]
            out = get_op("cat")(*parts, dim=0)
        return out.requires_grad_() if grads == {True} else out

    all_params = [dict(m.named_parameters()) for m in models]
    params = {k: stacked([p[k] for p in all_params], k) for k in all_params[0]}
    all_buffers = [dict(m.named_buffers()) for m in models]
    buffers = {k: stacked([b[k] for b in all_buffers], k) for k in all_buffers[0]}
    return params, buffers
