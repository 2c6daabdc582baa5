"""dg.config: one documented object, read when used; environment variables only seed it."""
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import duograph as dg
from duograph.graphlib.config import OPTIONS, Config
from duograph.runtime.cpu import cblas, cpu_backend, numba_support

ROOT = Path(__file__).resolve().parent.parent


def test_environment_seeds_the_defaults():
    cfg = Config(environ={"DUOGRAPH_FUSED": "numpy", "DUOGRAPH_NUMBA": "0",
                          "DUOGRAPH_FUSED_THREADS": "3", "DUOGRAPH_MATMUL_SWAP": "1",
                          "DUOGRAPH_SOURCE": "1", "DUOGRAPH_CACHE_DIR": "/tmp/dg"})
    assert cfg.fused_strategy == "numpy" and cfg.numba is False and cfg.fused_threads == 3
    assert cfg.matmul_swap == "on" and cfg.capture_source is True
    assert cfg.cache_dir == "/tmp/dg"
    defaults = Config(environ={})
    assert defaults.as_dict() == {name: o.default for name, o in OPTIONS.items()}


def test_backend_options_live_in_the_backends_section_with_documented_short_names():
    """The CPU backend registers its options under its name (``dg.config.cpu``); each short
    name (``dg.config.numba``) is the same option, seeded by the same variable."""
    from duograph.graphlib.config import ALIASES, SECTIONS
    from duograph.runtime.cpu.options import options
    assert options is dg.config.cpu
    cpu = {"fused_strategy", "fused_threads", "numba", "numba_parallel", "cblas", "cache_dir",
           "matmul_swap", "conv_algorithm", "numba_small_after"}
    assert set(SECTIONS["cpu"]) == cpu and all(ALIASES[n] == ("cpu", n) for n in cpu)
    assert not cpu & {n for n in OPTIONS if "." not in n}     # none declared by graphlib
    cfg = Config(environ={"DUOGRAPH_NUMBA": "0"})
    assert cfg.cpu.numba is False and cfg.numba is False
    cfg.numba = True
    assert cfg.cpu.numba is True
    cfg.cpu.fused_threads = "2"
    assert cfg.fused_threads == 2 and cfg.as_dict()["cpu.fused_threads"] == 2
    with cfg.override(**{"cpu.numba": False, "fused_strategy": "ops"}):
        assert cfg.cpu.numba is False and cfg.cpu.fused_strategy == "ops"
    with cfg.cpu.override(numba=False):
        assert cfg.numba is False
    assert cfg.cpu.numba is True and cfg.fused_strategy == "auto"
    with pytest.raises(ValueError, match="cpu.fused_threads"):
        cfg.cpu.fused_threads = 0
    with pytest.raises(AttributeError, match="no option 'fused'"):
        cfg.cpu.fused = 1
    with pytest.raises(AttributeError, match="section"):
        cfg.cpu = None
    assert dg.config.cpu is options       # one object for the life of the config
    before = dg.config.as_dict()
    dg.config.reset()                     # (the process's own seeds: nothing else changes)
    assert dg.config.cpu is options and dg.config.as_dict() == before


def test_a_bad_environment_value_warns_and_keeps_the_default():
    with pytest.warns(RuntimeWarning, match="DUOGRAPH_FUSED='fastest'"):
        cfg = Config(environ={"DUOGRAPH_FUSED": "fastest"})
    assert cfg.fused_strategy == "auto"


def test_reproducible_by_default():
    """Nothing timed changes a result unless asked for: the default matmul form is timed
    but kept only where it gives the same bits; the fully timed one is opt-in."""
    assert Config(environ={}).matmul_swap == "exact"


def test_assignment_is_checked_and_unknown_options_are_refused():
    cfg = Config(environ={})
    with pytest.raises(ValueError, match="fused_strategy: expected one of auto, numpy"):
        cfg.fused_strategy = "fastest"
    with pytest.raises(ValueError, match="fused_threads"):
        cfg.fused_threads = 0
    with pytest.raises(AttributeError, match="no option 'fused'"):
        cfg.fused = "numpy"
    with pytest.raises(AttributeError, match="no option 'nope'"):
        with cfg.override(nope=1):
            pass
    cfg.numba = "0"
    assert cfg.numba is False


def test_override_restores_even_when_the_block_raises():
    before = dg.config.as_dict()
    with pytest.raises(RuntimeError):
        with dg.config.override(fused_strategy="ops", numba=False):
            assert dg.config.fused_strategy == "ops" and dg.config.numba is False
            raise RuntimeError("boom")
    assert dg.config.as_dict() == before
    with pytest.raises(ValueError):
        with dg.config.override(fused_threads=2, fused_strategy="bad"):
            pass
    assert dg.config.as_dict() == before


def test_options_are_read_when_used():
    """A change after import takes effect at the next call (no import-time copies)."""
    with dg.config.override(numba=False):
        assert not numba_support.numba_available()
        assert numba_support.numba_module("conv_numba") is None
    with dg.config.override(cblas=False):
        assert not cblas.available()
    with dg.config.override(capture_source=True):
        assert dg.graphlib.source.capture_source_eagerly()
    assert not dg.graphlib.source.capture_source_eagerly()
    g = dg.Graph("strategy")
    with g:
        x = dg.placeholder("x", (100,))
        y = dg.tanh(x * 2.0) + 1.0
    exe = g.compile(outputs=[y], passes=["fuse"])
    (node,) = [n for n in exe.graph.nodes if n.op.name == "fused"]
    xs = np.linspace(-1, 1, 100, dtype=np.float32)
    with dg.config.override(fused_strategy="ops"):
        (ops,) = exe(x=xs)
    assert not [k for k in _plans_of(node.attrs["sub"]) if k is not None]   # op by op: no plan
    with dg.config.override(fused_strategy="numpy"):
        (chunks,) = exe(x=xs)
    assert [k for k in _plans_of(node.attrs["sub"]) if k is not None]
    np.testing.assert_array_equal(ops, chunks)


def _plans_of(body) -> dict:
    return cpu_backend.fused_compiler.plans.get(body) or {}


def test_set_capture_source_is_the_config_switch():
    try:
        dg.set_capture_source(True)
        assert dg.config.capture_source is True
    finally:
        dg.set_capture_source(False)
    assert dg.config.capture_source is False


def test_environment_variables_reach_a_fresh_process():
    code = "import duograph as dg; print(dg.config.fused_strategy, dg.config.numba)"
    env = {"DUOGRAPH_FUSED": "ops", "DUOGRAPH_NUMBA": "0", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True, cwd=ROOT).stdout.split()
    assert out == ["ops", "False"]


def test_no_environment_reads_outside_the_config():
    """Every DUOGRAPH_* variable is read by graphlib/config.py alone (its defaults' seed);
    elsewhere only other programs' variables, each read by its literal name."""
    offenders = []
    for folder in ("graphlib", "eager", "passes", "runtime", "duograph"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name == "config.py" and folder == "graphlib":
                continue
            for i, line in enumerate(path.read_text().splitlines(), 1):
                if "os.environ" in line or re.search(r"getenv\(", line):
                    # another program's variable read by its literal name (an MPI
                    # launcher's PMI_SIZE) is no duograph setting
                    named = re.findall(r"os\.environ\.get\(\"(\w+)\"\)", line)
                    if named and not any(n.startswith("DUOGRAPH") for n in named) and \
                            line.count("os.environ") == len(named):
                        continue
                    offenders.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_every_option_is_listed_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    for name, opt in OPTIONS.items():
        assert name in readme and opt.env in readme, name
