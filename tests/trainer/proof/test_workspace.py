"""The proof's folders and where a run's records stood when a process started (trainer/proof/workspace.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer.proof.proof_records import append_step
from trainer.proof.workspace import ProofFailed, RecordMark, Work


def test_a_process_counts_only_the_records_written_after_it_started(tmp_path: Path) -> None:
    work = Work(tmp_path)
    append_step(work, 1)
    mark = RecordMark.take(work.run)
    append_step(work, 2)
    assert [r["step"] for r in mark.steps()] == [2]
    append_step(work, 3, started="2020-01-01T00:00:00+00:00")  # written after the mark, dated before it
    with pytest.raises(ProofFailed, match=r"1 record\(s\) dated before this process started"):
        mark.steps()
