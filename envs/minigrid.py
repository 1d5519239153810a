"""MiniGrid as mira sees it: egocentric RGB pixels plus the mission as tokens.

Observation (a ``gymnasium.spaces.Dict``, the same for every MiniGrid/BabyAI level):
- ``pixels``: uint8 [3, 56, 56], the agent's 7x7 partial view rendered at 8 px per tile,
  channels first: the image minigrid's ``RGBImgPartialObsWrapper`` draws, pixel for pixel
  (``view_grid`` and ``pov_pixels``: 2.4x minigrid's own view and drawing per lab env step);
- ``instruction``: int64 [MAX_TOKENS], the mission string tokenised (``envs.instructions``).
Actions: MiniGrid's 7 discrete actions. Episodes end with ``terminated`` on success or
failure and ``truncated`` at the level's ``max_steps`` (kept apart for bootstrapping).
"""

from __future__ import annotations

import functools

import gymnasium as gym
import minigrid  # noqa: F401  (registers MiniGrid-* and BabyAI-* ids)
import numpy as np
from gymnasium import spaces
from minigrid.core.constants import DIR_TO_VEC
from minigrid.core.grid import Grid
from minigrid.core.world_object import Wall
from minigrid.minigrid_env import MiniGridEnv

from envs.instructions import MAX_TOKENS, VOCAB_SIZE, tokenize

TILE_SIZE = 8
_OUTSIDE = Wall()  # what the view shows past the grid's edge (only read, never changed)


def view_grid(env, agent_view_size: int | None = None) -> tuple[Grid, np.ndarray]:
    """``MiniGridEnv.gen_obs_grid``'s result, the same ``(Grid, visibility mask)``, faster.

    minigrid cuts the view out of the grid (``Grid.slice``, a fresh ``Wall`` per cell past
    the edge), turns it ``agent_dir + 1`` times (``Grid.rotate_left``, a new grid each time)
    and walks it for visibility with a numpy scalar access per cell (``Grid.process_vis``):
    three quarters of a lab env step. Here each view cell is looked up where it lies (view
    cell ``(i, j)``, agent at ``(size // 2, size - 1)`` facing up, is the world cell
    ``size - 1 - j`` steps ahead of the agent and ``i - size // 2`` steps to its right), and
    visibility is ``process_vis``'s own sweep on Python lists.
    """
    size = agent_view_size or env.agent_view_size
    if size % 2 == 0:  # minigrid's views are odd: the agent sits on the centre column
        raise ValueError(f"agent_view_size must be odd, got {size}")
    half = size // 2
    ax, ay = map(int, env.agent_pos)
    fx, fy = map(int, DIR_TO_VEC[env.agent_dir])  # plain ints: no numpy scalars in the loop
    rx, ry = -fy, fx  # minigrid's right_vec
    world = env.grid
    width, height, cells = world.width, world.height, world.grid
    view = Grid(size, size)
    out = view.grid
    for j in range(size):
        ahead = size - 1 - j
        for i in range(size):
            x = ax + fx * ahead + rx * (i - half)
            y = ay + fy * ahead + ry * (i - half)
            inside = 0 <= x < width and 0 <= y < height
            out[j * size + i] = cells[y * width + x] if inside else _OUTSIDE
    if env.see_through_walls:
        visible = np.ones((size, size), dtype=bool)
    else:
        seen = _visibility(out, size)
        for k, cell_seen in enumerate(seen):
            if not cell_seen:
                out[k] = None
        visible = np.array(seen, dtype=bool).reshape(size, size).T  # minigrid's [i, j]
    view.set(half, size - 1, env.carrying)  # the agent sees what it carries, or nothing
    return view, visible


def _visibility(cells: list, size: int) -> list[bool]:
    """``Grid.process_vis``'s sweep over a ``size x size`` view (row-major cells), as a list.

    From the agent's cell (bottom centre), row by row towards the top: light spreads
    right, then left, along the row and to the row above, and stops at a cell whose object
    hides what is behind it (``see_behind()`` false).
    """
    blocks = [c is not None and not c.see_behind() for c in cells]
    seen = [False] * (size * size)
    seen[(size - 1) * size + size // 2] = True
    for j in range(size - 1, -1, -1):
        row, up = j * size, (j - 1) * size
        for i in range(size - 1):
            if seen[row + i] and not blocks[row + i]:
                seen[row + i + 1] = True
                if j > 0:
                    seen[up + i + 1] = seen[up + i] = True
        for i in range(size - 1, 0, -1):
            if seen[row + i] and not blocks[row + i]:
                seen[row + i - 1] = True
                if j > 0:
                    seen[up + i - 1] = seen[up + i] = True
    return seen


def pov_pixels(env, tile_size: int = TILE_SIZE) -> np.ndarray:
    """The agent's partial view as RGB ``[H, W, 3]`` uint8, as ``env.get_pov_render`` draws it.

    The view from ``env.gen_obs_grid`` (``view_grid`` under ``PixelsAndInstruction``), drawn
    with the same tiles from minigrid's own tile cache (``Grid.render_tile``), agent at the
    bottom centre facing up, the visible cells highlighted; what it saves is
    ``Grid.render``'s per-cell ``np.array_equal`` and 49 slice assignments into a fresh
    image: the tiles go into one ``[rows, tile, cols, tile, 3]`` array.
    """
    grid, visible = env.gen_obs_grid()  # view_grid under PixelsAndInstruction
    n = grid.width
    agent_i, agent_j = n // 2, grid.height - 1
    img = np.empty((grid.height, tile_size, n, tile_size, 3), np.uint8)
    cells = grid.grid
    render_tile = Grid.render_tile
    for j in range(grid.height):
        for i in range(n):
            img[j, :, i] = render_tile(
                cells[j * n + i],
                agent_dir=3 if (i == agent_i and j == agent_j) else None,
                highlight=visible[i, j],
                tile_size=tile_size,
            )
    return img.reshape(grid.height * tile_size, n * tile_size, 3)


class PixelsAndInstruction(gym.ObservationWrapper):
    """MiniGrid dict obs -> ``{"pixels": [3, H, W] uint8, "instruction": [L] int64}``.

    The wrapped level computes its view with ``view_grid`` (the same grid and mask as
    minigrid's ``gen_obs_grid``), so the symbolic observation minigrid builds on every step
    under this wrapper costs a third of what it did.
    """

    def __init__(self, env: gym.Env, tile_size: int = TILE_SIZE):
        super().__init__(env)
        base = env.unwrapped
        if type(base).gen_obs_grid is MiniGridEnv.gen_obs_grid:  # not a level's own view
            base.gen_obs_grid = functools.partial(view_grid, base)
        self.tile_size = tile_size
        side = env.unwrapped.agent_view_size * tile_size
        self.observation_space = spaces.Dict(
            pixels=spaces.Box(0, 255, (3, side, side), np.uint8),
            instruction=spaces.Box(0, VOCAB_SIZE - 1, (MAX_TOKENS,), np.int64),
        )
        self._mission = None
        self._tokens = None

    def observation(self, obs):
        """Channels-first pixels ``[3, H, W]`` and the mission's tokens ``[MAX_TOKENS]``."""
        # Missions change only between episodes; tokenise once per distinct string.
        if obs["mission"] != self._mission:
            self._mission = obs["mission"]
            self._tokens = tokenize(self._mission)
        return {"pixels": self.pixels(), "instruction": self._tokens.copy()}

    def pixels(self) -> np.ndarray:
        """The agent's view now, channels first ``[3, H, W]`` uint8."""
        return np.ascontiguousarray(
            pov_pixels(self.env.unwrapped, self.tile_size).transpose(2, 0, 1))


def make_minigrid(env_id: str, **kwargs) -> gym.Env:
    """``gym.make(env_id)`` wrapped to mira's MiniGrid observation."""
    return PixelsAndInstruction(gym.make(env_id, **kwargs))
