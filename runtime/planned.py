"""The planned program: one executable's instructions over one preallocated arena.

``Program`` is built once per concrete shape signature from a memory plan (made by the
planner the face package hands the runtime: ``duograph.passes.memory.plan_memory``; the
runtime only reads the plan's fields, it never imports the passes). Building it

- allocates one arena (bytes aligned to ``plan.alignment``) on the executable's device and
  makes, for every intermediate the plan puts there, an array view of its bytes;
- runs every ``constant`` node once (``external`` values, never written afterwards);
- resolves symbolic attributes (``reshape`` to ``("N", 4)``) against the signature;
- prepares one step per node: ``(mode, node, kernel, out_kernel, input slots, output slots,
  attrs)``, the kernels taken from the executable's backend (``backend.kernels[op]``,
  ``backend.out_kernel(op)``, ``backend.prepare_out(...)``).

Running is a loop over the steps on a copy of the prepared slot list: an arena step calls the
backend's ``out=`` form for the op (which writes into the planned buffer and returns True)
or, where it has none or declines these operands, its kernel followed by one copy into the
buffer; a view
step (``reshape``, ``permute``...) keeps whatever its kernel returns (a view or a copy).
New state values the plan writes in place get the state's own buffer as their output. In
steady state nothing is allocated per op, except by kernels without an ``out=`` form.

A prepared call (``Executable.prepare``, and ``run`` on static shapes) of a program without
state whose steps are all bare ufuncs or prepared runners runs one generated function
(``fast_call``): the same checks, lock, floating-point state, output reuse and copies,
written out straight for that program, so a call on tiny work costs little above its
kernels.

A compiled loop body (``regions.py``) runs its program with ``run_steps`` after binding its
results to the buffers the loop hands it (the next carry, a row of the stacked ys).

Results a step writes are written into a fresh array per run and returned as they are;
results that view the arena, a state or a feed, or are constants, are copied out before they
are returned, so the next run can reuse the bytes. On numpy a returned array that nobody
holds any more by the next run (only the program's own reference is left: the caller dropped
it and no view, memoryview or feed keeps it) is written again instead of a new one: a fresh
16 MiB result costs its page faults on every call (the float32 GELU over 4M elements: ~2-3
ms of faults around a 2-3 ms kernel), which a caching allocator (PyTorch's, XLA's) does not
pay either. Any other reference, however it was taken, makes the next run allocate anew.
"""
from __future__ import annotations

import sys
from operator import itemgetter
from typing import Dict, List, Sequence

import numpy as np

from ..graphlib.collective_hooks import async_role, progress
from ..graphlib.errors import KernelError
from ..graphlib.kernels import run_kernel
from ..graphlib.types import eval_dim
from . import fperr

ARENA, VIEW, PREPARED, DIRECT, FREE = 0, 1, 2, 3, 4


def resolve_attrs(node, attrs: dict, shapes: Dict[str, int]) -> dict:
    """``attrs`` with symbolic ``shape``/``sizes`` entries (a symbol, or derived as N+2,
    N*6, N[1:]) evaluated against ``shapes``."""
    out = dict(attrs)
    for key in ("shape", "sizes"):
        dims = out.get(key)
        if not isinstance(dims, tuple) or not any(isinstance(d, str) for d in dims):
            continue
        resolved = []
        for d in dims:
            if isinstance(d, str):
                size = eval_dim(d, shapes)
                if size is None:
                    raise KernelError(f"{node.op.name}: the symbolic dim {d!r} is not bound by "
                                      f"any feed\n  in: {node.source}")
                d = size
            resolved.append(d)
        out[key] = tuple(resolved)
    return out


class Program:
    """An executable's nodes prepared against one memory plan (one shape signature)."""

    def __init__(self, exe, plan, shapes: Dict[str, int]):
        xp = exe.xp
        backend = exe.runner
        self.plan = plan
        slot = exe.slot_of
        align = int(plan.alignment)
        raw = xp.empty(int(plan.arena_bytes) + align, dtype=np.uint8)
        start = (-int(_address(raw))) % align
        self.arena = raw[start:start + int(plan.arena_bytes)]      # (a view: keeps raw)
        env: List = [None] * exe.num_slots
        made: Dict[tuple, object] = {}   # values over the same bytes share one array object
        for key, off in plan.offsets.items():
            v = key
            shape = _concrete(v.shape, shapes)
            nbytes = plan.sizes[key]
            spec = (off, nbytes, v.dtype, shape)
            buf = made.get(spec)
            if buf is None:
                buf = made[spec] = self.arena[off:off + nbytes].view(
                    np.dtype(v.dtype)).reshape(shape)
            env[slot[key]] = buf
        # new state values written straight into the state's buffer: (slot, state name)
        self.state_outputs = [(slot[new], slot[state], state.name)
                              for state, new in plan.inplace_updates]
        inplace_new = {new for _, new in plan.inplace_updates}
        external = set(plan.external)
        views = set(plan.views)
        steps = []
        with np.errstate(all="ignore"):
            for node in exe.nodes:
                attrs = resolve_attrs(node, node.attrs, shapes)
                ins = tuple(slot[x] for x in node.inputs)
                outs = tuple(slot[o] for o in node.outputs)
                keys = node.outputs
                if all(k in external for k in keys):          # constants: once, here
                    res = run_kernel(exe.kernel_of(node.op), xp, (), attrs,
                                     exe.is_multi(node),
                                     [np.dtype(o.dtype) for o in node.outputs])
                    for s, r in zip(outs, res):
                        env[s] = r
                    continue
                out_kernel = exe.out_kernel_of(node.op)
                if any(k in views for k in keys):
                    mode = VIEW
                    # for a view step the field holds its memo: [input array, results]
                    # (never for an ordered side effect: a collective's wait runs every time)
                    out_kernel = ([None, None] if len(node.inputs) == 1
                                  and not node.op.ordered else None)
                elif all(k in plan.offsets or k in inplace_new for k in keys):
                    mode = ARENA
                    runner = backend.prepare_out(
                        node.op, attrs, [_concrete(x.shape, shapes) for x in node.inputs])
                    direct = _direct_out(out_kernel, node, attrs, xp)
                    if runner is not None:
                        mode, out_kernel = PREPARED, (runner, out_kernel)
                    elif direct is not None:
                        mode, out_kernel = DIRECT, direct
                else:   # a plan that leaves an output nowhere: run it as the interpreter would
                    mode, out_kernel = VIEW, None
                steps.append((mode, node, exe.kernel_of(node.op), out_kernel, _getter(ins),
                              outs, attrs, exe.is_multi(node),
                              ([np.dtype(o.dtype) for o in node.outputs],
                               [_concrete(o.shape, shapes) for o in node.outputs])))
        self.env = env
        self.steps = _with_frees(exe, steps)
        # MPI moves a started collective on only inside MPI: poke it between kernels
        self.poll = progress if any(async_role(n.op) == "start" for n in exe.nodes) else None
        # where every step is a bare ufunc into its buffer (an optimizer's update, a chain
        # of elementwise ops unfused): the steps as (ufunc, getter, output slot, node), run
        # by a loop without branches
        self.direct = None
        if self.poll is None and steps and all(st[0] == DIRECT for st in steps):
            self.direct = [(st[3], st[4], st[5][0], st[1]) for st in steps]
        # Returned values a step writes into its planned buffer are written into a fresh
        # array per run instead (nothing reuses an output's bytes: it lives to the end), so
        # they are returned as they are. The others are copied out: they view the arena, a
        # state or a feed, or are constants.
        state_ids = {v for v in exe.graph.state}
        written = {s for step in steps if step[0] in (ARENA, PREPARED, DIRECT) for s in step[5]}
        fresh = {slot[v] for v in exe.outputs
                 if slot[v] in written and v not in state_ids
                 and v not in inplace_new and plan.storage(v)[0] == "arena"}
        self.fresh = [(s, (env[s].shape, env[s].dtype)) for s in sorted(fresh)]
        # slot -> the array the last run returned there (numpy: reused once unreferenced)
        self.returned: Dict[int, object] = {} if xp is np and _REFS is not None else None
        self.copy_outputs = [slot[v] not in fresh for v in exe.outputs]
        updated_in_place = {name for _, _, name in self.state_outputs}
        self.writebacks = [(name, s, plan.storage(new)[0] == "arena")
                           for (name, s), (_, new) in zip(exe.update_slots, exe.updates)
                           if name not in updated_in_place]
        self.inplace_names = sorted(updated_in_place)
        # the version bumps of the live objects whose bound state a run writes
        # (``state_written`` decided once per holder)
        holders = [exe._bound[name][1] for name in self.inplace_names
                   + [name for name, _, _ in self.writebacks] if name in exe._bound]
        self.bumps = [h.bump_version for h in holders
                      if getattr(type(h), "bump_version", None) is not None]

    def run(self, exe, env: list) -> None:
        """Run every step over ``env`` (feeds and state already bound)."""
        xp = exe.xp
        for s, state_slot, _ in self.state_outputs:
            env[s] = env[state_slot]
        returned = self.returned
        if returned is None:
            for s, (shape, dtype) in self.fresh:
                env[s] = xp.empty(shape, dtype)
            self.run_steps(exe, env)
            return
        for s, (shape, dtype) in self.fresh:
            env[s] = _unheld(returned, s)
            if env[s] is None:
                env[s] = xp.empty(shape, dtype)
        self.run_steps(exe, env)
        for s, _ in self.fresh:
            returned[s] = env[s]

    def run_steps(self, exe, env: list) -> None:
        """Run the steps over ``env``: every input, state and output buffer already bound
        (a compiled region body binds its outputs to the buffers its loop hands it)."""
        xp = exe.xp
        node = args = None
        direct = self.direct
        if direct is not None:
            try:
                for ufunc, get, out, node in direct:
                    ufunc(*get(env), out=env[out])
            except Exception as e:
                raise exe._kernel_error_for(node, get(env), e) from e
            return
        poll = self.poll
        try:
            for mode, node, kernel, out_kernel, get, outs, attrs, multi, types in self.steps:
                if poll is not None:
                    poll()
                args = get(env)
                if mode == DIRECT:          # a bare ufunc: ufunc(*args, out=buffer)
                    out_kernel(*args, out=env[outs[0]])
                elif mode == PREPARED:
                    buffers = tuple([env[s] for s in outs])
                    runner, generic = out_kernel
                    if not runner(args, buffers):     # declined: the out= form, then the kernel
                        if multi:
                            if not generic(xp, *args, out=buffers, **attrs):
                                _copy_results(xp, node, kernel(xp, *args, **attrs), buffers,
                                              True)
                        elif not generic(xp, *args, out=buffers[0], **attrs):
                            _copy_results(xp, node, kernel(xp, *args, **attrs), buffers,
                                          False)
                elif mode == ARENA:
                    if multi:
                        buffers = tuple([env[s] for s in outs])
                        if out_kernel is None or not out_kernel(xp, *args, out=buffers,
                                                                **attrs):
                            res = kernel(xp, *args, **attrs)
                            _copy_results(xp, node, res, buffers, True)
                    else:
                        buf = env[outs[0]]
                        if out_kernel is None or not out_kernel(xp, *args, out=buf, **attrs):
                            res = kernel(xp, *args, **attrs)
                            _copy_results(xp, node, res, (buf,), False)
                elif mode == FREE:          # view steps' results past their last reader
                    for s in outs:
                        env[s] = None
                else:
                    memo = out_kernel
                    if memo is not None and memo[0] is args[0]:   # the same array: same view
                        for s, r in zip(outs, memo[1]):
                            env[s] = r
                        continue
                    got = run_kernel(kernel, xp, args, attrs, multi, *types)
                    for s, r in zip(outs, got):
                        env[s] = r
                    if memo is not None:
                        # a result that views its input stays right while the input is the
                        # same array (arena buffers, bound state); a copy would go stale
                        views_input = all(xp.may_share_memory(r, args[0]) for r in got)
                        memo[0], memo[1] = (args[0], got) if views_input else (None, None)
        except Exception as e:
            if node is None:
                raise
            raise exe._kernel_error_for(node, args or (), e) from e


def _NOTHING(env) -> tuple:
    return ()


def _with_frees(exe, steps: list) -> list:
    """``steps`` with a ``FREE`` step after the last reader of each view step's result that
    nothing reads after the steps (no output, no state to write back): a "view" step's
    kernel may return a copy (``reshape`` of a permuted array), which the plan gives no
    bytes; dropping the run's reference once it is read for the last time frees it there
    instead of at the end of the run (a view of a planned buffer costs nothing to drop)."""
    kept = set(exe.output_slots) | {s for _, s in exe.update_slots}
    made = {}                       # view result slot -> index of its step
    last = {}                       # slot -> index of the last step reading it
    for k, st in enumerate(steps):
        if st[0] == VIEW:
            for s in st[5]:
                if s not in kept:
                    made[s] = k
    if not made:
        return steps
    for k, st in enumerate(steps):
        for x in st[1].inputs:
            s = exe.slot_of[x]
            if s in made:
                last[s] = k
    after: Dict[int, List[int]] = {}
    for s, k in made.items():
        after.setdefault(last.get(s, k), []).append(s)
    out = []
    for k, st in enumerate(steps):
        out.append(st)
        if k in after:
            out.append((FREE, st[1], None, None, _NOTHING, tuple(sorted(after[k])), None,
                        False, None))
    return out


def _unheld(returned: dict, s: int):
    """``returned[s]`` when the dict's reference is the only one left to it (its last
    caller dropped it), else None. The count is compared with the one the same lookup gives
    for an object only the dict holds (``_REFS``, measured once at import), so it holds
    whatever this interpreter's counting conventions are."""
    held = returned.get(s)
    if held is None or sys.getrefcount(held) != _REFS:
        return None
    return held


def _refs_baseline():
    """The count ``_unheld`` sees for an object held by its dict alone (None off CPython,
    where the counts are not exact: nothing is then reused)."""
    if not hasattr(sys, "getrefcount") or sys.implementation.name != "cpython":
        return None
    probe = {0: np.empty(1)}
    held = probe.get(0)
    return sys.getrefcount(held)


_REFS = _refs_baseline()


def _direct_out(out_kernel, node, attrs: dict, xp):
    """The bare callable an ``out=`` form stands for on this node's dtypes (its
    ``direct(in_dtypes, out_dtype)``), for a one-output node without attrs on numpy; else
    None. The dtypes are the node's own: every array a program binds has them (feeds and
    state are checked, arena buffers are typed)."""
    direct = getattr(out_kernel, "direct", None)
    if direct is None or attrs or len(node.outputs) != 1 or node.op.multi_output \
            or xp is not np:
        return None
    return direct(tuple(np.dtype(x.dtype) for x in node.inputs),
                  np.dtype(node.outputs[0].dtype))


def _getter(slots: tuple):
    """``get(env)``: the arrays in ``slots`` as a tuple, without a Python loop."""
    if len(slots) >= 2:
        return itemgetter(*slots)
    if len(slots) == 1:
        (s,) = slots
        return lambda env: (env[s],)
    return lambda env: ()


def _check_count(node, res, n: int) -> None:
    if not isinstance(res, (tuple, list)) or len(res) != n:
        raise ValueError(f"kernel returned {type(res).__name__}, expected a tuple of {n} "
                         "arrays")


def _copy_results(xp, node, res, buffers: Sequence, multi: bool) -> None:
    """Copy a kernel's fresh result(s) into the planned buffers, refusing a shape that
    differs from the planned one (numpy would broadcast it silently)."""
    if multi:
        _check_count(node, res, len(buffers))
    else:
        res = (res,)
    for r, buf in zip(res, buffers):
        shape = getattr(r, "shape", ())
        if tuple(shape) != buf.shape:
            raise ValueError(f"kernel returned shape {list(shape)}, planned "
                             f"{list(buf.shape)}")
        xp.copyto(buf, r, casting="unsafe")


def _concrete(shape, shapes: Dict[str, int]) -> tuple:
    return tuple(eval_dim(d, shapes) if isinstance(d, str) else d for d in shape)


def _address(arr) -> int:
    """The data address of a numpy or cupy array (for aligning the arena's start)."""
    if isinstance(arr, np.ndarray):
        return arr.ctypes.data
    return int(arr.data.ptr)


def fast_call(exe, prog: Program, feeds: Sequence[tuple]):
    """``call(arrays) -> outputs or None``: one generated function for a prepared call of
    ``prog`` (``PreparedCall``) when it is simple enough, else None. Simple: numpy, no
    state read or written, no collective to poll, every step a bare ufunc into its buffer
    (DIRECT) or a prepared runner (PREPARED, one output). The function is the same run as
    ``PreparedCall`` + ``Planned.execute`` + ``Program.run`` + ``run_steps``, written out
    straight for this program (as ``fused_chunks.DirectPlan`` writes out a region): feeds
    checked by exact type, dtype and shape (None, having run nothing, otherwise), the run
    lock held, floating-point warnings off, arena buffers bound as constants, returned
    arrays reused only when nobody else holds them (``_unheld``), outputs that view the
    arena or a feed copied. ``feeds``: ``PreparedCall.feeds``, (position, slot, dtype,
    shape) per feed the program reads.
    """
    if exe.xp is not np or prog.poll is not None or exe.live_state_slots or prog.writebacks \
            or prog.bumps or prog.state_outputs or not prog.steps:
        return None
    if prog.returned is None:
        return None
    glob: Dict[str, object] = {"ndarray": np.ndarray, "empty": np.empty, "getrefcount":
                               sys.getrefcount, "REFS": _REFS, "returned": prog.returned,
                               "exe": exe, "prog": prog, "steps": exe.steps,
                               "lock": exe.run_lock, "fperr_ignore": fperr.ignore,
                               "fperr_restore": fperr.restore, "decline": _declined}
    name: Dict[int, str] = {}
    lines = ["def call(arrays):"]
    for i, s, dt, shape in feeds:
        glob[f"D{s}"], glob[f"S{s}"] = dt, shape
        name[s] = f"a{s}"
        lines += [f"    a{s} = arrays[{i}]",
                  f"    if type(a{s}) is not ndarray or a{s}.dtype != D{s} or "
                  f"a{s}.shape != S{s}:",
                  "        return None"]
    fresh = dict(prog.fresh)
    body = []
    for k, step in enumerate(prog.steps):
        mode, node, kernel, out_kernel, get, outs, attrs, multi, types = step
        if mode not in (DIRECT, PREPARED) or len(outs) != 1 or (multi and mode == DIRECT):
            return None
        slots = [exe.slot_of[x] for x in node.inputs]
        args = []
        for s in slots:
            if s not in name:           # an arena buffer or a constant: fixed for prog
                if prog.env[s] is None:
                    return None
                glob[f"E{s}"] = prog.env[s]
                name[s] = f"E{s}"
            args.append(name[s])
        (o,) = outs
        if o not in name:
            if o in fresh:
                name[o] = f"b{o}"
            elif prog.env[o] is not None:
                glob[f"E{o}"] = prog.env[o]
                name[o] = f"E{o}"
            else:
                return None
        glob[f"K{k}"] = out_kernel
        body.append(f"            k = {k}")
        if mode == DIRECT:
            body.append(f"            K{k}({', '.join(args)}, out={name[o]})")
        else:
            glob[f"R{k}"] = out_kernel[0]
            tup = f"({', '.join(args)},)"
            body.append(f"            if not R{k}({tup}, ({name[o]},)):")
            body.append(f"                decline(exe, steps_[{k}], {tup}, ({name[o]},))")
    out_names = []
    for s, copy in zip(exe.output_slots, prog.copy_outputs):
        if s not in name:
            return None
        out_names.append(f"{name[s]}.copy()" if copy or name[s] in out_names else name[s])
    glob["steps_"] = prog.steps
    lines.append("    with lock:")
    for s in fresh:
        glob[f"F{s}"] = fresh[s]
        lines += [f"        b{s} = returned.get({s})",
                  f"        if b{s} is None or getrefcount(b{s}) != REFS:",
                  f"            b{s} = empty(*F{s})"]
    lines += ["        token = fperr_ignore()", "        k = -1", "        try:",
              "            pass"]
    lines += body
    lines += ["        except Exception as e:",
              "            if k < 0:",
              "                raise",
              "            step = steps_[k]",
              "            raise exe._kernel_error_for(step[1], step[4](_env(step, locals())),"
              " e) from e",
              "        finally:",
              "            fperr_restore(token)"]
    for s in fresh:
        lines.append(f"        returned[{s}] = b{s}")
    lines.append("        steps.last_program = prog")
    lines.append(f"        return [{', '.join(out_names)}]")
    glob["_env"] = lambda step, scope: _scope_env(step, scope, name, glob, len(prog.env))
    source = "\n".join(lines) + "\n"
    exec(compile(source, f"<prepared call {exe.graph.name}>", "exec"), glob)
    call = glob["call"]
    call.source = source
    return call


def _scope_env(step, scope: dict, name: Dict[int, str], glob: dict, n: int) -> list:
    """The slot list a failed step's getter reads, rebuilt from the generated function's
    locals (for the error message only)."""
    env: List = [None] * n
    for s, var in name.items():
        env[s] = scope.get(var, glob.get(var))
    return env


def _declined(exe, step, args: tuple, buffers: tuple) -> None:
    """A PREPARED step whose runner declined (its strategy changed): the op's ``out=``
    form, else its kernel and one copy, as ``run_steps`` does."""
    _, node, kernel, (_, generic), _, _, attrs, multi, _ = step
    if not generic(np, *args, out=buffers if multi else buffers[0], **attrs):
        _copy_results(np, node, kernel(np, *args, **attrs), buffers, multi)
