"""Watching an agent: whole evaluation episodes written as video files.

A frame is the environment's own picture after each agent step: Atari's full RGB screen
(``ale.getScreenRGB``, 210 x 160, what a person sees rather than the agent's 84 x 84
gray stack) and MiniGrid's / the lab levels' fully observed grid (``get_frame``). Files
are MP4 through OpenCV (already a mira dependency, for Atari's preprocessing), or GIF
through Pillow where OpenCV has no MP4 encoder. gymnasium's ``RecordVideo`` would need
moviepy and the env's ``render_mode`` fixed at creation, which mira's suites share with
training, so the episodes are driven by ``EnvRunner.run_episodes`` and recorded here.
ale-py's vector env (Atari's default backend) keeps no full-colour screen, so Atari video
is recorded on the ``gymnasium`` backend (same game, protocol and agent).
With ``unit_strip`` (RIMs cores), a strip under each frame shows which RIMs the step updated.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np


def screen(env, fallback_obs: dict | None = None) -> np.ndarray:
    """RGB uint8 ``[H, W, 3]`` picture of ``env``'s state (env None: ``fallback_obs``'s pixels)."""
    u = env.unwrapped if env is not None else None
    if hasattr(u, "ale"):
        return np.asarray(u.ale.getScreenRGB(), dtype=np.uint8)
    if hasattr(u, "get_frame"):
        return np.asarray(u.get_frame(highlight=False, tile_size=16), dtype=np.uint8)
    pixels = np.asarray((fallback_obs or {})["pixels"])  # [C, H, W]: the newest channel, in gray
    frame = pixels[-1] if pixels.ndim == 3 else pixels
    return np.repeat(frame[..., None], 3, axis=-1).astype(np.uint8)


def write_video(frames: list[np.ndarray], stem: Path, fps: int) -> Path:
    """``stem``.mp4 (OpenCV) or, without an MP4 encoder, ``stem``.gif (Pillow); returns the path."""
    h, w = frames[0].shape[:2]
    try:
        import cv2

        path = stem.with_suffix(".mp4")
        writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (w, h))
        if writer.isOpened():
            for f in frames:
                writer.write(cv2.cvtColor(f, cv2.COLOR_RGB2BGR))
            writer.release()
            return path
    except ImportError:
        pass
    from PIL import Image

    path = stem.with_suffix(".gif")
    images = [Image.fromarray(f) for f in frames]
    images[0].save(path, save_all=True, append_images=images[1:], duration=int(1000 / fps), loop=0)
    return path


def with_strip(frame: np.ndarray, active: np.ndarray, height: int = 12) -> np.ndarray:
    """``frame`` with a strip under it that shows which units were active at this step.

    One cell per unit, white when the unit was active at this step, dark grey when not
    (RIMs: which mechanisms the step updated).
    """
    h, w = frame.shape[:2]
    strip = np.full((height, w, 3), 40, dtype=np.uint8)
    edges = np.linspace(0, w, len(active) + 1).astype(int)
    for i, on in enumerate(active):
        strip[1:-1, edges[i] + 1:edges[i + 1] - 1] = 255 if on else 90
    return np.concatenate([frame, strip], axis=0)


def record(runner, weights: dict, episodes: int, out_dir: Path, task_name: str, fps: int,
           unit_strip: bool = False) -> list[Path]:
    """Play ``episodes`` whole episodes on ``runner``'s first env and write one file each.

    A runner whose envs cannot render full screens (``runner.batch.renders`` false: Atari's
    ``ale_vector`` backend) is rebuilt on the ``gymnasium`` backend for the recording.
    Files are named ``<task>_ep<k>_return<R>_steps<L>`` (one frame per agent step, ``fps``
    a second: the suite's ``video_fps``); returns the paths.
    """
    if unit_strip and not hasattr(runner.agent.core, "last_active"):
        raise ValueError(f"the unit strip shows which RIMs are active; this agent's core is "
                         f"{type(runner.agent.core).__name__}")
    out_dir.mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", task_name).strip("-")
    frames: list[np.ndarray] = []
    paths: list[Path] = []

    def observe(i: int, picture: np.ndarray | None, obs: dict, episode: tuple | None) -> None:
        if i != 0:
            return
        frame = picture if picture is not None else screen(None, obs)
        if unit_strip:  # the step that led here: the core's last forward, env 0
            frame = with_strip(frame, runner.agent.core.last_active()[-1, 0].cpu().numpy())
        frames.append(frame)
        if episode is not None:  # (return, length): the step that ended it is the last frame
            ret, steps = episode
            paths.append(write_video(frames, out_dir / f"{safe}_ep{len(paths) + 1:02d}"
                                                       f"_return{ret:+g}_steps{steps}", fps))
            frames.clear()

    rebuilt = not runner.batch.renders
    if rebuilt:
        runner = runner.on_backend("gymnasium")
    per_env = [episodes] + [0] * (runner.B - 1)
    try:
        runner.run_episodes(per_env, weights, observe=observe)
    finally:
        if rebuilt:
            runner.close()
    return paths
