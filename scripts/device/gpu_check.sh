#!/usr/bin/env bash
# The GPU checks in one run, on a machine with a CUDA device and 16 or more cores.
#
# After `bash scripts/device/gpu_wheels.sh` on a machine with a package index, copy the repository
# (with .whl/) to the GPU machine and run, from the repository root:
#   OUT=some/folder bash scripts/device/gpu_check.sh
# It installs the wheels (.whl/setup.sh), runs the CUDA and device tests, then
# `mira bench` on the paper preset with 15 runners as shipped and with two unrolls a batch,
# and on the Atari preset with asynchronous runners; each bench's lines go to $OUT/*.txt and
# to the console. About 6 minutes on one H200 with 16 cores. docs/gpu.md has the figures it
# gave last.
set -u
OUT=${OUT:-gpu_check}
mkdir -p "$OUT"
start=$(date +%s)
elapsed() { echo "[gpu_check] $1 after $(( $(date +%s) - start )) s"; }
# shellcheck disable=SC1091
. .whl/setup.sh > "$OUT/setup.log" 2>&1 || { cat "$OUT/setup.log"; exit 1; }
export RAY_DEDUP_LOGS=1
nvidia-smi -L
lscpu | grep -E '^(Model name|Thread\(s\) per core|Core\(s\) per socket|Socket\(s\))' || true
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py tests/test_device.py \
    > "$OUT/tests.txt" 2>&1
tail -n 3 "$OUT/tests.txt"
elapsed "tests"
bench() {  # name, then mira bench's arguments
    local name=$1; shift
    timeout 150 python3 -m scripts.cli bench "$@" --seconds 10 > "$OUT/$name.txt" 2>&1
    grep '^\[bench\]' "$OUT/$name.txt"
    elapsed "$name"
}
bench paper configs/impala_atari_paper.yaml env.game=Pong runtime.num_runners=15
bench paper_batch64 configs/impala_atari_paper.yaml env.game=Pong runtime.num_runners=15 \
    learner.batch_size=64
bench atari_async configs/impala_atari.yaml env.game=Pong runtime.num_runners=15 \
    learner.lock_step=false
