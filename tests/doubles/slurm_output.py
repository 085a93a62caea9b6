"""What Slurm's commands print, written for tests that stand in for Slurm (no cluster needed):
the formats hpc/slurm/calls.py asks for (hpc/slurm/output.py reads them; recorded outputs of a
real Slurm are in tests/fixtures/slurm/)."""

from __future__ import annotations

from hpc.slurm.output import FS, RS, RUN_FIELDS


def queue_text(states: dict[str, str]) -> str:
    """``squeue -o QUEUE_FORMAT`` for jobs in these states."""
    return "".join(FS.join([job, state, "None", "0:01", "1:00", "1", "n1", "job"]) + RS + "\n"
                   for job, state in states.items())


def runs_text(job_id: str, states: list[str]) -> str:
    """``sacct -X -D -o RUN_FIELDS`` for one job's runs in these states (oldest first)."""
    rows = []
    for state in states:
        values = {"JobID": job_id, "State": state, "Submit": "2026-11-25T08:00:00", "Eligible": "2026-11-25T08:00:00",
                  "Start": "2026-11-25T08:00:01", "End": "Unknown", "ElapsedRaw": "1", "NNodes": "1",
                  "AllocTRES": "cpu=1,node=1"}
        rows.append(FS.join(values[field] for field in RUN_FIELDS) + "\n")
    return "".join(rows)
