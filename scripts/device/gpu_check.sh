#!/usr/bin/env bash
# The GPU checks in one run, on a machine with a CUDA device and 16 or more cores.
#
# After `bash scripts/device/gpu_wheels.sh` on a machine with a package index, copy the repository
# (with .whl/) to the GPU machine and run, from the repository root:
#   OUT=some/folder bash scripts/device/gpu_check.sh
# It installs the wheels (.whl/setup.sh) and runs, in order of priority, each step writing
# its figures under $OUT as it ends:
#   (a) the CUDA and device tests (tests/test_gpu.py: one update on CUDA against CPU, and a
#       compiled one, learner.compile, against eager);
#   (b) the IMPALA and PPO MiniGrid quick starts (configs/impala_minigrid.yaml,
#       configs/ppo_minigrid.yaml) with a CUDA learner, seeds 0-2 each, all six side by side,
#       every scalar they log at each update (run.log_every_s=0.01; an update finishing in the
#       same loop turn as another is averaged with it), losses, gradient norms and entropy
#       among them, as CSV ($OUT/minigrid/*.csv), so a
#       shortfall against the CPU's curves can be diagnosed on a machine without a GPU;
#   (c) configs/impala_atari_gpu.yaml on Pong to the budget below: its frames/s, and the
#       frames and wall time at which the last-100 mean return first reaches +18 ($OUT/pong.txt);
#   (d) `mira bench` of that preset, if the minutes left allow.
# The whole run keeps within BUDGET_S seconds (570: a device call's 600 less its margin).
#
# Rehearsal on a machine without a GPU, so that a device call spends no minutes on a typo:
#   REHEARSAL=1 OUT=/tmp/rehearsal bash scripts/device/gpu_check.sh
# runs every step end to end with no wheels and no nvidia-smi, the learner on CPU, one seed,
# the Pong preset on 2 runners and tiny budgets (about 3-5 minutes on 2 cores).
set -u
OUT=${OUT:-gpu_check}
REHEARSAL=${REHEARSAL:-0}
BUDGET_S=${BUDGET_S:-570}
# (c)'s declared budget: 1e7 frames (the preset's schedule), stopped earlier by the clock
PONG_FRAMES=10000000
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
RUNS=$(mktemp -d)  # runs' checkpoints stay here; their curves and summaries go to $OUT
start=$(date +%s)
elapsed() { echo "[gpu_check] $1 after $(( $(date +%s) - start )) s" | tee -a "$OUT/steps.txt"; }
left() { echo $(( BUDGET_S - ($(date +%s) - start) )); }
export RAY_DEDUP_LOGS=1
if [ "$REHEARSAL" = 1 ]; then
  [ -x .venv/bin/python ] && PATH=$PWD/.venv/bin:$PATH
  PY=python
  DEVICE=cpu
  SEEDS="0"
  MINIGRID_FRAMES="run.total_frames=6000"
  PONG_LAYOUT="runtime.num_runners=2 learner.batch_size=8"
  PONG_FRAMES=16384
  BENCH_SECONDS=2
else
  # shellcheck disable=SC1091
  . .whl/setup.sh > "$OUT/setup.log" 2>&1 || { cat "$OUT/setup.log"; exit 1; }
  PY=python3
  DEVICE=cuda
  SEEDS="0 1 2"
  MINIGRID_FRAMES=""
  PONG_LAYOUT=""
  BENCH_SECONDS=10
  nvidia-smi -L | tee "$OUT/gpu.txt"
fi
lscpu | grep -E '^(Model name|Thread\(s\) per core|Core\(s\) per socket|Socket\(s\))' \
  | tee "$OUT/cpu.txt" || true
"$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__)' \
  | tee -a "$OUT/cpu.txt"

scalars() {  # run directory, CSV path: every scalar of its event files as frames,tag,value
  "$PY" - "$1" "$2" <<'EOF'
import csv, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})
acc.Reload()
with open(sys.argv[2], "w", newline="") as f:
    out = csv.writer(f)
    out.writerow(["frames", "tag", "value"])
    for tag in sorted(acc.Tags()["scalars"]):
        for e in acc.Scalars(tag):
            out.writerow([e.step, tag, e.value])
EOF
}

# (a) the CUDA tests (skipped without a GPU) and the device tests
timeout 210 "$PY" -m pytest -q -p no:cacheprovider tests/test_gpu.py tests/test_device.py \
  > "$OUT/tests.txt" 2>&1
tail -n 3 "$OUT/tests.txt"
elapsed "(a) tests"

# (b) the MiniGrid quick starts with a CUDA learner, side by side, a scalar at every update
mkdir -p "$OUT/minigrid"
pids=""
for algo in impala ppo; do
  for seed in $SEEDS; do
    # shellcheck disable=SC2086
    timeout -s INT -k 20 200 "$PY" -m scripts.cli train "configs/${algo}_minigrid.yaml" \
      run.seed="$seed" learner.device="$DEVICE" run.dir="$RUNS/minigrid/${algo}_s$seed" \
      run.log_every_s=0.01 $MINIGRID_FRAMES \
      > "$OUT/minigrid/${algo}_s$seed.log" 2>&1 &
    pids="$pids $!"
  done
done
# shellcheck disable=SC2086
wait $pids
for run in "$RUNS"/minigrid/*/; do
  name=$(basename "$run")
  scalars "$run" "$OUT/minigrid/$name.csv"
  cp "$run/summary.json" "$OUT/minigrid/$name.summary.json" 2>/dev/null \
    || echo "[gpu_check] $name left no summary.json" | tee -a "$OUT/steps.txt"
done
"$PY" - "$OUT/minigrid" <<'EOF' | tee "$OUT/minigrid.txt"
import glob, json, os, sys
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.summary.json"))):
    s = json.load(open(path))
    name = os.path.basename(path).removesuffix(".summary.json")
    print(f"[gpu_check] minigrid {name}: last-100 return {s.get('episode_return_mean')}, "
          f"{s.get('frames')} frames, {s.get('updates')} updates")
EOF
elapsed "(b) minigrid"

# (c) the GPU layout on Pong: frames/s, and frames and wall time to a last-100 mean of +18
reserve=$(( REHEARSAL == 1 ? 60 : 120 ))  # for (d) (its condition below) and the copies
pong_s=$(( $(left) - reserve ))
if [ "$pong_s" -gt 30 ]; then
  # shellcheck disable=SC2086
  timeout -s INT -k 30 "$pong_s" "$PY" -m scripts.cli train configs/impala_atari_gpu.yaml \
    env.game=Pong run.total_frames="$PONG_FRAMES" learner.device="$DEVICE" \
    run.dir="$RUNS/pong" run.log_every_s=5 $PONG_LAYOUT \
    > "$OUT/pong.log" 2>&1
  scalars "$RUNS/pong" "$OUT/pong.csv"
  cp "$RUNS/pong/summary.json" "$OUT/pong.summary.json" 2>/dev/null || true
  "$PY" - "$OUT/pong.csv" "$PONG_FRAMES" "$pong_s" <<'EOF' | tee "$OUT/pong.txt"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
series = {}
for r in rows:
    series.setdefault(r["tag"], []).append((int(r["frames"]), float(r["value"])))
wall = dict(series.get("wall_time_s", []))
frames = max((f for f, _ in wall.items()), default=0)
seconds = wall.get(frames, 0.0)
print(f"[gpu_check] pong: {frames} frames in {seconds:.0f} s of training, "
      f"{frames / max(seconds, 1e-9):.0f} frames/s (budget {float(sys.argv[2]):.0f} frames "
      f"or {sys.argv[3]} s)")
reached = [(f, v) for f, v in series.get("episode_return_mean100", []) if v >= 18]
if reached:
    f = reached[0][0]
    at = min((w for g, w in wall.items() if g >= f), default=float("nan"))
    print(f"[gpu_check] pong: last-100 mean +18 first at {f} frames, {at:.0f} s")
else:
    last = series.get("episode_return_mean100", [(0, float("nan"))])[-1]
    print(f"[gpu_check] pong: +18 not reached; last-100 mean {last[1]:.2f} at {last[0]} frames")
EOF
fi
elapsed "(c) pong"

# (d) mira bench of the GPU layout, if the minutes allow
if [ "$(left)" -gt $(( 8 * BENCH_SECONDS + 30 )) ]; then
  # shellcheck disable=SC2086
  timeout "$(( $(left) - 10 ))" "$PY" -m scripts.cli bench configs/impala_atari_gpu.yaml \
    env.game=Pong learner.device="$DEVICE" $PONG_LAYOUT --seconds "$BENCH_SECONDS" \
    > "$OUT/bench.txt" 2>&1
  grep '^\[bench\]' "$OUT/bench.txt"
  elapsed "(d) bench"
else
  elapsed "(d) bench skipped: $(left) s left"
fi
rm -rf "$RUNS"
