"""Evaluation episodes and their normalised scores (no learning, no Ray).

``Evaluator`` plays whole episodes of the tasks it is given with a fixed set of weights;
``mira evaluate`` runs one per task on Ray runners in parallel, training runs one on the
side when ``eval.every_frames`` is set. ``score_table`` turns episode returns into the
per-task report and the aggregates with stratified-bootstrap confidence intervals
(Agarwal et al. 2021), over a matrix ``[episodes, tasks]`` of normalised returns (the
bootstrap resamples each task's episodes; the capped mean caps each task's mean).
"""

from __future__ import annotations

import numpy as np

from agents.config import AgentConfig
from envs.runner import EnvRunner
from envs.suites import EnvConfig


class Evaluator:
    """Plays ``episodes`` whole episodes of each task with fixed weights, one EnvRunner per task."""

    def __init__(self, env_cfg: EnvConfig, agent_cfg: AgentConfig, tasks: list[int], episodes: int,
                 max_envs: int = 8, seed: int = 10_000, torch_threads: int = 1,
                 popart: bool = False):
        self.episodes = episodes
        self.envs = max(1, min(episodes, max_envs))
        # Env i plays exactly per_env[i] episodes, together `episodes`: keeping the first
        # `episodes` to finish of a larger number would favour short episodes.
        base, extra = divmod(episodes, self.envs)
        self.per_env = [base + (i < extra) for i in range(self.envs)]
        self.runners = {
            task: EnvRunner(env_cfg, agent_cfg, runner_id=task, envs_per_runner=self.envs,
                            unroll_length=1, seed=seed + task, tasks=[task] * self.envs,
                            torch_threads=torch_threads, popart=popart)
            for task in tasks
        }

    def evaluate(self, weights: dict) -> dict[int, list[float]]:
        """``{task: [return of each of `episodes` episodes]}``."""
        out = {}
        for task, runner in self.runners.items():
            eps = runner.run_episodes(self.per_env, weights)
            out[task] = [ret for _, ret, _ in eps]
        return out


def score_table(returns: dict[str, list[float]], score_suite: str, reps: int = 2000,
                seed: int = 0) -> dict:
    """Per-task statistics and aggregates of normalised scores (when the suite has them)."""
    from envs import scores
    from envs import statistics as st

    tasks = list(returns)
    has_ref = scores.has_reference_scores(score_suite) if score_suite != "none" else False
    per_task = {}
    for task in tasks:
        r = np.asarray(returns[task], dtype=float)
        entry = {"return_mean": float(r.mean()),
                 "return_std": float(r.std(ddof=1)) if len(r) > 1 else 0.0,
                 "episodes": int(len(r)), "normalized_score": None}
        if has_ref:
            entry["normalized_score"] = float(scores.normalized_score(score_suite, task,
                                                                      float(r.mean())))
        per_task[task] = entry
    result = {"score": scores.score_name(score_suite) if has_ref else "raw return",
              "tasks": per_task, "aggregates": {}}
    n = min(len(v) for v in returns.values())
    if n == 0:
        return result
    if has_ref:
        matrix = np.array([[scores.normalized_score(score_suite, t, x) for x in returns[t][:n]]
                           for t in tasks]).T
    else:
        matrix = np.array([returns[t][:n] for t in tasks], dtype=float).T
    aggregates = {"median": st.median, "mean": st.mean, "iqm": st.iqm}
    if has_ref:
        # Rows are episodes, not runs: DMLab-30's cap applies to a level's mean score, so
        # average each task's episodes first (capping single episodes would drag a level
        # whose mean is above 100 below it).
        aggregates["capped_mean"] = lambda m: st.capped_mean(m.mean(axis=0, keepdims=True))
    for name, fn in aggregates.items():
        ci = st.stratified_bootstrap_ci(matrix, fn, reps=reps, seed=seed)
        result["aggregates"][name] = {"value": float(ci.estimate),
                                      "ci95": [float(ci.low), float(ci.high)]}
    return result


def markdown(result: dict, title: str) -> str:
    """A ``score_table`` result as markdown: the per-task table, then the aggregates' 95% CIs."""
    lines = [f"# {title}", "", f"Score: {result['score']}.", "",
             "| task | return mean | return std | episodes | normalised score |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for task, e in result["tasks"].items():
        ns = "n/a" if e["normalized_score"] is None else f"{e['normalized_score']:.1f}"
        lines.append(f"| {task} | {e['return_mean']:.3f} | {e['return_std']:.3f} | "
                     f"{e['episodes']} | {ns} |")
    if result["aggregates"]:
        lines += ["", "Aggregates over this checkpoint's episodes: the IQM of every episode's "
                  "score in every task; the median, mean (and capped mean) of the per-task "
                  "means. A compare report's aggregates are over seeds x tasks instead.",
                  "", "| aggregate | value | 95% CI (stratified bootstrap over episodes) |",
                  "| --- | ---: | --- |"]
        for name, a in result["aggregates"].items():
            lines.append(f"| {name} | {a['value']:.3f} | "
                         f"[{a['ci95'][0]:.3f}, {a['ci95'][1]:.3f}] |")
    return "\n".join(lines) + "\n"
