"""Open-arena levels: lasertag (``lasertag_*``) and foraging (``natlab_*``) stand-ins.

``LaserTag``: red opponents wander the arena (each moves to a random neighbouring cell
with probability ``move_prob`` per step). ``toggle`` fires a beam along the agent's facing
direction, up to ``fire_range`` cells or the first obstacle; an opponent hit gives +1 and
respawns elsewhere. An opponent with a clear line to the agent within ``fire_range`` tags
it with probability ``shoot_prob`` per step, and the agent respawns at a random cell; as in
DMLab's lasertag, being tagged costs time, not reward. Episodes run to ``max_steps``.

``Forage``: mushrooms (+1 when walked over) on a map with rock walls. ``fixed_map`` keeps
the same rocks every episode (the map comes from a fixed generator seed; mushrooms still
move), as natlab_fixed_large_map; ``regrow_steps > 0`` brings an eaten mushroom back at
its place that many steps later (natlab_varying_map_regrowth); otherwise mushrooms are
placed at random and do not regrow (natlab_varying_map_randomized).
"""

from __future__ import annotations

import numpy as np

from envs.lab.world import Cell, Food, Grid, LabLevel, Target, Wall, connected

FIXED_MAP_SEED = 20_181_030  # the rocks of every fixed-map episode


def _scatter_walls(grid: Grid, rng: np.random.Generator, count: int) -> None:
    """Put ``count`` single wall cells at random interior cells, keeping the floor connected."""
    placed = 0
    while placed < count:
        x, y = int(rng.integers(1, grid.width - 1)), int(rng.integers(1, grid.height - 1))
        if grid.get(x, y) is not None:
            continue
        grid.set(x, y, Wall())
        if connected(grid):
            placed += 1
        else:
            grid.set(x, y, None)


class LaserTag(LabLevel):
    """Lasertag stand-in: ``toggle`` fires at wandering opponents, +1 a hit; they tag back."""

    mission_text = "tag the opponents"

    def __init__(self, num_opponents: int = 1, size: int = 9, num_pillars: int = 3,
                 max_steps: int = 100, fire_range: int = 5, move_prob: float = 0.5,
                 shoot_prob: float = 0.25, **kwargs):
        self.num_opponents, self.num_pillars = num_opponents, num_pillars
        self.fire_range, self.move_prob, self.shoot_prob = fire_range, move_prob, shoot_prob
        super().__init__(size=size, max_steps=max_steps, **kwargs)

    def _gen_grid(self, width, height):
        self.grid = Grid(width, height)
        self.grid.wall_rect(0, 0, width, height)
        _scatter_walls(self.grid, self.np_random, self.num_pillars)
        self.place_agent()
        self.opponents: list[Target] = []
        for _ in range(self.num_opponents):
            opponent = Target("red")
            self.place_obj(opponent, reject_fn=lambda env, pos: self._near_agent(pos))
            self.opponents.append(opponent)

    def _near_agent(self, pos: Cell, radius: int = 2) -> bool:
        ax, ay = self.agent_pos
        return abs(pos[0] - ax) + abs(pos[1] - ay) <= radius

    def line_of_fire(self, src: Cell, direction: tuple[int, int]) -> Cell | None:
        """The first non-empty cell within ``fire_range`` along ``direction``, or None."""
        x, y = src
        for _ in range(self.fire_range):
            x, y = x + direction[0], y + direction[1]
            if self.grid.get(x, y) is not None:
                return (x, y)
        return None

    def _on_toggle(self, obj, pos):
        hit = self.line_of_fire(tuple(self.agent_pos), tuple(self.dir_vec))
        target = self.grid.get(*hit) if hit is not None else None
        if target in self.opponents:
            self.remove(hit)
            self.place_obj(target, reject_fn=lambda env, p: self._near_agent(p, 3))
            return 1.0
        return 0.0  # a miss; toggling never does anything else here

    def _after_step(self, reward, terminated):
        for opponent in self.opponents:
            if self._rand_float(0, 1) < self.move_prob:
                dx, dy = ((1, 0), (0, 1), (-1, 0), (0, -1))[int(self._rand_int(0, 4))]
                x, y = opponent.cur_pos
                nxt = (int(x) + dx, int(y) + dy)
                if self.grid.get(*nxt) is None and nxt != tuple(self.agent_pos):
                    self.grid.set(int(x), int(y), None)
                    self.put(opponent, nxt)
                    self._dirty = True
        if self._tagged():
            self.respawn_agent()
            while any(self._near_agent(tuple(o.cur_pos)) for o in self.opponents):
                self.respawn_agent()
        return reward, terminated

    def _tagged(self) -> bool:
        agent = tuple(self.agent_pos)
        for opponent in self.opponents:
            for direction in ((1, 0), (0, 1), (-1, 0), (0, -1)):
                if self.line_of_fire_to(tuple(opponent.cur_pos), direction, agent):
                    if self._rand_float(0, 1) < self.shoot_prob:
                        return True
        return False

    def line_of_fire_to(self, src: Cell, direction: tuple[int, int], dst: Cell) -> bool:
        """Whether ``dst`` is within ``fire_range`` of ``src`` along ``direction``, unobstructed."""
        x, y = src
        for _ in range(self.fire_range):
            x, y = x + direction[0], y + direction[1]
            if (x, y) == dst:
                return True
            if self.grid.get(x, y) is not None:
                return False
        return False


class Forage(LabLevel):
    """Foraging stand-in: +1 per mushroom walked over, on a map with rock walls."""

    mission_text = "eat the mushrooms"

    def __init__(self, size: int = 11, num_food: int = 10, num_rocks: int = 10,
                 fixed_map: bool = False, regrow_steps: int = 0, max_steps: int = 150, **kwargs):
        self.num_food, self.num_rocks = num_food, num_rocks
        self.fixed_map, self.regrow_steps = fixed_map, regrow_steps
        super().__init__(size=size, max_steps=max_steps, **kwargs)

    def _gen_grid(self, width, height):
        self.grid = Grid(width, height)
        self.grid.wall_rect(0, 0, width, height)
        rocks_rng = np.random.default_rng(FIXED_MAP_SEED) if self.fixed_map else self.np_random
        _scatter_walls(self.grid, rocks_rng, self.num_rocks)
        self.place_agent()
        for _ in range(self.num_food):
            self.place_obj(Food("yellow"))
        self.eaten: dict[Cell, int] = {}  # mushroom cell -> step it was eaten (regrowth)

    def _after_step(self, reward, terminated):
        pos = tuple(int(v) for v in self.agent_pos)
        if isinstance(self.grid.get(*pos), Food):
            self.remove(pos)
            reward += 1.0
            if self.regrow_steps:
                self.eaten[pos] = self.step_count
        for cell, t in list(self.eaten.items()):
            if self.step_count - t >= self.regrow_steps and cell != pos:
                self.put(Food("yellow"), cell)
                del self.eaten[cell]
        return reward, terminated
