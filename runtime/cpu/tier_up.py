"""Background compilation for the planned runtime's small fused regions (``fused.bind``'s
tiered runner): one queue, one daemon thread started at the first job, so numba's import
and a kernel's compilation (seconds with an empty cache, tenths of one with the kernel on
disk) never run on the caller's path. A job publishes its result itself, by one attribute
store the caller reads (never a half-built kernel); a job that raises leaves its region on
numpy's plan, with one warning.

The thread shares the GIL with the caller. While a job runs the interpreter's switch
interval is lowered to ``SWITCH_INTERVAL`` (restored after), so a caller in a tight loop
does not starve it (numba's import releases and retakes the GIL thousands of times, and
each retake would otherwise wait out the caller's 5 ms slice). A caller's call can still
wait for a step that holds the GIL in C (loading llvmlite's library, LLVM's passes): that,
not the whole compilation, bounds the latency a call sees (measured up to ~0.1 s on a
loaded 2-core machine, against 0.7-2.2 s for the synchronous switch; call_breakdown.py
``--latency``). With the caller busy the kernel arrives later than an idle one would see
it (the two share one core's worth of GIL).
At interpreter exit
the queue takes no new job and a compilation in flight is abandoned with its daemon thread
(Python stops such a thread before tearing modules down): no wait, no traceback.
"""
from __future__ import annotations

import atexit
import queue
import sys
import threading
import warnings
from typing import Callable, Optional

__all__ = ["drain", "pending", "submit"]

_lock = threading.Lock()
_idle = threading.Condition(_lock)
_jobs: "queue.SimpleQueue[Callable[[], None]]" = queue.SimpleQueue()
_thread: Optional[threading.Thread] = None
_pending = 0            # jobs submitted and not yet finished
_closing = False        # set at interpreter exit: no new jobs
# the interpreter's switch interval while a job runs (module doc)
SWITCH_INTERVAL = 2e-4


def submit(job: Callable[[], None]) -> bool:
    """Queue ``job`` (no arguments, its result stored by itself) for the compile thread,
    starting the thread at the first job. False, queueing nothing, once the interpreter is
    exiting."""
    global _thread, _pending
    with _lock:
        if _closing:
            return False
        if _thread is None:
            _thread = threading.Thread(target=_work, name="duograph-compile", daemon=True)
            _thread.start()
        _pending += 1
    _jobs.put(job)
    return True


def pending() -> int:
    """How many queued jobs have not finished."""
    return _pending


def drain(timeout: Optional[float] = None) -> bool:
    """Wait until every queued job has finished (True), or ``timeout`` seconds (False)."""
    with _idle:
        return _idle.wait_for(lambda: _pending == 0, timeout)


def _work() -> None:
    global _pending
    while True:
        job = _jobs.get()
        interval = sys.getswitchinterval()
        try:
            sys.setswitchinterval(min(interval, SWITCH_INTERVAL))
            job()
        except Exception as e:  # noqa: BLE001 - the region stays on numpy, said once
            warnings.warn(f"duograph: a background kernel compilation failed ({e!r}); its "
                          "region stays on numpy", RuntimeWarning, stacklevel=1)
        finally:
            sys.setswitchinterval(interval)
            with _idle:
                _pending -= 1
                if _pending == 0:
                    _idle.notify_all()


@atexit.register
def _close() -> None:
    global _closing
    with _lock:
        _closing = True
