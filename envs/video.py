"""Watching an agent: whole evaluation episodes written as video files.

A frame is the environment's own picture after each agent step: Atari's full RGB screen
(``ale.getScreenRGB``, 210 x 160, what a person sees rather than the agent's 84 x 84
gray stack) and MiniGrid's / the lab levels' fully observed grid (``get_frame``). Files
are MP4 through OpenCV (already a mira dependency, for Atari's preprocessing), or GIF
through Pillow where OpenCV has no MP4 encoder. gymnasium's ``RecordVideo`` would need
moviepy and the env's ``render_mode`` fixed at creation, which mira's suites share with
training, so the episodes are driven by ``EnvRunner.run_episodes`` and recorded here.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

FPS = {"atari": 15, "default": 8}  # Atari: 60 Hz emulator / frame skip 4


def screen(env, fallback_obs: dict | None = None) -> np.ndarray:
    """RGB uint8 ``[H, W, 3]`` picture of ``env``'s current state."""
    u = env.unwrapped
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


def record(runner, weights: dict, episodes: int, out_dir: Path, task_name: str, suite: str) -> list[Path]:
    """Play ``episodes`` whole episodes on ``runner``'s first env and write one file each,
    named ``<task>_ep<k>_return<R>_steps<L>`` (one frame per agent step); returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", task_name).strip("-")
    fps = FPS.get(suite, FPS["default"])
    frames: list[np.ndarray] = []
    paths: list[Path] = []

    def observe(i: int, env, obs: dict, episode: tuple | None) -> None:
        if i != 0:
            return
        frames.append(screen(env, obs))
        if episode is not None:  # (return, length): the step that ended it is the last frame
            ret, steps = episode
            paths.append(write_video(frames, out_dir / f"{safe}_ep{len(paths) + 1:02d}_return{ret:+g}_steps{steps}", fps))
            frames.clear()

    per_env = [episodes] + [0] * (runner.B - 1)
    runner.run_episodes(per_env, weights, observe=observe)
    return paths
