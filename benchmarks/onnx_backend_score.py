"""Score duograph's ONNX backend with onnx's own backend test suite (the node tests).

    python benchmarks/onnx_backend_score.py            # score and failure classes
    python benchmarks/onnx_backend_score.py -v         # every failing test and its reason
    python benchmarks/onnx_backend_score.py -k relu    # only tests whose name contains relu

Runs ``onnx.backend.test.BackendTest(duograph.onnx.backend)``'s node tests (generated from
the onnx package's test cases) through unittest and prints passes, failures by class (the
error's first line, with numbers and names stripped) and errors that are not duograph's
clear refusals (``OnnxImportError``): those are the ones to look at first (wrong answers
are the assertion failures).
"""
from __future__ import annotations

import argparse
import collections
import re
import sys
import unittest
import warnings


def run(pattern: str = "", verbose: bool = False, names=None) -> dict:
    """Run the node tests whose id contains ``pattern`` (and, given ``names``, whose
    method name is one of them)."""
    import onnx.backend.test
    import duograph.onnx.backend as backend
    warnings.filterwarnings("ignore")
    bt = onnx.backend.test.BackendTest(backend, __name__)
    cls = bt.test_cases["OnnxBackendNodeModelTest"]
    suite = unittest.TestLoader().loadTestsFromTestCase(cls)
    if pattern:
        suite = unittest.TestSuite(t for t in suite if pattern in t.id())
    if names is not None:
        wanted = set(names)
        suite = unittest.TestSuite(t for t in suite if t.id().rsplit(".", 1)[-1] in wanted)
    result = unittest.TestResult()
    suite.run(result)
    total = result.testsRun
    skipped = len(result.skipped)
    bad = [(t, e, "error") for t, e in result.errors] + \
        [(t, e, "wrong") for t, e in result.failures]
    passed = total - len(bad) - skipped
    classes = collections.Counter()
    detail = []
    for test, trace, kind in bad:
        last = [ln for ln in trace.strip().splitlines() if ln and not ln.startswith(" ")][-1]
        if kind == "wrong" or "AssertionError" in last:
            kind = "wrong answer (assertion)"
            label = "AssertionError: " + last.split(":", 1)[-1].strip()[:60]
        elif "OnnxImportError" in last:
            kind = "refused"
            label = re.sub(r"node '[^']*' ", "", last.split("OnnxImportError: ", 1)[-1])
            label = re.sub(r"'[^']*'", "'…'", label)
            label = re.sub(r"\[[^\]]*\]|\d+", "#", label)[:110]
        else:
            kind = "other error"
            label = re.sub(r"\d+", "#", last)[:110]
        classes[(kind, label)] += 1
        detail.append((test.id().rsplit(".", 1)[-1], kind, last[:200]))
    return {"total": total, "passed": passed, "skipped": skipped, "classes": classes,
            "detail": detail}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-k", default="", help="only tests whose id contains this")
    ap.add_argument("-v", action="store_true", help="list every failing test")
    ap.add_argument("--top", type=int, default=40, help="failure classes to show")
    args = ap.parse_args(argv)
    r = run(args.k, args.v)
    print(f"onnx backend node tests: {r['passed']} passed of {r['total']} "
          f"({r['skipped']} skipped)")
    by_kind = collections.Counter()
    for (kind, _), n in r["classes"].items():
        by_kind[kind] += n
    print("failures by kind: " + ", ".join(f"{k}: {n}" for k, n in by_kind.most_common()))
    print("failure classes:")
    for (kind, label), n in r["classes"].most_common(args.top):
        print(f"  {n:5d}  [{kind}] {label}")
    if args.v:
        for name, kind, last in sorted(r["detail"]):
            print(f"{name}: [{kind}] {last}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
