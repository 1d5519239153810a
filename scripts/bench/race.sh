#!/bin/bash
# Time to +18 on Pong beside CleanRL, as docs/throughput.md declares it: one seed each, each
# run alone, one right after the other, on an otherwise idle machine.
#
#   PEERS=DIR [OUT=runs/race] bash scripts/bench/race.sh
#
#   1. mira train configs/impala_atari.yaml env.game=Pong run.seed=17 (its own schedule).
#   2. CleanRL ppo_atari_envpool.py (its defaults: Nature CNN, 8 envs, 128 steps, 4 epochs of
#      4 minibatches, Adam 2.5e-4 annealed over 10M agent steps), Pong-v5, seed 1, 2 threads,
#      stopped once its global step passes 3,750,000 (the first 1.5e7 frames of its schedule)
#      or after 110 minutes, whichever comes first, so that both fit within 3 hours.
# Then python -m scripts.bench.race prints both rows: minutes and frames to a last-100 mean
# of +18, the last-100 mean at the end, frames and frames/s. DIR holds the peers' harness
# (CleanRL's envpool script patched for gymnasium 1.x); ENVPOOL_PY is its virtualenv's python
# (default ~/peers_envpool/bin/python). STEPS and MINUTES override CleanRL's stopping step and
# time, and MIRA_ARGS adds overrides to mira's run: for a rehearsal with small budgets only,
# never for the race.
set -eu
: "${PEERS:?set PEERS to the folder of the peers harness scripts}"
ENVPOOL_PY=${ENVPOOL_PY:-$HOME/peers_envpool/bin/python}
OUT=${OUT:-runs/race}
STEPS=${STEPS:-3750000}
MINUTES=${MINUTES:-110}
MIRA_ARGS=${MIRA_ARGS:-}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
if [ -e "$OUT/cleanrl" ] || [ -e "$OUT/mira" ]; then
  echo "race: $OUT already holds a run; give another OUT" >&2
  exit 2
fi

echo "$(date +%T) mira configs/impala_atari.yaml, Pong seed 17"
# shellcheck disable=SC2086  # MIRA_ARGS is a list of overrides
mira train configs/impala_atari.yaml env.game=Pong run.seed=17 run.dir="$OUT/mira" \
  $MIRA_ARGS --quiet > "$OUT/mira.log" 2>&1
echo "$(date +%T) mira finished"

mkdir -p "$OUT/cleanrl"
echo "$(date +%T) CleanRL ppo_atari_envpool, Pong-v5 seed 1, to global step $STEPS or $MINUTES min"
# CleanRL writes runs/<run name>/ under its working directory; its stdout names each game's
# global step, which stops it once past STEPS or at the time limit (SIGINT; its event file is
# flushed on exit).
(cd "$OUT/cleanrl" && exec "$ENVPOOL_PY" -u "$PEERS/ppo_atari_envpool_gymnasium.py" \
  --env-id Pong-v5 --num-envs 8 --num-threads 2 --no-cuda --total-timesteps 10000000 \
  --seed 1) > "$OUT/cleanrl.log" 2>&1 &
pid=$!
stop_at=$(( $(date +%s) + MINUTES * 60 ))
while kill -0 "$pid" 2>/dev/null; do
  step=$(grep -o 'global_step=[0-9]*' "$OUT/cleanrl.log" | tail -1 | cut -d= -f2)
  if { [ -n "$step" ] && [ "$step" -gt "$STEPS" ]; } || [ "$(date +%s)" -ge "$stop_at" ]; then
    kill -INT "$pid"
    break
  fi
  sleep 5
done
wait "$pid" || true
echo "$(date +%T) CleanRL stopped at global step ${step:-0}"

python -m scripts.bench.race --cleanrl "$(ls -d "$OUT"/cleanrl/runs/*/ | head -1)" \
  --mira "$OUT/mira" | tee "$OUT/race.md"
