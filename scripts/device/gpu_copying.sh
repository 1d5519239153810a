#!/usr/bin/env bash
# The copying study (docs/results/studies.md, "Copying") on one GPU: its six runs at once.
#
# Needs only PyTorch (no Ray, gymnasium or ale-py), so it runs on a bare GPU image. From the
# repository root:
#   OUT=some/folder [MINUTES=8] [STEPS=30000] bash scripts/device/gpu_copying.sh [EARLIER]
# Each run trains on CUDA for at most MINUTES, then gets a Ctrl-C (SIGINT) and stops the usual
# way, with a checkpoint at a step boundary; checkpoints, curves and logs are in $OUT/copying.
# EARLIER, the $OUT/copying folder of an earlier call, is copied in first (over what $OUT
# holds), so the same command continues the runs where they stopped. At the end it joins the
# curves (`--join`) into $OUT/study_copying.csv and prints the study's result as it stands.
# Ctrl-C or a kill of this script stops the six runs the same way.
set -u
OUT=${OUT:-gpu_copying}
MINUTES=${MINUTES:-8}
STEPS=${STEPS:-30000}  # the extension's 30,000 steps (the first arm ran 15000)
DEVICE=${DEVICE:-cuda}  # DEVICE=cpu MINUTES=0.2 tries the script itself where there is no GPU
dir="$OUT/copying"
mkdir -p "$dir"
if [ -n "${1:-}" ]; then
  [ -d "$1" ] || { echo "gpu_copying: no folder $1 to continue from" >&2; exit 2; }
  shopt -s nullglob
  earlier=("$1"/*.pt "$1"/*.csv "$1"/*.json)
  shopt -u nullglob
  [ ${#earlier[@]} -gt 0 ] || { echo "gpu_copying: $1 holds no checkpoint or curve" >&2; exit 2; }
  cp -f "${earlier[@]}" "$dir"/ && chmod u+w "$dir"/*
  echo "[gpu_copying] continuing from $1: ${#earlier[@]} file(s)"
fi
nvidia-smi -L || true
start=$(date +%s)
trap 'kill -INT $(jobs -p) 2>/dev/null; wait' INT TERM
for seed in 0 1 2; do
  timeout -k 2m -s INT "${MINUTES}m" python3 -m scripts.papers.copying --cores lstm \
      --hidden 256 --embed 256 --steps "$STEPS" --seed "$seed" --device "$DEVICE" --out "$dir" \
      > "$dir/lstm-$seed.log" 2>&1 &
  timeout -k 2m -s INT "${MINUTES}m" python3 -m scripts.papers.copying --cores rims \
      --hidden 252 --embed 256 --steps "$STEPS" --seed "$seed" --device "$DEVICE" --out "$dir" \
      > "$dir/rims-$seed.log" 2>&1 &
done
wait
trap - INT TERM
echo "[gpu_copying] six runs stopped or finished after $(( $(date +%s) - start )) s"
for log in "$dir"/*.log; do
  echo "$log: $(grep -E '^\[(lstm|rims)\] (step|continuing|stopped)' "$log" | tail -n 1)"
done
python3 -m scripts.papers.copying --out "$dir" --join "$OUT/study_copying.csv"
