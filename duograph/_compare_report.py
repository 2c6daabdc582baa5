"""The HTML page and plots of a ``Comparison`` (matplotlib, written off screen).

Every file goes through ``graphlib.files`` (atomic, never through a planted symlink)."""
from __future__ import annotations

import html
import json
import os
from typing import List

from .graphlib.files import atomic_write, write_text


def _plt():
    try:
        import matplotlib
    except ImportError as e:
        raise ImportError("Comparison.report draws its plots with matplotlib: "
                          "pip install 'duograph[compare]' (or matplotlib)") from e
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"     # SVG text stays text (searchable)
    import matplotlib.pyplot as plt
    return plt


def _save(fig, path: str) -> str:
    """Write ``fig`` to ``path`` in the format its extension names (png, svg, pdf...)."""
    fmt = os.path.splitext(str(path))[1][1:].lower() or "png"
    fig.tight_layout()
    try:
        atomic_write(path, lambda f: fig.savefig(f, format=fmt, dpi=90))
    finally:
        import matplotlib.pyplot as plt
        plt.close(fig)
    return path


def plot_times(cmp, path: str) -> str:
    """Median step time per mode, with the quartiles as error bars (the min and max of a
    shared machine are mostly other processes)."""
    plt = _plt()
    rows = [r for r in cmp.modes.values() if r.times_s]
    fig, ax = plt.subplots(figsize=(6, 3))
    med = [r.median_s * 1e3 for r in rows]
    lo = [max(0.0, (r.median_s - r.spread_s[1]) * 1e3) for r in rows]
    hi = [max(0.0, (r.spread_s[2] - r.median_s) * 1e3) for r in rows]
    ax.bar([r.mode for r in rows], med, yerr=[lo, hi], capsize=4, color="#4c72b0")
    ax.set_ylabel("ms per step (median, quartiles)")
    ax.set_title(f"{cmp.name}: step time")
    return _save(fig, path)


def plot_memory(cmp, path: str) -> str:
    """Live bytes over one step of every mode: after each node of a planned mode's memory
    plan, after each kernel of the others (tracemalloc)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3))
    for r in cmp.modes.values():
        if r.live_bytes:
            ax.plot(range(len(r.live_bytes)), [b / 1024 for b in r.live_bytes], label=r.mode)
    ax.set_xlabel("kernel (or planned node) of the step")
    ax.set_ylabel("live KiB")
    ax.set_title(f"{cmp.name}: memory timeline")
    if ax.lines:
        ax.legend()
    return _save(fig, path)


def plot_errors(cmp, path: str) -> str:
    """Max absolute difference from eager per node, along the recorded graph's order."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3))
    for name, n in cmp.numerics.items():
        xs = [d.index for d in n.nodes]
        ys = [max(d.max_abs, 1e-18) for d in n.nodes]
        ax.plot(xs, ys, marker=".", linestyle="-", label=name)
    ax.set_yscale("log")
    if all(d.max_abs == 0 for n in cmp.numerics.values() for d in n.nodes):
        ax.text(0.5, 0.8, "every matched node bit-identical to eager", ha="center",
                transform=ax.transAxes)
    ax.set_xlabel("node of the recorded step")
    ax.set_ylabel("max |mode - eager| (floor 1e-18)")
    ax.set_title(f"{cmp.name}: per-node difference")
    if ax.lines:
        ax.legend()
    return _save(fig, path)


def plot_losses(cmp, path: str) -> str:
    """The loss of every step, per mode."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3))
    for r in cmp.modes.values():
        if r.losses:
            ax.plot(range(1, len(r.losses) + 1), r.losses, marker="o", label=r.mode)
    ax.set_xlabel("step")
    ax.set_ylabel("loss" if cmp.training else "output (max |.|)")
    ax.set_title(f"{cmp.name}: {'loss' if cmp.training else 'output'} per step")
    if ax.lines:
        ax.legend()
    return _save(fig, path)


PLOTS = {"times.png": plot_times, "memory.png": plot_memory, "errors.png": plot_errors,
         "losses.png": plot_losses}


def write_report(cmp, directory: str) -> str:
    os.makedirs(directory, exist_ok=True)
    images: List[str] = []
    for name, draw in PLOTS.items():
        draw(cmp, os.path.join(directory, name))
        images.append(name)
    write_text(os.path.join(directory, "comparison.json"), json.dumps(cmp.to_json(), indent=1))
    body = [f"<h1>duograph comparison: {html.escape(cmp.name)}</h1>",
            f"<pre>{html.escape(cmp.table())}</pre>"]
    body += [f'<img src="{name}" alt="{name}">' for name in images]
    body.append('<p>All figures: <a href="comparison.json">comparison.json</a></p>')
    page = os.path.join(directory, "index.html")
    write_text(page, "<!doctype html><html><head><meta charset='utf-8'><title>duograph "
               "compare</title></head><body>" + "\n".join(body) + "</body></html>\n")
    return page
