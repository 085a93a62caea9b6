"""The reports behind the job monitoring helpers (status.sh, sfail.sh, scompleted.sh,
scancelled.sh); the helpers parse their options in bash and call this with
`python -E -s -m hpc.run.monitor` from the repository's root (scripts/common.sh), so the
repository's own package is imported and a file in the user's working directory can never
shadow a module; ``HPC_CALLER_DIR`` (the user's directory) is where relative paths are read.

    python -m hpc.run.monitor runs-dir                          the launcher's default runs directory
    python -m hpc.run.monitor queue USER RUNS_DIR [RUN]         the user's queued and running jobs
    python -m hpc.run.monitor runs USER RUNS_DIR [RUN]          one line per run directory
    python -m hpc.run.monitor status USER RUNS_DIR [RUN]        both, from one squeue call (status.sh)
    python -m hpc.run.monitor ended LABEL STATES START USER RUNS_DIR PREFIX TAIL_LINES
                                                                sacct view of ended jobs with their logs

Job names may hold spaces, quotes, '|', even newlines and terminal escapes
(Slurm accepts all of them): hpc/slurm asks Slurm and reads its answers so that
none of them can break a record, and every name and path goes through printable()
before it reaches the terminal.

The run directory layout comes from hpc.run.rundir and the latest complete
checkpoint from hpc.run.checkpoints (both stdlib only): the launcher, the trainer
and these reports share one definition of each.

Errors are one line on stderr: exit 1 at run time, 2 for a bad value.

Modules: ``cli`` (the commands), ``queue`` (the user's queue), ``runs`` (one row per run:
state, step, checkpoint, GPU-hours, health, parked runs), ``ended`` (the sacct views of ended
jobs) with ``logs`` (where each job's logs are), ``status_cache`` (status.sh's rows kept between calls,
keyed on what they were read from), ``rundirs`` (the run directories under a runs
directory), ``display`` (rows, durations and one-line failures on the terminal).
"""
