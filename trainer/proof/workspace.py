"""The proof's folders and the environment of its commands: one run's names in the proof's
folder, what a job gives its workload (the run directory, ART's folder, the data, the run's
GPUs, the judge's address, offline settings), and where a run's records stood when one of the
proof's processes started. Nothing here needs a GPU, so the CPU tests drive it too."""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc.job.workload_env import REPO_DIR, Job, workload_env
from hpc.run.checkpoints import model_dir as art_model_dir
from hpc.run.rundir import RunDir

RUN_NAME = "proof"
PYTHON = sys.executable
# the RL run: small turns and groups, so a step takes seconds on one GPU
TRAIN_ARGS = ("base_model={model}", "training_dataset_size=null", "trajectories_per_group=4", "groups_per_step=3",
              "num_epochs=4", "max_turns=4", "max_tokens=256", "max_seq_length=16384", "val_set_size=4",
              "eval_steps=2", "prune_checkpoints=false", "rollout_concurrency=12", "learning_rate=5e-5",
              "vllm_fast_start=true", "preflight_min_free_gb=1")


# what every command of the proof gets besides a workload's variables: W&B off, litellm's cost map local
# (no network), output unbuffered (its log follows it), and the repository importable from any folder
PROCESS_ENV = {"WANDB_MODE": "disabled", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONUNBUFFERED": "1",
               "PYTHONPATH": str(REPO_DIR)}


class ProofFailed(RuntimeError):
    """A stage did not do what it must: one line saying what."""


def say(line: str) -> None:
    print(line, flush=True)


# -- the proof's folders and the environment of its commands ----------------------------------------------


@dataclass(frozen=True)
class Work:
    """The proof's folders, one run's names in them, and the environment every command gets
    (as a job script gives it to its workload)."""

    root: Path
    judge_url: str = ""
    run_name: str = RUN_NAME
    devices: str = ""  # the run's GPUs (CUDA_VISIBLE_DEVICES); "" leaves the variable as it is
    judge_model: str = "openai/judge"
    made: Path | None = None  # --model: a model an earlier proof made, read only; else <root>/model

    def for_run(self, run_name: str, devices: str | None = None) -> "Work":
        """The same proof, another run (its own run directory and checkpoints) on ``devices``."""
        return dataclasses.replace(self, run_name=run_name, devices=self.devices if devices is None else devices)

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def model(self) -> Path:
        return self.made if self.made is not None else self.root / "model"

    @property
    def runs(self) -> Path:
        return self.root / "runs"

    @property
    def run(self) -> RunDir:
        return RunDir(self.runs / self.run_name)

    @property
    def art(self) -> Path:
        return self.root / "art"

    @property
    def model_dir(self) -> Path:
        return art_model_dir(self.art, "email_agent", self.run_name)  # the project of smoke and agent_008

    def env(self, **extra: str) -> dict[str, str]:
        """What a job on this machine's cluster gives its workload (hpc/job/workload_env.py), offline,
        with the proof's folders and judge where a job has the dotenv's, then ``PROCESS_ENV``."""
        from hpc.launcher.clusters import load_registry  # lazily, as dotenv_setting below

        cluster = load_registry().detect().cluster
        job = Job(run_dir=self.run.path, model_dir=self.model_dir, cluster=cluster.name, internet=cluster.internet)
        runtime = os.environ.get("ART_VLLM_RUNTIME_CACHE_DIR") or dotenv_setting("ART_VLLM_RUNTIME_CACHE_DIR")
        settings = {"ART_PATH": str(self.art), "DATA_DIR": str(self.data), "JUDGE_API_BASE": self.judge_url,
                    "JUDGE_MODEL": self.judge_model, "ART_VLLM_RUNTIME_CACHE_DIR": runtime}
        return {**os.environ, **workload_env(job, settings, offline=True, devices=self.devices), **PROCESS_ENV,
                **extra}

    def log(self, name: str) -> Path:
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        return self.root / "logs" / f"{name}.log"

    def claim(self) -> None:
        """What the job's begin hook does first: the run owns its model folder (model.json both sides)."""
        from hpc.run.ownership import claim

        self.run.path.mkdir(parents=True, exist_ok=True)
        claim(self.run, self.model_dir)

    def train_args(self, *extra: str) -> list[str]:
        return [arg.format(model=self.model) for arg in TRAIN_ARGS] + list(extra)


def fresh_folder_problem(work: Path) -> str | None:
    """Why ``work`` cannot hold a new proof, if it cannot: it must be new or empty, so that no
    stage reads a record, checkpoint, evaluation or log an earlier proof left there."""
    if work.exists() and not work.is_dir():
        return f"--work {work} is a file: give a new folder"
    if work.is_dir() and any(work.iterdir()):
        return (f"--work {work} holds an earlier proof's files: every proof starts from an empty folder (a reused "
                "one mixes earlier runs' steps, checkpoints and evaluations into this one's figures); give a new "
                "--work, and --model DIR to reuse a model an earlier proof made")
    return None


@dataclass(frozen=True)
class RecordMark:
    """Where a run's records stood when one of the proof's processes started: what the run
    holds beyond it is that process's own (steps.jsonl, stops.jsonl, startups.jsonl,
    validation.jsonl), and each timed record must be dated after the process started."""

    run: RunDir
    counts: tuple[int, int, int, int]
    since: str  # utc_now() when the mark was taken

    @classmethod
    def take(cls, run: RunDir) -> "RecordMark":
        from hpc.run.rundir import utc_now

        counts = (len(run.read_steps()), len(run.read_stops()), len(run.read_startups()), len(run.read_validations()))
        return cls(run, counts, utc_now())

    def steps(self) -> list[dict[str, Any]]:
        return self._own(self.run.read_steps()[self.counts[0]:], "started", "steps.jsonl")

    def stops(self) -> list[dict[str, Any]]:
        return self._own(self.run.read_stops()[self.counts[1]:], "time", "stops.jsonl")

    def startups(self) -> list[dict[str, Any]]:
        return self._own(self.run.read_startups()[self.counts[2]:], "time", "startups.jsonl")

    def validations(self) -> list[dict[str, Any]]:
        return self.run.read_validations()[self.counts[3]:]

    def _own(self, records: list[dict[str, Any]], stamp: str, file: str) -> list[dict[str, Any]]:
        early = [r for r in records if str(r.get(stamp, "")) < self.since]
        if early:
            raise ProofFailed(f"{self.run.path / file} has {len(early)} record(s) dated before this process started "
                              f"({early[0].get(stamp)} < {self.since}): another process wrote them")
        return records


def dotenv_setting(name: str) -> str:
    """What a job on this machine's cluster gets for ``name`` from the dotenv files."""
    from hpc.launcher.clusters import load_registry
    from hpc.launcher.jobspec import dotenv_setting as setting

    return setting(name, load_registry().detect().cluster) or ""
