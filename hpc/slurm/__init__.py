"""The one Slurm layer: every call of sbatch, squeue, sacct, scontrol and scancel from Python,
and the reading of what they print.

- ``states.py``: a job's state as ``JobState`` (``CANCELLED by 0`` is CANCELLED; a state this
  code does not know is UNKNOWN, never an error) and which states are still in the queue;
- ``times.py``: Slurm's timestamps (aware datetimes, None for Unknown/None/N/A) and durations
  (seconds);
- ``output.py``: the parsers, pure functions over the text each command prints (tested on
  outputs recorded from a real Slurm 22.05 and on the formats of newer releases);
- ``calls.py``: the commands themselves, each run with an argument list (no shell), a timeout,
  Slurm's standard time format in UTC, and inside a job without the job's own SLURM_* variables.

The launcher (login node), the job's hooks (compute node) and the run's readers (status.sh,
accounting) all use it: it sits beside the other shared modules of ``hpc/`` and imports
nothing of the project. Stdlib only. The bash helpers of ``scripts/`` call Slurm themselves.
"""
