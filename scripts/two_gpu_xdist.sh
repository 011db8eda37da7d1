#!/usr/bin/env bash
# Issue #7 scale-out demonstration: the contract rows under pytest-xdist, one worker per GPU
# (--qconform-gpus), against one worker on one GPU; nvidia-smi samples show which processes ran where.
# Usage (on a two-GPU host): OUT=... SPEC='quant.fp8_*' bash scripts/two_gpu_xdist.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
SPEC=${SPEC:-quant.fp8_tensor}
mkdir -p "$OUT"
nvidia-smi --query-gpu=index,name,uuid --format=csv > "$OUT/gpus.csv"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'gpus', torch.cuda.device_count())" \
  > "$OUT/versions.txt"
run() {  # name, worker count, gpu list
  local name=$1 workers=$2 gpus=$3
  nvidia-smi --query-compute-apps=timestamp,gpu_uuid,pid,process_name,used_memory --format=csv,noheader -lms 500 \
    > "$OUT/$name-smi.csv" 2>/dev/null &
  local smi=$!
  local start=$(date +%s%N)
  TRITON_CACHE_DIR=/tmp/triton-$name timeout 280 python3 -m pytest tests/test_contracts.py -p no:cacheprovider -q \
    -n "$workers" --qconform-gpus "$gpus" --qconform-backend fast --qconform-profile smoke \
    --qconform-spec "$SPEC" > "$OUT/$name-pytest.log" 2>&1
  local rc=$?
  kill $smi
  printf '%s: workers=%s gpus=%s rc=%s wall=%s ms | %s\n' "$name" "$workers" "$gpus" "$rc" \
    "$(( ($(date +%s%N) - start) / 1000000 ))" "$(tail -1 "$OUT/$name-pytest.log")" | tee -a "$OUT/summary.txt"
  # which GPU each sampled process ran on
  awk -F', ' '{print $2, $3, $4}' "$OUT/$name-smi.csv" | sort -u | tee -a "$OUT/summary.txt"
}
run two-gpus 2 0,1
run one-gpu 1 0
