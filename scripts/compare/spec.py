"""The compare file: its format, its sections' dataclasses, and ``load_spec``.

Read by ``mira compare`` (``scripts/compare/command.py``), which trains and reports what this
module validates; nothing here runs a trial. A compare file (``configs/compare_*.yaml``)::

    name: heads_lab6                  # output: runs/compare/<name>/ (or `out:`, or --out)
    base: configs/impala_lab6.yaml    # training config (relative to this file, else to the cwd)
    overrides: {run.total_frames: 2e5}   # every trial (dotted keys or nested mappings)
    matrix: {agent.head: [linear, multiplicative]}   # the cartesian product = the variants
    variants: [{agent.head: linear},
               {agent.head: multiplicative, agent.head_options: {context: learnt}}]
                                      # or list them (crossed with the matrix when both are given)
    seeds: [0, 1, 2]                  # run.seed; a trial = one variant x one seed (a matrix
                                      # key run.seed means the same)
    plan: {pairs: [[head-multiplicative, head-linear]], bounds: [-10, 110], stop: all seeds}
                                      # the primary comparisons, declared up front
                                      # (plan.py); every other pair is exploratory
    evaluate: {episodes: 30}          # final evaluation of each trial's last checkpoint
    deterministic: false              # run.deterministic for every trial (replayable runs)
    csv: {path: study.csv, columns: {seed: seed, task: task, score: score},
          probes: study_probes.csv}   # a table of the scores (results_csv.py); probes: one
                                      # of the torso monitor's series (optional)
    keep: study_trials/               # each finished trial's record (scores, curves; no
                                      # checkpoint), restored where a run directory lost it
                                      # (scripts/compare/records.py)
    publish: {path: study, figure: final_scores}
                                      # the report and plots copied to study.md, study.png,
                                      # study_<plot>.png (scripts/compare/publish.py)
    threshold: 18                     # the report's time to a score: each trial's frames and
                                      # training time to its first last-100 training return
                                      # (raw) at or above it
    resources: {cpus_per_trial: 1}
    pbt: {enabled: false}             # population-based training: scripts/compare/pbt.py

The matrix key ``base`` varies the training config itself (``base: [configs/impala_atari.yaml,
configs/ppo_atari.yaml]`` compares learners, each with its own preset). Every trial's config is
validated before anything runs; an error names the variant.

A variant may hold ``match_params: {reference: VARIANT, width: KEY}``: the integer setting KEY
(e.g. ``agent.core_options.hidden_size``) is chosen so that its parameter count is within 2% of
the reference variant's (``scripts/compare/param_match.py``); the report says what it set.
Variants at one seed index share their environment seeds (runners seed their envs from
``run.seed``) and, where their torsos are alike, the torso's initial weights (the agent builds
its torso first, right after the learner seeds torch with ``run.seed``): the primary
comparisons use paired per-seed differences.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from envs import statistics as st
from learners.config.schema import ConfigError, ExperimentConfig, from_dict, load_config, read_yaml
from scripts.compare import plan as plan_mod
from scripts.compare import records
from scripts.compare.pbt import PBTSpec
from scripts.compare.plan import PlanSpec
from scripts.compare.publish import PublishSpec
from scripts.compare.results_csv import CsvSpec, check_columns
from scripts.compare.trial_runner import ResourcesSpec
from scripts.compare.trials import flatten, override

AGGREGATES = tuple(st.AGGREGATES)  # the names a compare file may give `aggregate:`


@dataclass
class EvaluateSpec:
    """The ``evaluate:`` section of a compare file: the final evaluation of every trial."""

    # evaluation episodes per task of each trial's final checkpoint (0 = none); 30 gives per-task
    # means precise enough to compare where evaluation stays a small part of a trial's time
    episodes: int = 30
    num_runners: int = 0  # 0: evaluate in the trial's task; >0: one Ray evaluator actor per task

    def __post_init__(self):
        for key in ("episodes", "num_runners"):
            if getattr(self, key) < 0:
                raise ValueError(f"evaluate.{key} must be 0 or more, got {getattr(self, key)}")


@dataclass
class CompareSpec:
    """A compare file (see the module docstring for its format), as read by ``load_spec``."""

    name: str = ""  # names the output directory runs/compare/<name>
    base: str = ""  # training config (a matrix key `base` overrides it per variant)
    out: str = ""  # output directory; default runs/compare/<name>
    overrides: dict = field(default_factory=dict)  # dotted key -> value, applied to every trial
    matrix: dict = field(default_factory=dict)  # dotted key -> list of values; product = variants
    # explicit variants (mappings of dotted key -> value), crossed with the matrix
    variants: list = field(default_factory=list)
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])  # run.seed of each variant's trials
    aggregate: str = "iqm"  # headline score: median, mean, iqm or capped_mean over seeds x tasks
    evaluate: EvaluateSpec = field(default_factory=EvaluateSpec)
    resources: ResourcesSpec = field(default_factory=ResourcesSpec)
    pbt: PBTSpec = field(default_factory=PBTSpec)  # population-based training (pbt.py)
    plan: PlanSpec = field(default_factory=PlanSpec)  # primary pairs, stop rule: plan.py
    deterministic: bool = False  # run.deterministic for every trial: replayable, slower
    csv: CsvSpec = field(default_factory=CsvSpec)  # a table of the scores: results_csv.py
    # the report and plots copied beside the csv, links rewritten: scripts/compare/publish.py
    publish: PublishSpec = field(default_factory=PublishSpec)
    # a directory (relative to the working directory) keeping each finished trial's record,
    # restored into a run directory that lost it: scripts/compare/records.py
    keep: str = ""
    # a last-100 training return (raw) the curves are read against: the report gives each
    # trial's frames and training time to its first crossing (trials still run their budget)
    threshold: float | None = None


@dataclass
class Trial:
    """One variant x one seed: its settings, config overrides and validated training config."""

    variant: str  # slug of the variant, e.g. "head-linear"
    settings: dict  # matrix key -> value of this variant
    seed: int
    base: str  # absolute path of the training config
    overrides: list[str]
    cfg: ExperimentConfig
    matched: dict | None = None  # what match_params set: {width, value, params, reference, ...}

    @property
    def slug(self) -> str:
        """``<variant>-seed<k>``: the trial's name and the name of its run directory."""
        return f"{self.variant}-seed{self.seed}"

    @property
    def dir(self) -> Path:
        """The trial's run directory, ``run.dir`` (``<out>/trials/<slug>``)."""
        return Path(self.cfg.run.dir)


def _resolve(path: str, near: Path) -> Path:
    for candidate in (near / path, Path(path)):
        if candidate.is_file():
            return candidate.resolve()
    raise ConfigError(f"training config {path!r} not found next to the compare file ({near}) "
                      "or in the cwd")


def _slug(settings: dict) -> str:
    short = [k.split(".")[-1] for k in settings]
    parts = []
    for (key, value), name in zip(settings.items(), short):
        name = key if short.count(name) > 1 else name
        value = Path(value).stem if key == "base" else value
        text = value if isinstance(value, str) else json.dumps(value)
        parts.append(re.sub(r"[^A-Za-z0-9.+=-]+", "-", f"{name}-{text}").strip("-"))
    return "_".join(parts) or "base"


def load_spec(path: str | Path, out: str | None = None) -> tuple[CompareSpec, list[Trial], Path]:
    """Read a compare file and validate every trial's config (nothing runs).

    Returns (spec, trials, output directory).
    """
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{str(path)!r} is a directory; give the compare file, e.g. "
                          "configs/compare_heads_lab6.yaml")
    if not path.is_file():
        raise ConfigError(f"compare file {str(path)!r} does not exist")
    raw = read_yaml(path) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of compare keys (name, base, variants, "
                          f"seeds, ...) at the top level, got a {type(raw).__name__}")
    spec = from_dict(CompareSpec, raw)
    if "run.seed" in flatten(spec.overrides):
        raise ConfigError("overrides.run.seed would be replaced by each trial's seed; "
                          "list the seeds in `seeds:`")
    if "run.seed" in spec.matrix:  # a seed axis in the matrix is the seeds list, not a variant axis
        seeds = spec.matrix.pop("run.seed")
        if not isinstance(seeds, list) or not seeds:
            raise ConfigError(f"matrix.run.seed: expected a non-empty list of seeds, got {seeds!r}")
        if "seeds" in raw and raw["seeds"] != seeds:
            raise ConfigError(f"seeds are given twice: matrix.run.seed {seeds} and seeds "
                              f"{raw['seeds']}; keep one")
        spec.seeds = seeds
    name = spec.name or path.stem
    out = Path(out or spec.out or Path("runs") / "compare" / name).resolve()
    if spec.aggregate not in AGGREGATES:
        raise ConfigError(
            f"aggregate must be one of {', '.join(AGGREGATES)}, got {spec.aggregate!r}")
    asked = [c for c in spec.csv.columns.values()
             if c in ("frames_to_threshold", "minutes_to_threshold")]
    if asked and spec.threshold is None:
        raise ConfigError(f"csv.columns: {asked[0]} needs a threshold: set `threshold:` (a "
                          "last-100 training return) in the compare file")
    if spec.resources.placement not in ("driver", "spread"):
        raise ConfigError(
            f"resources.placement must be driver or spread, got {spec.resources.placement!r}")
    if not spec.seeds or len(set(spec.seeds)) != len(spec.seeds):
        raise ConfigError(f"seeds must be a non-empty list of distinct integers, got {spec.seeds}")
    for key, values in spec.matrix.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"matrix.{key}: expected a non-empty list of values, got {values!r}")
    for i, v in enumerate(spec.variants):
        if not isinstance(v, dict) or not v:
            raise ConfigError(
                f"variants[{i}]: expected a mapping of dotted keys to values, got {v!r}")
    matches = [v.get("match_params") for v in spec.variants] or [None]
    for i, m in enumerate(matches):
        if m is not None and (not isinstance(m, dict) or set(m) != {"reference", "width"}):
            raise ConfigError(f"variants[{i}].match_params: expected {{reference: VARIANT, "
                              f"width: KEY}}, got {m!r}")
    explicit = [flatten({k: x for k, x in v.items() if k != "match_params"})
                for v in spec.variants] or [{}]
    bases = ([spec.base] if spec.base else []) + list(spec.matrix.get("base", [])) + [
        v["base"] for v in explicit if "base" in v]
    for b in bases:
        if not isinstance(b, str) or not b:
            raise ConfigError(f"base: expected the path of a training config, got {b!r}")
    if not spec.base and "base" not in spec.matrix and not all("base" in v for v in explicit):
        raise ConfigError("the compare file needs `base: TRAINING_CONFIG` (or a matrix key `base`)")
    common = [override(k, v) for k, v in flatten(spec.overrides).items()]
    if spec.deterministic:
        common.append("run.deterministic=true")
    trials, slugs = [], set()
    combos = [({**extra, **dict(zip(spec.matrix, combo))}, match)
              for extra, match in zip(explicit, matches)
              for combo in itertools.product(*spec.matrix.values())]
    for settings, _ in combos:
        variant = _slug(settings)
        if variant in slugs:
            raise ConfigError(f"two variants share the directory name {variant!r}; "
                              "make the variants distinct")
        slugs.add(variant)
    matched = _match_params(combos, common, path.parent, spec)
    for settings, _ in combos:
        variant = _slug(settings)
        base = _resolve(str(settings.get("base", spec.base)), path.parent)
        mine = _settings_overrides(settings) + (
            [f"{matched[variant]['width']}={matched[variant]['value']}"]
            if variant in matched else [])
        for seed in spec.seeds:
            where = out / "trials" / f"{variant}-seed{seed}"
            overrides = common + mine + [f"run.seed={seed}", f"run.dir={where}",
                                         f"run.name={name}-{where.name}"]
            try:
                cfg = load_config(base, overrides)
            except ConfigError as e:
                raise ConfigError(f"variant {variant} (seed {seed}): {e}") from None
            trials.append(Trial(variant, settings, seed, str(base), overrides, cfg,
                                matched.get(variant)))
    # Seed-major order (every variant's seed 0, then every variant's seed 1, ...): trials run in
    # this order, so a long compare stopped part-way has every variant at the same seeds.
    trials.sort(key=lambda t: spec.seeds.index(t.seed))
    check_columns(spec.csv, [t.cfg for t in trials])
    records.check(spec)
    if spec.pbt.enabled:
        from scripts.compare.pbt import check

        check(spec, trials)
    plan_mod.check(spec.plan, list(dict.fromkeys(t.variant for t in trials)), spec.seeds,
                   frames_of(trials), spec.evaluate.episodes)
    return spec, trials, out


def frames_of(trials: list[Trial]) -> dict:
    """Variant -> its trials' run.total_frames."""
    return {t.variant: t.cfg.run.total_frames for t in trials}


def _settings_overrides(settings: dict) -> list[str]:
    return [override(k, v) for key, value in settings.items() if key != "base"
            for k, v in flatten({key: value}).items()]


def _match_params(combos: list, common: list[str], near: Path, spec: CompareSpec) -> dict:
    """Variant -> what its ``match_params`` set (``param_match.match_variants``); {} if none asks.

    Configs are those of seed ``seeds[0]`` (the seed changes no shape).
    """
    from scripts.compare.param_match import match_variants

    by_name = {_slug(s): s for s, _ in combos}

    def config(name: str):
        base = str(_resolve(str(by_name[name].get("base", spec.base)), near))
        over = common + _settings_overrides(by_name[name]) + [f"run.seed={spec.seeds[0]}"]
        return base, over, load_config(base, over)

    return match_variants({_slug(s): m for s, m in combos if m}, list(by_name), config)
