#!/usr/bin/env bash
# On the GPU machine, from the repository root there, over pack.sh's pieces (each device call
# carries one DEST/callN folder; /tmp survives between calls made close together):
#   bash scripts/gpu/ort-cuda/remote.sh unpack DIR    take one call's pieces into $ORT_CUDA_ROOT
#   bash scripts/gpu/ort-cuda/remote.sh tests OUT     the GPU tests (tests.cjs): MLP and BERT
#   bash scripts/gpu/ort-cuda/remote.sh bench OUT     the serving benchmark (bench.sh): OUT/table.md
#   bash scripts/gpu/ort-cuda/remote.sh run OUT       tests, then bench
#   bash scripts/gpu/ort-cuda/remote.sh bert OUT      only export BERT (while the next pieces wait)
#   bash scripts/gpu/ort-cuda/remote.sh multi OUT     two GPUs: multi.cjs in each mode
#   bash scripts/gpu/ort-cuda/remote.sh pair OUT      ORT's own allocator and the arena timed in
#                                                     pairs in one process (pair.cjs): OUT/pairs.md
#        (PAIR_PROCESSES=6 per scenario, PAIR_CONF='' the arena's config or `ort` for the control
#        with both sessions on ORT's own allocator, PAIR_SCENARIOS="one k1")
# BERT-base is exported there (export_bert.py, torch's exporter) into $ORT_CUDA_ROOT/bert.onnx.
# The CUDA provider needs CUDA 13's cuBLAS, cuRAND, cudart (and cuDNN, cuFFT for some operators):
# those of torch's `nvidia` wheels are put on the library path.
# env: ORT_CUDA_ROOT=/tmp/cuda-arena-ort-cuda   ORT_CUDA_DRY=1 (dry-run.sh: CPU provider, host
#      backend, the machine's own node, no provider, no BERT)   TORCH_PY=/opt/torch/.venv/bin/python3
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
R=${ORT_CUDA_ROOT:-/tmp/cuda-arena-ort-cuda}
DRY=${ORT_CUDA_DRY:-0}
export ORT_CUDA_DRY=$DRY
APP=$R/app
X=$APP/node_modules/onnxruntime-node/bin/napi-v6/linux/x64
PY=${TORCH_PY:-/opt/torch/.venv/bin/python3}
[ -x "$PY" ] || PY=python3
say() { echo "[remote] $*"; }
field() { awk -v k="$1" '$1 == k { print $2 }' "$R/MANIFEST"; }
# xz, or Python's lzma where the machine has no xz.
unxz_to() { if command -v xz >/dev/null; then xz -dc "$1" >"$2"; else "$PY" -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"), 1 << 24)' "$1" "$2"; fi; }

node_bin() {
  if [ "$DRY" = 1 ]; then command -v node; else echo "$R/bin/node"; fi
}

ready() {
  [ -x "$(node_bin)" ] || { say "no node: unpack call1 first"; exit 1; }
  [ -f "$APP/mlp.onnx" ] || { say "no app: unpack call1 first"; exit 1; }
  [ "$DRY" = 1 ] || [ -f "$X/libonnxruntime_providers_cuda.so" ] || { say "no CUDA provider: unpack every call's pieces first"; exit 1; }
  export ORT_CUDA_APP=$APP NODE=$(node_bin)
  if [ "$DRY" != 1 ]; then
    local sp libs
    sp=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    libs=$(find "$sp/nvidia" -name 'lib*.so*' -printf '%h\n' 2>/dev/null | sort -u | paste -sd: || true)
    export LD_LIBRARY_PATH="${libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
}

bert() {
  [ "$DRY" = 1 ] && return 0
  [ -f "$R/bert.onnx" ] && return 0
  say "exporting BERT-base"
  "$PY" "$HERE/export_bert.py" "$R/bert.onnx" >"$1/export.log" 2>&1 || { tail -n 20 "$1/export.log"; exit 1; }
}

case "${1:-}" in
unpack)
  D=${2:?usage: remote.sh unpack DIR}
  mkdir -p "$R/parts"
  cp "$D/MANIFEST" "$R/MANIFEST"
  if [ -f "$D/node.xz" ]; then mkdir -p "$R/bin" && unxz_to "$D/node.xz" "$R/bin/node" && chmod +x "$R/bin/node"; fi
  if [ -f "$D/app.tar.xz" ]; then
    rm -rf "$APP" && unxz_to "$D/app.tar.xz" "$R/app.tar" && tar -C "$R" -xf "$R/app.tar" && rm -f "$R/app.tar"
  fi
  for p in "$D"/provider.xz.part*; do [ -e "$p" ] && cp "$p" "$R/parts/"; done
  want=$(field provider.parts)
  have=$(find "$R/parts" -name 'provider.xz.part*' | wc -l)
  say "provider pieces: $have of $want"
  if [ "$want" -gt 0 ] && [ "$have" = "$want" ] && [ -d "$X" ]; then
    cat "$R"/parts/provider.xz.part* >"$R/provider.xz"
    [ "$(sha256sum <"$R/provider.xz" | cut -d' ' -f1)" = "$(field provider.xz.sha256)" ] || { say "provider.xz checksum differs"; exit 1; }
    unxz_to "$R/provider.xz" "$X/libonnxruntime_providers_cuda.so" && rm -f "$R/provider.xz"
    [ "$(sha256sum <"$X/libonnxruntime_providers_cuda.so" | cut -d' ' -f1)" = "$(field provider.sha256)" ] || { say "provider checksum differs"; exit 1; }
    say "provider in place: $(stat -c %s "$X/libonnxruntime_providers_cuda.so") bytes"
  fi
  ;;
bert)
  mkdir -p "${2:?usage: remote.sh bert OUT}"
  bert "$2"
  ls -l "$R/bert.onnx"
  ;;
multi)
  OUT=${2:?usage: remote.sh multi OUT}
  mkdir -p "$OUT"
  ready
  bert "$OUT"
  rc=0
  i=0
  for conf in "" arena.use_virtual_memory=0 arena.use_cuda_mempool=1; do
    i=$((i + 1))
    code=0
    timeout 300 "$NODE" "$HERE/multi.cjs" "$R/bert.onnx" "$conf" >"$OUT/multi-$i.log" 2>&1 || code=$?
    echo "[remote] multi ${conf:-defaults}: exit $code"
    grep -E '^(RESULT|FAILED)' "$OUT/multi-$i.log" || tail -n 20 "$OUT/multi-$i.log"
    [ "$code" = 0 ] || rc=1
  done
  exit "$rc"
  ;;
pair)
  OUT=${2:?usage: remote.sh pair OUT}
  mkdir -p "$OUT"
  ready
  bert "$OUT"
  if [ "$DRY" = 1 ]; then model=$APP/mlp.onnx kind=mlp; else model=$R/bert.onnx kind=bert; fi
  : >"$OUT/pairs.jsonl"
  rc=0
  for sc in ${PAIR_SCENARIOS:-one k1}; do
    # serve.cjs's scenarios of one session: requests, max batch, max sequence.
    k=1
    case $sc in
    one) args=(300 32 512) ;;
    k1) args=(60 16 256) ;;
    k4) args=(60 16 256) k=4 ;;
    k8) args=(60 16 256) k=8 ;;
    *) say "no scenario $sc (one, k1, k4, k8)"; exit 2 ;;
    esac
    [ "$DRY" = 1 ] && args=(12 64 8)
    for p in $(seq 1 "${PAIR_PROCESSES:-6}"); do
      # Which session is created and runs first alternates (pair.cjs says why).
      line=$(PAIR_K=$k PAIR_OURS_FIRST=$((p % 2 == 0)) UV_THREADPOOL_SIZE=$((k > 4 ? k : 4)) timeout 300 "$NODE" "$HERE/pair.cjs" "${PAIR_CONF:-}" "${args[@]}" "$model" "$kind" 2>&1 | tee -a "$OUT/pair.log" | grep -E '^(PAIR|FAILED)' | tail -n 1)
      if [[ $line == PAIR* ]]; then
        printf '{"scenario":"%s","process":%d,"result":%s}\n' "$sc" "$p" "${line#PAIR }" >>"$OUT/pairs.jsonl"
      else
        rc=1
      fi
      say "pair $sc $p: ${line:0:300}"
    done
  done
  "$NODE" -e '
    const rows = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").filter(Boolean).map(JSON.parse)
    const med = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[s.length >> 1] }
    const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length
    console.log("| scenario | arena ÷ ORT, requests/s (median of processes, range) | mean of processes | per request (median) | processes | outputs identical |")
    console.log("|---|---:|---:|---:|---:|---|")
    for (const sc of [...new Set(rows.map((r) => r.scenario))]) {
      const rs = rows.filter((r) => r.scenario === sc).map((r) => r.result)
      const q = rs.map((r) => r.ratio)
      console.log(`| ${sc} | ${med(q).toFixed(3)} (${Math.min(...q).toFixed(3)}–${Math.max(...q).toFixed(3)}) | ${mean(q).toFixed(3)} | ${med(rs.map((r) => r.medianRatio)).toFixed(3)} | ${rs.length} | ${rs.every((r) => r.identical)} |`)
    }' "$OUT/pairs.jsonl" | tee "$OUT/pairs.md" || rc=1
  exit "$rc"
  ;;
tests | bench | run)
  OUT=${2:?usage: remote.sh $1 OUT}
  mkdir -p "$OUT"
  ready
  { cat "$R/MANIFEST"; "$NODE" --version; nvidia-smi -L 2>/dev/null || true; } | tee "$OUT/env.log"
  [ "$DRY" = 1 ] || { ldd "$X/libonnxruntime_providers_cuda.so" | grep 'not found' && { say "the provider's libraries are missing"; exit 1; } || true; }
  bert "$OUT"
  rc=0
  if [ "$1" != bench ]; then
    models=("$APP/mlp.onnx")
    [ "$DRY" = 1 ] || models+=("$R/bert.onnx")
    UV_THREADPOOL_SIZE=4 "$NODE" "$HERE/tests.cjs" "${models[@]}" 2>&1 | tee "$OUT/tests.log"
    rc=${PIPESTATUS[0]}
  fi
  if [ "$1" != tests ]; then
    if [ "$DRY" = 1 ]; then model=$APP/mlp.onnx; else model=$R/bert.onnx; fi
    BENCH_MODEL=$model bash "$HERE/bench.sh" "$OUT" || rc=1
  fi
  exit "$rc"
  ;;
*)
  echo "usage: remote.sh unpack DIR | bert OUT | tests OUT | bench OUT | run OUT | multi OUT | pair OUT" >&2
  exit 2
  ;;
esac
