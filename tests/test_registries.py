"""A new algorithm or suite is one file plus one registry line: no other module names it."""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import dataclass

import pytest

from agents.registry import ranged
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
