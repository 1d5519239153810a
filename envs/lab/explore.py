"""Maze levels: the stand-ins for DMLab-30's ``explore_*`` and ``skymaze_*`` levels.

The explore levels use a grid of small rooms joined by one-cell gaps (``room_grid``),
redrawn every episode; what is learnt within an episode is where things are:
- ``ObjectLocations``: apples (+1, eaten on contact); once all are eaten the agent is
  respawned and the apples come back at the same places (explore_object_locations).
- ``GoalLocations``: a goal (+1); reaching it respawns the agent, the goal stays
  (explore_goal_locations). ``obstructed=True``: the gaps not on a random spanning tree
  of the rooms are shut with locked red doors, redrawn at every respawn, so a route that
  worked may be closed next time (explore_obstructed_goals).
- ``ObjectRewards``: objects of three kinds (ball, box, key), picked up to be consumed;
  each kind's value is drawn per episode from a permutation of (-1, +1, +2); the episode
  ends when no positive object is left (explore_object_rewards_few / _many).

Skymaze's platforms with irreversible drops become MiniGrid's lava crossings (a step into
lava ends the episode): ``VariedLavaCrossing`` draws the number of lava rivers per
episode, as skymaze_irreversible_path_varied mixes difficulties.
"""

from __future__ import annotations

from minigrid.core.world_object import Box, Key
from minigrid.envs.crossing import CrossingEnv

from envs.lab.world import Ball, Cell, Door, Food, Goal, LabLevel, accessible, room_grid


class MazeLevel(LabLevel):
    """An ``rooms x rooms`` grid of ``room x room`` rooms; objects never sit in a gap."""

    def __init__(self, rooms: int = 2, room: int = 3, max_steps: int = 150, **kwargs):
        self.rooms, self.room = rooms, room
        super().__init__(size=rooms * (room + 1) + 1, max_steps=max_steps, **kwargs)

    def _gen_maze(self) -> None:
        self.grid, self.gaps = room_grid(self, self.rooms, self.rooms, self.room)
        self.agent_pos = (-1, -1)

    def free_cells(self, exclude=()):
        """``LabLevel.free_cells`` without the gaps, so no object blocks a passage."""
        return super().free_cells(list(exclude) + list(self.gaps.values()))

    def place(self, obj) -> Cell:
        """Put ``obj`` on a random free cell (never a gap); returns the cell."""
        pos = self.random_free_cell()
        self.put_obj(obj, *pos)
        return pos


class ObjectLocations(MazeLevel):
    """explore_object_locations: apples (+1 on contact) come back once all are eaten."""

    mission_text = "collect the apples"

    def __init__(self, num_apples: int = 3, **kwargs):
        self.num_apples = num_apples
        super().__init__(**kwargs)

    def _gen_grid(self, width, height):
        self._gen_maze()
        self.apples = [self.place(Food("green")) for _ in range(self.num_apples)]
        self.respawn_agent()
        self.left = self.num_apples

    def _after_step(self, reward, terminated):
        pos = tuple(int(v) for v in self.agent_pos)
        if isinstance(self.grid.get(*pos), Food):
            self.remove(pos)
            reward += 1.0
            self.left -= 1
            if self.left == 0:
                self.respawn_agent(exclude=self.apples)
                for cell in self.apples:
                    self.put(Food("green"), cell)
                self.left = self.num_apples
        return reward, terminated


class GoalLocations(MazeLevel):
    """explore_goal_locations: the goal (+1) respawns the agent (``obstructed``: locked doors)."""

    mission_text = "find the goal"

    def __init__(self, obstructed: bool = False, **kwargs):
        self.obstructed = obstructed
        super().__init__(**kwargs)

    def _gen_grid(self, width, height):
        self._gen_maze()
        self.goal = self.place(Goal())
        self.respawn_agent()
        self._obstruct()

    def _reward(self):
        return 1.0

    def _obstruct(self) -> None:
        """Shut every gap off a random spanning tree of the room graph (if obstructed)."""
        if not self.obstructed:
            return
        edges = list(self.gaps)
        order = self.np_random.permutation(len(edges))
        parent = {}

        def root(r):
            while parent.get(r, r) != r:
                r = parent[r]
            return r

        for k in order:
            a, b = edges[int(k)]
            cell = self.gaps[(a, b)]
            if root(a) != root(b):
                parent[root(a)] = root(b)
                self.grid.set(*cell, None)
            else:
                self.put_obj(Door("red", is_locked=True), *cell)
        self._dirty = True

    def _after_step(self, reward, terminated):
        if tuple(self.agent_pos) == self.goal:
            terminated = False  # the goal respawns the agent instead of ending the episode
            self.respawn_agent(exclude=[self.goal])
            self._obstruct()
        return reward, terminated


class ObjectRewards(MazeLevel):
    """explore_object_rewards: three kinds of object, each worth -1, +1 or +2 this episode."""

    mission_text = "collect the valuable objects"
    KINDS = {"ball": Ball, "box": Box, "key": Key}
    VALUES = (-1.0, 1.0, 2.0)

    def __init__(self, num_objects: int = 5, **kwargs):
        self.num_objects = num_objects
        super().__init__(**kwargs)

    def _gen_grid(self, width, height):
        values = self.np_random.permutation(len(self.VALUES))
        self.values = {kind: self.VALUES[int(v)] for kind, v in zip(self.KINDS, values)}
        while True:
            self._gen_maze()
            kinds = [self._rand_elem(list(self.KINDS)) for _ in range(self.num_objects)]
            if not any(self.values[k] > 0 for k in kinds):
                kinds[0] = max(self.values, key=self.values.get)
            for kind in kinds:
                self.place(self.KINDS[kind](self._rand_color()))
            self.respawn_agent()
            if accessible(self.grid, tuple(self.agent_pos)):
                break
        self.positive_left = sum(self.values[k] > 0 for k in kinds)

    def _on_pickup(self, obj, pos):
        value = self.values.get(obj.type)
        if value is None:
            return None
        self.remove(pos)
        self.positive_left -= value > 0
        return value

    def _after_step(self, reward, terminated):
        return reward, terminated or self.positive_left == 0


class VariedLavaCrossing(CrossingEnv):
    """LavaCrossing with the number of lava rivers drawn per episode from ``crossings``."""

    def __init__(self, size: int = 9, crossings: tuple[int, ...] = (1, 2, 3), **kwargs):
        self.crossings = tuple(crossings)
        super().__init__(size=size, num_crossings=max(self.crossings), **kwargs)

    def _gen_grid(self, width, height):
        self.num_crossings = int(self._rand_elem(self.crossings))
        super()._gen_grid(width, height)
