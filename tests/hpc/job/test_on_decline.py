"""hpc.job.on_decline, driven by the step double's loop (tests/doubles/step_trainer.py) on a recorded
curve that rose and fell (docs/results: the learning curve's seed 1, best 98.0% at step 20, then
below by 10.0 and 27.7 points at steps 48 and 52): stop ends the run with its reason, rollback
continues from the best checkpoint with the learning rate scaled down and deletes nothing, and a
job restarted mid-rollback finishes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpc.job import on_decline
from hpc.job.deadline import BoundaryRule, BoundarySettings
from hpc.job.exit_codes import EXIT_STOPPED_FOR_TIME
from hpc.run import ledger
from hpc.run.checkpoints import ADAPTER_WEIGHTS, list_checkpoints, step_dir
from hpc.run.ledger import Decline
from hpc.run.rundir import RunDir
from tests.doubles import step_trainer

CURVE = (Path(__file__).resolve().parents[3] / "docs/results/learning_curve_runs/2026-11-27-2xH100-copy-lesson"
         / "seed1/validation.jsonl")


class Run:
    def __init__(self, tmp_path: Path) -> None:
        self.run = RunDir(tmp_path / "run")
        self.run.path.mkdir()
        self.model_dir = tmp_path / "model"

    def train(self, *args: str) -> int:
        """One job of the step double (in this process: its loop, without its signal handlers)."""
        opts = step_trainer.parse_args(["step_seconds=0", "validate_every=4", f"curve={CURVE}", "steps=80",
                                        "learning_rate=1e-5", *args])
        rule = BoundaryRule.from_env({}, BoundarySettings(), enabled=False, say=step_trainer.say)
        return step_trainer.train(self.run, self.model_dir, opts, rule)

    def declines(self) -> list[Decline]:
        return ledger.of_kind(ledger.read(self.run), Decline)

    def rates(self) -> dict[int, float]:
        return {s["step"]: s["learning_rate"] for s in self.run.read_steps()}

    def weights(self, step: int) -> bytes:
        return (step_dir(self.model_dir, step) / ADAPTER_WEIGHTS).read_bytes()


@pytest.fixture
def run(tmp_path: Path) -> Run:
    return Run(tmp_path)


def test_stop_ends_the_run_at_the_second_validation_below_with_its_own_reason(run: Run) -> None:
    assert run.train("on_decline=stop") == 0
    done = run.run.read_done()
    assert done is not None
    assert (done["final_step"], done["total_steps"], done["steps_left"]) == (52, 80, 28)
    assert (done["best_step"], done["best_accuracy"], done["last_step"]) == (20, 0.98, 52)
    assert done["reason"].startswith("declined: held-out accuracy 70.3% at step 52 is 27.7 points below the best")
    (decline,) = run.declines()
    assert (decline.action, decline.step, decline.best_step, decline.steps_left) == ("stop", 52, 20, 28)
    assert run.run.read_stops()[-1]["reason"] == "declined"
    assert max(c.step for c in list_checkpoints(run.model_dir)) == 52, "no step trained after the decision"


def test_a_job_started_after_the_stop_trains_nothing_and_exits_0(run: Run) -> None:
    run.train("on_decline=stop")
    steps = len(run.run.read_steps())
    assert run.train("on_decline=stop") == 0
    assert len(run.run.read_steps()) == steps


def test_rollback_copies_the_best_forward_scales_the_rate_and_deletes_nothing(run: Run) -> None:
    assert run.train("on_decline=rollback", "max_rollbacks=1") == EXIT_STOPPED_FOR_TIME
    (decline,) = run.declines()
    assert (decline.action, decline.step, decline.best_step, decline.to_step, decline.lr_scale, decline.rollback) == (
        "rollback", 52, 20, 53, 0.5, 1)
    assert run.weights(53) == run.weights(20), "step 53 is the best checkpoint, copied"
    assert [c.step for c in list_checkpoints(run.model_dir)] == list(range(0, 54)), "every checkpoint kept"
    assert run.run.read_stops()[-1] == {**run.run.read_stops()[-1], "reason": "rollback", "step": 53}

    assert run.train("on_decline=rollback", "max_rollbacks=1") == 0, "the next job: from the copy, then a stop"
    rates = run.rates()
    assert rates[52] == pytest.approx(1e-5) and 53 not in rates and rates[54] == pytest.approx(5e-6)
    validated = {v["step"]: v["accuracy"] for v in run.run.read_validations()}
    assert validated[56] > 0.95, "the rolled-back model scores as the best did, not as step 56 of the fall"
    last = run.declines()[-1]
    assert last.action == "stop" and "1 rollback(s) made already (max_rollbacks)" in last.reason
    assert [c.step for c in list_checkpoints(run.model_dir)] == list(range(0, last.step + 1))


class Killed(Exception):
    """The job killed between recording its decision and carrying it out."""


def test_a_job_restarted_mid_rollback_makes_the_copy_and_continues_it(run: Run, monkeypatch) -> None:
    def killed(*_args: object) -> None:
        raise Killed

    with monkeypatch.context() as patch:
        patch.setattr(on_decline, "copy_forward", killed)
        with pytest.raises(Killed):
            run.train("on_decline=rollback", "max_rollbacks=1")
    assert [d.action for d in run.declines()] == ["rollback"] and not step_dir(run.model_dir, 53).exists()

    assert run.train("on_decline=rollback", "max_rollbacks=1") == 0
    assert run.weights(53) == run.weights(20)
    assert run.rates()[54] == pytest.approx(5e-6), "the scale the recorded decision left"
    assert [d.action for d in run.declines()] == ["rollback", "stop"], "the rollback made once, not decided again"


def test_a_copy_cut_short_is_made_again_and_a_later_checkpoint_is_never_overwritten(run: Run) -> None:
    run.train("on_decline=rollback", "max_rollbacks=1")
    (decline,) = run.declines()
    partial = run.model_dir / "checkpoints" / ".rollback-0053"
    partial.mkdir()
    (partial / "adapter_config.json").write_text("{")
    on_decline.copy_forward(run.model_dir, decline, print)  # 53 is there: nothing to do
    assert run.weights(53) == run.weights(20) and partial.exists()
    assert json.loads((step_dir(run.model_dir, 53) / "adapter_config.json").read_text())["step"] == 20


def test_continue_records_the_decline_and_trains_on(run: Run) -> None:
    assert run.train("on_decline=continue") == 0
    assert [(d.action, d.step) for d in run.declines()] == [("continue", 52)]
    assert max(s["step"] for s in run.run.read_steps()) == 80


def test_a_decline_is_told_to_the_webhook(run: Run, monkeypatch) -> None:
    told: list[tuple[str, str]] = []
    monkeypatch.setattr(on_decline.notify, "tell", lambda _run, event, detail, _env=None: told.append((event, detail)))
    run.train("on_decline=stop")
    assert told and told[0][0] == "declined" and told[0][1].startswith("stop: held-out accuracy 70.3% at step 52")
