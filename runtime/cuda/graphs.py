"""Whole steps as CUDA graphs: a planned executable with fixed shapes captured once
(``cupy.cuda.Stream.begin_capture`` / ``end_capture``) and replayed with one launch.

``capture(exe, feeds)`` (or ``CudaGraphStep(exe, feeds)``) needs an executable compiled for
the cuda backend with a memory plan (``g.compile(device="cuda")`` at O1 or above, the
default) whose placeholders have static shapes. It

1. copies the example feeds into static device buffers (the graph reads them there);
2. runs the step ``warmup`` times on a private stream, uncaptured: every kernel is compiled,
   the program's arena allocated, state bound;
3. runs it once more under stream capture, with a private cupy memory pool as the
   allocator, so that the temporaries and outputs the captured kernels write stay reserved
   for the graph (memory freed back to the shared pool would be handed to other arrays
   while replays still write it);
4. replays: each call copies the new feeds into the static buffers and launches the graph.
   State is updated in place on the device, as an uncaptured run does.

Where capture fails (a kernel that reads a value back to the host, such as a data-dependent
shape, or an op cupy cannot capture) the step falls back to uncaptured runs of the
executable and says why in ``reason``; ``captured`` tells which.

The outputs of a replay are the graph's own buffers: each call returns copies (device
arrays), or numpy arrays with ``host=True``.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np


class CudaGraphStep:
    """A planned cuda executable captured as one CUDA graph (see the module docstring)."""

    def __init__(self, exe, feeds: Optional[Dict[str, object]] = None, *, warmup: int = 2):
        import cupy
        self.cupy = cupy
        self.exe = exe
        if exe.xp is not cupy:
            raise ValueError(f"CUDA graphs: the executable runs on the {exe.backend} backend; "
                             "compile it with device='cuda'")
        if exe.planner is None:
            raise ValueError("CUDA graphs: the executable has no memory plan (compile at "
                             "O1 or above)")
        if exe.symbols:
            raise ValueError(f"CUDA graphs: the feeds have symbolic dims {list(exe.symbols)}; "
                             "a captured step needs fixed shapes")
        feeds = dict(feeds or {})
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.static: Dict[str, object] = {}
        with self.stream:
            for v, _ in exe.feeds:
                if v.name not in feeds:
                    raise ValueError(f"CUDA graphs: missing example feed {v.name!r}")
                arr = cupy.empty(tuple(v.shape), np.dtype(v.dtype))
                self._copy_in(arr, feeds[v.name], v.name)
                self.static[v.name] = arr
        self.graph = None
        self.outputs: List[object] = []
        self.reason: Optional[str] = None
        self.pool = cupy.cuda.MemoryPool()
        for _ in range(max(1, int(warmup))):
            self._run_uncaptured()
        self.stream.synchronize()
        self._capture()

    @property
    def captured(self) -> bool:
        """Whether replays launch a CUDA graph (False: the step fell back, see ``reason``)."""
        return self.graph is not None

    def _copy_in(self, buf, value, name: str) -> None:
        cupy = self.cupy
        if isinstance(value, cupy.ndarray):
            if value.shape != buf.shape or value.dtype != buf.dtype:
                raise ValueError(f"CUDA graphs: feed {name!r} has {value.dtype}"
                                 f"{list(value.shape)}, expected {buf.dtype}{list(buf.shape)}")
            cupy.copyto(buf, value)
            return
        host = np.asarray(value)
        if host.shape != buf.shape or host.dtype != buf.dtype:
            raise ValueError(f"CUDA graphs: feed {name!r} has {host.dtype}{list(host.shape)}, "
                             f"expected {buf.dtype}{list(buf.shape)}")
        buf.set(np.ascontiguousarray(host), stream=self.stream)

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
        try:
            with stream, cupy.cuda.using_allocator(self.pool.malloc):
                stream.begin_capture()
                try:
                    outs = self._steps()
                finally:
                    graph = stream.end_capture()
        except Exception as e:  # noqa: BLE001 - any failure: run uncaptured, say why
            self.reason = f"{type(e).__name__}: {e}"
            self.graph = None
            stream.synchronize()
            return
        self.graph = graph
        self.outputs = list(outs)
        if hasattr(graph, "upload"):
            graph.upload(stream)
        stream.synchronize()

    def __call__(self, feeds: Optional[Dict[str, object]] = None, *, host: bool = False,
                 **kw) -> list:
        """One step: copy ``feeds`` (numpy or cupy arrays, by placeholder name; as keywords
        too) into the static buffers, launch the graph (or run uncaptured), and return the
        outputs: device arrays (copies), or numpy arrays with ``host=True``."""
        feeds = dict(feeds or {}, **kw)
        with self.stream:
            for name, value in feeds.items():
                buf = self.static.get(name)
                if buf is None:
                    raise ValueError(f"CUDA graphs: unknown feed {name!r}; the placeholders "
                                     f"are {sorted(self.static)}")
                self._copy_in(buf, value, name)
            if self.graph is not None:
                self.graph.launch(self.stream)
                outs = [o.copy() for o in self.outputs]
            else:
                outs = self._run_uncaptured()
        if host:
            return [self.cupy.asnumpy(o, stream=self.stream) for o in outs]
        self.stream.synchronize()
        return outs

    def replay(self) -> None:
        """Launch the graph once on the current static feeds, returning nothing (for timing
        the step alone); uncaptured steps run the executable."""
        with self.stream:
            if self.graph is not None:
                self.graph.launch(self.stream)
            else:
                self._steps()

    def synchronize(self) -> None:
        """Wait for the step's stream."""
        self.stream.synchronize()


def capture(exe, feeds: Optional[Dict[str, object]] = None, **options) -> CudaGraphStep:
    """``CudaGraphStep(exe, feeds, **options)``: capture ``exe``'s planned step once."""
    return CudaGraphStep(exe, feeds, **options)
