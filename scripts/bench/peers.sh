#!/bin/bash
# Same-network throughput beside CleanRL and Sample Factory on Pong, each run alone, alternated.
#
#   PEERS=DIR [ROUNDS=3] [S=130] bash scripts/bench/peers.sh
#
# Per round, one after the other, each for S seconds of wall time (stopped with Ctrl-C's
# signal, so every tool writes its figures):
#   1. mira configs/ppo_atari.yaml with the Nature CNN and no core (8 envs, T=128, 4 epochs x
#      4 minibatches: CleanRL's PPO settings);
#   2. the same on the gymnasium backend (one wrapped env per env, as CleanRL's ppo_atari.py;
#      mira's default, ale_vector, is ale-py's C++ vector env, as envpool is a C++ pool);
#   3. CleanRL ppo_atari_envpool.py, 8 envs on 2 threads;
#   4. CleanRL ppo_atari.py (gymnasium + ale-py), 8 envs;
#   5. mira configs/impala_atari.yaml (APPO) with the Nature CNN and no core;
#   6. Sample Factory APPO (--async_rl=True), 2 workers x 4 envs, its Atari preset otherwise.
# Each prints frames/s end to end, learning included (CleanRL's SPS is agent steps/s since its
# start: x4 frames). DIR holds the peers' harness scripts (CleanRL's two Atari PPO scripts
# patched for gymnasium 1.x, Sample Factory's Atari launcher and its log reader sf_fps.py);
# each peer runs from its own virtualenv: ENVPOOL_PY, ALE_PY, SF_PY (defaults
# ~/peers_envpool/bin/python, ~/peers_ale/bin/python, ~/peers_sf/bin/python). Time it only on
# an otherwise idle machine; docs/throughput.md has the figures and what still differs.
# Every figure also goes to $OUT/peers.csv (date, round, tool, frames/s, mira's revision), the
# rows to commit beside the page's table.
set -u
: "${PEERS:?set PEERS to the folder of the peers harness scripts}"
ROUNDS=${ROUNDS:-3}
S=${S:-130}
ENVPOOL_PY=${ENVPOOL_PY:-$HOME/peers_envpool/bin/python}
ALE_PY=${ALE_PY:-$HOME/peers_ale/bin/python}
SF_PY=${SF_PY:-$HOME/peers_sf/bin/python}
OUT=${OUT:-runs/peers}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
NATURE_FF="agent.torso=nature agent.torso_options.init=orthogonal agent.core=feedforward"
CSV="$OUT/peers.csv"
[ -f "$CSV" ] || echo "date,round,tool,frames_per_s,mira_code" > "$CSV"
CODE=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)

row() {  # round, tool, frames/s[, a note]: one line printed, one row in $CSV
  echo "$(date +%T) round $1 $2: $3 frames/s${4:+ $4}"
  echo "$(date -u +%F),$1,$2,$3,$CODE" >> "$CSV"
}

mira_fps() {  # frames/s end to end of a finished mira run directory
  python -c "import json, sys; print(round(json.load(open(sys.argv[1]))['fps']))" "$1/summary.json"
}

for r in $(seq 1 "$ROUNDS"); do
  rm -rf "$OUT/mira_ppo_$r" "$OUT/mira_impala_$r"
  timeout -s INT "$S" mira train configs/ppo_atari.yaml env.game=Pong $NATURE_FF \
    run.dir="$OUT/mira_ppo_$r" --quiet > "$OUT/mira_ppo.$r.log" 2>&1
  row "$r" "mira ppo_atari nature feed-forward" "$(mira_fps "$OUT/mira_ppo_$r")"

  rm -rf "$OUT/mira_ppo_gym_$r"
  timeout -s INT "$S" mira train configs/ppo_atari.yaml env.game=Pong $NATURE_FF env.backend=gymnasium \
    run.dir="$OUT/mira_ppo_gym_$r" --quiet > "$OUT/mira_ppo_gym.$r.log" 2>&1
  row "$r" "mira ppo_atari nature feed-forward gymnasium backend" "$(mira_fps "$OUT/mira_ppo_gym_$r")"

  timeout -s INT "$S" "$ENVPOOL_PY" "$PEERS/ppo_atari_envpool_gymnasium.py" --env-id Pong-v5 \
    --num-envs 8 --num-threads 2 --no-cuda --total-timesteps 10000000 \
    > "$OUT/cleanrl_envpool.$r.log" 2>&1
  sps=$(grep -o 'SPS: [0-9]*' "$OUT/cleanrl_envpool.$r.log" | tail -1 | cut -d' ' -f2)
  row "$r" "CleanRL envpool" "$((sps * 4))" "($sps SPS)"

  (cd /tmp && PYTHONPATH="$PEERS" timeout -s INT "$S" "$ALE_PY" "$PEERS/ppo_atari_gymnasium1.py" \
    --env-id PongNoFrameskip-v4 --num-envs 8 --no-cuda --total-timesteps 10000000 \
    > "$OUT/cleanrl_ale.$r.log" 2>&1)
  sps=$(grep -o 'SPS: [0-9]*' "$OUT/cleanrl_ale.$r.log" | tail -1 | cut -d' ' -f2)
  row "$r" "CleanRL gymnasium" "$((sps * 4))" "($sps SPS)"

  timeout -s INT "$S" mira train configs/impala_atari.yaml env.game=Pong $NATURE_FF \
    run.dir="$OUT/mira_impala_$r" --quiet > "$OUT/mira_impala.$r.log" 2>&1
  row "$r" "mira impala_atari nature feed-forward" "$(mira_fps "$OUT/mira_impala_$r")"

  (cd /tmp && timeout -s INT $((S + 20)) "$SF_PY" "$PEERS/sf_train_atari.py" --env=atari_pong \
    --experiment="sf_pong_$r" --train_dir="$OUT/sf" --device=cpu --num_workers=2 \
    --num_envs_per_worker=4 --worker_num_splits=2 --async_rl=True --restart_behavior=overwrite \
    --experiment_summaries_interval=10 > "$OUT/sf.$r.log" 2>&1)
  sf=$("$SF_PY" "$PEERS/sf_fps.py" "$OUT/sf.$r.log" 2>&1 | tail -1)  # "N frames in S s: F frames/s ..."
  row "$r" "Sample Factory" "$(echo "$sf" | sed -n 's/.*: \([0-9]*\) frames\/s.*/\1/p')" "($sf)"
done
