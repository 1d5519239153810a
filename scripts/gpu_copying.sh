#!/usr/bin/env bash
# The copying study (docs/results/studies.md, section 7) on one GPU: its six runs at once.
#
# Needs only PyTorch (no Ray, gymnasium or ale-py), so it runs on a bare GPU image. From the
# repository root:
#   OUT=some/folder [MINUTES=8] bash scripts/gpu_copying.sh [EARLIER]
# Each run trains on CUDA for at most MINUTES, then Ctrl-C's the usual way (a checkpoint at
# the step boundary); the checkpoints, curves and logs are in $OUT/copying. EARLIER, a folder
# of an earlier call's $OUT/copying, is copied in first, so the same command continues the
# runs where they stopped. At the end it joins the curves (`--join`) into
# $OUT/study_copying.csv and prints the study's result as it stands.
set -u
OUT=${OUT:-gpu_copying}
MINUTES=${MINUTES:-8}
DEVICE=${DEVICE:-cuda}  # DEVICE=cpu MINUTES=0.2 tries the script itself where there is no GPU
dir="$OUT/copying"
mkdir -p "$dir"
if [ -n "${1:-}" ]; then
  cp -n "$1"/*.pt "$1"/*.csv "$1"/*.json "$dir"/ 2>/dev/null || true
fi
nvidia-smi -L || true
start=$(date +%s)
for seed in 0 1 2; do
  timeout -s INT "${MINUTES}m" python3 -m scripts.papers.copying --cores lstm --hidden 256 \
      --embed 256 --steps 15000 --seed "$seed" --device "$DEVICE" --out "$dir" \
      > "$dir/lstm-$seed.log" 2>&1 &
  timeout -s INT "${MINUTES}m" python3 -m scripts.papers.copying --cores rims --hidden 252 \
      --embed 256 --steps 15000 --seed "$seed" --device "$DEVICE" --out "$dir" \
      > "$dir/rims-$seed.log" 2>&1 &
done
wait
echo "[gpu_copying] six runs stopped or finished after $(( $(date +%s) - start )) s"
for log in "$dir"/*.log; do
  echo "$log: $(grep -E '^\[(lstm|rims)\] (step|continuing)' "$log" | tail -n 1)"
done
python3 -m scripts.papers.copying --out "$dir" --join "$OUT/study_copying.csv"
