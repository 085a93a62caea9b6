"""The figures the proof reads from a run directory and a trainer's log (start-up seconds,
rollouts per second, the steps that changed the LoRA), and the checks each stage makes of
them: stopped as asked, steps consecutive, the resumed checkpoint served."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from hpc.job.exit_codes import EXIT_STOPPED_FOR_TIME
from hpc.run.checkpoints import list_checkpoints
from trainer.proof.adapter_weights import same_weights
from trainer.proof.processes import last_lines
from trainer.proof.workspace import ProofFailed, RecordMark, Work
from trainer.serving.vllm_server import served_models


def seconds_to_register(log: str) -> float | None:
    """From the trainer's first line to 'registered:' (Unsloth loaded, vLLM serving)."""
    stamps = re.findall(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d) \[trainer\] (config |registered:)", log, re.M)
    begin = next((s for s, what in stamps if what == "config "), None)
    end = next((s for s, what in stamps if what == "registered:"), None)
    if begin is None or end is None:
        return None
    parse = lambda stamp: time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S"))  # noqa: E731
    return parse(end) - parse(begin)


def served_at(log: str) -> tuple[str, str] | None:
    """(vLLM's address, the model name it serves) from the trainer's 'registered:' line."""
    found = re.search(r"registered: inference at (\S+) as (\S+)", log)
    return (found.group(1), found.group(2)) if found else None


@dataclass
class ServedWatch:
    """An ``until`` for the resumed process: once it has registered, ask its vLLM which models it
    serves (``/v1/models``, once), then defer to ``then``."""

    run: Work
    name: str
    then: Callable[[], bool]
    served: list[str] | None = None
    url: str = ""

    def __call__(self) -> bool:
        if self.served is None:
            found = served_at(self.run.log(self.name).read_text(errors="replace"))
            if found is None:
                return False
            self.url = found[0]
            self.served = sorted(served_models(self.url))  # [] where it did not answer
        return self.then()


def check_served(watch: ServedWatch, model_name: str, step: int) -> None:
    """vLLM serves the checkpoint the run resumed from, and no later one."""
    expected = f"{model_name}@{step}"
    later = [m for m in watch.served or [] if m.startswith(f"{model_name}@") and m.split("@")[-1].isdigit()
             and int(m.split("@")[-1]) > step]
    if watch.served is None or expected not in watch.served or later:
        raise ProofFailed(f"the resumed job's vLLM at {watch.url or '?'} serves {watch.served}, not {expected} "
                          f"(the checkpoint it resumed from){' and later: ' + str(later) if later else ''}")


def rollouts_per_second(records: list[dict[str, Any]]) -> float:
    """Rollouts gathered per second of gathering (steps.jsonl's trajectories and rollout_seconds)."""
    count = sum(record["trajectories"] for record in records)
    seconds = sum(record["rollout_seconds"] for record in records)
    return count / seconds if seconds else 0.0


def seconds_per_step(records: list[dict[str, Any]]) -> float:
    return sum(record["seconds"] for record in records) / len(records) if records else 0.0


def folder_mib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def trained_steps(work: Work, records: list[dict[str, Any]]) -> list[int]:
    """Steps whose checkpoint's LoRA weights differ from the previous one's (ART copies it forward
    when nothing in a step is trainable; trainer/proof/adapter_weights.py says why values, not bytes)."""
    by_step = {c.step: c.path for c in list_checkpoints(work.model_dir)}
    return [r["step"] for r in records
            if r["step"] in by_step and r["step"] - 1 in by_step
            and not same_weights(by_step[r["step"]], by_step[r["step"] - 1])]


def check_stopped(work: Work, mark: RecordMark, code: int, log: str, steps: int) -> list[dict[str, Any]]:
    """A stage's process stopped by SIGUSR1 (exit 75) after at least ``steps`` steps of its own
    (the records after ``mark``): those records; else ProofFailed saying which part did not hold."""
    records = mark.steps()
    if code != EXIT_STOPPED_FOR_TIME:
        raise ProofFailed(f"{work.run_name}: trainer.train exited {code}, not 75 after SIGUSR1: {last_lines(log)}")
    if len(records) < steps:
        raise ProofFailed(f"{work.run_name}: only {len(records)} steps done before the stop (wanted {steps}): "
                          f"{last_lines(log)}")
    check_consecutive(work)
    return records


def check_consecutive(work: Work) -> list[int]:
    """The run's steps, each once and in order from 1: none lost, none repeated."""
    numbers = [r["step"] for r in work.run.read_steps()]
    if numbers != list(range(1, len(numbers) + 1)):
        raise ProofFailed(f"{work.run_name}: steps lost or repeated: {numbers}")
    return numbers


def check_trained(work: Work, mark: RecordMark, code: int, log: str, steps: int, changed_at_least: int | None = None
                  ) -> list[dict[str, Any]]:
    """``check_stopped``, and ``changed_at_least`` of those steps (default: each) changed the LoRA
    (GRPO really trained; a step whose groups all scored alike leaves it as it was)."""
    records = check_stopped(work, mark, code, log, steps)
    changed = trained_steps(work, records)
    if len(changed) < (steps if changed_at_least is None else changed_at_least):
        raise ProofFailed(f"{work.run_name}: of {len(records)} steps only {changed} changed the LoRA (GRPO had nothing "
                          "to learn: every rollout of a group scored the same)")
    return records
