"""A fake ``cupy`` with CUDA stream capture, for testing CUDA-graph code without a GPU.

``fake_cupy()`` enters ``fake_device.fake_cuda()`` (numpy arrays of the subclass
``FakeDeviceArray`` play device arrays; ``FakeXP`` is the "cuda" backend's array module) and
installs that very array module as ``sys.modules["cupy"]`` (so ``import cupy`` inside the
engine gives the backend's ``xp``: ``exe.xp is cupy``), with the ``cupy.cuda`` names that
capture uses: ``Stream`` (a context manager making it the current stream, ``begin_capture``,
``end_capture``, ``is_capturing``, ``synchronize``), ``MemoryPool``, ``using_allocator``,
``get_current_stream`` and ``runtime.CUDARuntimeError``. Everything is put back on exit.

What capture emulates (numpy stands in for the device; "device array" = ``FakeDeviceArray``)
--------------------------------------------------------------------------------------------
Between ``stream.begin_capture()`` and ``stream.end_capture()`` (a real capture launches
nothing; it records the kernels into a graph):

- **Nothing that writes existing device memory executes.** Calls that write into arrays they
  are given are only recorded: any ufunc call or method with ``out=`` (so ``a += b`` too),
  ``ufunc.at``, ``copyto``/``put``/``place``/``putmask``/``put_along_axis``/
  ``fill_diagonal``, array functions given ``out=``, and the in-place methods ``fill``,
  ``__setitem__``, ``sort``, ``put``, ``partition``. They return what numpy would return
  (the ``out`` array) with its contents unchanged.
- **Calls that allocate a fresh result execute** (so Python sees the right shapes and
  dtypes) and are recorded together with their result objects: ufuncs and their
  reductions, array functions, array methods (``copy``, ``astype``, fancy ``__getitem__``,
  ``argmax``, ``dot``...), the array module's creation functions (``zeros``, ``full``,
  ``arange``... ; ``empty``/``empty_like`` allocate and record nothing, as they launch
  nothing) and random draws. A reduction to a numpy scalar returns a 0-d device array, as
  cupy's do. The values computed at capture are those of memory not yet written by the
  recorded writes: no more meaningful than a real capture's (which computes nothing).
- **Views launch nothing**: a result sharing memory with a device argument (``reshape`` of a
  contiguous array, basic slicing, ``.T``...) is not recorded; it sees whatever the replays
  write into the memory it views.
- **A host read raises** ``CUDARuntimeError`` (cudaErrorStreamCaptureUnsupported) and
  invalidates the capture, so ``end_capture`` then raises cudaErrorStreamCaptureInvalidated
  (without naming the first error), as CUDA does: ``.get()``, ``cupy.asnumpy``,
  ``float``/``int``/``bool``/``complex``/``operator.index``/``item``/``tolist``/
  ``tobytes`` of a device array, a result whose size depends on the data (``nonzero``,
  ``unique``, boolean-mask indexing...), host -> device copies (``asarray``/``array`` of
  host data, ``arr.set``, assigning a host array into a device array),
  ``stream.synchronize()`` of the capturing stream, and device work issued on another
  stream than the capturing one (cudaErrorStreamCaptureImplicit).
- **Every device array is read-only during capture** (flags flipped at
  ``begin_capture``, fresh results frozen as they are made, all restored at
  ``end_capture``): a write through a path this fake does not intercept fails loudly
  instead of executing where a real capture would not.
- ``end_capture()`` returns a ``FakeGraph``: ``launch(stream)`` replays every recorded call
  in order against the same array objects (addresses baked), with the arguments as they
  were at capture (Python scalars, and host arrays copied at record time: kernel arguments
  are baked), writing each fresh-result call's new values into its recorded result arrays
  (so views of them stay right). ``upload`` is accepted. ``launches`` counts launches;
  ``calls`` lists what was recorded. A random generator made during capture is reset to its
  seeded state at the start of each replay (cupy seeds it with a captured kernel), so each
  replay draws what the captured run would have.
- Allocations made during capture are counted against the pool of the active
  ``using_allocator`` (``MemoryPool.total_bytes()``); those made with no pool active are
  counted in the graph's ``allocations_outside_pool`` (real graphs would keep writing such
  memory after the shared pool hands it to someone else).

What it cannot emulate
----------------------
Concurrency (streams are sequential here: races between a non-blocking stream and the
default stream, missing synchronisation, and an async ``launch`` still running when the
host reads are invisible); reuse of freed device memory (the graph holds its arrays, so a
temporary freed back to a shared pool is never overwritten); cupy's own kernels and their
rules (which ops cupy really captures, e.g. whether a given cupy function syncs; cuBLAS
workspaces; NVRTC); ``numpy.asarray`` of a device array (numpy converts the subclass without
asking it; cupy refuses); pinned-memory host -> device copies, which real CUDA may capture
(baking the staging buffer) but which this fake refuses; numpy's own decomposition of some
methods (``mean`` is a sum then an in-place divide: both recorded, replayed in order).
"""
from __future__ import annotations

import contextlib
import gc
import inspect
import sys
import types

import numpy as np

import fake_device
from fake_device import FakeDeviceArray, FakeXP, fake_cuda

from duograph.eager import device as eager_device
from duograph.eager import dispatch as eager_dispatch
from duograph.runtime import backends
from duograph.runtime.cuda import CUDABackend
from duograph.runtime.cuda import fused as cuda_fused


class CUDARuntimeError(RuntimeError):
    """What ``cupy.cuda.runtime.CUDARuntimeError`` is: a CUDA error status and its name."""

    def __init__(self, name: str, detail: str = ""):
        self.name = name
        super().__init__(f"{name}: {detail}" if detail else name)


UNSUPPORTED = "cudaErrorStreamCaptureUnsupported"
INVALIDATED = "cudaErrorStreamCaptureInvalidated"
IMPLICIT = "cudaErrorStreamCaptureImplicit"

# array functions that write their first argument
_WRITERS = {"copyto", "put", "place", "putmask", "put_along_axis", "fill_diagonal"}
# results whose size depends on the data: cupy reads a count back to the host
_DATA_SHAPED = {"nonzero", "flatnonzero", "argwhere", "unique", "extract", "compress",
                "unique_values", "unique_counts", "unique_inverse", "unique_all", "trim_zeros"}
# array functions that only read metadata (no kernel)
_METADATA = {"may_share_memory", "shares_memory", "result_type", "ndim", "shape", "size",
             "iscomplexobj", "isrealobj", "can_cast", "min_scalar_type", "broadcast_shapes",
             "common_type"}
# creation functions that allocate without launching a kernel
_ALLOC_ONLY = {"empty", "empty_like", "ndarray"}
# creation functions that read host data
_FROM_HOST = {"array", "asarray", "asanyarray", "ascontiguousarray", "asfortranarray",
              "frombuffer", "fromiter", "fromfunction", "copy"}


class _State:
    def __init__(self):
        self.capture = None        # the Capture in progress
        self.depth = 0             # > 0: inside a call being executed (numpy internals)
        self.streams = []          # the current-stream stack (empty: the null stream)
        self.allocator = None      # the MemoryPool of the active using_allocator


_S = _State()


def _active():
    """The capture that a device call made now belongs to (None: execute it)."""
    cap = _S.capture
    if cap is None or _S.depth:
        return None
    if not _S.streams or _S.streams[-1] is not cap.stream:
        cap.fail(IMPLICIT, "device work on another stream than the capturing one")
    return cap


def _is_dev(x) -> bool:
    return isinstance(x, FakeDeviceArray)


def _walk(x, acc: list) -> list:
    if isinstance(x, np.ndarray):
        acc.append(x)
    elif isinstance(x, (list, tuple)):
        for y in x:
            _walk(y, acc)
    elif isinstance(x, dict):
        for y in x.values():
            _walk(y, acc)
    return acc


def _bake(x):
    """An argument as a captured kernel holds it: host arrays copied, containers copied."""
    if isinstance(x, np.ndarray) and not _is_dev(x):
        return x.copy()
    if isinstance(x, list):
        return [_bake(y) for y in x]
    if isinstance(x, tuple) and type(x) is tuple:
        return tuple(_bake(y) for y in x)
    if isinstance(x, dict):
        return {k: _bake(v) for k, v in x.items()}
    return x


def _has_host_data(args, kwargs) -> bool:
    for x in list(args) + list(kwargs.values()):
        if _is_dev(x):
            continue
        if isinstance(x, (np.ndarray, np.generic, list, tuple, int, float, complex, bool)):
            if isinstance(x, (list, tuple)) and all(_is_dev(y) for y in x) and x:
                continue
            return True
    return False


def _base(x):
    return x.view(np.ndarray) if _is_dev(x) else x


def _unwrap(x):
    if _is_dev(x):
        return x.view(np.ndarray)
    if isinstance(x, tuple) and type(x) is tuple:
        return tuple(_unwrap(y) for y in x)
    if isinstance(x, list):
        return [_unwrap(y) for y in x]
    return x


def _to_dev(x):
    if isinstance(x, np.ndarray) and not _is_dev(x):
        return x.view(FakeDeviceArray)
    if isinstance(x, tuple) and type(x) is tuple:
        return tuple(_to_dev(y) for y in x)
    if isinstance(x, list):
        return [_to_dev(y) for y in x]
    return x


class _Call:
    """One recorded call: ``fn(*args, **kwargs)``; ``targets``: for a fresh-result call,
    (position in the result, recorded array) pairs its replay writes."""

    __slots__ = ("fn", "args", "kwargs", "targets", "label")

    def __init__(self, fn, args, kwargs, targets, label):
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.targets, self.label = targets, label

    def replay(self) -> None:
        res = self.fn(*self.args, **self.kwargs)
        if not self.targets:
            return
        items = res if isinstance(res, (tuple, list)) else (res,)
        for k, target in self.targets:
            new = np.asarray(_base(items[k]))
            if new.shape != target.shape:
                raise AssertionError(f"fake graph: replay of {self.label} made shape "
                                     f"{new.shape}, captured {target.shape}")
            np.copyto(target.view(np.ndarray), new, casting="unsafe")

    def __repr__(self):
        return f"<{self.label}{' -> fresh' if self.targets else ''}>"


class _Reset:
    """Replay step: put a random generator back to its state when captured."""

    def __init__(self, gen, state):
        self.gen, self.state, self.label = gen, state, "default_rng"

    def replay(self) -> None:
        self.gen.bit_generator.state = self.state


class Capture:
    """The calls recorded so far by a stream capture, and the arrays it froze."""

    def __init__(self, stream):
        self.stream = stream
        self.calls: list = []
        self.invalid = None
        self.frozen: list = []          # arrays made read-only by the capture
        self.outside_pool = 0
        fakes = [o for o in gc.get_objects() if type(o) is FakeDeviceArray]
        self.readonly_before = {id(o): o for o in fakes if not o.flags.writeable}
        for o in fakes:
            if o.flags.writeable:
                o.flags.writeable = False
                self.frozen.append(o)

    def fail(self, name: str, what: str):
        """Raise the CUDA error a capture gives for ``what``; the capture is invalidated."""
        if self.invalid is None:
            self.invalid = f"{name}: {what}"
        raise CUDARuntimeError(name, f"{what} (operation not permitted when stream is "
                                     "capturing)")

    def note_fresh(self, arrays) -> None:
        for a in arrays:
            if a.flags.writeable:
                a.flags.writeable = False
                self.frozen.append(a)
            pool = _S.allocator
            if pool is None:
                self.outside_pool += 1
            else:
                pool._total += a.nbytes

    def thaw(self) -> None:
        pending = self.frozen
        while pending:
            left = []
            for o in pending:
                try:
                    o.flags.writeable = True
                except ValueError:
                    left.append(o)
            if len(left) == len(pending):
                break
            pending = left
        # views made during capture of frozen arrays inherited the flag
        for o in gc.get_objects():
            if type(o) is FakeDeviceArray and not o.flags.writeable \
                    and id(o) not in self.readonly_before:
                try:
                    o.flags.writeable = True
                except ValueError:
                    pass
        self.readonly_before = {}


def _record_write(cap, fn, args, kwargs, label):
    cap.calls.append(_Call(fn, _bake(args), _bake(kwargs), (), label))


def _run(fn, args, kwargs):
    _S.depth += 1
    try:
        return fn(*args, **kwargs)
    finally:
        _S.depth -= 1


def _fresh_call(cap, fn, args, kwargs, label, exe=None):
    """Execute a call that may allocate fresh results; record it with them."""
    res = _run(exe or fn, args, kwargs)
    ins = [_base(a) for a in _walk((args, kwargs), []) if _is_dev(a)]
    single = not isinstance(res, (tuple, list))
    items = [res] if single else list(res)
    targets = []
    for k, r in enumerate(items):
        if isinstance(r, (np.generic, int, float, complex, bool)) and not isinstance(
                r, np.ndarray):
            r = items[k] = np.asarray(r).view(FakeDeviceArray)   # cupy: a 0-d array
        elif isinstance(r, np.ndarray):
            if not _is_dev(r):
                r = items[k] = r.view(FakeDeviceArray)
            rb = r.view(np.ndarray)
            if any(np.may_share_memory(rb, a) for a in ins):
                continue                                         # a view: no kernel
        else:
            continue
        targets.append((k, r))
    if targets:
        cap.note_fresh([t for _, t in targets])
        cap.calls.append(_Call(fn, _bake(args), _bake(kwargs), targets, label))
    if single:
        return items[0]
    return type(res)(items) if type(res) in (tuple, list) else res


# -- hooks installed on FakeDeviceArray while the fake cupy is in use ----------------------------
def _array_ufunc(self, ufunc, method, *inputs, **kwargs):
    fn = getattr(ufunc, method)
    out = kwargs.get("out")
    if out is not None and not isinstance(out, tuple):
        out = kwargs["out"] = (out,)
    cap = _active()
    if cap is not None:
        writes = method == "at" or (out is not None and any(o is not None for o in out))
        label = f"{ufunc.__name__}.{method}"
        if writes:
            _record_write(cap, fn, inputs, kwargs, label)
            if method == "at":
                return None
            return out[0] if len(out) == 1 else out
        return _fresh_call(cap, fn, inputs, kwargs, label,
                           exe=lambda *a, **k: _array_ufunc(self, ufunc, method, *a, **k))
    args = _unwrap(inputs)
    if out is not None:
        kwargs["out"] = _unwrap(out)
    res = fn(*args, **kwargs)
    if out is not None and method != "at":
        return out[0] if len(out) == 1 else out
    return _to_dev(res)


def _out_of(func, args, kwargs):
    out = kwargs.get("out")
    if out is None and args:
        try:
            out = inspect.signature(func).bind(*args, **kwargs).arguments.get("out")
        except (TypeError, ValueError):
            out = None
    return out


def _array_function(self, func, types_, args, kwargs):
    name = func.__name__
    cap = _active() if name not in _METADATA else None
    if cap is not None:
        if name in _DATA_SHAPED or (name == "where" and len(args) + len(kwargs) == 1):
            cap.fail(UNSUPPORTED, f"{name} sizes its result from the data")
        label = f"numpy.{name}"
        if name in _WRITERS or _out_of(func, args, kwargs) is not None:
            _record_write(cap, func, args, kwargs, label)
            out = _out_of(func, args, kwargs)
            return out
        return _fresh_call(cap, func, args, kwargs, label)
    return _to_dev(func._implementation(*args, **kwargs))


def _method(name, kind, orig=None):
    orig = orig or getattr(np.ndarray, name)

    def hook(self, *args, **kwargs):
        cap = _active()
        if cap is None:
            return _run(orig, (self,) + args, kwargs)
        label = f"ndarray.{name}"
        if kind == "read":
            cap.fail(UNSUPPORTED, f"{label} reads a device array on the host")
        if kind == "datadep":
            cap.fail(UNSUPPORTED, f"{label} sizes its result from the data")
        if kind == "write":
            _record_write(cap, orig, (self,) + args, kwargs, label)
            return None
        return _fresh_call(cap, orig, (self,) + args, kwargs, label)
    hook.__name__ = name
    return hook


def _getitem(self, key):
    cap = _active()
    if cap is None:
        return _run(np.ndarray.__getitem__, (self, key), {})
    keys = key if isinstance(key, tuple) else (key,)
    if any(isinstance(k, np.ndarray) and k.dtype == bool for k in keys):
        cap.fail(UNSUPPORTED, "boolean-mask indexing sizes its result from the data")
    return _fresh_call(cap, np.ndarray.__getitem__, (self, key), {}, "ndarray.__getitem__")


def _setitem(self, key, value):
    cap = _active()
    if cap is None:
        return _run(np.ndarray.__setitem__, (self, key, value), {})
    if isinstance(value, np.ndarray) and not _is_dev(value):
        cap.fail(UNSUPPORTED, "assigning a host array copies it to the device")
    _record_write(cap, np.ndarray.__setitem__, (self, key, value), {}, "ndarray.__setitem__")


def _set(self, host, stream=None):
    """cupy's ``ndarray.set``: copy a host array into this one."""
    cap = _active()
    if cap is not None:
        cap.fail(UNSUPPORTED, "ndarray.set copies host memory to the device")
    # cupy's checks, word for word
    if not isinstance(host, np.ndarray) or _is_dev(host):
        raise TypeError("Only numpy.ndarray can be set to cupy.ndarray")
    if host.dtype != self.dtype:
        raise TypeError(f"{host.dtype} array cannot be set to {self.dtype} array")
    if host.shape != self.shape:
        raise ValueError(f"Shape mismatch. Old shape: {self.shape}, new shape: {host.shape}")
    np.copyto(self.view(np.ndarray), host, casting="unsafe")


def _make_hooks(original_get):
    hooks = {"__array_ufunc__": _array_ufunc, "__array_function__": _array_function,
             "__getitem__": _getitem, "__setitem__": _setitem, "set": _set,
             "get": _method("get", "read", original_get)}
    for name in ("fill", "sort", "put", "partition"):
        hooks[name] = _method(name, "write")
    for name in ("copy", "astype", "argmax", "argmin", "argsort", "take", "repeat", "dot",
                 "flatten", "searchsorted", "choose", "trace", "__copy__", "__deepcopy__",
                 "reshape", "ravel"):
        hooks[name] = _method(name, "fresh")
    for name in ("item", "tolist", "tobytes", "__float__", "__int__", "__index__",
                 "__bool__", "__complex__"):
        hooks[name] = _method(name, "read")
    hooks["nonzero"] = _method("nonzero", "datadep")
    return hooks


# -- the array module's functions --------------------------------------------------------------
def _xp_callable(fn):
    """``fake_device._wrap_callable`` while the fake cupy is in use: calls through the array
    module that dispatch to no device argument (creation functions, random draws) are
    recorded here."""
    name = getattr(fn, "__name__", "fn")

    def call(*args, **kwargs):
        cap = _active()
        if cap is None:
            return _to_dev(fn(*args, **kwargs))
        if name in _FROM_HOST and _has_host_data(args, kwargs):
            cap.fail(UNSUPPORTED, f"{name} of host data copies it to the device")
        before = len(cap.calls)
        res = _to_dev(fn(*args, **kwargs))
        if len(cap.calls) != before or _S.capture is None:
            return res                    # dispatched to a hook, which recorded it
        arrays = [r for r in _walk(res, []) if _is_dev(r)]
        ins = [_base(a) for a in _walk((args, kwargs), []) if _is_dev(a)]
        if not arrays or any(np.may_share_memory(r.view(np.ndarray), a)
                             for r in arrays for a in ins):
            return res
        if name in _ALLOC_ONLY:
            cap.note_fresh(arrays)
            return res
        targets = [(0, res)] if _is_dev(res) else [
            (k, r) for k, r in enumerate(res) if _is_dev(r)]
        cap.note_fresh([t for _, t in targets])
        cap.calls.append(_Call(fn, _bake(args), _bake(kwargs), targets, f"xp.{name}"))
        return res
    call.__name__ = name
    return call


def _asarray(x, dtype=None, order=None):
    cap = _active()
    if cap is not None and not _is_dev(x):
        cap.fail(UNSUPPORTED, "asarray of host data copies it to the device")
    return _ORIG_ASARRAY(x, dtype, order)


_ORIG_ASARRAY = FakeXP.asarray


def _default_rng(seed=None):
    if _is_dev(seed):
        seed = int(seed)                          # a host read (raises during capture)
    gen = np.random.default_rng(seed)
    cap = _active()
    if cap is not None:
        cap.calls.append(_Reset(gen, gen.bit_generator.state))
    return fake_device._Generator(gen)


class ElementwiseKernel:
    """``cupy.ElementwiseKernel``: the generated CUDA C compiled for the host by the host
    C++ compiler (``test_cuda_backend_host.HostKernel``), called like cupy's (inputs, then
    optional outputs), a kernel launch as far as capture is concerned."""

    def __init__(self, in_params, out_params, operation, name, preamble="", **options):
        from test_cuda_backend_host import HostKernel

        from duograph.runtime.cuda.codegen import KernelSource
        self.name = name
        self.n_in = len([p for p in in_params.split(",") if p.strip()])
        self._host = HostKernel(KernelSource(in_params, out_params, operation, name,
                                             preamble))

    def __call__(self, *arrays):
        cap = _active()
        if cap is None:
            return _to_dev(_run(self._host, arrays, {}))
        label = f"ElementwiseKernel {self.name}"
        if len(arrays) > self.n_in:
            _record_write(cap, self._host, arrays, {}, label)
            outs = arrays[self.n_in:]
            return outs[0] if len(outs) == 1 else tuple(outs)
        return _fresh_call(cap, self._host, arrays, {}, label)


# -- cupy.cuda -----------------------------------------------------------------------------------
class FakeGraph:
    """What ``end_capture`` returns: the recorded calls, replayed by ``launch``."""

    def __init__(self, calls, outside_pool: int):
        self.calls = calls
        self.launches = 0
        self.uploaded = False
        self.allocations_outside_pool = outside_pool

    def upload(self, stream=None) -> None:
        self.uploaded = True

    def launch(self, stream=None) -> None:
        cap = _active()
        if cap is not None:                      # a graph launched into a capture: a child
            cap.calls.append(_Call(self.launch, (), {}, (), "graph.launch"))
            return
        if _S.capture is not None:
            raise CUDARuntimeError(IMPLICIT, "graph launch while another stream captures")
        for call in self.calls:
            call.replay()
        self.launches += 1


class Stream:
    """``cupy.cuda.Stream``: a context manager making it the current stream, and capture."""

    def __init__(self, null=False, non_blocking=False, ptds=False):
        self.null = null
        self.non_blocking = non_blocking

    def __enter__(self):
        _S.streams.append(self)
        return self

    def __exit__(self, *exc):
        _S.streams.pop()
        return False

    def use(self):
        _S.streams.append(self)
        return self

    def is_capturing(self) -> bool:
        return _S.capture is not None and _S.capture.stream is self

    def begin_capture(self, mode=None) -> None:
        if self.null:
            raise CUDARuntimeError(UNSUPPORTED, "the legacy null stream cannot be captured")
        if _S.capture is not None:
            raise CUDARuntimeError("cudaErrorIllegalState", "a capture is in progress")
        _S.capture = Capture(self)

    def end_capture(self) -> FakeGraph:
        cap = _S.capture
        if cap is None or cap.stream is not self:
            raise CUDARuntimeError("cudaErrorIllegalState", "this stream is not capturing")
        _S.capture = None
        cap.thaw()
        if cap.invalid is not None:
            # (as CUDA's, the message does not say which error invalidated it)
            raise CUDARuntimeError(INVALIDATED, "operation failed due to a previous error "
                                                "during capture")
        return FakeGraph(cap.calls, cap.outside_pool)

    def synchronize(self) -> None:
        if self.is_capturing():
            _S.capture.fail(UNSUPPORTED, "synchronizing a capturing stream")


class MemoryPool:
    """``cupy.cuda.MemoryPool``: ``total_bytes()`` counts what captures allocated under it."""

    def __init__(self, allocator=None):
        self._total = 0

    def malloc(self, nbytes: int):
        self._total += int(nbytes)
        return None

    def total_bytes(self) -> int:
        return self._total

    def used_bytes(self) -> int:
        return self._total


@contextlib.contextmanager
def using_allocator(allocator=None):
    """``cupy.cuda.using_allocator``: allocations in the block come from ``allocator``'s
    pool (a ``MemoryPool.malloc``)."""
    saved = _S.allocator
    _S.allocator = getattr(allocator, "__self__", None)
    try:
        yield
    finally:
        _S.allocator = saved


def _current_stream():
    return _S.streams[-1] if _S.streams else _NULL


_NULL = Stream(null=True)


@contextlib.contextmanager
def fake_cupy(cuda_backend: bool = False):
    """The fake device as "cuda" (``fake_cuda()``) with its array module installed as
    ``cupy`` and capture hooks on its arrays, for the duration of the block; yields the fake
    ``cupy`` module (the backend's ``xp``).

    ``cuda_backend``: the "cupy" backend is duograph's real ``CUDABackend`` over the fake
    module (its fused compiler, generated ElementwiseKernels compiled for the host, device
    softmax-cross-entropy) instead of ``fake_cuda``'s plain ``Backend`` running the ops'
    reference kernels; the compiled-kernel cache is emptied before and after."""
    saved_mod = sys.modules.get("cupy", None)
    had_mod = "cupy" in sys.modules
    saved_wrap = fake_device._wrap_callable
    saved_attrs = {k: FakeDeviceArray.__dict__[k] for k in ("get", "__repr__")}
    hooks = _make_hooks(saved_attrs["get"])
    for name, fn in hooks.items():
        setattr(FakeDeviceArray, name, fn)
    fake_device._wrap_callable = _xp_callable
    FakeXP.asarray = staticmethod(_asarray)
    try:
        with fake_cuda() as backend:
            xp = backend.xp
            xp.random = types.SimpleNamespace(default_rng=_default_rng)
            xp.cuda = types.SimpleNamespace(
                Stream=Stream, MemoryPool=MemoryPool, using_allocator=using_allocator,
                get_current_stream=_current_stream, graph=types.SimpleNamespace(),
                runtime=types.SimpleNamespace(CUDARuntimeError=CUDARuntimeError))
            xp.ElementwiseKernel = ElementwiseKernel
            sys.modules["cupy"] = xp
            saved_kernels = cuda_fused._kernels
            if cuda_backend:
                cuda_fused._kernels = {}
                backends._made["cupy"] = CUDABackend(xp)
                eager_device.set_backend_provider(eager_device.get_backend_provider())
                eager_dispatch._scalar_cache.clear()
            try:
                yield xp
            finally:
                cuda_fused._kernels = saved_kernels
                if had_mod:
                    sys.modules["cupy"] = saved_mod
                else:
                    sys.modules.pop("cupy", None)
    finally:
        if _S.capture is not None:
            _S.capture.thaw()
        _S.__init__()
        FakeXP.asarray = staticmethod(_ORIG_ASARRAY)
        fake_device._wrap_callable = saved_wrap
        for name in hooks:
            if name in saved_attrs:
                setattr(FakeDeviceArray, name, saved_attrs[name])
            else:
                delattr(FakeDeviceArray, name)
