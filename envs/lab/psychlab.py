"""Psychlab-style trial levels (Leibo et al. 2018, "Psychlab").

The stand-ins for ``psychlab_arbitrary_visuomotor_mapping`` and
``psychlab_continuous_recognition``.

Each trial shows one cue object straight ahead of the agent; the agent answers by
stepping onto the left (purple) or the right (yellow) floor pad beside it, i.e. two
actions (turn, forward). A correct answer gives +1, a wrong one 0; either way the agent
is put back on the start cell facing the next cue. ``num_trials`` trials make an episode.

    W W W W W
    W . C . W      C: cue (cannot be picked up or toggled)
    W L A R W      A: start, facing the cue; L / R: answer pads
    W W W W W

- ``ArbitraryVisuomotorMapping``: each episode draws ``num_cues`` objects and an
  arbitrary cue -> side mapping; the agent learns it by trial and error within the
  episode (the reward is the only feedback), as in the Psychlab task.
- ``ContinuousRecognition``: a stream of objects; answer left for an object not seen
  before in the episode and right for one seen before.
"""

from __future__ import annotations

import abc

from minigrid.core.world_object import Box, Floor, Key

from envs.lab.world import Cell, Grid, LabLevel, Target

CUE_TYPES = {"ball": Target, "box": Box, "key": Key}
CUE_COLORS = ("red", "green", "blue", "purple", "yellow", "grey")
CUES = [(t, c) for t in CUE_TYPES for c in CUE_COLORS]  # 18 distinct objects

START: Cell = (2, 2)
CUE_POS: Cell = (2, 1)
PADS: dict[str, Cell] = {"left": (1, 2), "right": (3, 2)}
UP = 3


class PsychlabTrials(LabLevel, abc.ABC):
    """Base class: subclasses choose each trial's cue and correct side in ``_new_trial``."""

    def __init__(self, num_trials: int = 20, max_steps: int = 100, **kwargs):
        self.num_trials = num_trials
        super().__init__(width=5, height=4, max_steps=max_steps, **kwargs)

    def _gen_grid(self, width, height):
        self.grid = Grid(width, height)
        self.grid.wall_rect(0, 0, width, height)
        self.put_obj(Floor("purple"), *PADS["left"])
        self.put_obj(Floor("yellow"), *PADS["right"])
        self.agent_pos, self.agent_dir = START, UP
        self.trials_done = 0
        self._start_episode()
        self._show_next_cue()

    def _show_next_cue(self) -> None:
        kind, color = self._new_trial()
        self.put(CUE_TYPES[kind](color), CUE_POS)

    def _start_episode(self) -> None:
        """Draw whatever the episode keeps fixed (a mapping, a stream of objects)."""

    @abc.abstractmethod
    def _new_trial(self) -> tuple[str, str]:
        """Return the next cue ``(type, colour)`` and set ``self.answer`` to "left"/"right"."""

    def _on_pickup(self, obj, pos):
        return 0.0  # cues stay where they are

    def _on_toggle(self, obj, pos):
        return 0.0  # a box cue would otherwise open and vanish

    def _after_step(self, reward, terminated):
        pos = tuple(self.agent_pos)
        for side, pad in PADS.items():
            if pos == pad:
                reward += 1.0 if side == self.answer else 0.0
                self.trials_done += 1
                terminated = terminated or self.trials_done >= self.num_trials
                self.agent_pos, self.agent_dir = START, UP
                self._show_next_cue()
        return reward, terminated


class ArbitraryVisuomotorMapping(PsychlabTrials):
    """Each episode maps ``num_cues`` objects to sides at random; learnt by trial and error."""

    mission_text = "learn which side each object asks for"

    def __init__(self, num_cues: int = 4, **kwargs):
        self.num_cues = num_cues
        super().__init__(**kwargs)

    def _start_episode(self):
        cues = self._rand_subset(CUES, self.num_cues)
        sides = ["left", "right"] * (self.num_cues // 2) + ["left"] * (self.num_cues % 2)
        sides = self._rand_subset(sides, len(sides))  # a random permutation
        self.mapping = dict(zip(cues, sides))

    def _new_trial(self):
        cue = self._rand_elem(list(self.mapping))
        self.answer = self.mapping[cue]
        return cue


class ContinuousRecognition(PsychlabTrials):
    """A stream of objects: left for one new in this episode, right for one seen before."""

    mission_text = "left for a new object right for one seen before"

    def _start_episode(self):
        self.unseen = self._rand_subset(CUES, len(CUES))  # a random order
        self.seen: list[tuple[str, str]] = []

    def _new_trial(self):
        if self.seen and (not self.unseen or self._rand_bool()):
            self.answer = "right"
            return self._rand_elem(self.seen)
        cue = self.unseen.pop()
        self.seen.append(cue)
        self.answer = "left"
        return cue
