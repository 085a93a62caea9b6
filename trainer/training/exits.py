"""How the trainer ends: its exit codes and the errors that choose them.

``trainer.training.train.main`` turns each error into its code: a ``SetupError`` is 78 (the run is
given up: retrying will not help), ``StepFailed`` and ``BackendDidNotStart`` are 1 (the job's crash
guard decides). 75 and 0 (stopped, finished) are hpc.run.rundir's.
"""

from __future__ import annotations

from hpc.run.rundir import EXIT_CONFIG_ERROR

EXIT_SETUP_ERROR = EXIT_CONFIG_ERROR  # 78: bad config, missing data or backend: retrying will not help
EXIT_STEP_FAILED = 1  # a step produced nothing to train on, or trained nothing: the crash guard decides


class SetupError(RuntimeError):
    """Something the user must fix before training can start (exit 78, one line; the run is given up)."""


class BackendDidNotStart(RuntimeError):
    """The backend's model service failed to start (no GPU, out of memory...): exit 1, one line."""


class StepFailed(RuntimeError):
    """A step could not produce anything to train on (exit 1; the job's crash guard decides)."""
