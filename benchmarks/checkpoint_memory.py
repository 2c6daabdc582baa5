"""Memory used by dg.save and dg.load on a ~300 MB state, each measured in a fresh process.

The state is 300 float32 tensors of 1 MB each (a model's state_dict plus a few plain values).
For saving: resident memory (RSS) once the state is built, and the peak during ``dg.save``.
For loading: RSS before ``dg.load``, right after it, and the peak; anonymous memory (what
the process itself allocated) and file-backed memory (pages of the memory-mapped file, which
the kernel can drop and re-read at any time) are shown apart. ``--verify`` loads with
checksum verification (the default) or without (``--no-verify``).

    python benchmarks/checkpoint_memory.py [--megabytes 300] [--dir /tmp]
"""
from __future__ import annotations

import argparse
import inspect
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _status() -> dict:
    """VmRSS, VmHWM, RssAnon, RssFile of this process in MB (Linux /proc)."""
    values = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                values[key] = int(rest.split()[0]) / 1024
    return values


def _reset_peak() -> None:
    """Start VmHWM again from the current RSS (Linux >= 4.0: write 5 to clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _state(megabytes: int):
    import numpy as np

    import duograph as dg
    rng = np.random.default_rng(0)
    return {"model": {f"layer{i}.weight": dg.from_numpy(rng.random(262_144, np.float32))
                      for i in range(megabytes)},
            "epoch": 3, "lr": 1e-3}


def child_save(path: str, megabytes: int) -> None:
    import duograph as dg
    state = _state(megabytes)
    before = _status()
    _reset_peak()
    start = time.perf_counter()
    dg.save(state, path)
    seconds = time.perf_counter() - start
    after = _status()
    print(f"save {megabytes} MB: RSS {before['VmRSS']:.0f} MB before, peak "
          f"{after['VmHWM']:.0f} MB during save (+{after['VmHWM'] - before['VmRSS']:.0f}), "
          f"{seconds:.2f} s")


def child_load(path: str, verify: bool) -> None:
    import duograph as dg
    kwargs = {}
    if "verify" in inspect.signature(dg.load).parameters:
        kwargs["verify"] = verify
    before = _status()
    _reset_peak()
    start = time.perf_counter()
    state = dg.load(path, **kwargs)
    seconds = time.perf_counter() - start
    after = _status()
    label = "" if not kwargs else (" (verify)" if verify else " (no verify)")
    print(f"load{label}: RSS {before['VmRSS']:.0f} -> {after['VmRSS']:.0f} MB "
          f"(+{after['VmRSS'] - before['VmRSS']:.0f}; anonymous "
          f"+{after['RssAnon'] - before['RssAnon']:.0f}, file-backed "
          f"+{after['RssFile'] - before['RssFile']:.0f}), peak {after['VmHWM']:.0f} MB "
          f"(+{after['VmHWM'] - before['VmRSS']:.0f}), {seconds:.2f} s")
    total = sum(float(t.numpy()[0]) for t in state["model"].values())   # touch every tensor
    assert total >= 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=300)
    parser.add_argument("--dir", default=None, help="where the checkpoint is written")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, path = args.child[:2]
        if kind == "save":
            child_save(path, args.megabytes)
        else:
            child_load(path, kind == "load-verify")
        return
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        path = os.path.join(directory, "state.safetensors")
        for kind in ("save", "load-verify", "load-no-verify"):
            subprocess.run([sys.executable, os.path.abspath(__file__), "--megabytes",
                            str(args.megabytes), "--child", kind, path], check=True)


if __name__ == "__main__":
    main()
