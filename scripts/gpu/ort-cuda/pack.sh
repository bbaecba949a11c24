#!/usr/bin/env bash
# Packs, on a machine with Node and the package registries (no GPU needed), what the GPU machine
# needs to run onnxruntime-node's CUDA sessions on cuda-arena: it has no Node, no npm and no
# network, and takes at most 64 MiB a call (working tree included), keeping /tmp between calls
# made close together. So the files go in pieces, one folder per device call:
#   DEST/call1: node.xz (this machine's Node), app.tar.xz (the app: cuda-arena and its platform
#               package as `npm pack` makes them, onnxruntime-node for linux-x64 with the CUDA
#               provider's shared library, the test model), MANIFEST
#   DEST/call2, call3, ...: the CUDA provider, xz-compressed, in pieces of PIECE bytes
# The provider is the one in the onnxruntime-gpu wheel of onnxruntime-node's own version (its
# install script fetches the same build from elsewhere, which fails here); TRIM=1 keeps only the
# GPU code for sm_90 (H100, H200), 272 MB -> one ~50 MB piece.
#   bash scripts/gpu/ort-cuda/pack.sh          (after npm ci && npm run build)
# env: DEST=.device/ort-cuda   where the call folders go (ignored by git)
#      WORK=/tmp/cuda-arena-ort-cuda   downloads and staging (the wheel is kept for next time)
#      PROVIDER=trim|whole|none   TRIM (sm_90 only), the whole provider, or none (dry run)
#      NODE_XZ=1    carry Node (0: the dry run uses the machine's own)
#      XZ_LEVEL=-9e
#      PIECE=58720256   bytes per provider piece (56 MiB: a call also carries the ~6 MiB tree)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
DEST=$(mkdir -p "${DEST:-$ROOT/.device/ort-cuda}" && cd "${DEST:-$ROOT/.device/ort-cuda}" && pwd)
WORK=${WORK:-/tmp/cuda-arena-ort-cuda}
PROVIDER=${PROVIDER:-trim}
NODE_XZ=${NODE_XZ:-1}
XZ_LEVEL=${XZ_LEVEL:--9e}
PIECE=${PIECE:-58720256}
say() { echo "[pack] $*"; }
mkdir -p "$WORK"

# 1. The built package. onnxruntime-node's version decides the provider's.
cd "$ROOT"
for f in dist/index.js npm/linux-x64-gnu/cuda-arena.linux-x64-gnu.node npm/linux-x64-gnu/lib/libcuda_arena.so node_modules/onnxruntime-node/package.json; do
  [ -f "$f" ] || { say "no $f: run npm ci && npm run build first"; exit 1; }
done
ORT=$(node -p "require('./node_modules/onnxruntime-node/package.json').version")
ORTBIN=node_modules/onnxruntime-node/bin/napi-v6/linux/x64
say "cuda-arena $(git rev-parse --short HEAD 2>/dev/null || echo '?'), onnxruntime-node $ORT, provider: $PROVIDER"

# 2. The app: what `npm install cuda-arena onnxruntime-node` would give, for linux-x64 only.
STAGE=$WORK/stage
rm -rf "$STAGE"
mkdir -p "$STAGE/app/node_modules" "$WORK/tgz"
rm -f "$WORK"/tgz/*.tgz
# --ignore-scripts: the prepack script would edit package.json (tests may read it meanwhile);
# the platform package goes beside cuda-arena here, as its optional dependency would.
npm pack --silent --ignore-scripts --pack-destination "$WORK/tgz" . ./npm/linux-x64-gnu >/dev/null
for t in "$WORK"/tgz/*.tgz; do
  base=$(basename "$t")
  pkg=${base%-*.tgz}   # cuda-arena-0.1.0.tgz -> cuda-arena
  mkdir -p "$STAGE/app/node_modules/$pkg"
  tar -C "$STAGE/app/node_modules/$pkg" --strip-components=1 -xzf "$t"
done
[ -f "$STAGE/app/node_modules/cuda-arena/dist/index.js" ] && [ -f "$STAGE/app/node_modules/cuda-arena-linux-x64-gnu/package.json" ] || { say "npm pack gave no cuda-arena packages"; exit 1; }
O=$STAGE/app/node_modules/onnxruntime-node
mkdir -p "$O/bin/napi-v6/linux/x64"
cp -r node_modules/onnxruntime-node/package.json node_modules/onnxruntime-node/dist "$O/"
cp "$ORTBIN/libonnxruntime.so.1" "$ORTBIN/onnxruntime_binding.node" "$O/bin/napi-v6/linux/x64/"
cp -r node_modules/onnxruntime-common "$STAGE/app/node_modules/"
echo '{"name":"ort-cuda-app","private":true}' >"$STAGE/app/package.json"
# The test suite's MLP (x [batch, 512] -> y, 4 MiB of seeded weights), written by its own builder.
npx tsx -e "require('node:fs').writeFileSync(process.argv[1], require('./__test__/ort/model.ts').modelBytes())" "$STAGE/app/mlp.onnx"
find "$STAGE" -name '*.map' -delete

# 3. The CUDA provider from the onnxruntime-gpu wheel of the same version (CUDA 13 build).
PROV=
if [ "$PROVIDER" != none ]; then
  WHL=$(ls "$WORK"/onnxruntime_gpu-"$ORT"-*.whl 2>/dev/null | head -n 1 || true)
  if [ -z "$WHL" ]; then
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
      -d "$WORK" "onnxruntime-gpu==$ORT"
    WHL=$(ls "$WORK"/onnxruntime_gpu-"$ORT"-*.whl | head -n 1)
  fi
  python3 - "$WHL" "$WORK" <<'EOF'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
for n in ('libonnxruntime_providers_cuda.so', 'libonnxruntime_providers_shared.so'):
    with open(f'{sys.argv[2]}/{n}', 'wb') as f:
        f.write(z.read('onnxruntime/capi/' + n))
EOF
  cp "$WORK/libonnxruntime_providers_shared.so" "$O/bin/napi-v6/linux/x64/"
  PROV=$WORK/libonnxruntime_providers_cuda.so
  if [ "$PROVIDER" = trim ]; then
    python3 "$HERE/fatbin_keep.py" "$PROV" "$WORK/libonnxruntime_providers_cuda.sm90.so" 90
    PROV=$WORK/libonnxruntime_providers_cuda.sm90.so
  fi
fi

# 4. The pieces.
rm -rf "$DEST"/call*
mkdir -p "$DEST/call1"
# xz_cached SRC OUT: xz of SRC, reused from $WORK while SRC and the level are the same (xz -9e
# of the 272 MB provider takes minutes).
xz_cached() {
  local key
  key="$(sha256sum "$1" | cut -d' ' -f1) $XZ_LEVEL"
  if [ ! -f "$2" ] || [ "$(cat "$2.key" 2>/dev/null)" != "$key" ]; then
    xz -T2 "$XZ_LEVEL" -c "$1" >"$2.tmp" && mv "$2.tmp" "$2" && echo "$key" >"$2.key"
  fi
}
if [ "$NODE_XZ" = 1 ]; then
  xz_cached "$(command -v node)" "$WORK/node.xz"
  cp "$WORK/node.xz" "$DEST/call1/node.xz"
fi
tar -C "$STAGE" -cf - app | xz -T2 "$XZ_LEVEL" >"$DEST/call1/app.tar.xz"
parts=0
if [ -n "$PROV" ]; then
  xz_cached "$PROV" "$WORK/provider.xz"
  rm -f "$WORK"/provider.xz.part*
  split -b "$PIECE" -d -a 2 "$WORK/provider.xz" "$WORK/provider.xz.part"
  i=2
  for p in "$WORK"/provider.xz.part*; do
    mkdir -p "$DEST/call$i" && mv "$p" "$DEST/call$i/"
    i=$((i + 1)); parts=$((parts + 1))
  done
fi
{
  echo "cuda-arena $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "node $(node --version)"
  echo "onnxruntime-node $ORT"
  echo "provider $PROVIDER"
  echo "provider.parts $parts"
  if [ -n "$PROV" ]; then
    echo "provider.sha256 $(sha256sum "$PROV" | cut -d' ' -f1)"
    echo "provider.xz.sha256 $(sha256sum "$WORK/provider.xz" | cut -d' ' -f1)"
  fi
} >"$WORK/MANIFEST"
for d in "$DEST"/call*; do cp "$WORK/MANIFEST" "$d/"; done
for d in "$DEST"/call*; do say "$d: $(du -sb "$d" | cut -f1) bytes: $(ls "$d" | tr '\n' ' ')"; done
