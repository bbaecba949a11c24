#!/usr/bin/env bash
# Builds what scripts/gpu/threads.sh runs on the GPU machine (which has no cargo) into .device/
# (ignored by git): libcuda_arena.so from this tree and libcuda_arena.base.so from BASE_REV
# ("today's" library; default 7faa207, the last commit before issue 15), built in a temporary
# worktree with its own target directory. Run here, from anywhere.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BASE_REV=${BASE_REV:-7faa207}
mkdir -p .device
cargo build -p cuda-arena-c --release
cp "${CARGO_TARGET_DIR:-target}/release/libcuda_arena.so" .device/libcuda_arena.so

WT=$(mktemp -d /tmp/cuda-arena-base.XXXXXX)
trap 'git -C "$ROOT" worktree remove --force "$WT" >/dev/null 2>&1 || true' EXIT
git worktree add --detach "$WT" "$BASE_REV" >/dev/null
(cd "$WT" && CARGO_TARGET_DIR="$WT/target" cargo build -p cuda-arena-c --release)
cp "$WT/target/release/libcuda_arena.so" .device/libcuda_arena.base.so
echo "$BASE_REV" > .device/libcuda_arena.base.rev
git rev-parse HEAD > .device/libcuda_arena.rev
ls -l .device/libcuda_arena.so .device/libcuda_arena.base.so
echo "base: $BASE_REV  new: $(cat .device/libcuda_arena.rev) (plus uncommitted changes, if any)"
