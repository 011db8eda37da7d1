#!/usr/bin/env bash
# One check-and-benchmark pass on a CUDA machine (the device tool's H100), in one call:
#   1. install the carried wheels (.whl: qconform's metadata and the pure-Python test deps)
#   2. conformance runs of `fast` and `torch` (profile from $PROFILE, default "default")
#   3. the exhaustive sweep of cast rows ($SWEEP glob, default none)
#   4. GPU tests and benchmarks (tests/gpu/run_gpu_pass.sh)
# Everything lands in $OUT (reports as one tarball; logs; bench JSON).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
  export PYTHONPATH="$PWD:/tmp/site"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/env.txt"
python3 -c "import torch, triton, numpy; print('torch', torch.__version__, 'triton', triton.__version__, 'numpy', numpy.__version__, 'cuda', torch.version.cuda)" | tee -a "$OUT/env.txt"

status=0
for backend in ${BACKENDS:-fast torch}; do
  python3 -m conformance.cli run --backend "$backend" --profile "${PROFILE:-default}" --spec "${SPEC:-*}" \
    --report "reports/$backend" 2>&1 | tee "reports-$backend.log" | grep -vE '^\[[0-9]+/[0-9]+\].*: pass' 
  [ "${PIPESTATUS[0]}" -le 1 ] || status=1
done
if [ -n "${SWEEP:-}" ]; then
  ( time python3 -m conformance.cli run --backend fast --profile exhaustive --spec "$SWEEP" --report reports/fast-exhaustive ) \
    > sweep.log 2>&1
  tr '\r' '\n' < sweep.log | grep -vE '^\s+[0-9.]+% of' > "$OUT/sweep.log"
fi
tar czf "$OUT/reports.tgz" reports reports-*.log 2>/dev/null
if [ -f tests/gpu/run_gpu_pass.sh ] && [ -z "${SKIP_GPU_TESTS:-}" ]; then
  bash tests/gpu/run_gpu_pass.sh || status=1
fi
exit $status
