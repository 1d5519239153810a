"""Reference solvers for the lab30 levels: the "reference" policy of the score table.

- ``babyai``: minigrid's ``BabyAIBot`` (it reads the BabyAI instruction and explores with
  the agent's own partial view), for the BabyAI levels.
- ``planner``: a breadth-first planner with full access to the level state (grid, hidden
  platform, correct answer, opponent positions), replanned every step. It searches the
  (x, y, direction) graph of MiniGrid's left / right / forward moves for the nearest state
  that meets a level-specific goal, then takes that level's action there (pickup, toggle).
  Lava is never entered and cells in ``avoid`` (a wrong answer pad) are never walked on.

Being full-state, the planner is an upper reference, not a human one: it knows where the
watermaze platform is and which psychlab answer is right before any trial and error.
``Expert(env).act()`` returns the next action for the current state of ``env``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from minigrid.core.actions import Actions
from minigrid.core.world_object import Goal
from minigrid.envs.crossing import CrossingEnv
from minigrid.envs.memory import MemoryEnv

from envs.lab.arena import Forage, LaserTag
from envs.lab.explore import GoalLocations, ObjectLocations, ObjectRewards
from envs.lab.psychlab import PADS, PsychlabTrials
from envs.lab.rooms import (
    AnswerQuantitativeQuestion,
    CollectGoodObjects,
    ExploitDeferredEffects,
    Watermaze,
)
from envs.lab.world import MOVES, Cell, Food, passable

State = tuple[int, int, int]  # x, y, direction
GoalTest = Callable[[State], bool]


def plan(env, goal: GoalTest, avoid: Iterable[Cell] = ()) -> int | None:
    """First action of a shortest left/right/forward path to a state meeting ``goal``.

    None if the current state already meets it or no such state is reachable.
    """
    u = env.unwrapped
    avoid = set(avoid)
    start = _state(env)
    if goal(start):
        return None
    first: dict[State, int] = {start: -1}
    todo = deque([start])
    while todo:
        s = todo.popleft()
        x, y, d = s
        dx, dy = MOVES[d]
        nexts = [((x, y, (d - 1) % 4), Actions.left), ((x, y, (d + 1) % 4), Actions.right)]
        fwd = (x + dx, y + dy)
        if fwd not in avoid and passable(u.grid.get(*fwd)):
            nexts.append(((fwd[0], fwd[1], d), Actions.forward))
        for n, action in nexts:
            if n in first:
                continue
            first[n] = action if first[s] == -1 else first[s]
            if goal(n):
                return int(first[n])
            todo.append(n)
    return None


def _state(env) -> State:
    u = env.unwrapped
    return int(u.agent_pos[0]), int(u.agent_pos[1]), int(u.agent_dir)


def at(cells: Iterable[Cell]) -> GoalTest:
    """Goal test: the agent stands on one of ``cells``."""
    cells = set(cells)
    return lambda s: (s[0], s[1]) in cells


def facing(cells: Iterable[Cell]) -> GoalTest:
    """Goal test: the cell in front of the agent is one of ``cells`` (to pick up or toggle it)."""
    cells = set(cells)
    return lambda s: (s[0] + MOVES[s[2]][0], s[1] + MOVES[s[2]][1]) in cells


def cells_where(env, test) -> list[Cell]:
    """The cells ``(x, y)`` of the grid whose content (an object or None) passes ``test``."""
    g = env.unwrapped.grid
    return [(x, y) for y in range(g.height) for x in range(g.width) if test(g.get(x, y))]


def go(env, goal: GoalTest, then: int = Actions.left, avoid: Iterable[Cell] = ()) -> int:
    """Walk towards ``goal``; once there (or if it cannot be reached) take ``then``."""
    action = plan(env, goal, avoid)
    return then if action is None else action


# --- one policy per level class --------------------------------------------------------

def _collect_good(env):
    balls = cells_where(env, lambda o: o is not None and o.type == "ball")
    return go(env, facing(balls), Actions.pickup)


def _deferred(env):
    u = env.unwrapped
    apples = cells_where(env, lambda o: o is not None and o.type == "ball")
    door = u.grid.get(*u.door_pos)
    if apples:  # unless the key walls the last apples in: then the key comes first
        action = plan(env, facing(apples))
        if action is not None or facing(apples)(_state(env)):
            return Actions.pickup if action is None else action
    if door.is_locked and u.carrying is None:
        return go(env, facing(cells_where(env, lambda o: o is not None and o.type == "key")),
                  Actions.pickup)
    if not door.is_open:
        return go(env, facing([u.door_pos]), Actions.toggle)
    return go(env, at([u.goal_pos]))


def _memory(env):
    u = env.unwrapped
    return go(env, at([u.success_pos]), avoid=[u.failure_pos])


def _watermaze(env):
    return go(env, at([env.unwrapped.platform]))


def _question(env):
    u = env.unwrapped
    wrong = [p for c, p in u.pads.items() if c != u.answer]
    return go(env, at([u.pads[u.answer]]), avoid=wrong)


def _lasertag(env):
    u = env.unwrapped

    def in_sight(s: State) -> bool:
        hit = u.line_of_fire((s[0], s[1]), MOVES[s[2]])
        return hit is not None and any(u.grid.get(*hit) is o for o in u.opponents)

    return go(env, in_sight, Actions.toggle)


def _food(env):
    food = cells_where(env, lambda o: isinstance(o, Food))
    return go(env, at(food)) if food else Actions.left


def _crossing(env):
    return go(env, at(cells_where(env, lambda o: isinstance(o, Goal))))


def _psychlab(env):
    u = env.unwrapped
    wrong = [p for side, p in PADS.items() if side != u.answer]
    return go(env, at([PADS[u.answer]]), avoid=wrong)


def _goal_locations(env):
    return go(env, at([env.unwrapped.goal]))


def _object_rewards(env):
    u = env.unwrapped
    good = cells_where(env, lambda o: o is not None and u.values.get(o.type, 0) > 0)
    return go(env, facing(good), Actions.pickup)


PLANNERS: list[tuple[type, Callable]] = [
    (CollectGoodObjects, _collect_good),
    (ExploitDeferredEffects, _deferred),
    (MemoryEnv, _memory),  # SequentialComparison and SelectNonmatchingObject
    (Watermaze, _watermaze),
    (AnswerQuantitativeQuestion, _question),
    (LaserTag, _lasertag),
    (Forage, _food),
    (ObjectLocations, _food),
    (CrossingEnv, _crossing),
    (PsychlabTrials, _psychlab),
    (GoalLocations, _goal_locations),
    (ObjectRewards, _object_rewards),
]


class Expert:
    """The reference solver of one episode; build it right after ``env.reset``."""

    def __init__(self, env, solver: str):
        self.env = env
        if solver == "babyai":
            from minigrid.utils.baby_ai_bot import BabyAIBot

            self._bot = BabyAIBot(env)
            self._policy = lambda e: self._bot.replan()
        elif solver == "planner":
            u = env.unwrapped
            self._policy = next((f for cls, f in PLANNERS if isinstance(u, cls)), None)
            if self._policy is None:
                raise ValueError(f"no planner for {type(u).__name__}")
        else:
            raise ValueError(f"unknown solver {solver!r}; valid solvers: babyai, planner")

    def act(self) -> int:
        """The next action for the current state of the env."""
        return int(self._policy(self.env))
