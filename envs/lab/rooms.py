"""Single-room object levels: lab30 stand-ins for ``rooms_*`` and a counting question.

They stand in for DMLab-30's ``rooms_*`` levels and for
``language_answer_quantitative_question``.

DMLab-30 (Beattie et al. 2016; the IMPALA paper's appendix lists the levels) has these as
first-person 3D rooms; here each keeps the task's structure on a small MiniGrid room:
- ``CollectGoodObjects``: balls are good (+1), boxes bad (-1), in any colour, so the rule
  is the shape, as the ``_test`` level's held-out colour/shape pairs require.
- ``ExploitDeferredEffects``: apples pay +1 now; picking up the key costs -1 now but opens
  the door to a +5 goal: the better policy pays a cost for a deferred gain.
- ``SelectNonmatchingObject``: MiniGrid's Memory level with the answer flipped: remember
  the object in the start room, then go to the one that does *not* match it.
- ``Watermaze``: an invisible platform (+1, then the agent is respawned); coloured walls are
  the distal cues for finding it again (Morris water maze).
- ``AnswerQuantitativeQuestion``: count the balls of two colours and answer "which colour
  has more (fewer) balls" by stepping on the floor pad of that colour.
"""

from __future__ import annotations

from minigrid.core.mission import MissionSpace
from minigrid.core.world_object import Box, Floor, Key
from minigrid.envs.memory import MemoryEnv

from envs.lab.world import (
    MOVES,
    Ball,
    Cell,
    Door,
    Goal,
    Grid,
    LabLevel,
    Target,
    Wall,
    accessible,
    reachable,
)

ANSWER_COLORS = ("red", "blue", "purple", "yellow")


class CollectGoodObjects(LabLevel):
    """Pick up balls (+1 each), avoid boxes (-1 each); ends when every ball is taken."""

    mission_text = "collect the good objects"

    def __init__(self, size: int = 8, num_good: int = 3, num_bad: int = 3, max_steps: int = 120,
                 **kwargs):
        self.num_good, self.num_bad = num_good, num_bad
        super().__init__(size=size, max_steps=max_steps, **kwargs)

    def _gen_grid(self, width, height):
        while True:  # resample until no object is walled in
            self.grid = Grid(width, height)
            self.grid.wall_rect(0, 0, width, height)
            self.place_agent()
            for _ in range(self.num_good):
                self.place_obj(Ball(self._rand_color()))
            for _ in range(self.num_bad):
                self.place_obj(Box(self._rand_color()))
            if accessible(self.grid, tuple(self.agent_pos)):
                break
        self.good_left = self.num_good

    def _on_pickup(self, obj, pos):
        if obj.type not in ("ball", "box"):
            return None
        self.remove(pos)
        if obj.type == "ball":
            self.good_left -= 1
            return 1.0
        return -1.0

    def _after_step(self, reward, terminated):
        return reward, terminated or self.good_left == 0


class ExploitDeferredEffects(LabLevel):
    """Apples +1; the key costs -1 when picked up and unlocks the door to a +5 goal.

    Layout (11 x 7): a 5x5 main room (agent, 3 apples, the key), a wall with a locked
    door, and a 3x5 side room holding the goal. Best return 3 - 1 + 5 = 7.
    """

    mission_text = "collect apples or pay for the key"
    GOAL_REWARD = 5.0

    def __init__(self, num_apples: int = 3, max_steps: int = 150, **kwargs):
        self.num_apples = num_apples
        super().__init__(width=11, height=7, max_steps=max_steps, **kwargs)

    def _gen_grid(self, width, height):
        self.grid = Grid(width, height)
        self.grid.wall_rect(0, 0, width, height)
        self.grid.vert_wall(6, 0, height)
        self.door_pos = (6, int(self._rand_int(1, height - 1)))
        self.put_obj(Door("yellow", is_locked=True), *self.door_pos)
        self.goal_pos = self.place_obj(Goal(), top=(7, 1), size=(3, 5))
        self.place_agent(top=(1, 1), size=(5, 5))
        for _ in range(self.num_apples):
            self.place_obj(Ball("green"), top=(1, 1), size=(5, 5))
        # Keep the key off the door's doorstep so it never blocks the way in.
        self.place_obj(Key("yellow"), top=(1, 1), size=(4, 5))

    def _reward(self):
        return self.GOAL_REWARD

    def _on_pickup(self, obj, pos):
        if obj.type == "ball":  # apples are eaten, never carried
            self.remove(pos)
            return 1.0
        if obj.type == "key" and self.carrying is None:
            self.carrying = obj
            obj.cur_pos = (-1, -1)
            self.remove(pos)
            return -1.0
        return None


class SelectNonmatchingObject(MemoryEnv):
    """MiniGrid Memory with the answer flipped: the non-matching object is correct."""

    def __init__(self, size: int = 9, max_steps: int = 150, **kwargs):
        super().__init__(size=size, random_length=False, max_steps=max_steps, **kwargs)

    @staticmethod
    def _gen_mission():  # MemoryEnv builds its MissionSpace from this: the mission must be in it
        return "go to the object that does not match"

    def _gen_grid(self, width, height):
        super()._gen_grid(width, height)
        self.success_pos, self.failure_pos = self.failure_pos, self.success_pos
        self.mission = self._gen_mission()


class Watermaze(LabLevel):
    """Find an invisible platform (+1 and respawn); walls are coloured cues, one per side."""

    mission_text = "find the hidden platform"
    WALLS = ("red", "green", "blue", "yellow")  # north, east, south, west

    def __init__(self, size: int = 9, max_steps: int = 200, **kwargs):
        super().__init__(size=size, max_steps=max_steps, **kwargs)

    def _gen_grid(self, width, height):
        north, east, south, west = self.WALLS
        self.grid = Grid(width, height)
        for x in range(width):
            self.grid.set(x, 0, Wall(north))
            self.grid.set(x, height - 1, Wall(south))
        for y in range(1, height - 1):
            self.grid.set(0, y, Wall(west))
            self.grid.set(width - 1, y, Wall(east))
        self.platform = (int(self._rand_int(1, width - 1)), int(self._rand_int(1, height - 1)))
        self.agent_pos = self.random_free_cell(exclude=[self.platform])
        self.agent_dir = int(self._rand_int(0, 4))

    def _after_step(self, reward, terminated):
        if tuple(self.agent_pos) == self.platform:
            reward += 1.0
            self.respawn_agent(exclude=[self.platform])
        return reward, terminated


def _question(comparison: str, color_a: str, color_b: str) -> str:
    return f"which colour has {comparison} balls {color_a} or {color_b}"


class AnswerQuantitativeQuestion(LabLevel):
    """Count balls of two colours; step on the pad of the colour with more (fewer) balls.

    Correct answer: ``1 - 0.9 * t / max_steps`` (BabyAI's success reward); wrong pad: 0.
    Either pad ends the episode.
    """

    def __init__(self, max_count: int = 4, max_steps: int = 64, **kwargs):
        self.max_count = max_count
        super().__init__(width=9, height=7, max_steps=max_steps, **kwargs)

    @classmethod
    def _mission_space(cls) -> MissionSpace:
        return MissionSpace(
            mission_func=_question,
            ordered_placeholders=[["more", "fewer"], list(ANSWER_COLORS), list(ANSWER_COLORS)],
        )

    def _gen_grid(self, width, height):
        color_a, color_b = (str(c) for c in self._rand_subset(ANSWER_COLORS, 2))
        count_a, count_b = (int(n) for n in self._rand_subset(range(1, self.max_count + 1), 2))
        comparison = "more" if self._rand_bool() else "fewer"
        while True:
            self.grid = Grid(width, height)
            self.grid.wall_rect(0, 0, width, height)
            self.place_agent()
            self.pads: dict[str, Cell] = {c: self.place_obj(Floor(c)) for c in (color_a, color_b)}
            for color, count in ((color_a, count_a), (color_b, count_b)):
                for _ in range(count):
                    self.place_obj(Target(color))
            if accessible(self.grid, tuple(self.agent_pos)) and self._pads_apart():
                break
        more = color_a if count_a > count_b else color_b
        self.answer = more if comparison == "more" else (color_b if more == color_a else color_a)
        self.mission = _question(comparison, color_a, color_b)

    def _pads_apart(self) -> bool:
        """Can each pad be reached without stepping on the other one?"""
        floor = reachable(self.grid, tuple(self.agent_pos), walkable=lambda obj: obj is None)
        return all(any((x + dx, y + dy) in floor for dx, dy in MOVES)
                   for x, y in self.pads.values())

    def _after_step(self, reward, terminated):
        pos = tuple(self.agent_pos)
        for color, pad in self.pads.items():
            if pos == pad:
                return (self._reward() if color == self.answer else 0.0), True
        return reward, terminated
