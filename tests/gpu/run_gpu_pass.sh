#!/usr/bin/env bash
# GPU tests and benchmarks of fast/ on a CUDA machine, in one call; run from anywhere.
#   1. every test marked gpu (tests/gpu and the GPU cases of tests/fast): kernels against reference/ on CUDA
#   2. tests/bench (-m bench): CPU paths, the Triton kernel and its peers, beside copy bandwidth
#   3. a short summary table (GB/s, fraction of copy bandwidth, peers), printed last
# Writes into ${OUT:-/tmp/out}: gpu-junit.xml, bench.json, gpu-pass.log (both pytest logs and the summary).
# Expects python3 with torch (CUDA), triton, numpy, pytest and pytest-benchmark; the caller puts any
# carried packages (hypothesis, pyyaml, ...) on PYTHONPATH.  Exit status: 0 when both steps passed.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
LOG="$OUT/gpu-pass.log"
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
: > "$LOG"

python3 -c "import torch, triton, numpy; gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else 'none'
print('gpu', gpu, '| torch', torch.__version__, '| triton', triton.__version__, '| numpy', numpy.__version__)" 2>&1 | tee -a "$LOG"

status=0
echo "== tests -m gpu" | tee -a "$LOG"
python3 -m pytest tests -m gpu -q -rfEs -p no:cacheprovider --junitxml "$OUT/gpu-junit.xml" 2>&1 | tee -a "$LOG"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

echo "== tests/bench" | tee -a "$LOG"
python3 -m pytest tests/bench -m bench -q -rfEs -p no:cacheprovider --benchmark-enable \
  --benchmark-json "$OUT/bench.json" 2>&1 | tee -a "$LOG"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

# ALU-bound kernels (the bfloat16 cast) follow the SM clock; memory-bound ones (float32, the copy) do not.
echo "== GPU state just after the benchmarks" | tee -a "$LOG"
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu --format=csv 2>&1 | tee -a "$LOG"

echo "== summary" | tee -a "$LOG"
python3 - "$OUT/bench.json" "$OUT/gpu-junit.xml" <<'EOF' 2>&1 | tee -a "$LOG"
import json
import sys
import xml.etree.ElementTree as ET

bench_path, junit_path = sys.argv[1:3]
try:
    suite = ET.parse(junit_path).getroot().find("testsuite")
    print("gpu tests: " + ", ".join(f"{k} {suite.get(k)}" for k in ("tests", "failures", "errors", "skipped")))
except (OSError, ET.ParseError) as error:
    print(f"gpu tests: no JUnit report ({error})")
try:
    benchmarks = json.load(open(bench_path))["benchmarks"]
except (OSError, ValueError) as error:
    sys.exit(f"benchmarks: no JSON report ({error})")
copy = [b["extra_info"]["copy_gb_per_s"] for b in benchmarks if "copy_gb_per_s" in b["extra_info"]]
if copy:
    print(f"device-to-device copy: {copy[0]:.0f} GB/s (read + write)")
print(f"{'benchmark':<62} {'ms':>9} {'GB/s':>7} {'of copy':>8}")
for b in benchmarks:
    info = b["extra_info"]
    if "ms" in info:
        print(f"{b['name'][:62]:<62} {info['ms']:9.3f} {info['gb_per_s']:7.0f} {info['fraction_of_copy']:8.1%}")
    else:
        print(f"{b['name'][:62]:<62} {b['stats']['median'] * 1e3:9.3f}  (CPU, pytest-benchmark median)")
EOF
exit $status
