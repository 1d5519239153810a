"""Environments: suite factories, wrappers, the Trajectory container, the EnvRunner and
score tables. Importing ``envs`` registers mira's gymnasium ids (``mira/Lab30-*``)."""
