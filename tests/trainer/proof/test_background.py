"""The proof in the background (trainer/proof/background.py): started in a session of its own,
followed to its end."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer.proof.proof_records import made_elsewhere
from trainer.proof import cli

# litellm noise in the forwarder's test (as tests/trainer/training/test_train.py)
pytestmark = pytest.mark.filterwarnings(
    "ignore:Pydantic serializer warnings:UserWarning", "ignore:There is no current event loop:DeprecationWarning")


# -- readings --------------------------------------------------------------------------------------------


def test_a_background_proof_outlives_its_start_and_is_followed_to_its_end(tmp_path: Path, capsys) -> None:
    work = tmp_path / "proof"
    model = made_elsewhere(tmp_path / "earlier" / "model")
    argv = ["--work", str(work), "--gpus", "0", "--model", str(model), "--only", "dedicated", "--background"]
    assert cli.main(argv) == 0
    assert "follow it with:" in capsys.readouterr().out and (work / "proof.pid").is_file()
    assert cli.main(["--work", str(work), "--follow", "120"]) == 0
    out = capsys.readouterr().out
    assert "skipped dedicated: it needs two GPUs" in out and "GPU proof: stages dedicated done" in out
    assert out.rstrip().endswith("== ended: exit 0; last stage dedicated")
    assert cli.main(["--work", str(work), "--follow", "1"]) == 0
    assert "skipped dedicated" not in capsys.readouterr().out, "a line is printed once"


def test_following_a_folder_with_no_background_proof_says_so(tmp_path: Path, capsys) -> None:
    assert cli.main(["--work", str(tmp_path), "--follow", "1"]) == 2
    assert "no background proof in" in capsys.readouterr().err
