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
#   optable  the op table on the GPU (graph and eager, values and gradients: ~3000 tests);
#            in "all" it gets what is left of the 10 minutes (OPTABLE_S, default 100 s), so
#            run "optable" alone as a second command for the whole table (540 s)
# ("tests" = smoke + optable). Results go under $OUT (default ./gpu_out): env.txt,
# install.log, <stage>.txt (pytest output, junit xml), gpu_bench.txt and gpu_bench.json.
# Each stage has its own time limit so that a slow one cannot eat the others' results.
set -u
STAGE="${1:-all}"
OUT="${OUT:-$(pwd)/gpu_out}"
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"

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
  "$PY" -m pip install --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 \
    || echo "pip install failed (see install.log); running from the source tree" \
    >> "$OUT/env.txt"
else
  echo "no CUDA device (or SKIP_INSTALL): not installing" > "$OUT/install.log"
fi
export PYTHONPATH="$(pwd)${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1

run_pytest () {   # name, seconds, pytest args...
  local name="$1" limit="$2"; shift 2
  timeout "$limit" "$PY" -m pytest -q -p no:cacheprovider -rfEs \
    --junitxml="$OUT/$name.xml" "$@" > "$OUT/$name.txt" 2>&1
  echo "$name: exit $? (limit ${limit}s)" | tee -a "$OUT/summary.txt"
  tail -n 3 "$OUT/$name.txt" | tee -a "$OUT/summary.txt"
}

# limits (seconds) fit "all" in one 10-minute device command: smoke, then the benchmark,
# then as much of the op table as is left (run "optable" alone for all of it)
SMOKE_S="${SMOKE_S:-150}"; BENCH_S="${BENCH_S:-300}"; OPTABLE_S="${OPTABLE_S:-100}"
if [[ "$STAGE" == optable ]]; then OPTABLE_S="${OPTABLE_S_ALONE:-540}"; fi
if [[ "$STAGE" == all || "$STAGE" == smoke || "$STAGE" == tests ]]; then
  run_pytest smoke "$SMOKE_S" tests/test_gpu.py -k "not op_table" tests/test_eager_tensor.py \
    tests/test_fusion.py tests/test_cuda_codegen.py tests/test_device_plumbing.py
fi
if [[ "$STAGE" == all || "$STAGE" == bench ]]; then
  timeout "$BENCH_S" "$PY" benchmarks/gpu.py ${BENCH_ARGS:-} --json "$OUT/gpu_bench.json" \
    > "$OUT/gpu_bench.txt" 2>&1
  echo "bench: exit $? (limit ${BENCH_S}s)" | tee -a "$OUT/summary.txt"
  grep -A20 "^goals" "$OUT/gpu_bench.txt" | tee -a "$OUT/summary.txt"
fi
if [[ "$STAGE" == all || "$STAGE" == optable || "$STAGE" == tests ]]; then
  # -v: one line per test as it finishes, so a run cut by the limit still shows its counts
  run_pytest optable "$OPTABLE_S" tests/test_gpu.py -k "op_table" -v --tb=line --maxfail=300
  echo "optable so far: $(grep -c ' PASSED' "$OUT/optable.txt") passed, \
$(grep -c ' FAILED' "$OUT/optable.txt") failed" | tee -a "$OUT/summary.txt"
fi
