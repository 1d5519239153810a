"""Entry points: the ``mira`` command line, and in ``papers/`` the paper checks.

The modules here are ``mira``'s commands (``cli.py``; ``evaluate``, ``bench``, ``compare`` and
the modules compare runs on). ``scripts/papers/`` holds the scripts that set mira's parts beside
the seed papers' results (``python -m scripts.papers.NAME``); the commands never import them.
"""
