"""The plots of a compare's report, drawn from ``scripts/compare/report.py``'s results.

``learning_curves.png``, ``final_scores.png`` and ``probability_of_improvement.png``.

The learning curves are interpolated onto a common frame grid; the band is a 95% percentile
bootstrap over seeds of the mean at each grid point. Matplotlib draws off-screen (Agg).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from envs import statistics as st


def band(curves: list[tuple[np.ndarray, np.ndarray]], grid: np.ndarray, reps: int = 1000,
         seed: int = 0):
    """Mean over seeds and its 95% bootstrap band on ``grid``: three arrays [len(grid)].

    They are NaN outside the frames that every seed covers (so no seed joins or leaves
    mid-curve).
    """
    ys = np.array([np.interp(grid, x, y, left=np.nan, right=np.nan) if len(x)
                   else np.full(len(grid), np.nan) for x, y in curves])
    ys[:, np.isnan(ys).any(axis=0)] = np.nan
    rng = np.random.default_rng(seed)
    resampled = ys[rng.integers(0, len(ys), size=(reps, len(ys)))]  # [reps, seeds, grid]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN grid points stay NaN
        boot = np.nanmean(resampled, axis=1)
        return (np.nanmean(ys, axis=0), np.nanpercentile(boot, 2.5, axis=0),
                np.nanpercentile(boot, 97.5, axis=0))


def plot(out: Path, res: dict, curves: dict, curve_label: str) -> None:
    """Write ``learning_curves.png``, ``final_scores.png`` and ``probability_of_improvement.png``.

    Args:
        out: the compare output directory.
        res: ``collect``'s results.
        curves: variant -> one ``learning_curve`` (frames, value) per seed that has one.
        curve_label: the learning curves' y-axis label.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants, agg = res["variants"], res["aggregate"]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    # Learning curves.
    fig, ax = plt.subplots(figsize=(8, 5))
    top = max((x[-1] for cs in curves.values() for x, _ in cs if len(x)), default=1.0)
    grid = np.linspace(0, top, 200)
    for i, (name, cs) in enumerate(curves.items()):
        mean, low, high = band(cs, grid)
        c = colors[i % len(colors)]
        seeds = f"{len(cs)} seed" + ("s" if len(cs) != 1 else "")
        ax.plot(grid, mean, color=c, label=f"{variants[name]['label']} ({seeds})")
        ax.fill_between(grid, low, high, color=c, alpha=0.2, linewidth=0)
    ax.set(xlabel="environment frames", ylabel=curve_label,
           title=f"{res['name']}: learning curves (mean over seeds, 95% bootstrap CI)")
    ax.grid(alpha=0.3)
    if curves:
        ax.legend(loc="best", fontsize=9)
    else:
        ax.text(0.5, 0.5, "no curves: every trial was rebuilt from the compare's table",
                ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(out / "learning_curves.png", dpi=120)
    plt.close(fig)
    # Final scores.
    names = [n for n in variants if agg in variants[n]["aggregates"]]
    labels = [variants[n]["label"] for n in names]
    fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(names) + 2), 5))
    for i, n in enumerate(names):
        a = variants[n]["aggregates"][agg]
        err = [[a["value"] - a["ci95"][0]], [a["ci95"][1] - a["value"]]]
        ax.bar(i, a["value"], color=colors[i % len(colors)], alpha=0.8, yerr=err, capsize=6)
        # Seeds as dots where they are on the bar's scale: one task, or the plain mean. (IQM and
        # median pool seeds x tasks, so one seed's IQM over its tasks may lie outside the CI.)
        if len(variants[n]["tasks"]) == 1 or agg == "mean":
            fn = st.AGGREGATES[agg]
            per_seed = [fn(np.array([row])) for row in variants[n]["scores_per_seed"]]
            ax.scatter(np.full(len(per_seed), i) + np.linspace(-0.15, 0.15, len(per_seed)),
                       per_seed, color="black", s=14, zorder=3,
                       label="one seed" if i == 0 else None)
    ax.set_xticks(range(len(names)), labels, rotation=20 if len(names) > 3 else 0,
                  ha="right" if len(names) > 3 else "center")
    when = "final evaluation" if res["final"] == "evaluation" else "end of training"
    ax.set(ylabel=f"{agg} of {res['score']} ({when})",
           title=f"{res['name']}: final {agg} score\n"
                 "(bars: 95% stratified bootstrap CI over seeds)")
    ax.grid(axis="y", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="lower right", fontsize=9, framealpha=0.9)
    fig.tight_layout()
    fig.savefig(out / "final_scores.png", dpi=120)
    plt.close(fig)
    # Probability of improvement: a matrix of pairs, so nothing to draw for one variant.
    poi = res["probability_of_improvement"]
    if len(poi["variants"]) < 2:
        return
    labels = [variants[n]["label"] for n in poi["variants"]]
    m = np.array([[np.nan if p is None else p["value"] for p in row] for row in poi["matrix"]],
                 dtype=float).reshape(len(labels), len(labels))
    size = max(4.5, 1.3 * len(labels) + 2.5)
    fig, ax = plt.subplots(figsize=(size + 1, size))
    cmap = matplotlib.colormaps["RdBu"].with_extremes(bad="#dddddd")  # bad: the diagonal
    image = ax.imshow(m, cmap=cmap, vmin=0, vmax=1)
    for i, row in enumerate(poi["matrix"]):
        for j, p in enumerate(row):
            text = ("—" if p is None
                    else f"{p['value']:.2f}\n[{p['ci95'][0]:.2f}, {p['ci95'][1]:.2f}]")
            dark = p is not None and abs(p["value"] - 0.5) > 0.3
            ax.text(j, i, text, ha="center", va="center", color="white" if dark else "black",
                    fontsize=10 if len(labels) < 6 else 7)
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
    ax.set_yticks(range(len(labels)), labels)
    ax.set(xlabel="column variant Y", ylabel="row variant X",
           title=f"{res['name']}: probability of improvement P(X > Y)\n(with 95% bootstrap CI)")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="P(row > column)")
    fig.tight_layout()
    fig.savefig(out / "probability_of_improvement.png", dpi=120)
    plt.close(fig)
