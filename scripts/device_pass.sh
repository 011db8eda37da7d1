#!/usr/bin/env bash
# One check-and-benchmark pass on a CUDA machine (the device tool's H100), in one call.
# Order puts what must come back first; each step is time-boxed:
#   1. install the carried wheels (.whl: qconform's metadata, pure-Python test deps)
#   2. conformance runs of $BACKENDS (default: fast torch) at $PROFILE (default: default) and $SEED (default: 0, the
#      reproducible cases; another seed fuzzes new ones), each in $SHARDS
#      parallel shards (default 1) merged into one report; a shard cut by $RUN_S runs again one contract a process
#   3. GPU tests and benchmarks (tests/gpu/run_gpu_pass.sh)
#   4. exhaustive sweeps of the rows selected by $SWEEP_SPEC and $SWEEP_WHERE, at most $SWEEP_S seconds
# Results in $OUT: env.txt, reports.tgz, gpu-junit.xml, bench.json, gpu-pass.log, sweep.log.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" reports
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
  export PYTHONPATH="$PWD:/tmp/site"
fi
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader
  python3 -c "import torch, triton, numpy; print('torch', torch.__version__, 'triton', triton.__version__, 'numpy', numpy.__version__, 'cuda', torch.version.cuda)"
  nproc; } | tee "$OUT/env.txt"

status=0
# $SHARDS processes per backend (default 1), each on every row of its shard, merged into reports/$backend
SHARDS=${SHARDS:-1}
for backend in ${BACKENDS:-fast torch}; do
  start=$(date +%s)
  for i in $(seq 1 "$SHARDS"); do
    timeout "${RUN_S:-300}" python3 -m conformance.cli run --backend "$backend" --profile "${PROFILE:-default}" \
      --seed "${SEED:-0}" --spec "${SPEC:-*}" --shard "$i/$SHARDS" --report "reports/$backend-$i" --quiet > "reports/$backend-$i.log" 2>&1 &
  done
  wait
  # A shard that ran past RUN_S (a cold cache compiles every kernel variant) is run again in pieces, one contract a
  # process, RETRY_PARALLEL side by side, RETRY_S each; report merge counts the shard covered once every row is there.
  for i in $(seq 1 "$SHARDS"); do
    [ -f "reports/$backend-$i/report.json" ] && continue
    echo "$backend: shard $i/$SHARDS did not finish in ${RUN_S:-300} s; again, one contract a process"
    python3 -c 'import sys; from conformance.registry import load_specs; print(*(s.contract for s in load_specs(sys.argv[1])))' \
      "${SPEC:-*}" | tr ' ' '\n' | xargs -P "${RETRY_PARALLEL:-16}" -I{} sh -c "timeout ${RETRY_S:-${RUN_S:-300}} \
        python3 -m conformance.cli run --backend $backend --profile ${PROFILE:-default} --seed ${SEED:-0} --spec {} --shard $i/$SHARDS \
        --report reports/$backend-$i-{} --quiet > reports/$backend-$i-{}.log 2>&1"
  done
  python3 -m conformance.cli report merge --report "reports/$backend" reports/"$backend"-*/report.json \
    > "reports/$backend.log" 2>&1
  code=$?
  cat reports/"$backend"-*.log "reports/$backend.log" | cut -c1-400
  echo "$backend: $SHARDS shards, wall time $(( $(date +%s) - start )) s"
  [ "$code" -le 1 ] || status=1
done
tar czf "$OUT/reports.tgz" reports

if [ -f tests/gpu/run_gpu_pass.sh ] && [ -z "${SKIP_GPU_TESTS:-}" ]; then
  timeout "${GPU_S:-300}" bash tests/gpu/run_gpu_pass.sh > /dev/null 2>&1 || status=1
  tail -40 "$OUT/gpu-pass.log"
fi

if [ -n "${SWEEP_SPEC:-}" ]; then
  start=$(date +%s)
  timeout "${SWEEP_S:-240}" python3 -m conformance.cli run --backend fast --profile exhaustive --spec "$SWEEP_SPEC" \
    ${SWEEP_WHERE:+--where "$SWEEP_WHERE"} --report reports/fast-exhaustive 2>&1 \
    | tr '\r' '\n' | grep --line-buffered -vE '^\s+[0-9.]+% of' > "$OUT/sweep.log"
  echo "sweep wall time: $(( $(date +%s) - start )) s" | tee -a "$OUT/sweep.log"
  tail -30 "$OUT/sweep.log"
  tar czf "$OUT/reports.tgz" reports
fi
exit $status
