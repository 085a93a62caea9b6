"""How a run goes on after a job ends: its continuation modes, defined once.

The launcher picks one (``--continuation``, ``--chain``: hpc/launcher/single_run.py), the job
script passes it to its end hook (``hpc.job.continuation end --mode``, ``hpc.job.pack end --mode``),
and the end hook acts on it. Stdlib only: the dry run imports it.
"""

from __future__ import annotations

from enum import StrEnum


class ContinuationMode(StrEnum):
    """What continues the run after a job that did not finish it."""

    REQUEUE = "requeue"  # the job requeues itself (scontrol requeue): it keeps its id
    AFTERANY = "afterany"  # each job queues its successor as it starts (afterany on itself)
    CHAIN = "chain"  # the launcher pre-submits --chain jobs, each waiting on the one before


AUTO = "auto"  # --continuation's default: requeue where the cluster allows it, else afterany
# The modes in which each job queues what continues it (a pack's jobs always do: they are never chained).
SUCCESSOR_MODES = (ContinuationMode.REQUEUE, ContinuationMode.AFTERANY)
# Command lines' choices, as plain words (argparse names each choice by its repr in an error):
MODE_CHOICES = tuple(mode.value for mode in ContinuationMode)  # the end hook's --mode
SUCCESSOR_CHOICES = tuple(mode.value for mode in SUCCESSOR_MODES)  # a pack's end hook's --mode
LAUNCH_CHOICES = (AUTO, *SUCCESSOR_CHOICES)  # --continuation's (CHAIN comes with --chain N)
