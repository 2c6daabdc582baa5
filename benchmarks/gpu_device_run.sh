#!/usr/bin/env bash
# Everything issue 14 needs from the GPU machine, in one command (or one stage per command):
#
#     bash benchmarks/gpu_device_run.sh [all|smoke|tests|optable|bench]   # default: all
#
# Installs duograph (no index needed: --no-deps), records the environment, then runs
#   smoke    the non-table GPU tests (generated kernels, arena, CUDA graphs, digits in three
#            modes, DLPack, device errors) and the CPU-side codegen/plumbing tests
#   bench    benchmarks/gpu.py (MLP, CNN, fused GELU against torch and JAX); BENCH_ARGS
#            passes options (e.g. BENCH_ARGS=--quick)
#   optable  the op table on the GPU (graph and eager, values and gradients: ~3000 tests),
#            spread over pytest-xdist workers where xdist is installed (OPTABLE_WORKERS)
#   rerun    only the tests named in benchmarks/gpu_rerun.txt (one pytest node id a line)
# ("tests" = smoke and optable side by side: one GPU, many CPU cores; then "all" runs the
# benchmark alone on the quiet GPU). Results go under $OUT (default ./gpu_out): env.txt (with
# the install log), summary.txt, <stage>.txt (pytest output), gpu_bench.txt and
# gpu_bench.json (written after each workload). At most 8 files come back from the device
# tool, so nothing else is written there. Each stage has its own time limit so that a slow
# one cannot eat the others' results.
set -u
STAGE="${1:-all}"
OUT="${OUT:-$(pwd)/gpu_out}"
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
# output reaches the files as it is printed (a stage cut by its limit keeps what it printed);
# JAX takes GPU memory as it needs it, beside cupy's and torch's pools
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false

{
  date -u
  nvidia-smi || true
  "$PY" - <<'PYEOF'
import importlib
for name in ("numpy", "scipy", "networkx", "sympy", "safetensors", "ml_dtypes", "cupy",
             "torch", "jax", "numba", "pytest", "sklearn"):
    try:
        mod = importlib.import_module(name)
        print(f"{name} {getattr(mod, '__version__', '?')}")
    except Exception as e:  # noqa: BLE001
        print(f"{name} MISSING ({type(e).__name__}: {e})")
try:
    import cupy
    print("cuda devices:", cupy.cuda.runtime.getDeviceCount(),
          "runtime", cupy.cuda.runtime.runtimeGetVersion(),
          "driver", cupy.cuda.runtime.driverGetVersion())
except Exception as e:  # noqa: BLE001
    print("cupy device check failed:", e)
PYEOF
} > "$OUT/env.txt" 2>&1

# install only where a CUDA device is visible (the device machine), never into a
# development machine's interpreter; elsewhere the source tree runs through PYTHONPATH
if "$PY" -c "import cupy, sys; sys.exit(cupy.cuda.runtime.getDeviceCount() == 0)" \
    > /dev/null 2>&1 && [[ -z "${SKIP_INSTALL:-}" ]]; then
  "$PY" -m pip install --no-deps --no-build-isolation -e . >> "$OUT/env.txt" 2>&1 \
    || echo "pip install failed (see above); running from the source tree" >> "$OUT/env.txt"
else
  echo "no CUDA device (or SKIP_INSTALL): not installing" >> "$OUT/env.txt"
fi
export PYTHONPATH="$(pwd)${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1

run_pytest () {   # name, seconds, pytest args...
  local name="$1" limit="$2" t0=$SECONDS; shift 2
  timeout "$limit" "$PY" -m pytest -p no:cacheprovider -rfEs "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  { echo "$name: exit $rc after $((SECONDS - t0))s (limit ${limit}s)"
    tail -n 3 "$OUT/$name.txt"; } >> "$OUT/summary.txt"
}
# pytest-xdist spreads a stage over CPU workers (the GPU is shared; compiles are on the CPU)
xdist () {   # workers
  if "$PY" -c "import xdist" > /dev/null 2>&1 && [[ "$1" -gt 1 ]]; then echo "-n $1"; fi
}

# limits (seconds) fit "all" in well under one 10-minute device command: smoke and the op
# table side by side, then the benchmark alone
SMOKE_S="${SMOKE_S:-170}"; BENCH_S="${BENCH_S:-220}"; OPTABLE_S="${OPTABLE_S:-170}"
SMOKE_WORKERS="${SMOKE_WORKERS:-4}"; OPTABLE_WORKERS="${OPTABLE_WORKERS:-10}"
if [[ "$STAGE" == optable ]]; then OPTABLE_S="${OPTABLE_S_ALONE:-540}"; fi
smoke () {
  run_pytest smoke "$SMOKE_S" -q $(xdist "$SMOKE_WORKERS") tests/test_gpu.py -k "not op_table" \
    tests/test_eager_tensor.py tests/test_fusion.py tests/test_cuda_codegen.py \
    tests/test_device_plumbing.py
}
optable () {
  # -v: one line per test as it finishes, so a run cut by the limit still shows its counts
  run_pytest optable "$OPTABLE_S" $(xdist "$OPTABLE_WORKERS") tests/test_gpu.py -k "op_table" \
    -v --tb=line --maxfail=300
  echo "optable so far: $(grep -c 'PASSED' "$OUT/optable.txt") passed, \
$(grep -c 'FAILED' "$OUT/optable.txt") failed" >> "$OUT/summary.txt"
}
case "$STAGE" in
  all|tests) smoke & optable & wait ;;
  smoke) smoke ;;
  optable) optable ;;
  rerun) run_pytest rerun "${RERUN_S:-200}" $(xdist "$OPTABLE_WORKERS") -v --tb=short \
           $(grep -v '^#' benchmarks/gpu_rerun.txt) ;;
esac
if [[ "$STAGE" == all || "$STAGE" == bench ]]; then
  timeout "$BENCH_S" "$PY" benchmarks/gpu.py ${BENCH_ARGS:-} --json "$OUT/gpu_bench.json" \
    > "$OUT/gpu_bench.txt" 2>&1
  echo "bench: exit $? (limit ${BENCH_S}s)" >> "$OUT/summary.txt"
  grep -A20 "^goals" "$OUT/gpu_bench.txt" >> "$OUT/summary.txt"
fi
cat "$OUT/summary.txt"
