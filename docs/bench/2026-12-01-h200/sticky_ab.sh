#!/usr/bin/env bash
# The sticky-bit A/B in one device call, from the checkout's root (README.md beside this file).  Needs here, before the
# call: `git show ef7582e:fast/quant/nvfp4.py > scratch/nvfp4_head.py` and the wheels in .whl (carry scratch and .whl).
set -uo pipefail
export PYTHONUNBUFFERED=1 REPO=$PWD
AB=docs/bench/2026-12-01-h200/sticky_ab.py
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
mkdir -p /tmp/old && cp -r fast /tmp/old/ && cp scratch/nvfp4_head.py /tmp/old/fast/quant/nvfp4.py
old() { PYTHONPATH=/tmp/old:/tmp/site timeout 150 python3 $AB old "$@"; }
new() { PYTHONPATH=$PWD:/tmp/site timeout 150 python3 $AB new "$@"; }
old check & a=$!; new check & b=$!; wait $a $b
python3 - <<'P'
import json, os
a = json.load(open(os.environ["OUT"] + "/ab_hash_old.json")); b = json.load(open(os.environ["OUT"] + "/ab_hash_new.json"))
print("cases", len(a), "differ", sum(a[k] != b.get(k) for k in a), "errors", sum(v.startswith("error") for v in a.values()))
P
old time; new time; old time; new time; new time; old time
cat "$OUT/ab_times.json"
