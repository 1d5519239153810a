"""Environments: suite factories, wrappers, the Trajectory container, EnvRunner and score tables.

Importing ``envs`` registers mira's gymnasium ids (``mira/Lab30-*``).
"""

from envs import lab  # noqa: E402,F401  (registers mira/Lab30-* and the lab30/lab6 suites)
