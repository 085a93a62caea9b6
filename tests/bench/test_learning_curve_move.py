"""bench/learning_curve_move.py: seed 1 of the learning bench bundled after collect, and continued on a fresh machine."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from bench import learning_curve as bench
from bench.learning_curve_move import MODEL_HASHES, PART_MIB, bundle_seed, move_folder, resume_seed
from tests.bench.test_learning_curve import CPU_OVERRIDES, inbox_agent
from tests.doubles.openai_server import OpenAIServer
from trainer.proof.workspace import ProofFailed, Work


def staged(root: Path, url: str, data: Path) -> Work:
    work = Work(root, url, devices="")
    root.mkdir(parents=True, exist_ok=True)
    work.data.symlink_to(data)
    return work


def made_model(work: Work) -> None:
    """The base model's folder as the model stage leaves it (the backend double reads none of it)."""
    work.model.mkdir()
    (work.model / "config.json").write_text('{"model_type": "qwen2"}\n')
    (work.model / "model.safetensors").write_bytes(bytes(range(256)) * 64)


def test_seed_1_bundled_after_the_runs_continues_on_a_fresh_machine_at_the_next_step_with_no_step_repeated(
        tmp_path: Path, inbox_data_dir: Path) -> None:
    with OpenAIServer(inbox_agent()) as server:
        first = staged(tmp_path / "a", server.base_url, inbox_data_dir)
        made_model(first)
        bench.train_runs(first, ["0"], time.time() + 600, CPU_OVERRIDES, ART_FAKE_INFERENCE_URL=server.base_url)
        assert [s["step"] for s in first.for_run("seed1").run.read_steps()] == [1, 2]
        [line] = bundle_seed(first)
        move = move_folder(first)
        assert line.startswith(f"seed1 bundled at step 2 into {move / 'bundle'}") and f"at most {PART_MIB} MiB" in line
        assert json.loads((move / MODEL_HASHES).read_text()).keys() == {"config.json", "model.safetensors"}

        fresh = staged(tmp_path / "b", server.base_url, inbox_data_dir)
        lines = resume_seed(fresh, move, 2, ["0"], CPU_OVERRIDES, ART_FAKE_INFERENCE_URL=server.base_url)
    said = "\n".join(lines)
    assert "copied from" in said and "unbundled" in said and "at step 2 (2 steps recorded): continuing 2" in said
    assert "the run's steps 1-4: none lost, none repeated; the first after the move 3" in said
    assert [s["step"] for s in fresh.for_run("seed1").run.read_steps()] == [1, 2, 3, 4]
    assert (fresh.model / "model.safetensors").read_bytes() == (first.model / "model.safetensors").read_bytes()


def test_a_seed_at_the_configs_last_step_is_continued_on_a_longer_cut_of_the_same_shuffled_questions() -> None:
    from bench.learning_curve_move import enough_data

    assert enough_data(CPU_OVERRIDES, 2) == []  # 2 steps of 2 groups: the config's 4 questions
    assert enough_data(CPU_OVERRIDES, 4) == ["training_dataset_size=8"]
    assert enough_data((), 110) == ["training_dataset_size=880"]  # 8 groups a step, past the config's 800


def test_a_move_whose_model_is_not_the_one_seed_1_trained_on_is_refused_before_anything_is_unbundled(
        tmp_path: Path) -> None:
    move = tmp_path / "move"
    (move / "bundle").mkdir(parents=True)
    (move / "model").mkdir()
    (move / "model" / "model.safetensors").write_bytes(b"weights")
    (move / MODEL_HASHES).write_text(json.dumps({"model.safetensors": "0" * 64}))
    fresh = Work(tmp_path / "fresh")
    with pytest.raises(ProofFailed, match="is not the model seed 1 trained on"):
        resume_seed(fresh, move, 1, ["0"])
    assert not fresh.runs.exists() and not fresh.model.exists()
    with pytest.raises(ProofFailed, match="no learning-bench move"):
        resume_seed(fresh, tmp_path / "nothing", 1, ["0"])


def test_resume_from_a_folder_that_is_no_move_is_a_one_line_error_with_exit_2_and_nothing_made(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    work = tmp_path / "work"
    assert bench.main(["resume", "--work", str(work), "--move", str(tmp_path / "nothing"), "--gpus", "0"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line == (f"bench.learning_curve: error: --move {tmp_path / 'nothing'} is no learning-bench move (no "
                    f"{MODEL_HASHES} or bundle/ in it): accepted the WORK/move folder python -m "
                    "bench.learning_curve start wrote")
    assert not work.exists()
