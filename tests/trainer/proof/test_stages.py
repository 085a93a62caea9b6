"""trainer/proof/stages.py: the proof's one table of stages drives its command line, its checks and its runs."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tests.trainer.proof.proof_records import made_elsewhere
from trainer.proof import cli, stages
from trainer.proof.workspace import Work


def test_every_stage_function_of_the_proof_has_one_row_and_every_prerequisite_is_a_stage() -> None:
    assert len(stages.NAMES) == len(stages.TABLE)  # no name twice
    assert all(stage.needs is None or stage.needs in stages.BY_NAME for stage in stages.TABLE)
    assert set(stages.DEFAULT) < set(stages.NAMES) and "agent008-14b" not in stages.DEFAULT


def test_a_stage_added_as_one_row_is_accepted_checked_and_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    ran: list[str] = []

    def stage_hello(work: Work, args: argparse.Namespace) -> list[str]:
        ran.append(work.root.name)
        return ["hello from a new stage"]

    row = stages.Stage("hello", stage_hello, needs="model")
    monkeypatch.setattr(cli, "BY_NAME", {**stages.BY_NAME, "hello": row})
    monkeypatch.setattr(cli, "NAMES", (*stages.NAMES, "hello"))

    with pytest.raises(SystemExit) as refused:
        cli.main(["--work", str(tmp_path / "refused"), "--only", "hello"])
    assert refused.value.code == 2 and "--only hello needs model before it" in capsys.readouterr().err
    model = made_elsewhere(tmp_path / "earlier" / "model")
    assert cli.main(["--work", str(tmp_path / "proof"), "--model", str(model), "--only", "hello"]) == 0
    assert ran == ["proof"] and "hello from a new stage" in capsys.readouterr().out
