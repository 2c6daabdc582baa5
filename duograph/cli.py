"""The ``duograph`` command (also ``python -m duograph``).

    duograph inspect FILE [--dim N=32 ...] [--svg out.svg] [--no-ir]
    duograph inspect --view FILE       # open a graph or an ONNX file in Netron
    duograph export SCRIPT:OBJECT --to json|onnx [-o PATH] [--input NAME=SHAPE[:DTYPE] ...]
    duograph compare SCRIPT:BUILD | --model NAME [--modes eager,O2] [--steps 3]
                     [--repeats 10] [--report DIR] [--json PATH]

``inspect`` reads a saved duograph graph (``dg.save_graph``, or ``.json`` from
``graph.to_json()``) or an ONNX model, and prints the text IR, an op histogram, the
parameter count and bytes, inputs and outputs with their symbolic dims, kernel counts at
O0/O1/O2 and, given the symbolic dims (``--dim N=32``), the memory plan's summary.
``export`` loads ``OBJECT`` from the user's ``SCRIPT``: a Graph, a function returning
one, or a module/function with ``--input`` specs (recorded, the same IR as eager runs).
"""
from __future__ import annotations

import argparse
import collections
import os
import runpy
import sys
from typing import Dict, List, Optional, Sequence

import numpy as np

from .graphlib.files import NotRegularFileError, open_regular, write_text


class CommandError(Exception):
    """A mistake on the command line or in its files: printed without a traceback."""


def _parse_dims(items: Sequence[str]) -> Dict[str, int]:
    dims = {}
    for item in items or ():
        name, eq, value = item.partition("=")
        if not eq or not name.isidentifier() or not value.strip().isdigit():
            raise CommandError(f"--dim expects NAME=SIZE (e.g. --dim N=32), found {item!r}")
        dims[name] = int(value)
    return dims


def _output_file(path: Optional[str], flag: str) -> None:
    """Refuse, before any work, a file path the command could not write: its directory is
    missing (or is a file), or the path is a directory."""
    if path is None:
        return
    if os.path.isdir(path):
        raise CommandError(f"{flag} {path}: is a directory; give a file path inside it")
    _parent_directory(path, flag)


def _output_directory(path: Optional[str], flag: str) -> None:
    """Refuse a directory path that exists as a file (a missing one is created)."""
    if path is not None and os.path.exists(path) and not os.path.isdir(path):
        raise CommandError(f"{flag} {path}: is a file, not a directory")


def _parent_directory(path: str, flag: str) -> None:
    parent = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(parent):
        return
    shown = os.path.dirname(path) or parent
    if os.path.exists(parent):
        raise CommandError(f"{flag} {path}: {shown} is a file, not a directory")
    raise CommandError(f"{flag} {path}: the directory {shown} does not exist; create it first")


def load_any(path: str):
    """A Graph from a saved graph, a JSON document, or an ONNX model."""
    import duograph as dg
    if not os.path.exists(path):
        raise CommandError(f"no such file: {path}")
    low = path.lower()
    if low.endswith(".onnx"):
        try:
            from duograph import onnx as dg_onnx
        except ImportError as e:
            raise CommandError(f"{path}: reading ONNX models needs the onnx package ({e})") \
                from None
        return dg_onnx.load(path)
    try:
        if low.endswith(".json"):
            with open_regular(path) as f:
                return dg.Graph.from_json(f.read())
        return dg.load_graph(path)
    except NotRegularFileError as e:
        raise CommandError(f"{path}: {e.kind}, not a regular file: refused") from None
    except dg.GraphFormatError as e:
        raise CommandError(f"{path}: {e}") from None


def _kernels(graph) -> Dict[str, int]:
    from duograph.graphlib.rewrite import clone
    from duograph.passes import PassManager, kernel_count
    counts = {}
    for level in ("O0", "O1", "O2"):
        work = PassManager(level, keep_ir=False).run(clone(graph)[0])
        counts[level] = kernel_count(work)
    return counts


def inspect_graph(graph, dims: Dict[str, int], show_ir: bool = True,
                  svg: Optional[str] = None) -> str:
    """The report ``duograph inspect`` prints."""
    from duograph import DuographError
    lines: List[str] = []
    if show_ir:
        lines += [graph.to_text(), ""]
    lines.append(f"graph {graph.name}: {len(graph.nodes)} nodes")
    for v in graph.inputs:
        lines.append(f"  input  {v.name}: {v.type!r}")
    for k, v in enumerate(graph.outputs):
        lines.append(f"  output {k}: {v.type!r}")
    params = sum(int(np.prod(v.shape)) for v in graph.state)
    nbytes = sum(v.type.nbytes() or 0 for v in graph.state)
    lines.append(f"  state  {len(graph.state)} tensors, {params:,} values, {nbytes:,} bytes")
    hist = collections.Counter(n.op.name for n in graph.nodes)
    lines.append("ops: " + ", ".join(f"{name} {count}" for name, count in hist.most_common()))
    kernels = _kernels(graph)
    lines.append("kernels: " + ", ".join(f"{k} {v}" for k, v in kernels.items()))
    symbols = sorted({d for v in graph.inputs for d in v.shape if not isinstance(d, int)},
                     key=str)
    unknown = sorted(set(dims) - {str(s) for s in symbols})
    if unknown:
        have = ", ".join(str(s) for s in symbols) or "none"
        raise CommandError(f"--dim {unknown[0]}: the graph's inputs have no symbolic dim "
                           f"{unknown[0]!r} (they have: {have})")
    missing = [str(s) for s in symbols if str(s) not in dims]
    if missing:
        lines.append(f"memory plan: give the symbolic dims ({', '.join(missing)}) with --dim, "
                     f"e.g. --dim {missing[0]}=32")
    elif graph.outputs:
        exe = graph.compile(passes="O2")
        lines.append("memory plan (O2):")
        lines += ["  " + ln for ln in exe.plan_for(**dims).summary().splitlines()]
    if svg:
        try:
            path = graph.render(svg)
        except DuographError as e:              # no Graphviz: the report, then why not
            print("\n".join(lines))
            raise CommandError(str(e)) from None
        lines.append(f"picture: {path}")
    return "\n".join(lines)


def _load_object(spec: str):
    script, colon, name = spec.rpartition(":")
    if not colon or not script or not name:
        raise CommandError(f"expected SCRIPT:OBJECT (e.g. model.py:build), found {spec!r}")
    if not os.path.exists(script):
        raise CommandError(f"no such script: {script}")
    namespace = runpy.run_path(script, run_name="__duograph_export__")
    if name not in namespace:
        found = sorted(k for k in namespace if not k.startswith("_"))
        raise CommandError(f"{script} defines no {name!r}; it defines {found}")
    return namespace[name]


def _parse_inputs(items: Sequence[str]):
    """``--input x=N,784:float32`` -> [(name, shape, dtype)]."""
    specs = []
    for item in items or ():
        name, eq, rest = item.partition("=")
        shape_text, _, dtype = rest.partition(":")
        if not eq or not name.isidentifier() or not shape_text:
            raise CommandError(f"--input expects NAME=D1,D2[:DTYPE] (e.g. x=N,784:float32), "
                               f"found {item!r}")
        shape = tuple(int(d) if d.strip().isdigit() else d.strip()
                      for d in shape_text.split(","))
        specs.append((name, shape, dtype or "float32"))
    return specs


def _as_graph(obj, inputs):
    import duograph as dg
    if isinstance(obj, dg.Graph):
        return obj
    if callable(obj) and not inputs and not isinstance(obj, dg.nn.Module):
        made = obj()
        if isinstance(made, dg.Graph):
            return made
        raise CommandError(f"{obj!r}() returned {type(made).__name__}, not a Graph; pass "
                           "--input specs to record a module or function")
    if not inputs:
        raise CommandError("recording a module or function needs --input NAME=SHAPE specs")
    g = dg.Graph(getattr(obj, "__name__", type(obj).__name__))
    with g:
        args = [dg.placeholder(n, s, d) for n, s, d in inputs]
        out = obj(*args)
    g.outputs = list(out) if isinstance(out, (tuple, list)) else [out]
    return g


def export(spec: str, to: str, out: Optional[str], inputs) -> str:
    graph = _as_graph(_load_object(spec), _parse_inputs(inputs))
    import duograph as dg
    if to == "json":
        path = out or f"{graph.name}.dg"
        if path.endswith(".json"):
            write_text(path, graph.to_json(indent=1))
        else:
            dg.save_graph(graph, path)
        return path
    try:
        from duograph import onnx as dg_onnx
    except ImportError as e:
        raise CommandError(f"--to onnx needs the onnx package ({e})") from None
    path = out or f"{graph.name}.onnx"
    dg_onnx.export(graph, path)
    return path


def _compare_spec(obj) -> dict:
    """What a user's ``build()`` returned, as ``dg.compare``'s arguments: a dict with the keys
    model, inputs (and optionally targets, loss, optimizer), or a tuple in that order."""
    made = obj() if callable(obj) and not hasattr(obj, "parameters") else obj
    keys = ("model", "inputs", "targets", "loss", "optimizer")
    if isinstance(made, dict):
        unknown = sorted(set(made) - set(keys))
        if unknown or "model" not in made or "inputs" not in made:
            raise CommandError(f"build() must return a dict with keys model and inputs (and "
                               f"optionally targets, loss, optimizer), found {sorted(made)}")
        return dict(made)
    if isinstance(made, (tuple, list)) and 2 <= len(made) <= 5:
        return dict(zip(keys, made))
    raise CommandError("build() must return (model, inputs[, targets, loss, optimizer]) or a "
                       f"dict of them, found {type(made).__name__}")


def compare_command(args) -> str:
    from duograph import models
    from duograph.comparison import KNOWN_MODES, compare
    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    bad = [m for m in modes if m not in KNOWN_MODES]
    if bad:
        raise CommandError(f"--modes: unknown mode(s) {bad}: expected some of {KNOWN_MODES}")
    if bool(args.target) == bool(args.model):
        raise CommandError("give either SCRIPT:BUILD or --model NAME "
                           f"(one of {', '.join(models.NAMES)})")
    case = None
    if args.model:
        if args.model not in models.NAMES:
            raise CommandError(f"--model: unknown model {args.model!r}: expected one of "
                               f"{', '.join(models.NAMES)}")
        case = models.get(args.model)
        spec = {"model": case.model, "inputs": case.inputs, "targets": case.targets,
                "loss": case.loss, "optimizer": case.optimizer}
    else:
        spec = _compare_spec(_load_object(args.target))
    if any(m.startswith("torch") or m == "jax" for m in modes) and case is None:
        raise CommandError("--modes torch, torch.compile and jax need a bundled model "
                           "(--model NAME)")
    targets = spec.get("targets")     # (``or ()`` would ask a tensor for its truth value)
    cmp = compare(spec["model"], spec["inputs"], targets=() if targets is None else targets,
                  loss=spec.get("loss"), optimizer=spec.get("optimizer"), modes=modes,
                  steps=args.steps, repeats=args.repeats, case=case, progress=True)
    lines = [cmp.table()]
    if args.json:
        cmp.save_json(args.json)
        lines.append(f"wrote {args.json}")
    if args.report:
        lines.append(f"wrote {cmp.report(args.report)}")
    return "\n".join(lines)


def find_mpiexec() -> Optional[str]:
    """The mpiexec beside this interpreter (the mpich wheel puts it there), else on PATH."""
    import shutil
    return shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or \
        shutil.which("mpiexec")


def run_command(nproc: int, script: str, script_args: Sequence[str]) -> int:
    """``duograph run -n N script.py args``: ``mpiexec -n N <this python> script.py args``,
    its exit status returned (N = 1 runs the script here, without MPI)."""
    import subprocess
    if nproc < 1:
        print(f"duograph run: -n must be at least 1, found {nproc}", file=sys.stderr)
        return 2
    if not os.path.isfile(script):
        print(f"duograph run: no script {script!r}", file=sys.stderr)
        return 2
    cmd = [sys.executable, script, *script_args]
    if nproc > 1:
        mpiexec = find_mpiexec()
        if mpiexec is None:
            print("duograph run: mpiexec not found; install MPI with "
                  "pip install 'duograph[distributed]' (mpi4py and mpich)", file=sys.stderr)
            return 2
        cmd = [mpiexec, "-n", str(nproc), *cmd]
    try:
        return subprocess.call(cmd)
    except KeyboardInterrupt:
        return 130


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="duograph", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ins = sub.add_parser("inspect", help="print a saved graph or an ONNX model's IR and stats")
    ins.add_argument("file")
    ins.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE",
                     help="size of a symbolic dim, for the memory plan (repeatable)")
    ins.add_argument("--svg", metavar="PATH", help="also draw the graph (Graphviz)")
    ins.add_argument("--no-ir", action="store_true", help="leave out the text IR")
    ins.add_argument("--view", action="store_true",
                     help="open the graph or ONNX file in Netron instead (pip install netron)")
    exp = sub.add_parser("export", help="save a graph, module or function from a script")
    exp.add_argument("target", metavar="SCRIPT:OBJECT")
    exp.add_argument("--to", choices=("json", "onnx"), required=True)
    exp.add_argument("-o", "--output", metavar="PATH")
    exp.add_argument("--input", action="append", default=[], metavar="NAME=D1,D2[:DTYPE]",
                     help="an input of a module or function to record (repeatable)")
    cmp = sub.add_parser("compare", help="run one model in every mode and compare time, "
                         "memory, kernels and numbers node by node")
    cmp.add_argument("target", nargs="?", metavar="SCRIPT:BUILD",
                     help="a function of your script returning (model, inputs[, targets, "
                          "loss, optimizer]) or a dict of them")
    cmp.add_argument("--model", metavar="NAME", help="a bundled model instead (duograph.models:"
                     " mlp, cnn, transformer, resnet, rnn)")
    cmp.add_argument("--modes", default="eager,compiled,O0,O1,O2",
                     help="comma-separated: eager, compiled, O0, O1, O2, torch, "
                          "torch.compile, jax")
    cmp.add_argument("--steps", type=int, default=3, help="steps for the loss curves")
    cmp.add_argument("--repeats", type=int, default=10, help="timed steps per mode")
    cmp.add_argument("--report", metavar="DIR", help="write an HTML page with plots here")
    cmp.add_argument("--json", metavar="PATH", help="write every figure as JSON here")
    run = sub.add_parser("run", help="run a script on several MPI processes (mpiexec -n N "
                         "python SCRIPT ...)")
    run.add_argument("-n", "--nproc", type=int, default=1, metavar="N",
                     help="how many processes (ranks)")
    run.add_argument("script")
    run.add_argument("script_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.command == "run":
        return run_command(args.nproc, args.script, args.script_args)
    import duograph as dg
    try:
        if args.command == "inspect" and args.view:
            from duograph.pictures import view
            onnx_file = args.file.lower().endswith(".onnx")
            target = args.file if onnx_file else load_any(args.file)
            print(f"duograph inspect: showing {args.file} in Netron (Ctrl-C to stop)")
            view(target)
        elif args.command == "inspect":
            _output_file(args.svg, "--svg")
            graph = load_any(args.file)
            print(inspect_graph(graph, _parse_dims(args.dim), not args.no_ir, args.svg))
        elif args.command == "compare":
            _output_file(args.json, "--json")
            _output_directory(args.report, "--report")
            print(compare_command(args))
        else:
            _output_file(args.output, "-o")
            print(f"wrote {export(args.target, args.to, args.output, args.input)}")
    except (CommandError, dg.DuographError, ValueError, TypeError) as e:
        print(f"duograph {args.command}: {e}", file=sys.stderr)
        return 2
    except OSError as e:          # a file the command reads or writes: one line, no traceback
        where = f": {e.filename}" if e.filename else ""
        print(f"duograph {args.command}: {e.strerror or e}{where}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
