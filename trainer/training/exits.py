"""How the trainer ends: its exit codes and the errors that choose them.

``trainer.training.train.main`` turns each error into its code: a ``SetupError`` is 78 (the run is
given up: retrying will not help), ``StepFailed`` and ``BackendDidNotStart`` are 1 (the job's crash
guard decides). The codes are hpc/job/exit_codes.py's.
"""

from __future__ import annotations


class SetupError(RuntimeError):
    """Something the user must fix before training can start (exit 78, one line; the run is given up)."""


class BackendDidNotStart(RuntimeError):
    """The backend's model service failed to start (no GPU, out of memory...): exit 1, one line."""


class StepFailed(RuntimeError):
    """A step could not produce anything to train on (exit 1; the job's crash guard decides)."""
