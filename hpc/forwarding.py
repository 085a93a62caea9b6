"""Module paths kept apart from where their code lives: the commands users type, and the old paths
that job scripts rendered by release 0.1.0 call.

A module at an old path is a few lines: ``forward(__name__, "new.path")``. Run as a command
(``python -m old.path ...``) it runs the moved module as ``__main__``, with the same
arguments; imported, it is the moved module itself (``sys.modules`` maps the old name to it),
so patch targets, ``isinstance`` and module attributes behave as before.

The users' commands (``python -m hpc.launch``, ``python -m trainer.train``, ...) are for good.
The paths below are not: they are ``OLD_JOB_PATHS``, the one list of them. Job scripts rendered
by release 0.1.0 call them, and such a run is continued by re-submitting that same script (its
successor, a follow-up job), so each must work as long as such a run may be continued. They go in
release ``REMOVED_IN``, whose notes (CHANGELOG.md) ask users to relaunch runs launched with 0.1.0
(a relaunch renders the script anew); tests/test_forwarding.py fails once the project's version
reaches it and they are still here.
"""

import importlib
import runpy
import sys

REMOVED_IN = "0.3.0"
# old path -> where its code lives; what calls it in a job script rendered by 0.1.0
OLD_JOB_PATHS: dict[str, str] = {
    "hpc.continuation": "hpc.job.continuation",  # job control's begin and end hooks
    "hpc.pack": "hpc.job.pack",  # a pack job's slots, begin, devices and end; the judge block's devices
    "hpc.ray_cluster": "hpc.job.ray_cluster",  # a multi-node job's Ray nodes
    "hpc.tied": "hpc.job.tied",  # the workload tied to the job's shell (python -S -m hpc.tied)
    "hpc.watch": "hpc.job.watch",  # the run's watcher (a webhook set)
    "trainer.vllm_server": "trainer.serving.vllm_server",  # a judge served in the job
}


def forward(name: str, new: str) -> None:
    if name == "__main__":
        runpy.run_module(new, run_name="__main__", alter_sys=True)
    else:
        sys.modules[name] = importlib.import_module(new)


def forward_old_job_path(name: str, path: str) -> None:
    """``forward`` for one of ``OLD_JOB_PATHS``: ``path`` is the old module's own (``__spec__.name``)."""
    forward(name, OLD_JOB_PATHS[path])
