"""Building blocks shared by the lab30 levels written on MiniGrid's API.

- ``LabLevel``: a ``MiniGridEnv`` with a fixed mission string and helpers for the
  mechanics DMLab levels use and MiniGrid lacks: objects consumed on contact or on
  ``pickup`` (no carrying), respawning the agent, and per-step events handled around
  ``MiniGridEnv.step`` without changing its bookkeeping (step count, truncation).
- ``Food`` (a ball the agent walks over to eat) and ``Target`` (a ball that cannot be
  picked up: a lasertag opponent, a psychlab cue).
- ``room_grid``: an ``nx x ny`` grid of square rooms joined by one-cell gaps, the map of
  the explore levels; ``reachable``: flood fill used to keep generated maps connected.

All randomness goes through ``self.np_random`` (seeded by ``reset(seed=...)``), so a seed
reproduces an episode exactly, including moving opponents.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from minigrid.core.actions import Actions
from minigrid.core.grid import Grid
from minigrid.core.mission import MissionSpace
from minigrid.core.world_object import Ball, Door, Goal, Lava, Wall, WorldObj
from minigrid.minigrid_env import MiniGridEnv

Cell = tuple[int, int]
MOVES = ((1, 0), (0, 1), (-1, 0), (0, -1))  # MiniGrid's DIR_TO_VEC order: right, down, left, up


class Food(Ball):
    """A ball the agent eats by stepping onto it (natlab mushrooms, explore apples)."""

    def can_overlap(self) -> bool:
        """True: the agent steps onto it, which eats it."""
        return True

    def can_pickup(self) -> bool:
        """False: it is eaten by stepping onto it, never carried."""
        return False


class Target(Ball):
    """A ball that blocks the way and cannot be picked up (opponents, cues)."""

    def can_pickup(self) -> bool:
        """False: opponents and cues stay on the grid."""
        return False


def passable(obj: WorldObj | None) -> bool:
    """Can the agent walk into a cell holding ``obj`` without dying or toggling?"""
    if obj is None:
        return True
    if isinstance(obj, Lava):
        return False
    return obj.can_overlap()


def reachable(grid: Grid, start: Cell, walkable=passable) -> set[Cell]:
    """Cells reachable from ``start`` through cells whose content is ``walkable``."""
    seen, todo = {tuple(start)}, deque([tuple(start)])
    while todo:
        x, y = todo.popleft()
        for dx, dy in MOVES:
            nxt = (x + dx, y + dy)
            if nxt in seen or not (0 <= nxt[0] < grid.width and 0 <= nxt[1] < grid.height):
                continue
            if walkable(grid.get(*nxt)):
                seen.add(nxt)
                todo.append(nxt)
    return seen


class LabLevel(MiniGridEnv):
    """A MiniGrid level with a fixed mission and hooks for DMLab-style mechanics.

    Subclasses implement ``_gen_grid`` and may override ``_on_pickup`` (an object in
    front of the agent is picked up: return a reward or None to let MiniGrid carry it),
    ``_on_toggle`` (same for ``toggle``) and ``_after_step`` (called after every step with
    the reward and termination flag, returns them, possibly changed).
    """

    mission_text = ""

    def __init__(self, size: int | None = None, width: int | None = None,
                 height: int | None = None, max_steps: int = 100, **kwargs):
        super().__init__(
            mission_space=self._mission_space(),
            grid_size=size,
            width=width,
            height=height,
            max_steps=max_steps,
            see_through_walls=False,
            **kwargs,
        )

    @classmethod
    def _mission_space(cls) -> MissionSpace:
        """The level's missions; a fixed string unless a subclass says otherwise."""
        text = cls.mission_text
        return MissionSpace(mission_func=lambda: text)

    # --- stepping -------------------------------------------------------------------

    def step(self, action):
        """``MiniGridEnv.step`` with the ``_on_pickup``/``_on_toggle``/``_after_step`` hooks."""
        reward = 0.0
        fwd = tuple(self.front_pos)
        fwd_cell = self.grid.get(*fwd)
        if action == Actions.pickup and fwd_cell is not None:
            r = self._on_pickup(fwd_cell, fwd)
            if r is not None:
                reward, action = r, Actions.done  # handled here; "done" only counts the step
        elif action == Actions.toggle:
            r = self._on_toggle(fwd_cell, fwd)
            if r is not None:
                reward, action = r, Actions.done
        obs, base_reward, terminated, truncated, info = super().step(action)
        reward, terminated = self._after_step(reward + float(base_reward), terminated)
        if self._dirty:  # the grid changed after super().step rendered the observation
            obs = self.gen_obs()
            self._dirty = False
        return obs, reward, terminated, truncated, info

    def reset(self, *, seed=None, options=None):
        """``MiniGridEnv.reset``; the first observation already shows what ``_gen_grid`` built."""
        self._dirty = False
        out = super().reset(seed=seed, options=options)
        self._dirty = False  # the first observation was rendered after _gen_grid
        return out

    def _on_pickup(self, obj: WorldObj, pos: Cell) -> float | None:
        return None

    def _on_toggle(self, obj: WorldObj | None, pos: Cell) -> float | None:
        return None

    def _after_step(self, reward: float, terminated: bool) -> tuple[float, bool]:
        return reward, terminated

    # --- helpers --------------------------------------------------------------------

    def remove(self, pos: Cell) -> None:
        """Empty cell ``pos``; the step's observation is then rendered again."""
        self.grid.set(*pos, None)
        self._dirty = True

    def put(self, obj: WorldObj, pos: Cell) -> None:
        """Place ``obj`` at ``pos``; the step's observation is then rendered again."""
        self.put_obj(obj, *pos)
        self._dirty = True

    def free_cells(self, exclude: Iterable[Cell] = ()) -> list[Cell]:
        """Empty floor cells, not under the agent, in a fixed (row-major) order."""
        skip = set(map(tuple, exclude)) | {tuple(self.agent_pos)}
        return [
            (x, y)
            for y in range(self.height)
            for x in range(self.width)
            if self.grid.get(x, y) is None and (x, y) not in skip
        ]

    def random_free_cell(self, exclude: Iterable[Cell] = ()) -> Cell:
        """A uniformly drawn cell of ``free_cells(exclude)`` (through ``self.np_random``)."""
        cells = self.free_cells(exclude)
        return cells[self._rand_int(0, len(cells))]

    def respawn_agent(self, exclude: Iterable[Cell] = ()) -> None:
        """Teleport the agent to a random empty cell, facing a random direction."""
        self.agent_pos = self.random_free_cell(exclude)
        self.agent_dir = self._rand_int(0, 4)
        self._dirty = True


def connected(grid: Grid, walkable=passable) -> bool:
    """Are all ``walkable`` cells of ``grid`` one connected region?"""
    cells = [(x, y) for y in range(grid.height) for x in range(grid.width)
             if walkable(grid.get(x, y))]
    return not cells or len(reachable(grid, cells[0], walkable)) == len(cells)


def accessible(grid: Grid, start: Cell) -> bool:
    """From ``start``, can the agent walk to every floor cell and stand next to every object?"""
    reach = reachable(grid, start)
    for y in range(grid.height):
        for x in range(grid.width):
            obj = grid.get(x, y)
            if (x, y) in reach or isinstance(obj, Wall):
                continue
            if (obj is None or obj.can_overlap()
                    or not any((x + dx, y + dy) in reach for dx, dy in MOVES)):
                return False
    return True


def room_grid(env: MiniGridEnv, nx: int, ny: int, room: int) -> tuple[Grid, dict]:
    """An ``nx x ny`` array of ``room x room`` rooms; every inner wall has one gap.

    Returns the grid and ``gaps``: {((i, j), (i2, j2)): gap cell} for adjacent rooms.
    Grid size must be ``(nx * (room + 1) + 1, ny * (room + 1) + 1)``.
    """
    w, h = nx * (room + 1) + 1, ny * (room + 1) + 1
    grid = Grid(w, h)
    for k in range(nx + 1):
        grid.vert_wall(k * (room + 1), 0, h)
    for k in range(ny + 1):
        grid.horz_wall(0, k * (room + 1), w)
    gaps = {}
    for j in range(ny):
        for i in range(nx):
            x0, y0 = i * (room + 1), j * (room + 1)
            if i + 1 < nx:  # wall to the right of room (i, j)
                cell = (x0 + room + 1, y0 + 1 + int(env._rand_int(0, room)))
                grid.set(*cell, None)
                gaps[((i, j), (i + 1, j))] = cell
            if j + 1 < ny:  # wall below room (i, j)
                cell = (x0 + 1 + int(env._rand_int(0, room)), y0 + room + 1)
                grid.set(*cell, None)
                gaps[((i, j), (i, j + 1))] = cell
    return grid, gaps


__all__ = [
    "Actions", "Ball", "Cell", "Door", "Food", "Goal", "Grid", "LabLevel", "Lava", "MOVES",
    "Target", "Wall", "accessible", "connected", "passable", "reachable", "room_grid",
]
