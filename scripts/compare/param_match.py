"""Parameter counts of a compare's variants, and ``match_params``: a width that matches a count.

A variant of a compare file may say ``match_params: {reference: VARIANT, width: KEY}``: the
integer setting ``KEY`` (e.g. ``agent.core_options.hidden_size``) is then chosen so that the
variant's parameter count is within ``TOLERANCE`` of the reference variant's. Counts come from
building the agent on the suite's observation and action spaces, as a runner does (one
environment is made to read its observation space); building an agent takes milliseconds.
"""

from __future__ import annotations

import dataclasses

from learners.config.schema import ConfigError, ExperimentConfig, load_config

TOLERANCE = 0.02  # relative difference of parameter counts that counts as matched
MAX_WIDTH = 1 << 14


_SPACES: dict[str, tuple] = {}  # env config (repr) -> observation/action spaces


def _spaces(cfg_env) -> tuple:
    """(obs shapes, obs vocab, actions, tasks) of the suite, read off one env as a runner does."""
    import numpy as np

    from envs.suites import build_suite

    key = repr(cfg_env)
    if key not in _SPACES:
        suite = build_suite(cfg_env)
        env = suite.make(0, 0)
        space = env.observation_space
        shapes = {k: space[k].shape for k in space}
        vocab = {k: int(np.max(space[k].high)) + 1 for k in space
                 if k != "pixels" and np.issubdtype(space[k].dtype, np.integer)}
        env.close()
        _SPACES[key] = shapes, vocab, suite.num_actions, len(suite.tasks)
    return _SPACES[key]


def param_count(cfg: ExperimentConfig) -> int:
    """Values in the agent's state dict (parameters and buffers), as the report counts them."""
    from agents.agent import Agent

    shapes, vocab, actions, tasks = _spaces(cfg.env)
    agent = Agent(cfg.agent, shapes, actions, tasks, vocab, popart=cfg.learner.popart)
    return int(sum(v.numel() for v in agent.state_dict().values()))


def width_of(cfg: ExperimentConfig, key: str) -> int:
    """The integer setting ``key`` of ``cfg``; a ConfigError if the config has no such setting."""
    node = cfg
    parts = key.split(".")
    for i, part in enumerate(parts):
        names = ([f.name for f in dataclasses.fields(node)]
                 if dataclasses.is_dataclass(node) else [])
        if part not in names:
            where = ".".join(parts[:i]) or "the config"
            raise ConfigError(f"match_params.width {key!r}: {where} has no setting {part!r}"
                              + (f"; it has {', '.join(names)}" if names else ""))
        node = getattr(node, part)
    if isinstance(node, bool) or not isinstance(node, int):
        raise ConfigError(f"match_params.width {key!r} is {node!r}, not an integer width")
    return node


def match_width(base: str, overrides: list[str], key: str, target: int) -> tuple[int, int]:
    """The width ``key`` whose agent's count is nearest ``target``: (width, count).

    Counts grow with the width, so a bisection finds the first width at or above ``target``;
    it or the one below is the nearest. A ConfigError if the nearest is off by more than
    ``TOLERANCE``.
    """

    def count(width: int) -> int:
        return param_count(load_config(base, overrides + [f"{key}={width}"]))

    low, high = 1, 1
    while count(high) < target and high < MAX_WIDTH:
        low, high = high, high * 2
    while low < high:
        mid = (low + high) // 2
        if count(mid) < target:
            low = mid + 1
        else:
            high = mid
    best = min({max(high - 1, 1), high}, key=lambda w: abs(count(w) - target))
    got = count(best)
    if abs(got - target) > TOLERANCE * target:
        raise ConfigError(f"match_params: no {key} gives a parameter count within "
                          f"{TOLERANCE:.0%} of {target:,}; the nearest is {best} ({got:,})")
    return best, got


def match_variants(wanted: dict, names: list[str], config) -> dict:
    """Resolve every variant's ``match_params``: variant -> what it set.

    What it set: {width, value, params, reference, reference_params}. ``wanted``: variant ->
    its ``{reference, width}``; ``names``: every variant; ``config(name)`` gives a variant's
    (base file, overrides, validated config). A reference must be a variant without
    ``match_params`` of its own; the width must be an integer setting of the variant.
    """
    out = {}
    for variant, m in wanted.items():
        reference, key = m["reference"], m["width"]
        if reference not in names or reference in wanted:
            raise ConfigError(f"variant {variant}: match_params.reference {reference!r} is not a "
                              "variant without match_params; variants: "
                              f"{', '.join(n for n in names if n not in wanted)}")
        try:
            base, over, cfg = config(variant)
            width_of(cfg, key)
            target = param_count(config(reference)[2])
            value, count = match_width(base, over, key, target)
        except ConfigError as e:
            raise ConfigError(f"variant {variant}: {e}") from None
        out[variant] = {"width": key, "value": value, "params": count, "reference": reference,
                        "reference_params": target}
    return out
