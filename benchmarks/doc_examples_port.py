"""Port check of PyTorch's documentation examples: the ``>>>`` examples of the docstrings of
the torch names duograph has (``torch.<name>`` and ``torch.Tensor.<name>``) run with
``import duograph as torch`` in place of torch, their values compared with PyTorch's.

    python benchmarks/doc_examples_port.py [--show N] [--json FILE]

Only deterministic docstrings count: one whose examples draw random numbers (``rand``,
``randn``, ``normal``, ``manual_seed``...), allocate uninitialised memory (``empty``) or use
CUDA is skipped. Each docstring's examples run in order in one namespace, once under PyTorch
and once under duograph; the value of every example that is an expression is compared
(tensors as arrays: shape, dtype name and values within rtol 1e-4 / atol 1e-5; numbers,
bools, strings and tuples of them exactly or as close). A docstring "matches" when every
example runs and every value matches. Prints the counts and the commonest reasons for the
rest (the exception type and the first words of its message, or "values differ").
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import doctest
import io
import json
import os
import re
import sys
import tempfile
import warnings

import numpy as np

import duograph as dg

_NONDETERMINISTIC = re.compile(r"rand|normal|manual_seed|empty|bernoulli|multinomial|"
                               r"uniform_|exponential_|geometric_|cauchy_|log_normal_|"
                               r"cuda|Generator|poisson|dropout|seed")


def _examples(doc: str):
    try:
        return doctest.DocTestParser().get_examples(doc or "")
    except ValueError:
        return []


def _run(examples, module):
    """The values of the examples (None for statements) under ``module`` as ``torch``;
    raises what an example raises."""
    scope = {"torch": module, "np": np, "numpy": np, "math": __import__("math")}
    if module is dg:
        scope["F"] = dg.nn.functional
    else:
        scope["F"] = module.nn.functional
    values = []
    for ex in examples:
        source = ex.source
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()) as out:
            warnings.simplefilter("ignore")
            try:
                code = compile(source, "<example>", "eval")
            except SyntaxError:
                exec(compile(source, "<example>", "exec"), scope)   # noqa: S102
                values.append(("printed", out.getvalue().strip()) if out.getvalue() else None)
                continue
            values.append(eval(code, scope))                           # noqa: S307
    return values


def _run_isolated(examples, module):
    """``_run``, with the process settings an example may change (the default dtype)
    restored afterwards, so one docstring does not change the next one's results."""
    try:
        return _run(examples, module)
    finally:
        module.set_default_dtype(module.float32)


def _plain(value):
    """A comparable form: arrays for tensors, tuples for sequences."""
    if hasattr(value, "detach") and hasattr(value, "numpy"):       # torch
        value = value.detach()
        try:
            return ("tensor", str(value.dtype).replace("torch.", ""), value.numpy())
        except Exception:  # noqa: BLE001 - complex-conj views, sparse...
            return ("tensor", str(value.dtype).replace("torch.", ""), value.resolve_conj()
                    .numpy())
    if isinstance(value, dg.Tensor):
        return ("tensor", str(value.dtype), value.numpy())
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    if isinstance(value, np.ndarray):
        return ("tensor", str(value.dtype), value)
    if isinstance(value, np.generic):
        return value.item()
    if " at 0x" in repr(value):                 # a plain object: its type is what compares
        return ("object", type(value).__name__)
    if type(value).__name__ == "dtype" and str(value).startswith("torch."):
        return str(value).replace("torch.", "")       # torch.float64 -> "float64"
    return value


def _same(a, b) -> bool:
    if isinstance(a, tuple) and len(a) == 3 and a[:1] == ("tensor",):
        if not (isinstance(b, tuple) and len(b) == 3 and b[:1] == ("tensor",)):
            return False
        (_, da, xa), (_, db, xb) = a, b
        if da != db or xa.shape != xb.shape:
            return False
        if xa.dtype.kind in "fc" or xb.dtype.kind in "fc":
            return bool(np.allclose(xa, xb, rtol=1e-4, atol=1e-5, equal_nan=True))
        return bool(np.array_equal(xa, xb))
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return bool(np.isclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True))
    if isinstance(a, tuple) and not isinstance(b, tuple):
        return False
    try:
        return bool(a == b) or str(a) == str(b)
    except Exception:  # noqa: BLE001
        return False


def _reason(exc: BaseException) -> str:
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    message = re.sub(r"\d+", "N", message)
    return f"{type(exc).__name__}: {message[:70]}"


def measure(torch) -> dict:
    names = []
    for name in dir(torch):
        if not name.startswith("_") and hasattr(dg, name) and callable(getattr(torch, name)):
            names.append(("torch", name, getattr(torch, name)))
    for name in dir(torch.Tensor):
        if not name.startswith("_") and hasattr(dg.Tensor, name):
            names.append(("Tensor", name, getattr(torch.Tensor, name)))
    counts = collections.Counter()
    reasons = collections.Counter()
    failures = collections.defaultdict(list)
    for where, name, obj in names:
        examples = _examples(getattr(obj, "__doc__", "") or "")
        if not examples:
            counts["no examples"] += 1
            continue
        if any(_NONDETERMINISTIC.search(ex.source) for ex in examples):
            counts["skipped (random or uninitialised)"] += 1
            continue
        try:
            want = [_plain(v) for v in _run_isolated(examples, torch)]
        except Exception:  # noqa: BLE001 - an example that fails under PyTorch itself
            counts["skipped (fails under PyTorch)"] += 1
            continue
        counts["checked"] += 1
        try:
            got = [_plain(v) for v in _run_isolated(examples, dg)]
        except Exception as e:  # noqa: BLE001 - what the check is about
            reason = _reason(e)
            reasons[reason] += 1
            failures[reason].append(f"{where}.{name}")
            continue
        if all(_same(w, g) for w, g in zip(want, got)):
            counts["match"] += 1
        else:
            reasons["values differ"] += 1
            failures["values differ"].append(f"{where}.{name}")
    return {"counts": dict(counts), "reasons": reasons.most_common(),
            "failures": {k: v for k, v in failures.items()}}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show", type=int, default=15, help="how many reasons to list")
    parser.add_argument("--json", help="also write the result to this JSON file")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        raise SystemExit("doc_examples_port: PyTorch is the reference; install it to run")
    # examples save files (torch.save(x, "tensor.pt")...): run them in a scratch folder
    here = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="doc-examples-") as scratch:
        os.chdir(scratch)
        try:
            result = measure(torch)
        finally:
            os.chdir(here)
    c = result["counts"]
    print(f"duograph {dg.__version__}, PyTorch {torch.__version__}: docstrings of the torch "
          f"names duograph has")
    for key in ("checked", "match", "no examples", "skipped (random or uninitialised)",
                "skipped (fails under PyTorch)"):
        print(f"  {key:36s} {c.get(key, 0)}")
    if c.get("checked"):
        print(f"  unchanged and matching: {c.get('match', 0)} / {c['checked']} "
              f"({100.0 * c.get('match', 0) / c['checked']:.1f}%)")
    print("commonest reasons for the rest:")
    for reason, n in result["reasons"][:args.show]:
        examples = ", ".join(result["failures"][reason][:4])
        print(f"  {n:4d}  {reason}  (e.g. {examples})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
