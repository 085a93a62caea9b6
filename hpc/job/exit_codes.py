"""The exit codes a job's commands and its workload tell job control with, defined once.

The trainer, ``trainer.serve`` and ``trainer.eval`` end with them, ``hpc.job.continuation`` decides
from them whether the run continues, is retried or is given up, and the job scripts compare them in
bash: sbatch/'s templates get this module as ``exit_codes`` (hpc/launcher/render.py) and spell no
number of their own. The sysexits.h names are theirs where one fits. Stdlib only, nothing imported:
the job's quickest commands (``python -S``) import it.
"""

from __future__ import annotations

EXIT_FAILED = 1  # a failure that may pass: job control retries while the step advances (--max_failures)
EXIT_BAD_INPUT = 2  # bad input, one line (hpc.errors.UsageError): like 78, job control does not retry it
EXIT_NOT_OURS = 3  # continuation begin: the model folder belongs to another run; the job fails, nothing continues
EXIT_NOTHING_TO_DO = 10  # continuation begin, pack begin: the run is finished or failed; the job exits 0 at once
EXIT_RUN_HELD = 12  # continuation begin: another job holds the run's lease (hpc/run/lease.py); this one touched nothing
EXIT_UNAVAILABLE = 69  # EX_UNAVAILABLE: every failure may pass later (the network, a busy judge); retried
EXIT_STOPPED_FOR_TIME = 75  # EX_TEMPFAIL: stopped cleanly because time is up (or told to stop); the run continues
EXIT_CONFIG_ERROR = 78  # EX_CONFIG: a configuration error the run cannot outgrow; job control gives the run up
EXIT_CONNECTION = 255  # ssh's own: the connection, not the remote command, failed (hpc/remote/ssh.py)
