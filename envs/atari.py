"""Atari 2600 through ale-py: its C++ vector env (default) or gymnasium's wrappers.

Two named protocols (``env.protocol``):

- ``dqn``: Mnih et al. 2015 / Wang et al. 2016 evaluation protocol: up to 30 random
  no-op starts, no sticky actions, the game's minimal action set;
- ``machado``: Machado et al. 2018: sticky actions with probability 0.25, the full
  18-action set, no no-op starts.

Both: frame skip 4 with max-pooling over the last two frames, 84x84 grayscale (INTER_AREA
resize), a stack of the last 4 frames (the first observation of an episode repeated to fill
it) and the 108,000-frame episode cap, reported as ``truncated`` (bootstrapped), not as a
terminal state. Rewards are raw: the learner clips them (``learner.reward_clip``). No FIRE
on reset. Multitask training asks for the full action set for every protocol so that all
games share one action space.

``episodic_life`` (used by the PPO preset, as Kostrikov's and baselines' Atari wrappers
do) ends the *learning* episode on a life loss without resetting the game; the episode
returns that mira reports are always whole games.

Two backends (``env.backend``) give the same observations, rewards and episode ends, except
where noted on ``AleVectorBatch``:

- ``ale_vector``: ``AleVectorBatch``, all envs of a game in one ``ale_py.vector_env.AtariVectorEnv``
  (preprocessing in C++; frames stacked here);
- ``gymnasium``: ``make_atari``, one ``ALE/<game>-v5`` env per env with
  ``AtariPreprocessing`` and ``FrameStackObservation``, stepped one by one.
"""

from __future__ import annotations

import ale_py
import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation, RecordEpisodeStatistics

from envs.batch import BatchStep

gym.register_envs(ale_py)

PROTOCOLS = ("dqn", "machado")


class EpisodicLife(gym.Wrapper):
    """Signal ``terminated`` on a life loss; reset the emulator only on a real game over.

    A life loss is a real terminal state for the learner (the value of what follows is
    not bootstrapped), but the game goes on: ``reset`` after a life loss takes one no-op
    step instead of restarting the game (baselines' ``EpisodicLifeEnv``).
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self._lives = 0
        self._game_over = True

    def step(self, action):
        """``env.step``, with ``terminated`` also True on a life loss; the game goes on."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._game_over = terminated or truncated
        lives = self.env.unwrapped.ale.lives()
        if 0 < lives < self._lives:
            terminated = True
        self._lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs):
        """Reset the game after a game over; after a life loss, take one no-op step instead."""
        if self._game_over:
            obs, info = self.env.reset(**kwargs)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        self._game_over = False
        self._lives = self.env.unwrapped.ale.lives()
        return obs, info


class PixelsDict(gym.ObservationWrapper):
    """[4, 84, 84] frame stack -> ``{"pixels": uint8 [4, 84, 84]}`` (mira's obs layout)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.observation_space = spaces.Dict(pixels=env.observation_space)

    def observation(self, obs):
        """The frame stack as ``{"pixels": uint8 array}``."""
        return {"pixels": np.asarray(obs)}


def protocol_settings(protocol: str, full_action_space: bool | None = None) -> dict:
    """Sticky-action probability, action set and no-op starts of a protocol (both backends)."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown Atari protocol {protocol!r}; valid protocols: "
                         f"{', '.join(PROTOCOLS)}")
    machado = protocol == "machado"
    return dict(repeat_action_probability=0.25 if machado else 0.0,
                full_action_space=machado if full_action_space is None else full_action_space,
                noop_max=0 if machado else 30)


def make_atari(
    game: str,
    protocol: str = "dqn",
    *,
    full_action_space: bool | None = None,
    episodic_life: bool = False,
    max_episode_frames: int = 108_000,
    frame_stack: int = 4,
    noop_max: int | None = None,
) -> gym.Env:
    """``ALE/<game>-v5`` with the named protocol; observation ``{"pixels": [4, 84, 84]}``.

    ``noop_max`` replaces the protocol's (tests compare the backends without no-op starts).
    """
    settings = protocol_settings(protocol, full_action_space)
    env = gym.make(
        f"ALE/{game}-v5",
        frameskip=1,  # AtariPreprocessing does the skipping (and max-pools the last 2 frames)
        repeat_action_probability=settings["repeat_action_probability"],
        full_action_space=settings["full_action_space"],
        max_num_frames_per_episode=max_episode_frames,
    )
    noops = settings["noop_max"] if noop_max is None else noop_max
    env = AtariPreprocessing(env, noop_max=noops, frame_skip=4, screen_size=84)
    env = RecordEpisodeStatistics(env)  # whole-game return/length, below EpisodicLife
    if episodic_life:
        env = EpisodicLife(env)
    return PixelsDict(FrameStackObservation(env, frame_stack))


def rom_id(game: str) -> str:
    """ale-py's ROM id of a gymnasium game name (``MsPacman`` -> ``ms_pacman``)."""
    return gym.spec(f"ALE/{game}-v5").kwargs["game"]


class AleVectorBatch:
    """The envs of a runner on ale-py's C++ vector env: one ``AtariVectorEnv`` per game.

    Implements ``envs.batch.GymBatch``'s interface (``reset``, ``step`` -> ``BatchStep``,
    ``observation_space``, ``close``). The vector env emulates, skips frames, max-pools,
    converts to gray and resizes (as ``AtariPreprocessing``, INTER_AREA) and resets a game
    that ended in the same step (``SameStep`` autoreset: the step returns the next game's
    first frame and puts the last one in ``info["final_obs"]``). Here, in numpy: the
    frame stack (padded with an episode's first frame, as ``FrameStackObservation``),
    episodic life (a drop in ``info["lives"]`` ends the learning episode and restarts the
    stack, the game goes on) and the whole-game return and length of every game.

    Where it differs from the ``gymnasium`` backend (observations, rewards and episode ends
    are otherwise the same for the same actions):

    - no-op starts draw 0-29 no-ops from the vector env's own generator, gymnasium's 1-30
      from the env's ``np_random``; sticky actions draw from ALE's generator seeded
      differently: ``dqn`` episodes and ``machado`` sticky actions differ in detail, not
      in distribution (with ``noop_max=0`` and no sticky actions both are deterministic and
      equal);
    - the 108k-frame cap counts frames from the end of the no-ops; gymnasium's counts them
      too (at most 30 frames sooner);
    - after a life loss (``episodic_life``) gymnasium's wrapper plays one hidden no-op step
      (baselines' ``EpisodicLifeEnv``); here the game goes on from the agent's next action;
    - no full-colour screen for video (``renders = False``).
    """

    renders = False  # no full-colour screens: video records on the gymnasium backend

    def __init__(self, games: list[str], tasks: list[int], seeds: list[int], protocol: str = "dqn",
                 *, full_action_space: bool | None = None, episodic_life: bool = False,
                 max_episode_frames: int = 108_000, frame_stack: int = 4, num_threads: int = 1,
                 noop_max: int | None = None):
        from ale_py.vector_env import AtariVectorEnv

        settings = protocol_settings(protocol, full_action_space)
        if noop_max is not None:
            settings["noop_max"] = noop_max
        tasks_arr = np.asarray(tasks)
        self.num_envs = len(tasks)
        self.episodic_life = episodic_life
        self.groups = []  # (env indices [n], vector env of n envs), one per game
        for task in sorted(set(tasks)):
            idx = np.flatnonzero(tasks_arr == task)
            vec = AtariVectorEnv(
                rom_id(games[task]), len(idx), num_threads=num_threads,
                autoreset_mode="SameStep", max_num_frames_per_episode=max_episode_frames,
                stack_num=1,  # stacked here, padded as FrameStackObservation pads
                reward_clipping=False,  # the learner clips (learner.reward_clip)
                use_fire_reset=False, episodic_life=False, life_loss_info=False, **settings)
            self.groups.append((idx, vec))
        self._seeds = np.asarray(seeds, dtype=np.int64)  # used by the first reset only
        shape = (frame_stack, 84, 84)
        self.observation_space = spaces.Dict(pixels=spaces.Box(0, 255, shape, np.uint8))
        self.stack = np.zeros((self.num_envs, *shape), np.uint8)
        self.lives = np.zeros(self.num_envs, np.int64)
        self.returns = np.zeros(self.num_envs, np.float64)
        self.lengths = np.zeros(self.num_envs, np.int64)

    def reset(self) -> dict[str, np.ndarray]:
        """New games in every env (seeded by the first call); first observations ``[B, ...]``."""
        for idx, vec in self.groups:
            frames, info = vec.reset(seed=None if self._seeds is None else self._seeds[idx])
            self.stack[idx] = frames  # [n, 1, 84, 84]: the first frame fills the stack
            self.lives[idx] = info["lives"]
        self._seeds = None  # later resets continue each env's generators
        self.returns[:] = 0.0
        self.lengths[:] = 0
        return {"pixels": self.stack.copy()}

    def step(self, actions: np.ndarray, screens: bool = False) -> BatchStep:
        """Step env ``i`` with ``actions[i]``; games that ended restart in the same step."""
        if screens:
            raise ValueError("the ale_vector backend has no full-colour screens; "
                             "record video with env.backend=gymnasium")
        B = self.num_envs
        frames = np.empty((B, *self.stack.shape[2:]), np.uint8)  # this step's frame per env
        last = np.empty_like(frames)  # the frame the action led to (before any reset)
        reward = np.zeros(B, np.float32)
        game_over, cut = np.zeros(B, bool), np.zeros(B, bool)
        lives = np.zeros(B, np.int64)
        actions = np.asarray(actions, dtype=np.int64)
        for idx, vec in self.groups:
            obs, rew, term, trunc, info = vec.step(actions[idx])
            rows = idx[info["env_id"]]
            frames[rows] = last[rows] = obs[:, -1]
            done = term | trunc
            if done.any():
                last[rows[done]] = info["final_obs"][done, -1]
            reward[rows], lives[rows] = rew, info["lives"]
            game_over[rows], cut[rows] = done, trunc & ~term
        self.returns += reward
        self.lengths += 1
        # Lives left fell but the game goes on (a game's last life ends it: game_over).
        life_lost = ~game_over & (lives > 0) & (lives < self.lives)
        self.lives = lives  # after a game over: the next game's lives
        terminated = (game_over & ~cut) | (self.episodic_life & life_lost)
        shifted = np.concatenate([self.stack[:, 1:], last[:, None]], axis=1)
        final_obs = {int(i): {"pixels": shifted[i].copy()} for i in np.flatnonzero(cut)}
        episodes = [(int(i), float(self.returns[i]), int(self.lengths[i]))
                    for i in np.flatnonzero(game_over)]
        self.returns[game_over] = 0.0
        self.lengths[game_over] = 0
        restart = game_over | (self.episodic_life & life_lost)
        shifted[restart] = frames[restart][:, None]  # a new (learning) episode: a fresh stack
        self.stack = shifted
        return BatchStep({"pixels": shifted}, reward, terminated, cut, final_obs, episodes)

    def close(self) -> None:
        """Close every vector env."""
        for _, vec in self.groups:
            vec.close()
