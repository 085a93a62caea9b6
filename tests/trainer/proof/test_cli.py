"""The proof's command line (trainer/proof/cli.py): its arguments, the stages' prerequisites, the
fresh folder, stages skipped on one GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer.proof.proof_records import made_elsewhere
from trainer.proof import cli
from trainer.proof.workspace import Work


@pytest.mark.parametrize("text", ["0,0", "a", "", "1,x"])
def test_a_bad_gpu_list_is_refused_naming_it(text: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.parse_args(["--gpus", text])
    assert exit_.value.code == 2 and "invalid --gpus" in capsys.readouterr().err




def test_two_gpu_stages_are_skipped_and_said_so_on_one_gpu(tmp_path: Path, capsys) -> None:
    model = made_elsewhere(tmp_path / "earlier" / "model")
    assert cli.main(["--work", str(tmp_path / "proof"), "--gpus", "0", "--model", str(model),
                           "--only", "dedicated", "judge", "pack"]) == 0
    out = capsys.readouterr().out
    assert out.count("it needs 2 GPUs and the proof has 1") == 3


def test_a_work_folder_with_an_earlier_proof_in_it_is_refused_and_nothing_runs(tmp_path: Path, capsys) -> None:
    (tmp_path / "runs").mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    assert cli.main(["--work", str(tmp_path), "--only", "env"]) == 2
    err = capsys.readouterr().err
    assert "holds an earlier proof's files: every proof starts from an empty folder" in err and len(err.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("only, extra, named", [
    (["resume"], [], "--only resume needs train before it"),
    (["boundary", "train"], [], "--only boundary needs train before it"),
    (["agent008-14b"], [], "--only agent008-14b needs model14b before it in the same proof (or --model14b DIR)"),
    (["train"], [], "--only train needs model before it"),
])
def test_a_stage_whose_prerequisite_is_not_earlier_in_the_same_proof_is_refused(
        only: list[str], extra: list[str], named: str, tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.parse_args(["--work", str(tmp_path), "--only", *only, *extra])
    assert exit_.value.code == 2 and named in capsys.readouterr().err


def test_a_model_from_an_earlier_proof_stands_in_for_the_model_stage(tmp_path: Path) -> None:
    args = cli.parse_args(["--only", "train", "--model", str(tmp_path)])
    assert args.only == ["train"] and args.model == tmp_path
    work = Work(tmp_path / "proof", made=tmp_path)
    assert work.for_run("proof-pack-a", devices="1").model == tmp_path, "every run of the proof trains on it"
    assert f"base_model={tmp_path}" in work.for_run("proof-judge").train_args()
