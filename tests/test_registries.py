"""A new algorithm or suite is one file plus one registry line: no other module names it."""

from __future__ import annotations

import dataclasses
import pickle
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from agents.registry import ranged
from envs.suites import ENVS, EnvConfig, Suite, SuiteSpec, build_suite, config_tasks
from learners.algorithms import LEARNERS, impala
from learners.config.schema import ConfigError, load_config, to_dict


@dataclass(frozen=True)
class ToyConfig:
    """The ``learner.toy:`` section."""

    temperature: float = ranged(1.0, 0, None, True)  # a setting only the toy algorithm reads


@pytest.fixture
def toy(monkeypatch):
    entry = dataclasses.replace(LEARNERS.get("impala"), options=ToyConfig,
                                check=lambda cfg: None)
    monkeypatch.setitem(LEARNERS._entries, "toy", entry)
    return entry


def test_an_algorithm_declares_its_config_section(toy):
    cfg = load_config(None, ["learner.name=toy", "learner.toy.temperature=0.5"])
    assert cfg.learner.toy == ToyConfig(temperature=0.5)
    saved = to_dict(cfg)["learner"]
    assert saved["toy"] == {"temperature": 0.5}
    assert list(saved)[-3:] == ["impala", "ppo", "toy"]  # the sections follow the shared keys
    with pytest.raises(ConfigError, match=r"learner\.toy\.temperature must be > 0"):
        load_config(None, ["learner.name=toy", "learner.toy.temperature=0"])
    with pytest.raises(ConfigError, match=r"valid keys under 'learner.toy': temperature"):
        load_config(None, ["learner.toy.heat=1"])
    assert load_config(to_dict(cfg)) == cfg  # a saved config loads with the same meaning


def test_the_shipped_sections_are_the_registry_entries_options():
    cfg = load_config(None, [])
    for name in LEARNERS.names():
        assert isinstance(getattr(cfg.learner, name), LEARNERS.get(name).options)
    assert LEARNERS.get("impala").options is impala.ImpalaConfig
    assert pickle.loads(pickle.dumps(cfg)) == cfg  # Ray sends it to the learner actor


@dataclass(frozen=True)
class ToyOptions(EnvConfig):
    """The ``env`` section for suite ``toy``."""

    suite: str = "toy"
    size: int = ranged(3, 1)  # a key only the toy suite reads


@pytest.fixture
def toy_suite(monkeypatch):
    def build(cfg: ToyOptions) -> SuiteSpec:
        return SuiteSpec(["only"], lambda task, seed: None, 3, "none")

    def check(cfg: ToyOptions) -> str | None:
        return "env.size: the toy suite holds at most 5" if cfg.size > 5 else None

    monkeypatch.setitem(ENVS._entries, "toy", Suite(build, ToyOptions, check=check))


def test_a_suite_declares_its_options_and_rules(toy_suite):
    cfg = load_config(None, ["env.suite=toy", "env.size=4"])
    assert cfg.env == ToyOptions(size=4)
    assert config_tasks(cfg.env) is None and build_suite(cfg.env).tasks == ["only"]
    with pytest.raises(ConfigError, match="the toy suite holds at most 5"):
        load_config(None, ["env.suite=toy", "env.size=6"])
    with pytest.raises(ConfigError, match="the toy suite does not read it"):
        load_config(None, ["env.suite=toy", "env.game=Pong"])


def test_the_shipped_suites_answer_for_themselves():
    assert config_tasks(EnvConfig(suite="atari", games=["Pong", "Breakout"])) == (
        "env.games", ["Pong", "Breakout"])
    assert config_tasks(EnvConfig(suite="minigrid")) == ("env.level", ["MiniGrid-Empty-5x5-v0"])
    assert config_tasks(EnvConfig(suite="lab6")) is None
    atari = ENVS.get("atari")
    assert atari.check(EnvConfig(suite="atari", games=["Pong", "Breakout"],
                                 full_action_space=False)) is not None
    assert atari.video_fps == 15 and ENVS.get("minigrid").video_fps == 8
    assert ENVS.get("minigrid").protocol_overrides is None


def test_no_code_outside_the_suites_compares_env_suite_with_a_name():
    """Code asks the suite's entry (``Suite``) instead; paper checks may name their suite."""
    root = Path(__file__).resolve().parents[1]
    compare = re.compile(r"""env\.suite\s*(==|!=|\bin\b)\s*[("'\[]""")
    found = [f"{path.relative_to(root)}:{n}" for folder in ("agents", "envs", "learners", "scripts")
             for path in sorted((root / folder).rglob("*.py"))
             if "papers" not in path.parts
             for n, line in enumerate(path.read_text().splitlines(), 1) if compare.search(line)]
    assert not found, found
