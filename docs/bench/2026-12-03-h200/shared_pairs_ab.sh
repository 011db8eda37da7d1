#!/usr/bin/env bash
# A/B of the 16x16 tiles' shared codes by float16x2 pairs, in one device call from the checkout's root (README.md
# beside this file).  Needs here, before the call: `git show 1984d87:fast/quant/nvfp4.py > scratch/nvfp4_head.py`
# (carry scratch).  Uses 2026-12-01's sticky_ab.py: `check` hashes every output of 186 cases, `time` times them.
set -uo pipefail
export PYTHONUNBUFFERED=1 REPO=$PWD
AB=docs/bench/2026-12-01-h200/sticky_ab.py
mkdir -p /tmp/old && cp -r fast /tmp/old/ && cp scratch/nvfp4_head.py /tmp/old/fast/quant/nvfp4.py
old() { PYTHONPATH=/tmp/old timeout 200 python3 $AB old "$@"; }
new() { PYTHONPATH=$PWD timeout 200 python3 $AB new "$@"; }
old check & a=$!; new check & b=$!; wait $a $b
python3 - <<'P'
import json, os
a = json.load(open(os.environ["OUT"] + "/ab_hash_old.json")); b = json.load(open(os.environ["OUT"] + "/ab_hash_new.json"))
print("cases", len(a), "differ", [k for k in a if a[k] != b.get(k)], "errors", sum(v.startswith("error") for v in a.values()))
P
old time; new time; new time; old time; old time; new time
cat "$OUT/ab_times.json"
PYTHONPATH=$PWD timeout 240 python3 -m pytest tests/gpu/test_gpu_nvfp4.py tests/gpu/test_gpu_group.py -m gpu -q -x -n 8 \
  -p no:cacheprovider 2>&1 | tail -5
