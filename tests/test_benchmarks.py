"""Smoke tests for benchmarks/: they run and write well-formed figures (timings not checked).

    python -m pytest tests/test_benchmarks.py
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

import duograph as dg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_benchmark(script: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", script), *args],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def test_passes_benchmark_quick(tmp_path):
    out = tmp_path / "passes.json"
    proc = run_benchmark("passes.py", "--quick", "--json", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "targets (issues 5 and 11):" in proc.stdout
    assert "OPENBLAS_CORETYPE=" in proc.stdout
    r = json.loads(out.read_text())
    for key in ("blas", "workloads", "chain", "targets", "correct", "rounds", "batches"):
        assert key in r, key
    assert r["correct"] is True
    if importlib.util.find_spec("torch") is not None:   # PyTorch eager, on the same weights
        assert all("torch" in w["32"]["losses"] for w in r["workloads"].values())
    assert "openblas_coretype" in r["blas"] and "libraries" in r["blas"]
    assert set(r["workloads"]) == {"mlp", "cnn"}
    for kind, per_batch in r["workloads"].items():
        assert list(per_batch) == ["32"], kind
        w = per_batch["32"]
        assert w["correct"], (kind, w["losses"])
        contenders = w["contenders"]
        for name in ("eager", "O0", "O1", "O2", "numpy"):
            c = contenders[name]
            assert c["best"] > 0 and c["median"] >= c["best"], (kind, name, c)
            assert c["vs_numpy"] > 0 and c["vs_O0"] > 0
        assert contenders["numpy"]["vs_numpy"] == 1.0
        for mode in ("O0", "O1", "O2"):
            c = contenders[mode]
            assert c["kernels"] > 0 and c["compile_s"] > 0
            mem = c["memory"]
            assert 0 < mem["lower_bound_bytes"] <= mem["arena_bytes"] <= mem["no_reuse_bytes"]
        assert contenders["O2"]["kernels"] < contenders["O0"]["kernels"]
        assert contenders["O2"]["passes"], "O2 ran no passes"
    chain = r["chain"]
    assert chain["kernels_O2"] == 1 and chain["kernels_O0"] >= 8
    assert all(t["best"] > 0 for t in chain["timing"].values())
    assert r["targets"] and all({"name", "ok", "detail"} <= set(t) for t in r["targets"])


def test_passes_benchmark_refuses_avx512_kernels_without_avx512():
    try:
        with open("/proc/cpuinfo") as f:
            if " avx512f" in f.read():
                pytest.skip("this CPU has AVX-512")
    except OSError:
        pytest.skip("no /proc/cpuinfo")
    proc = run_benchmark("passes.py", "--quick", "--blas", "SkylakeX", timeout=60)
    assert proc.returncode != 0
    assert "SIGILL" in proc.stderr


def test_compile_time_benchmark_prints_a_row_per_size():
    proc = run_benchmark("compile_time.py", "--sizes", "100", "400")
    assert proc.returncode == 0, proc.stderr
    rows = [ln.split() for ln in proc.stdout.splitlines()[1:]]
    assert [int(r[0]) for r in rows] == [102, 402]
    assert all(float(r[1]) >= float(r[2]) >= 0 for r in rows)


def test_before_after_runs_both_checkouts_alternately():
    """Against itself as the 'old' checkout: the same figures on both sides, ratios printed."""
    proc = run_benchmark("before_after.py", "--old", ROOT, "--old-python", sys.executable,
                         "--rounds", "1", "eager_overhead.py", "--", "--ops", "4",
                         "--repeat", "1")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[1].split() == ["figure", "old", "new", "new/old"]
    rows = {ln.split()[0]: ln.split()[1:] for ln in lines[2:]}
    assert set(rows) == {"duograph_fwd", "duograph_fwd_ctx", "duograph_fwd_grad",
                         "duograph_fwd_bwd"}
    for old, new, ratio in rows.values():
        assert float(old) > 0 and float(new) > 0
        assert abs(float(ratio) - float(new) / float(old)) < 1e-3 * float(ratio) + 1e-3


@pytest.mark.parametrize("timer", ["wall", "cpu"])
def test_eager_overhead_measures_both_frameworks_alike(tmp_path, timer):
    """Every mode is timed for duograph and PyTorch (the same closures), printed as a row
    with the dg/torch ratio; the JSON names the clock. Without PyTorch (the README's test
    command on a fresh machine) the benchmark times duograph alone and prints "-" for it."""
    with_torch = importlib.util.find_spec("torch") is not None     # (the benchmark's view)
    out = tmp_path / "eager.json"
    proc = run_benchmark("eager_overhead.py", "--ops", "4", "--repeat", "1", "--number", "2",
                         "--timer", timer, "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["timer"] == timer
    modes = ("fwd", "fwd_ctx", "fwd_grad", "fwd_bwd")
    for mode in modes:
        assert r[f"duograph_{mode}"] > 0
        assert (r[f"torch_{mode}"] > 0) if with_torch else f"torch_{mode}" not in r
    rows = {ln.split()[0]: ln.split()[1:] for ln in proc.stdout.splitlines()[2:6]}
    assert set(rows) == set(modes)
    for dg_us, torch_us, _numpy, ratio, _ in rows.values():
        if not with_torch:
            assert float(dg_us) > 0 and torch_us == ratio == "-"
            continue
        want = float(dg_us) / float(torch_us)       # (from figures rounded to 0.01 us)
        assert abs(float(ratio) - want) < 0.05 * want + 0.02


def test_executable_overhead_benchmark_runs(tmp_path):
    out = tmp_path / "exe.json"
    proc = run_benchmark("executable_overhead.py", "--ops", "10", "--repeat", "1",
                         "--number", "50", "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["ops"] == 10 and all(r[k] > 0 for k in (
        "chain_O0", "call_O0", "call_O2", "compile_chain", "compile_chain_exe",
        "compile_mlp", "compile_mlp_exe"))
    assert abs(r["compile_mlp_ratio"] - r["compile_mlp"] / r["compile_mlp_exe"]) < 1e-9
    assert "overhead per kernel" in proc.stdout
    names = [t["name"] for t in r["targets"]]       # the issues' targets, each printed
    want = 7 if "jax_chain" in r else 5             # two against JAX where JAX is installed
    assert len(names) == want and all(f"{n}:" in proc.stdout for n in names)


def test_lstm_scan_benchmark_runs_and_its_losses_agree():
    pytest.importorskip("torch")
    proc = run_benchmark("lstm_scan.py", "--seq", "4", "--batch", "4", "--hidden", "8",
                         "--input", "4", "--steps", "3")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "losses agree to 1e-8" in proc.stdout
    for name in ("scan O2", "unrolled O2", "torch", "scan / unrolled"):
        assert name in proc.stdout


def test_gpu_benchmark_says_it_needs_a_device_without_one():
    """benchmarks/gpu.py (run on the device machine by gpu_device_run.sh) exits with status 2
    and says why where no CUDA device can be used."""
    if dg.cuda.is_available():
        pytest.skip("a CUDA device is present: gpu_device_run.sh runs the benchmark")
    proc = run_benchmark("gpu.py", "--quick", timeout=60)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "needs" in proc.stdout and "CUDA device" in proc.stdout


def test_eager_step_benchmark_runs(tmp_path):
    """benchmarks/eager_step.py: every part timed for duograph (and torch when installed)."""
    out = tmp_path / "eager_step.json"
    proc = run_benchmark("eager_step.py", "--batch", "4", "--rounds", "1", "--number", "1",
                         "--json", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r = json.loads(out.read_text())
    parts = {"fwd_nograd", "fwd", "fwd_bwd", "step", "opt_step"}
    assert set(r["4"]["duograph"]) == parts
    assert all(v > 0 for v in r["4"]["duograph"].values())
    if importlib.util.find_spec("torch") is not None:
        assert set(r["4"]["torch"]) == parts


def test_distributed_benchmark_runs_on_one_and_two_ranks(tmp_path):
    """benchmarks/distributed.py: both jobs run and every ratio is reported (tiny sizes)."""
    pytest.importorskip("mpi4py")
    from duograph.cli import find_mpiexec
    if find_mpiexec() is None:
        pytest.skip("needs mpiexec")
    out = tmp_path / "dist.json"
    proc = run_benchmark("distributed.py", "--per-rank", "4", "--rounds", "1", "--steps", "1",
                         "--profile", "--json", str(out), timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert set(r["results"]) == {"1", "2"}
    assert "cnn dg DDP efficiency" in r["goals"] and "allreduce dg/mpi4py" in r["goals"]
    # the no-communication ceiling, and the DDP efficiencies measured against it
    assert "cnn dg graph DDP efficiency / ceiling" in r["goals"]
    assert "cnn dg graph DDP sleep-wait" in r["results"]["2"]
    assert all(v > 0 for v in r["results"]["2"].values())
    assert all(v >= 0 for v in r["cpu"]["2"].values()) and "cnn dg graph DDP" in r["cpu"]["2"]
    # per node of the CNN graph-DDP step: one table on the 1-rank job, one per rank on 2
    assert [len(r["profile"][k]) for k in ("1", "2")] == [1, 2]
    nodes = [row[0].split("[")[0] for row in r["profile"]["2"][1]]
    assert "all_reduce_wait" in nodes and "conv2d_weight_grad" in nodes


def test_distributed_pair_benchmark_runs(tmp_path):
    """benchmarks/distributed_pair.py: solo, pair without DDP and pair with DDP (both waits)
    in one 2-rank job, with their efficiencies (tiny sizes)."""
    pytest.importorskip("mpi4py")
    from duograph.cli import find_mpiexec
    if find_mpiexec() is None:
        pytest.skip("needs mpiexec")
    out = tmp_path / "pair.json"
    proc = run_benchmark("distributed_pair.py", "--model", "mlp", "--per-rank", "4",
                         "--rounds", "1", "--steps", "1", "--json", str(out), timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    figs = json.loads(out.read_text())["figures"]
    assert set(figs) == {"solo", "pair no-DDP", "pair DDP spin", "pair DDP sleep"}
    assert all(f["best"] > 0 and f["cpu"] >= 0 for f in figs.values())
    assert all(len(figs[k]["efficiency"]) == 2 for k in figs if k != "solo")


def test_autocast_step_benchmark_runs(tmp_path):
    out = tmp_path / "autocast.json"
    proc = run_benchmark("autocast_step.py", "--batch", "16", "--hidden", "32", "--rounds", "1",
                         "--number", "1", "--json", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert {"dg_f32", "dg_bf16"} <= set(r["step"]) and "bf16_dg" in r["matmul"]
    assert all(v["best_ms"] > 0 for v in r["step"].values())


def test_activation_checkpoint_benchmark_runs(tmp_path):
    out = tmp_path / "ckpt.json"
    proc = run_benchmark("activation_checkpoint.py", "--mlp-layers", "3", "--hidden", "16",
                         "--batch", "32", "--blocks", "1", "--seq", "8", "--rounds", "1",
                         "--json", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r = json.loads(out.read_text())
    for model in ("mlp", "transformer"):
        assert r[model]["gradients_equal"] is True
        assert r[model]["plain"]["peak_mb"] > 0 and r[model]["checkpointed"]["peak_mb"] > 0


def test_per_sample_grads_benchmark_quick(tmp_path):
    out = tmp_path / "psg.json"
    proc = run_benchmark("per_sample_grads.py", "--quick", "--json", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["correct"] is True
    assert {"duograph vmap", "duograph loop"} <= set(r["contenders"])
    assert all(c["best_ms"] > 0 and c["median_ms"] >= c["best_ms"]
               for c in r["contenders"].values())


def test_cnn_step_benchmark_quick(tmp_path):
    """benchmarks/cnn_step.py --quick: the CNN step and three conv shapes, figures in JSON."""
    out = tmp_path / "cnn.json"
    proc = run_benchmark("cnn_step.py", "--quick", "--json", str(out), timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "CPU:" in proc.stdout and "GEMM rate" in proc.stdout
    r = json.loads(out.read_text())
    assert r["step"]["O2"] > 0 and r["step"]["eager"] > 0 and r["step"]["floor"] > 0
    passes = {(c["shape"], c["pass"]) for c in r["convs"]}
    assert ("cnn conv2 16->32", "igrad") in passes and ("dw 3x3 96", "wgrad") in passes
    assert all(c["dg"] > 0 and c["floor"] > 0 for c in r["convs"])
    assert len(r["pools"]) == 4
