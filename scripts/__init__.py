"""Command-line entry points: the mira CLI and the seed papers' small benchmarks."""
