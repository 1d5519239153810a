"""The update around an algorithm: the ``Learner``, its batches, optimizers and schedules.

The ``Learner`` owns forward, backward, clipping, the non-finite guard, PopArt, the optimizer
step and versions; ``optim``, ``schedule``, ``device``, ``malloc``, ``outputs``, ``staging``,
``bursts``, ``monitor``, ``redo`` and ``report`` what it uses.
"""
