#!/usr/bin/env bash
# Exhaustive sweeps of several row selections in one call, within a time box.
# Usage: OUT=... DEADLINE_S=500 bash scripts/sweeps.sh "cast.fp8|rounding == 'stochastic'" "cast.fp4|" ...
# Each argument is "<spec glob>|<where expression or empty>"; logs go to $OUT/sweep-<n>.log and a summary
# of every finished row (verdict, message, seconds) to $OUT/sweep-summary.txt.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" reports
export PYTHONUNBUFFERED=1
end=$(( $(date +%s) + ${DEADLINE_S:-500} ))
n=0
for selection in "$@"; do
  n=$((n + 1))
  spec=${selection%%|*}
  where=${selection#*|}
  left=$(( end - $(date +%s) ))
  [ "$left" -gt 20 ] || { echo "time box reached before: $selection" | tee -a "$OUT/sweep-summary.txt"; break; }
  start=$(date +%s)
  timeout "$left" python3 -m conformance.cli run --backend fast --profile exhaustive --spec "$spec" \
    ${where:+--where "$where"} --report "reports/sweep-$n" 2>&1 | tr '\r' '\n' \
    | grep --line-buffered -vE '^\s+[0-9.]+% of' > "$OUT/sweep-$n.log"
  echo "== $selection: $(( $(date +%s) - start )) s" | tee -a "$OUT/sweep-summary.txt"
  grep -E '^\[[0-9]+/[0-9]+\]' "$OUT/sweep-$n.log" | tee -a "$OUT/sweep-summary.txt"
done
tar czf "$OUT/sweep-reports.tgz" reports
