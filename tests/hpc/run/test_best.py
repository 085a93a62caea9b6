"""hpc.run.best: the run's best validated checkpoint, what @best names (and its one-line refusals)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpc.run import checkpoints as ck
from hpc.run.best import NoBest, best_and_last, best_checkpoint, best_of, last_of
from hpc.run.rundir import RunDir
from tests.doubles.art_backend import save_adapter


def validated(run: RunDir, *points: tuple[int, float]) -> None:
    for step, accuracy in points:
        run.record_validation({"step": step, "accuracy": accuracy, "reward_mean": accuracy}, [])


@pytest.fixture
def run(tmp_path: Path) -> RunDir:
    found = RunDir(tmp_path / "agent")
    found.path.mkdir()
    return found


def test_the_best_is_the_highest_accuracy_and_a_tie_goes_to_the_later_step() -> None:
    records = [{"step": 0, "accuracy": 0.4}, {"step": 20, "accuracy": 0.98}, {"step": 44, "accuracy": 0.98},
               {"step": 64, "accuracy": 0.65}]
    assert best_of(records).step == 44 and last_of(records).step == 64
    assert best_of([]) is None and last_of([]) is None


def test_done_json_gets_the_best_and_the_last_beside_each_other(run: RunDir) -> None:
    validated(run, (0, 0.47), (20, 0.98), (64, 0.65))
    assert best_and_last(run) == {"best_step": 20, "best_accuracy": 0.98, "last_step": 64, "last_accuracy": 0.65}
    run.mark_done(64, 64, **best_and_last(run))
    assert run.read_done()["best_step"] == 20


def test_best_names_the_best_steps_complete_checkpoint(run: RunDir, tmp_path: Path) -> None:
    model = tmp_path / "model"
    for step in (0, 20, 64):
        save_adapter(ck.step_dir(model, step), step)
    validated(run, (0, 0.47), (20, 0.98), (64, 0.65))
    assert best_checkpoint(run, model).step == 20


def test_a_run_without_validation_has_no_best_in_one_line(run: RunDir, tmp_path: Path) -> None:
    with pytest.raises(NoBest, match="run agent has no validation, so it has no best checkpoint") as error:
        best_checkpoint(run, tmp_path / "model")
    assert "\n" not in str(error.value) and "val_set_size > 0" in str(error.value)


def test_a_pruned_best_is_named_in_one_line_with_what_is_left(run: RunDir, tmp_path: Path) -> None:
    model = tmp_path / "model"
    for step in (0, 64):
        save_adapter(ck.step_dir(model, step), step)
    validated(run, (0, 0.47), (20, 0.98), (64, 0.65))
    with pytest.raises(NoBest, match=r"best checkpoint, step 20 \(98.0%\), is gone .*complete checkpoints: 0, 64"):
        best_checkpoint(run, model)


def test_pruning_keeps_the_best_whatever_comes_after_it(tmp_path: Path) -> None:
    model = tmp_path / "model"
    for step in range(0, 9):
        save_adapter(ck.step_dir(model, step), step)
    records = [{"step": 0, "accuracy": 0.4}, {"step": 2, "accuracy": 0.99}, {"step": 4, "accuracy": 0.5},
               {"step": 8, "accuracy": 0.0}]
    ck.prune(model, {best_of(records).step})
    assert [c.step for c in ck.list_checkpoints(model)] == [2, 8]
