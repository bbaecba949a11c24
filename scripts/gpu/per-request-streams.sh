#!/usr/bin/env bash
# Issue 25 on the GPU machine: a stream per request, never reset in the arena, W requests in
# flight (scripts/gpu/per_request_streams.cu), with each build of the library given. What is
# held should stay flat as the requests (and the streams there have been) grow.
# Here: bash scripts/gpu/build-device.sh (and copy other builds into .device/).
# There, from the repository root, carrying .device:
#   LIBS="new=.device/libcuda_arena.so old=.device/libcuda_arena.main.so" \
#     bash scripts/gpu/per-request-streams.sh
# Env: RETIRE (see the .cu), REQUESTS (120000), W (50), SPIN_US (2000), CONFS (";"-separated arena configs, each
# "k=v k=v"; default: the defaults, then the region mode).
set -uo pipefail
cd "$(dirname "$0")/../.."
LIBS=${LIBS:-new=.device/libcuda_arena.so}
REQUESTS=${REQUESTS:-120000}
W=${W:-50}
SPIN_US=${SPIN_US:-2000}
CONFS=${CONFS:-";arena.use_virtual_memory=0"}
B=/tmp/per-request-streams
mkdir -p "$B"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
IFS=';' read -ra confs <<<"$CONFS"
for lib in $LIBS; do
  label=${lib%%=*} path=${lib#*=}
  mkdir -p "$B/$label"
  cp "$path" "$B/$label/libcuda_arena.so"
  nvcc -O2 -o "$B/$label/prs" scripts/gpu/per_request_streams.cu -I.device -L"$B/$label" \
    -lcuda_arena -Xlinker -rpath -Xlinker "$B/$label" || exit 1
done
for conf in "${confs[@]}"; do
  for lib in $LIBS; do
    label=${lib%%=*}
    echo "== $label [${conf:-defaults}] requests $REQUESTS in flight $W spin ${SPIN_US}us"
    # shellcheck disable=SC2086
    timeout 240 "$B/$label/prs" "$REQUESTS" "$W" "$SPIN_US" $conf
    echo "exit $?"
  done
done
