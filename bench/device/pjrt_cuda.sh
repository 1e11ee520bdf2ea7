#!/usr/bin/env bash
# Device check of the PJRT runtime on an NVIDIA GPU (docs/pjrt.md, "Device check"): builds
# torch_tpu against the machine's torch, points it at the CUDA plugin of the installed
# jax-cuda13-pjrt, runs tests/pjrt, the GPT training benchmark next to native cuda eager, and a
# float32 OpInfo subset. No network, no pip. Results go to $OUT (default ./pjrt_cuda_out).
# Budget knobs (seconds): BUILD_LIMIT, TEST_LIMIT, BENCH_LIMIT, FUSED_LIMIT, OPINFO_LIMIT. PHASES
# (default "build,tests,bench,opinfo"; "fused" adds bench/fused_vs_strict.py on the GPU) selects phases, so a device lent with a 10-minute limit per command
# can run PHASES=build first and PHASES=tests,bench,opinfo in a second call (build-device/ stays).
# Device time is scarce, so two things may travel with the tree: wheels in .whl/ (test-only
# packages the machine lacks, e.g. expecttest) are installed into a scratch folder, and a
# torch_tpu/_C built elsewhere for this machine's Python and torch is used as is when it imports
# (the build phase is then skipped). TORCH_TPU_PJRT_PLUGIN, when set, replaces plugin discovery
# (a dry run on a machine without a GPU: point it at the CPU plugin, and the bench skips cuda).
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
OUT=${OUT:-$REPO/pjrt_cuda_out}
mkdir -p "$OUT"
PY=${PYTHON:-$(command -v python3 || command -v python)}
JOBS=${JOBS:-$(nproc)}
SUMMARY=$OUT/summary.txt
touch "$SUMMARY"
PHASES=${PHASES:-build,tests,bench,opinfo}
failed=0
want() { [[ ",$PHASES," == *",$1,"* ]]; }

step() {  # step NAME LIMIT CMD...: runs CMD with a time limit, logs to $OUT/NAME.log
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS rc=0
  echo "== $name (limit ${limit}s)"
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1 || rc=$?
  echo "$name rc=$rc $((SECONDS - t0))s" | tee -a "$SUMMARY"
  tail -n 15 "$OUT/$name.log"
  if [ "$rc" != 0 ]; then failed=1; fi
  return 0
}

if compgen -G ".whl/*.whl" > /dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/torch_tpu_site .whl/*.whl
  export PYTHONPATH=/tmp/torch_tpu_site${PYTHONPATH:+:$PYTHONPATH}
fi

{
  date -u || true
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
  "$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())" || true
  "$PY" -c "import jax, jaxlib; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__)" || true
  command -v cmake ninja g++ || true
  g++ --version | head -n 1 || true
  "$PY" -c "import sysconfig, os; h = os.path.join(sysconfig.get_paths()['include'], 'Python.h'); print(h, os.path.isfile(h))" || true
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

# 1. Build against this machine's torch (cmake + ninja; the extension lands in torch_tpu/).
if want build && TORCH_TPU_RUNTIME=host "$PY" -c "import torch_tpu._C" > "$OUT/prebuilt.log" 2>&1; then
  echo "build skipped: a prebuilt torch_tpu/_C imports with this Python and torch" | tee -a "$SUMMARY"
elif want build; then
  step build "${BUILD_LIMIT:-300}" bash -c "cmake -S '$REPO' -B '$REPO/build-device' -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DPython_EXECUTABLE='$PY' && cmake --build '$REPO/build-device' -j '$JOBS' --target _C"
  if [ "$failed" != 0 ]; then
    echo "build failed: see $OUT/build.log"
    exit 1
  fi
fi

# 2. The CUDA plugin of the installed jax-cuda13-pjrt (no import of jax needed).
PLUGIN=${TORCH_TPU_PJRT_PLUGIN:-$("$PY" - <<'PYEOF'
import os, sys
for d in sys.path:
    for sub in ("xla_cuda13", "xla_cuda12"):
        p = os.path.join(d, "jax_plugins", sub, "xla_cuda_plugin.so")
        if os.path.isfile(p):
            print(p)
            raise SystemExit
raise SystemExit("no jax_plugins/xla_cuda13/xla_cuda_plugin.so in sys.path (is jax-cuda13-pjrt installed?)")
PYEOF
)}
echo "plugin: $PLUGIN" | tee -a "$OUT/env.txt"
export TORCH_TPU_RUNTIME=pjrt TORCH_TPU_PJRT_PLUGIN=$PLUGIN
export TORCH_TPU_PJRT_OPTIONS=${TORCH_TPU_PJRT_OPTIONS-preallocate=false}  # set but empty: none (a CPU-plugin dry run)
export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH}
# The program cache stays out of $OUT: the device tool brings back at most 8 files.
export TORCH_TPU_CACHE_DIR=${TORCH_TPU_CACHE_DIR:-/tmp/torch_tpu_device_cache}

# 3. GPT training step: PJRT strict/fused/compiled vs native cuda eager, same process (first:
#    it is the figure the check exists for).
if want bench; then
  step bench "${BENCH_LIMIT:-200}" "$PY" bench/device/pjrt_cuda.py --out "$OUT/bench.json"
fi

# 3b. The fused-eager issue's benchmark (fused vs strict, same process) with the GPU as the device:
#     on a real accelerator strict mode pays one program launch per op, which is what fusion saves.
if want fused; then
  step fused_vs_strict "${FUSED_LIMIT:-300}" "$PY" bench/fused_vs_strict.py --rounds "${FUSED_ROUNDS:-3}" \
    --only "${FUSED_ONLY:-gpt,resnet,gpt2width,preprocess}"
fi

# 4. Loader + runtime tests on the GPU.
if want tests; then
  step tests_pjrt "${TEST_LIMIT:-100}" "$PY" -m pytest tests/pjrt -q -p no:cacheprovider -rs
fi

# 5. A float32 OpInfo subset in strict mode (-v: the log lists each result even when the time
#    limit cuts the run short).
if want opinfo; then
  OPS="add or sub or mul or div or exp or log or tanh or sigmoid or softmax or matmul or mm or sum or mean"
  OPS="$OPS or amax or where or clamp or cat or transpose or gather or layer_norm"
  step opinfo "${OPINFO_LIMIT:-150}" "$PY" -m pytest tests/ops/test_opinfo.py -v -p no:cacheprovider --maxfail=50 \
    -k "test_forward and float32 and strict and ($OPS)" -o addopts=""
fi

echo "summary:"; cat "$SUMMARY"
exit $failed
