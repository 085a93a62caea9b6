"""The one-GPU stages' checks that need no GPU (trainer/proof/one_gpu.py): an evaluation, a
boundary stop."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from trainer.proof import one_gpu
from trainer.proof.workspace import ProofFailed, RecordMark, Work

FOUR = [{"correct": True}, {"correct": False}, {"correct": True}, {"correct": False}]
BOUNDARY_LINE = ("2026-11-26T10:00:04 [trainer] the backend's start (predicted 239.5s) and step 9 (predicted 22.2s) "
                 "would not end before the job's stop signal may come: 26.9s left: not starting the backend; stopping")

def write_evaluation(work: Work, records: list[dict], **summary: object) -> None:
    folder = work.run.evaluations_dir / "test-4" / "proof_4"
    folder.mkdir(parents=True)
    (folder / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (folder / "summary.json").write_text(json.dumps({"model": "proof@4", "questions": 4, "accuracy": 0.5, "failed": 0,
                                                     "time": "2030-01-01T00:00:00+00:00", **summary}))


@pytest.mark.parametrize("records, summary, output, named", [
    (FOUR, {}, "", None),
    (FOUR[:3], {}, "", "3 records of 4 questions"),
    ([*FOUR[:3], {"correct": False, "error": "APIConnectionError: refused"}], {}, "", "1 failed"),
    (FOUR, {"accuracy": 0.75}, "", "says accuracy 0.75, its records give 0.5"),
    (FOUR, {"time": "2020-01-01T00:00:00+00:00"}, "", "written 2020-01-01"),
    (FOUR, {}, "proof@4: already evaluated on test-4 with openai/judge", "skipped the model as already evaluated"),
])
def test_an_evaluation_counts_only_when_every_question_ran_none_failed_and_its_accuracy_recomputes(
        tmp_path: Path, records: list[dict], summary: dict, output: str, named: str | None) -> None:
    work = Work(tmp_path)
    write_evaluation(work, records, **summary)
    if named is None:
        found, kept = one_gpu.check_evaluation(work, output, "2029-01-01T00:00:00+00:00")
        assert found["accuracy"] == 0.5 and len(kept) == 4
        return
    with pytest.raises(ProofFailed, match=re.escape(named)):
        one_gpu.check_evaluation(work, output, "2029-01-01T00:00:00+00:00")


@pytest.mark.parametrize("log, seconds, startup, named", [
    (BOUNDARY_LINE, 4.0, False, None),
    (BOUNDARY_LINE + "\n2026-11-26T10:00:05 [trainer] backend: art.local.backend.LocalBackend at /x", 4.0, False,
     "backend lines ['] backend: ']"),
    ("2026-11-26T10:00:04 [trainer] step 9 would not end: not starting it", 4.0, False, "its line ''"),
    (BOUNDARY_LINE, 4.0, True, "start-ups [{"),
    (BOUNDARY_LINE, 180.0, False, "took 180 s"),
])
def test_a_boundary_stop_counts_only_before_the_backend_and_within_seconds(
        tmp_path: Path, log: str, seconds: float, startup: bool, named: str | None) -> None:
    work = Work(tmp_path)
    mark = RecordMark.take(work.run)
    work.run.append_stop({"step": 8, "reason": "boundary"})
    if startup:
        work.run.append_startup(200.0)
    line = next((line for line in log.splitlines() if "not starting the backend" in line), "")
    if named is None:
        one_gpu.check_boundary(75, mark.stops(), log, line, seconds, mark)
        return
    with pytest.raises(ProofFailed, match=re.escape(named)):
        one_gpu.check_boundary(75, mark.stops(), log, line, seconds, mark)
