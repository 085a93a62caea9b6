"""The trainer's preflight on the login node, before a job is queued.

A job that cannot work (no data, no scenarios, a missing key, a backend its
environment lacks, a model missing from an offline cluster's HF cache, an
output folder it cannot write) would otherwise wait its turn in the queue,
hours on a busy cluster, only to fail in seconds. So ``hpc.launch`` runs
trainer/training/preflight.py ``--where login`` with the job's environment before it
submits (``refuses``: a single run's, a sweep's first run to launch), and refuses
(exit 1, nothing submitted or written) with the checks' own one-line fixes when one
fails for good; ``--no_preflight`` skips it.

The checks run in a child process: litellm, httpx and the trainer's config
loader stay out of the launcher (``--dry_run`` must stay import-light).
Failures the login node cannot settle, the judge or W&B not answering
(transient: a login node without the network, a judge that is only down for
now), are said and the job is queued anyway: it checks again on its node.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass

from hpc.job import workload_env
from hpc.job.exit_codes import EXIT_CONFIG_ERROR, EXIT_UNAVAILABLE
from hpc.job.workload_env import HPC_JUDGE_SERVED
from hpc.launcher.jobspec import DEFAULT_ENTRYPOINT, REPO_DIR, JobSpec

TIMEOUT = 300  # seconds for the whole check (the judge's own timeout is the config's preflight_timeout)


@dataclass(frozen=True)
class Result:
    """What the login-side preflight said: its exit code, its listing, and how long it took."""

    code: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def failed_lines(self) -> list[str]:
        return [line for line in self.stdout.splitlines() if line.startswith("FAILED")]

    @property
    def broken(self) -> str | None:
        """Why the checks could not run at all (a crash, a bad config), else None."""
        if self.code in (0, EXIT_CONFIG_ERROR, EXIT_UNAVAILABLE) and (self.code == 0 or self.failed_lines):
            return None
        return (self.stderr.strip().splitlines() or ["no output"])[-1]


def applies(spec: JobSpec) -> bool:
    """The checks are the trainer's: they apply when the job runs the trainer."""
    return spec.entrypoint == DEFAULT_ENTRYPOINT


def job_env(spec: JobSpec) -> dict[str, str]:
    """The job's environment as the preflight needs it: the merged dotenv (secrets included: the
    judge's key is checked, never printed) and what every job script adds (hpc/job/workload_env.py:
    the run, its model folder, internet or not)."""
    served = getattr(spec, "judge", None)  # --judge_serve: a judge only the job can ask
    return {**os.environ, **spec.env.values, **workload_env.job_env(spec.workload_job()),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True", **({HPC_JUDGE_SERVED: served.model} if served else {})}


def run(spec: JobSpec) -> Result:
    """trainer/training/preflight.py --where login for this job, in a child process."""
    command = [sys.executable, "-m", "trainer.preflight", "--config", spec.config, "--where", "login",
               *spec.train_args]
    began = time.monotonic()
    try:
        done = subprocess.run(command, cwd=REPO_DIR, env=job_env(spec), capture_output=True, text=True,
                              timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return Result(-1, "", f"the checks did not finish within {TIMEOUT} s", time.monotonic() - began)
    return Result(done.returncode, done.stdout, done.stderr, time.monotonic() - began)


def refuses(spec: JobSpec | None, skip: bool) -> bool:
    """Before submitting: True when the login-side preflight refuses ``spec`` (said on stderr); False
    to go on, also with nothing to check (no run to launch, ``--no_preflight``, a workload that is
    not the trainer). hpc.launch asks it for its run, a sweep for its first run to launch."""
    if spec is None or skip or not applies(spec):
        return False
    return not gate(spec)


def gate(spec: JobSpec) -> bool:
    """Before submitting: True to go on (the checks passed, or only the network let them down),
    False (said on stderr, with each failed check's fix) to submit nothing."""
    result = run(spec)
    failed = result.failed_lines
    if result.broken is not None:
        print(f"hpc.launch: the preflight could not run ({result.broken}); nothing submitted "
              "(--no_preflight skips it)", file=sys.stderr)
        return False
    if result.code == EXIT_CONFIG_ERROR:
        print(f"hpc.launch: preflight on the login node failed for run {spec.job_name}; nothing submitted "
              "(--no_preflight skips it):", file=sys.stderr)
        for line in failed:
            print(f"  {line}", file=sys.stderr)
        return False
    checks = sum(1 for line in result.stdout.splitlines() if line.startswith(("ok ", "FAILED")))
    print(f"preflight on the login node: {checks - len(failed)} of {checks} checks passed "
          f"({result.seconds:.1f} s)")
    for line in failed:
        print(f"  {line} (not settled from this login node; the job checks it again on its node)")
    return True
