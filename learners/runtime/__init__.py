"""Orchestration: the training loop, the fleet of Ray actors, run directories and logging.

The training loop (``trainer``), the fleet of Ray actors (``fleet``, ``handles``,
``unroll_queue``), run directories (``run_dir``) and what a run logs (``logbook``). Only this
package and the runner's actor wrapper import Ray.
"""
