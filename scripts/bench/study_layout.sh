#!/bin/bash
# How a study should lay out its trials on this machine: frames/s summed over the machine for
# (a) one trial in the preset's own layout (its Ray runners, the learner on every core) and
# (b) two trials at once, each in-process on one core (runtime.num_runners=0, the preset's 8
# envs in one runner, one learner thread), as the declared studies run them.
#
#   [CONFIGS="configs/impala_atari.yaml configs/ppo_atari.yaml"] [GAME=Kangaroo] [S=180] \
#     [OUT=runs/study_layout] bash scripts/bench/study_layout.sh
#
# Each run trains for S seconds of wall time from the preset's start (stopped with Ctrl-C's
# signal); its rate is read from its own wall_time_s curve after the first 60 s, so Ray's and
# the envs' start-up are left out. Time it only on an otherwise idle machine.
set -u
CONFIGS=${CONFIGS:-"configs/impala_atari.yaml configs/ppo_atari.yaml"}
GAME=${GAME:-Kangaroo}
S=${S:-180}
OUT=${OUT:-runs/study_layout}
mkdir -p "$OUT"
INPROC="runtime.num_runners=0 runtime.envs_per_runner=8 runtime.learner_threads=1"

rate() {  # frames/s of a run directory after its first 60 s of training
  python - "$@" <<'EOF'
import sys
from scripts.compare.curves import learning_curve
frames, wall = learning_curve(sys.argv[1], "wall_time_s")
keep = wall >= 60
if keep.sum() < 2:
    print("n/a")
else:
    f, w = frames[keep], wall[keep]
    print(round((f[-1] - f[0]) / (w[-1] - w[0])))
EOF
}

for cfg in $CONFIGS; do
  name=$(basename "$cfg" .yaml)
  rm -rf "$OUT/${name}_ray" "$OUT/${name}_inproc0" "$OUT/${name}_inproc1"
  timeout -s INT "$S" mira train "$cfg" env.game="$GAME" run.dir="$OUT/${name}_ray" --quiet \
    > "$OUT/${name}_ray.log" 2>&1
  echo "$(date +%T) $name $GAME, its own layout, alone: $(rate "$OUT/${name}_ray") frames/s"
  for seed in 0 1; do
    # shellcheck disable=SC2086  # INPROC is a list of overrides
    timeout -s INT "$S" mira train "$cfg" env.game="$GAME" run.seed=$seed $INPROC \
      run.dir="$OUT/${name}_inproc$seed" --quiet > "$OUT/${name}_inproc$seed.log" 2>&1 &
  done
  wait
  a=$(rate "$OUT/${name}_inproc0"); b=$(rate "$OUT/${name}_inproc1")
  echo "$(date +%T) $name $GAME, two in-process at once: $a + $b frames/s"
done
