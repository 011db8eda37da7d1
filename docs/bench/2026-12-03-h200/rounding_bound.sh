#!/usr/bin/env bash
# The rounding bound in one device call, from the checkout's root (README.md beside this file).
set -uo pipefail
export PYTHONUNBUFFERED=1 REPO=$PWD
B=docs/bench/2026-12-03-h200/rounding_bound.py
python3 $B patch /tmp/free || exit 3
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
shipped() { PYTHONPATH=$PWD timeout 200 python3 $B time shipped; }
free() { PYTHONPATH=/tmp/free timeout 200 python3 $B time free; }
shipped; free; free; shipped; shipped; free
cat "$OUT/bound_times.json"
