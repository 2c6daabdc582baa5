"""``finishes(fn)``: a call that must not hang (a reader given a FIFO), run in a thread with a
time limit, for tests/test_io.py and tests/test_serialize.py."""
from __future__ import annotations

import os
import threading

import pytest


def finishes(fn, timeout: float = 20.0, unblock=None):
    """``fn()``'s exception (or None) if it returns within ``timeout`` seconds; fails the
    test otherwise (a reader that hangs on a FIFO), opening ``unblock`` for writing so the
    stuck thread can end."""
    box = {}

    def run():
        try:
            fn()
            box["error"] = None
        except BaseException as e:   # noqa: BLE001 - handed to the test
            box["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        if unblock is not None:
            try:
                os.close(os.open(unblock, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
        pytest.fail(f"still running after {timeout} s (hangs)")
    return box["error"]
