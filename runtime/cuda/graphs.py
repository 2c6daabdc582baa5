"""Whole steps as CUDA graphs: a planned executable with fixed shapes captured once
(``cupy.cuda.Stream.begin_capture`` / ``end_capture``) and replayed with one launch.

``capture(exe, feeds)`` (or ``CudaGraphStep(exe, feeds)``) needs an executable compiled for
the cuda backend with a memory plan (``g.compile(passes="O2", device="cuda")``, or any
passes with ``plan=True``) whose placeholders have static shapes. It

1. copies the example feeds into static device buffers (the graph reads them there);
2. runs the step ``warmup`` times on a private stream, uncaptured: every kernel is compiled,
   the program's arena allocated, state bound;
3. runs it once more under stream capture, with a private cupy memory pool as the
   allocator, so that the temporaries and outputs the captured kernels write stay reserved
   for the graph (memory freed back to the shared pool would be handed to other arrays
   while replays still write it);
4. replays: each call copies the new feeds into the static buffers and launches the graph.
   State is updated in place on the device, as an uncaptured run does (and the versions of
   the tensors it writes are bumped, as an uncaptured run bumps them). Before each launch,
   on the step's stream and outside the graph, the device copy of a host 0-d state (a
   learning rate changed through ``param_groups`` or a scheduler) is refreshed, and the
   state arrays are compared with those captured: a state given a new array since
   (``p.data = ...``, ``exe.state[name] = ...``) makes the step capture again, since the
   graph has the old array's address baked in.

Where capture fails (a kernel that reads a value back to the host, such as a data-dependent
shape, or an op cupy cannot capture) the step falls back to uncaptured runs of the
executable and says why in ``reason`` (the step's own error, not the "capture invalidated"
that ``end_capture`` then raises); ``captured`` tells which.

The outputs of a replay are the graph's own buffers: each call returns copies (device
arrays), or numpy arrays with ``host=True``.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np

from ...graphlib.kernels import state_written


class CudaGraphStep:
    """A planned cuda executable captured as one CUDA graph (see the module docstring)."""

    def __init__(self, exe, feeds: Optional[Dict[str, object]] = None, *, warmup: int = 2):
        import cupy         # (optional: the gpu extra, needed only to capture)
        self.cupy = cupy
        self.exe = exe
        if getattr(exe.xp, "module", exe.xp) is not cupy:     # (the backend's BlasArrayModule)
            raise ValueError(f"CUDA graphs: the executable runs on the {exe.backend} backend; "
                             "compile it with device='cuda'")
        if exe.planner is None:
            raise ValueError("CUDA graphs: the executable has no memory plan (compile with "
                             "passes='O2' or plan=True)")
        if exe.symbols:
            raise ValueError(f"CUDA graphs: the feeds have symbolic dims {list(exe.symbols)}; "
                             "a captured step needs fixed shapes")
        feeds = dict(feeds or {})
        self.placeholders = {v.name: v for v, _ in exe.feeds}
        extra = sorted(set(feeds) - set(self.placeholders))
        if extra:
            raise ValueError(f"CUDA graphs: unknown example feed {', '.join(map(repr, extra))};"
                             f" the placeholders are {sorted(self.placeholders)}")
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.static: Dict[str, object] = {}
        for v, _ in exe.feeds:
            if v.name not in feeds:
                raise ValueError(f"CUDA graphs: missing example feed {v.name!r}")
            self.static[v.name] = cupy.empty(tuple(v.shape), np.dtype(v.dtype))
        self._copy_feeds(feeds)
        self.graph = None
        self.outputs: List[object] = []
        self.reason: Optional[str] = None
        # the state arrays the graph was captured over (a new array: capture again)
        self.state_arrays: List[object] = []
        self.pool = cupy.cuda.MemoryPool()
        for _ in range(max(1, int(warmup))):
            self._run_uncaptured()
        self.stream.synchronize()
        self._capture()

    @property
    def captured(self) -> bool:
        """Whether replays launch a CUDA graph (False: the step fell back, see ``reason``)."""
        return self.graph is not None

    def _checked(self, name: str, value):
        """``value`` for feed ``name``: a device array, or a contiguous host array, of the
        static buffer's exact shape and dtype (Python numbers and lists take the
        placeholder's dtype, as the executable's feeds do)."""
        buf = self.static.get(name)
        if buf is None:
            raise ValueError(f"CUDA graphs: unknown feed {name!r}; the placeholders are "
                             f"{sorted(self.static)}")
        if not isinstance(value, self.cupy.ndarray):
            if isinstance(value, (bool, int, float, list, tuple)) and \
                    not isinstance(value, np.generic):
                value = self.exe._python_feed(self.placeholders[name], value)
            value = np.asarray(value, order="C")      # (ascontiguousarray makes 0-d 1-d)
        if value.shape != buf.shape or value.dtype != buf.dtype:
            raise ValueError(f"CUDA graphs: feed {name!r} has {value.dtype}"
                             f"{list(value.shape)}, expected {buf.dtype}{list(buf.shape)}")
        return value

    def _copy_feeds(self, feeds: Dict[str, object]) -> None:
        """Check every feed, then copy them into the static buffers on the step's stream
        (a bad feed leaves every buffer as it was)."""
        checked = [(name, self._checked(name, value)) for name, value in feeds.items()]
        with self.stream:
            for name, value in checked:
                buf = self.static[name]
                if isinstance(value, self.cupy.ndarray):
                    self.cupy.copyto(buf, value)
                else:
                    buf.set(value, stream=self.stream)

    def _state(self) -> list:
        """The state arrays a run binds, as ``Planned.run`` binds them. Run on the step's
        stream: a host 0-d state (a learning rate) read through a device copy has that copy
        refreshed here when the host value changed, outside the graph and before it."""
        exe = self.exe
        return [exe._state_array(v) for v, _ in exe.live_state_slots]

    def _written_holders(self) -> list:
        """The live objects whose bound state a step writes (their versions are bumped)."""
        exe = self.exe
        prog = exe.steps.last_program
        names = list(prog.inplace_names) + [name for name, _, _ in prog.writebacks]
        return [exe._bound[n][1] for n in names if n in exe._bound]

    def _steps(self) -> list:
        exe = self.exe
        env: list = [None] * exe.num_slots
        bindings = exe._bind_feeds(self.static, env)
        return exe.steps.run(exe, env, bindings)

    def _run_uncaptured(self) -> list:
        with self.stream:
            return self._steps()

    def _capture(self) -> None:
        cupy = self.cupy
        stream = self.stream
        outs = None
        graph = None
        failure: Optional[Exception] = None
        self.graph = None
        with stream:
            # device copies of host scalars current now: no refresh is captured (a fill
            # baked into the graph would undo every later refresh)
            self.state_arrays = self._state()
        try:
            with stream, cupy.cuda.using_allocator(self.pool.malloc):
                stream.begin_capture()
                try:
                    outs = self._steps()
                except Exception as e:  # noqa: BLE001 - any failure: run uncaptured, say why
                    failure = e
                try:
                    graph = stream.end_capture()
                except Exception as e:  # noqa: BLE001
                    # an error in the step invalidates the capture: end_capture then fails
                    # without saying why, so the step's own error is the reason
                    failure = failure or e
        except Exception as e:  # noqa: BLE001
            failure = failure or e
        if failure is not None:
            self.reason = f"{type(failure).__name__}: {failure}"
            stream.synchronize()
            return
        self.reason = None
        self.graph = graph
        self.outputs = list(outs)
        self.written = self._written_holders()
        if hasattr(graph, "upload"):
            graph.upload(stream)
        stream.synchronize()

    def _launch(self) -> Optional[list]:
        """One step on the static feeds, on the step's stream: refresh host scalars' device
        copies, capture again if a state was given a new array since the capture (the
        graph has the old one's address baked in), then launch the graph; without a graph,
        run the executable uncaptured and return its outputs (else None)."""
        if self.graph is not None:
            now = self._state()
            if any(a is not b for a, b in zip(now, self.state_arrays)):
                changed = [v.name for (v, _), a, b in zip(self.exe.live_state_slots, now,
                                                          self.state_arrays) if a is not b]
                self._capture()
                if self.graph is None:
                    self.reason = (f"capturing again after the state {changed} was given "
                                   f"new arrays failed: {self.reason}")
        if self.graph is None:
            return self._steps()
        self.graph.launch(self.stream)
        for holder in self.written:
            state_written(holder)
        return None

    def __call__(self, feeds: Optional[Dict[str, object]] = None, *, host: bool = False,
                 **kw) -> list:
        """One step: copy ``feeds`` (numpy or cupy arrays, by placeholder name; as keywords
        too) into the static buffers, launch the graph (or run uncaptured), and return the
        outputs: device arrays (copies), or numpy arrays with ``host=True``."""
        self._copy_feeds(dict(feeds or {}, **kw))
        with self.stream:
            outs = self._launch()
            if outs is None:
                outs = [o.copy() for o in self.outputs]
        if host:
            return [self.cupy.asnumpy(o, stream=self.stream) for o in outs]
        self.stream.synchronize()
        return outs

    def replay(self) -> None:
        """Launch the graph once on the current static feeds, returning nothing (for timing
        the step alone); uncaptured steps run the executable."""
        with self.stream:
            self._launch()

    def synchronize(self) -> None:
        """Wait for the step's stream."""
        self.stream.synchronize()


def capture(exe, feeds: Optional[Dict[str, object]] = None, **options) -> CudaGraphStep:
    """``CudaGraphStep(exe, feeds, **options)``: capture ``exe``'s planned step once."""
    return CudaGraphStep(exe, feeds, **options)
