#!/usr/bin/env bash
# Install TransformerEngine 2.20.2 on a device machine with no network, in consecutive device calls (issue #30).
#
# The core wheel transformer-engine-cu13==2.20.2 (276.5 MB) is larger than what one call may carry (64 MiB with the
# working tree), so it travels in pieces, one carried path per call, kept under /tmp between calls (the machine stays
# held while calls come back to back); transformer_engine_torch==2.20.2 is an sdist, built on the device in the
# background while the pieces travel.
#
# Steps (run from the repository root):
#   prepare        HERE (network): download into .te-wheels/ (git-ignored), split the core wheel into
#                  .te-wheels/piece-NN (PIECE_MIB each, default 45), write .te-wheels/small/MANIFEST (name, size, sha256)
#   start          device, call 1, carry .te-wheels/small: install the small wheels into $TE_SITE, unpack the sdist
#                  and start `setup.py build_ext --inplace` under setsid (log: $TE_BUILD/build.log)
#   piece NN       device, one call per piece, carry .te-wheels/piece-NN: copy it to $TE_PIECES
#   install        device (in the call of the last piece): cat the pieces into the wheel's own file name, check its
#                  sha256, pip install --no-deps --target $TE_SITE, wait for the build, copy transformer_engine_torch*.so
#                  into $TE_SITE/transformer_engine/, write the transformer_engine-2.20.2.dist-info TE's import checks
#   check          device: import transformer_engine.pytorch and print the version, the GPU and TE's availability checks
#   env            print the PYTHONPATH line to put before `python3 -m conformance.cli run --backend te ...`
#   status         device: what is in $TE_PIECES, whether the build is done (tail of its log)
set -uo pipefail
VERSION=2.20.2
WHEEL=transformer_engine_cu13-$VERSION-py3-none-manylinux_2_28_x86_64.whl
SDIST=transformer_engine_torch-$VERSION.tar.gz
SDIST_URL=https://files.pythonhosted.org/packages/3d/fb/c9ce298a38c22ed1059923a01cac7e1f4e4f7281d39a8679c8118febe079/$SDIST
SDIST_SHA256=4c40ced8a6261649e689076f198d4feaf02277b1ba18931a66eccdaceb33c43e
SMALL="pydantic pydantic-core annotated-types typing-inspection importlib-metadata nvidia-cudnn-frontend nvdlfw-inspect"
DIR=${TE_WHEELS:-.te-wheels}
TE_SITE=${TE_SITE:-/tmp/te-site}
TE_PIECES=${TE_PIECES:-/tmp/te-pieces}
TE_BUILD=${TE_BUILD:-/tmp/te-build}
PIECE_MIB=${PIECE_MIB:-45}
PY=${PYTHON:-python3}

die() { echo "te_device_install: $*" >&2; exit 1; }

prepare() {
  mkdir -p "$DIR/small"
  df -h "$DIR" | tail -1
  local plat=(--only-binary=:all: --python-version 312 --implementation cp --abi cp312
              --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
  [ -f "$DIR/$WHEEL" ] || $PY -m pip download -q --no-deps "${plat[@]}" -d "$DIR" "transformer-engine-cu13==$VERSION" \
    || die "download of the core wheel failed"
  # pip download of an sdist runs its build backend (which needs CUDA): fetch the file from PyPI's index instead
  [ -f "$DIR/small/$SDIST" ] || curl -sSfL --max-time 300 -o "$DIR/small/$SDIST" "$SDIST_URL" || die "sdist download failed"
  echo "$SDIST_SHA256  $DIR/small/$SDIST" | sha256sum -c --quiet || die "sdist sha256 mismatch"
  # shellcheck disable=SC2086
  $PY -m pip download -q --no-deps "${plat[@]}" -d "$DIR/small" $SMALL || die "download of the small wheels failed"
  rm -f "$DIR"/piece-*
  split -b "${PIECE_MIB}M" -d -a 2 "$DIR/$WHEEL" "$DIR/piece-"
  { echo "wheel $WHEEL $(stat -c %s "$DIR/$WHEEL") $(sha256sum "$DIR/$WHEEL" | cut -d' ' -f1)"
    for p in "$DIR"/piece-*; do echo "piece $(basename "$p") $(stat -c %s "$p") $(sha256sum "$p" | cut -d' ' -f1)"; done
  } > "$DIR/small/MANIFEST"
  cat "$DIR/small/MANIFEST"
  du -sh "$DIR/small" "$DIR"/piece-*
}

start() {
  [ -f "$DIR/small/MANIFEST" ] || die "carry $DIR/small (run prepare here first)"
  mkdir -p "$TE_SITE" "$TE_PIECES" "$TE_BUILD"
  cp "$DIR/small/MANIFEST" "$TE_PIECES/MANIFEST"
  $PY -m pip install -q --no-index --no-deps --no-compile --target "$TE_SITE" "$DIR"/small/*.whl || die "small wheels"
  tar xzf "$DIR/small/$SDIST" -C "$TE_BUILD"
  local src="$TE_BUILD/transformer_engine_torch-$VERSION"
  ( cd "$src" && NVTE_PYTORCH_FORCE_BUILD=TRUE MAX_JOBS=${MAX_JOBS:-14} PYTHONPATH="$TE_SITE:${PYTHONPATH:-}" \
      setsid nohup $PY setup.py build_ext --inplace > "$TE_BUILD/build.log" 2>&1 < /dev/null & echo $! > "$TE_BUILD/build.pid" )
  echo "build started (pid $(cat "$TE_BUILD/build.pid")), log $TE_BUILD/build.log"
}

piece() {
  local name="piece-$1"
  [ -f "$DIR/$name" ] || die "carry $DIR/$name"
  mkdir -p "$TE_PIECES"
  cp "$DIR/$name" "$TE_PIECES/$name"
  grep "^piece $name " "$TE_PIECES/MANIFEST" | awk '{print $4 "  '"$TE_PIECES/$name"'"}' | sha256sum -c --quiet \
    || die "$name: sha256 mismatch"
  echo "$name kept: $(ls "$TE_PIECES" | grep -c '^piece-') of $(grep -c '^piece ' "$TE_PIECES/MANIFEST") pieces"
}

install() {
  local manifest="$TE_PIECES/MANIFEST"
  [ -f "$manifest" ] || die "no $manifest: run start first (same machine)"
  local missing
  missing=$(awk '$1 == "piece" {print $2}' "$manifest" | while read -r p; do [ -f "$TE_PIECES/$p" ] || echo "$p"; done)
  [ -z "$missing" ] || die "pieces missing (the machine was given back?): $missing"
  awk '$1 == "piece" {print "'"$TE_PIECES"'/" $2}' "$manifest" | xargs cat > "$TE_PIECES/$WHEEL"
  awk '$1 == "wheel" {print $4 "  '"$TE_PIECES/$WHEEL"'"}' "$manifest" | sha256sum -c --quiet || die "wheel sha256 mismatch"
  $PY -m pip install -q --no-index --no-deps --no-compile --target "$TE_SITE" "$TE_PIECES/$WHEEL" || die "pip install"
  local src="$TE_BUILD/transformer_engine_torch-$VERSION" waited=0
  while kill -0 "$(cat "$TE_BUILD/build.pid")" 2>/dev/null && [ "$waited" -lt "${BUILD_WAIT_S:-400}" ]; do
    sleep 5; waited=$((waited + 5))
  done
  local so
  so=$(ls "$src"/transformer_engine_torch*.so 2>/dev/null | head -1)
  [ -n "$so" ] || { tail -30 "$TE_BUILD/build.log"; die "transformer_engine_torch not built (waited ${waited}s)"; }
  cp "$so" "$TE_SITE/transformer_engine/"
  local info="$TE_SITE/transformer_engine-$VERSION.dist-info"
  mkdir -p "$info"
  printf 'Metadata-Version: 2.1\nName: transformer_engine\nVersion: %s\n' "$VERSION" > "$info/METADATA"
  printf 'Wheel-Version: 1.0\nGenerator: te_device_install\nRoot-Is-Purelib: true\nTag: py3-none-any\n' > "$info/WHEEL"
  # an empty RECORD makes TE's import check fail: list the two files (and RECORD itself, unhashed)
  { for f in METADATA WHEEL; do
      echo "transformer_engine-$VERSION.dist-info/$f,sha256=$($PY -c 'import base64,hashlib,sys; print(base64.urlsafe_b64encode(hashlib.sha256(open(sys.argv[1],"rb").read()).digest()).rstrip(b"=").decode())' "$info/$f"),$(stat -c %s "$info/$f")"
    done
    echo "transformer_engine-$VERSION.dist-info/RECORD,,"; } > "$info/RECORD"
  echo "installed TE $VERSION into $TE_SITE (extension $(basename "$so"), build waited ${waited}s)"
}

check() {
  PYTHONPATH="$TE_SITE:${PYTHONPATH:-}" $PY - <<'EOF'
import torch
import transformer_engine
import transformer_engine.pytorch as te

print("transformer_engine", transformer_engine.__version__, "torch", torch.__version__, "cuda", torch.version.cuda)
print("device", torch.cuda.get_device_name(), "capability", te.get_device_compute_capability())
for name in ("is_fp8_available", "is_fp8_block_scaling_available", "is_mxfp8_available", "is_nvfp4_available"):
    print(name, getattr(te, name)(return_reason=True))
EOF
}

status() {
  ls -la "$TE_PIECES" 2>/dev/null
  if [ -f "$TE_BUILD/build.pid" ] && kill -0 "$(cat "$TE_BUILD/build.pid")" 2>/dev/null; then echo "build running"; else echo "build not running"; fi
  tail -5 "$TE_BUILD/build.log" 2>/dev/null
}

case "${1:-}" in
  prepare) prepare ;;
  start) start ;;
  piece) [ -n "${2:-}" ] || die "piece NN"; piece "$2" ;;
  install) install ;;
  check) check ;;
  env) echo "export PYTHONPATH=\"\$PWD:$TE_SITE\"" ;;
  status) status ;;
  *) sed -n '2,25p' "$0"; exit 2 ;;
esac
