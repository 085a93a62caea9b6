"""trainer.train: the training loop's contract with the job (docs/design.md).

The loop runs for real on the fixture data: real rollouts against a scripted
OpenAI-compatible endpoint (policy and judge), ART's own gather and logging,
and the backend double ``tests.doubles.art_backend:FakeBackend`` in place of
LocalBackend (it keeps ART's checkpoint layout and records every trained step).
Most tests run the loop in-process; the signal tests run
``python -m trainer.train`` as the job does and send it real signals.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpc.job.exit_codes import EXIT_CONFIG_ERROR, EXIT_STOPPED_FOR_TIME
from hpc.run.checkpoints import ADAPTER_CONFIG, INCOMPLETE, is_complete, list_checkpoints, step_dir
from hpc.run.rundir import RunDir
from tests.doubles.art_backend import TRAINING_MARKER, read_calls, read_train_log, save_adapter
from tests.doubles.openai_server import OpenAIServer, Reply, failure, text, tool_call
from trainer.training import environment, loop
from trainer.training.backend import backend_class, build_model, server_config
from trainer.training.boundary import resume_step
from trainer.training.config import ConfigError, load_config
from trainer.training.environment import Paths, configure_environment, metrics_reporters, resolve_paths
from trainer.training.exits import SetupError
from trainer.training.progress import total_steps
from trainer.training.stop_request import StopRequest
from trainer.training.training_step import TrainedNothing

# litellm noise: its response objects trip pydantic's serializer checks, and its logging worker
# drops a success callback when a test's event loop closes.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Pydantic serializer warnings:UserWarning",
    "ignore:coroutine 'Logging.async_success_handler' was never awaited:RuntimeWarning",
)

REPO = Path(__file__).resolve().parents[3]
CONFIG = "smoke"
JUDGE_MODEL = "judge-model"
SCENARIOS = 6  # 3 steps of 2 groups x 2 rollouts
OVERRIDES = ["backend=tests.doubles.art_backend:FakeBackend", f"training_dataset_size={SCENARIOS}",
             "groups_per_step=2", "trajectories_per_group=2", "num_epochs=1", "judge_retries=0",
             "val_set_size=0"]  # validation has tests of its own (test_validation.py)
TOTAL = 3
PROGRESS_KEYS = {"step", "total_steps", "epoch", "reward_mean", "answer_accuracy", "judge_failures",
                 "seconds_per_step", "eta_seconds"}


# -- the scripted endpoint ----------------------------------------------------------------


def alternating_verdicts() -> Callable[[dict], Reply]:
    """The answer judge: accepts every other answer (so rewards within a group differ)."""
    verdicts = itertools.cycle([True, False])
    return lambda body: text(json.dumps({"thinking": "scripted", "accept": next(verdicts)}))


def ruler_scores(body: dict) -> Reply:
    """RULER: scores 0.25, 0.75, ... for the trajectories it was shown."""
    shown = body["messages"][-1]["content"].count("<trajectory id=")
    scores = [{"trajectory_id": str(i), "explanation": "scripted", "score": 0.25 + 0.5 * (i % 2 == 0)}
              for i in range(1, shown + 1)]
    return text(json.dumps({"scores": scores}))


def scripted(policy_delay: float = 0.0, on_policy: Callable[[], None] | None = None,
             judge: Callable[[dict], Reply] | None = None) -> Callable[[dict], Reply]:
    """Policy: answer at once (one turn), a different answer each time so the judge's
    cache never answers for it. Judge: ``judge``, by default alternating verdicts."""
    judge = judge or alternating_verdicts()
    answers = itertools.count()

    def respond(body: dict) -> Reply:
        if body.get("model") == JUDGE_MODEL:
            return judge(body)
        if on_policy is not None:
            on_policy()
        return tool_call("return_final_answer", {"answer": f"answer {next(answers)}", "sources": []},
                         delay=policy_delay)

    return respond


@pytest.fixture
def server():
    with OpenAIServer(scripted()) as endpoint:
        yield endpoint


# -- a run's places ---------------------------------------------------------------------------


@dataclass
class Run:
    """One trainer run's directories and environment (as the job would set it)."""

    env: dict[str, str]
    run_dir: RunDir
    art_path: Path
    model_dir: Path

    @property
    def trained(self) -> list[int]:
        """Every step the backend trained, in order: the batch number it trained on."""
        return [record["from_step"] for record in read_train_log(self.art_path)]

    def steps_on_disk(self) -> list[int]:
        return [c.step for c in list_checkpoints(self.model_dir)]


@pytest.fixture
def run(tmp_path: Path, art_e_data_dir: Path, server: OpenAIServer, monkeypatch: pytest.MonkeyPatch) -> Run:
    config = load_config(CONFIG, OVERRIDES)
    art_path = tmp_path / "art"
    env = {
        "HPC_RUN_DIR": str(tmp_path / "run"),
        "ART_PATH": str(art_path),
        "DATA_DIR": str(art_e_data_dir),
        "JUDGE_MODEL": JUDGE_MODEL,
        "JUDGE_API_BASE": server.base_url,
        "JUDGE_API_KEY": "test-key",
        "ART_FAKE_INFERENCE_URL": server.base_url,
        "WANDB_MODE": "disabled",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "HF_HUB_OFFLINE": "1",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for name in ("WANDB_API_KEY", "HPC_NO_INTERNET", "ART_FAKE_TRAIN_SECONDS", "ART_FAKE_SAVE_SECONDS",
                 "ART_FAKE_REGISTER_SECONDS", "SLURM_JOB_ID", "HPC_SIGNAL_GRACE", "HPC_JOB_END_TIME"):  # no job's end unless a test sets one
        monkeypatch.delenv(name, raising=False)
    return Run(env, RunDir(tmp_path / "run"), art_path, art_path / config.project / "models" / "run")


def train_in_process(stop: StopRequest | None = None, overrides: list[str] = OVERRIDES) -> int:
    config = load_config(CONFIG, overrides)
    paths = resolve_paths(CONFIG, config, os.environ)
    return asyncio.run(loop.train(config, paths, stop or StopRequest()))


def batch_scenario_ids(art_e_data_dir: Path) -> list[list[int]]:
    """The scenario ids of every batch, as iterate_dataset orders them for this config."""
    from art.utils import iterate_dataset

    from trainer.agent.scenarios import load_scenarios

    config = load_config(CONFIG, OVERRIDES)
    assert config.training_dataset_seed == 42, "the tests check shuffling with the smoke config's seed"
    scenarios = load_scenarios(art_e_data_dir, "train", limit=config.training_dataset_size,
                               max_messages=config.max_messages, seed=config.training_dataset_seed)
    assert len(scenarios) == SCENARIOS, "the fixture data needs at least 6 training scenarios"
    return [[s.id for s in batch.items]
            for batch in iterate_dataset(scenarios, config.groups_per_step, config.num_epochs, use_tqdm=False)]


def trained_scenario_ids(run: Run) -> list[list[int]]:
    """Per trained step, the scenario of each group (every rollout carries it in its metadata)."""
    ids = []
    for record in read_train_log(run.art_path):
        groups = [{t["scenario_id"] for t in group} for group in record["metadata"]]
        assert all(len(g) == 1 for g in groups)
        ids.append([g.pop() for g in groups])
    return ids


def precreate_checkpoints(run: Run, steps: range) -> None:
    for step in steps:
        save_adapter(step_dir(run.model_dir, step), step)


# -- resume ------------------------------------------------------------------------------------


def test_training_starts_at_the_latest_checkpoint_step(run: Run, art_e_data_dir: Path) -> None:
    precreate_checkpoints(run, range(0, 3))  # steps 0..2 done: batch 2 is next

    assert train_in_process() == 0

    assert run.trained == [2]
    assert trained_scenario_ids(run) == batch_scenario_ids(art_e_data_dir)[2:]
    assert run.steps_on_disk() == [0, 1, 2, 3]


def test_an_incomplete_newer_checkpoint_is_moved_aside_before_resuming(run: Run) -> None:
    precreate_checkpoints(run, range(0, 2))
    torn = step_dir(run.model_dir, 2)  # killed while saving step 2: config written, weights not
    torn.mkdir(parents=True)
    (torn / ADAPTER_CONFIG).write_text("{}")

    assert train_in_process() == 0

    assert run.trained == [1, 2], "resumed from step 1, the latest complete checkpoint"
    aside = list((run.model_dir / INCOMPLETE).iterdir())
    assert [p.name.split("-")[0] for p in aside] == ["0002"]
    assert all(is_complete(c.path) for c in list_checkpoints(run.model_dir))


def test_a_finished_run_started_again_writes_done_without_training(run: Run) -> None:
    precreate_checkpoints(run, range(0, TOTAL + 1))

    assert train_in_process() == 0

    assert run.trained == []
    assert run.run_dir.read_done()["final_step"] == TOTAL


# -- progress and the end ----------------------------------------------------------------------


def test_every_step_writes_progress_with_the_documented_keys(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    written: list[dict[str, Any]] = []
    original = RunDir.write_progress
    monkeypatch.setattr(RunDir, "write_progress", lambda self, p: (written.append(p), original(self, p))[1])

    assert train_in_process() == 0

    assert [p["step"] for p in written] == [1, 2, 3]
    assert all(set(p) == PROGRESS_KEYS for p in written)
    last = run.run_dir.read_progress()
    assert set(last) == PROGRESS_KEYS | {"updated_at"}
    assert (last["step"], last["total_steps"], last["epoch"], last["eta_seconds"]) == (TOTAL, TOTAL, 0, 0)
    assert last["answer_accuracy"] == 0.5, "the judge accepts every other one of the step's 4 answers"
    assert last["judge_failures"] == 0 and isinstance(last["reward_mean"], float)
    assert last["seconds_per_step"] >= 0


def test_finishing_all_steps_writes_done_and_returns_0(run: Run, art_e_data_dir: Path) -> None:
    assert train_in_process() == 0

    done = run.run_dir.read_done()
    assert (done["final_step"], done["total_steps"]) == (TOTAL, TOTAL)
    assert run.trained == [0, 1, 2]
    assert trained_scenario_ids(run) == batch_scenario_ids(art_e_data_dir)
    assert run.steps_on_disk() == [0, 1, 2, 3]


def test_judge_verdicts_are_cached_in_the_run_directory(run: Run) -> None:
    assert train_in_process() == 0

    assert len(list((run.run_dir.path / "judge_cache").glob("*.json"))) >= 1


def test_the_heap_is_collected_then_frozen_once_after_the_jobs_first_step(run: Run, monkeypatch: pytest.MonkeyPatch
                                                                           ) -> None:
    calls: list[tuple[str, int]] = []
    for name in ("collect", "freeze"):
        monkeypatch.setattr(gc, name, lambda name=name: calls.append((name, len(run.run_dir.read_steps()))))
    precreate_checkpoints(run, range(0, 2))  # a resumed job: its first step is the run's step 2 (batch 1)

    assert train_in_process() == 0

    assert calls == [("collect", 1), ("freeze", 1)], "after the job's first step, before its second"


def test_reward_ruler_trains_on_ruler_scores_without_the_answer_judge(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    with OpenAIServer(scripted(judge=ruler_scores)) as endpoint:
        monkeypatch.setenv("ART_FAKE_INFERENCE_URL", endpoint.base_url)
        monkeypatch.setenv("JUDGE_API_BASE", endpoint.base_url)
        assert train_in_process(overrides=[*OVERRIDES, "reward=ruler"]) == 0
        judge_calls = endpoint.requests_for(JUDGE_MODEL)

    assert len(judge_calls) == TOTAL * 2, "one RULER call per group, no per-answer judge calls"
    rewards = [group for record in read_train_log(run.art_path) for group in record["rewards"]]
    assert rewards and all(sorted(group) == [0.25, 0.75] for group in rewards)
    assert run.run_dir.read_progress()["answer_accuracy"] is None, "nobody checked the answers"


def test_reward_proof_only_text_hash_scores_each_rollout_by_its_text_for_a_made_model_only(
    run: Run, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    made = tmp_path / "made"
    made.mkdir()
    (made / "made_by.json").write_text("{}")
    overrides = [*OVERRIDES, "reward=proof_only_text_hash", f"base_model={made}"]
    with caplog.at_level("WARNING", logger="trainer"):
        assert train_in_process(overrides=overrides) == 0
    rewards = [group for record in read_train_log(run.art_path) for group in record["rewards"]]
    assert len(rewards) == TOTAL * 2 and all(0 <= r < 1 for group in rewards for r in group)
    assert all(len(set(group)) == len(group) for group in rewards), "each rollout's text differs, so its reward"
    assert "PROOF ONLY" in caplog.text
    with pytest.raises(ConfigError, match="reward 'proof_only_text_hash' is for the GPU proof of a model made by"):
        load_config(CONFIG, [*OVERRIDES, "reward=proof_only_text_hash"])  # smoke's base: Qwen/Qwen2.5-14B-Instruct


# -- stopping -------------------------------------------------------------------------------------


def test_a_stop_before_the_first_step_exits_75_without_starting_the_backend(run: Run) -> None:
    stop = StopRequest()
    stop.request("SIGUSR1")

    assert train_in_process(stop) == EXIT_STOPPED_FOR_TIME

    assert run.steps_on_disk() == [] and run.trained == []


def test_a_stop_during_rollouts_abandons_them_and_trains_nothing(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    stop = StopRequest()
    with OpenAIServer(scripted(policy_delay=3.0, on_policy=lambda: stop.request("SIGUSR1"))) as slow:
        monkeypatch.setenv("ART_FAKE_INFERENCE_URL", slow.base_url)
        began = time.monotonic()
        assert train_in_process(stop) == EXIT_STOPPED_FOR_TIME
        elapsed = time.monotonic() - began

    assert elapsed < 3.0, "the rollouts were cancelled, not waited for"
    assert run.trained == [] and run.steps_on_disk() == [0]
    assert run.run_dir.read_progress() is None and run.run_dir.read_done() is None


def test_a_backend_that_copies_checkpoints_forward_without_training_fails_the_run(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ART_FAKE_SKIP_TRAINING", "1")  # what ART does with no usable logprobs
    one_group = [*OVERRIDES, "groups_per_step=1", "trajectories_per_group=4"]  # the judge alternates within it
    with pytest.raises(TrainedNothing, match="step 1: the backend trained on 0 groups"):
        train_in_process(overrides=one_group)
    assert run.run_dir.read_progress() is None, "a step that trained nothing is not progress"


def test_the_configs_objective_reaches_the_backend(run: Run) -> None:
    assert train_in_process(overrides=[*OVERRIDES, "loss_fn=cispo", "importance_sampling_level=sequence"]) == 0
    records = read_train_log(run.art_path)
    assert {json.dumps(r["objective"], sort_keys=True) for r in records} == {json.dumps(
        {"loss_fn": "cispo", "scale_rewards": True, "importance_sampling_level": "sequence"}, sort_keys=True)}


def test_rollout_failures_beyond_the_allowed_share_fail_the_step_untrained(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    with OpenAIServer(lambda body: failure(500, "policy down")) as broken:
        monkeypatch.setenv("ART_FAKE_INFERENCE_URL", broken.base_url)
        with pytest.raises(Exception, match="policy down"):
            train_in_process(overrides=[*OVERRIDES, "max_rollout_exceptions=0.25"])

    assert run.trained == [] and run.steps_on_disk() == [0]


@pytest.fixture
def start_trainer(run: Run):
    """Start ``python -m trainer.train`` as the job template runs it (output to files in
    the test's directory, so no pipe fills up); whatever is still running at the end
    of the test is killed."""
    started: list[subprocess.Popen] = []

    def start(log_name: str, **extra_env: str) -> subprocess.Popen:
        with open(run.run_dir.path.parent / f"{log_name}.out", "w") as out, \
                open(run.run_dir.path.parent / f"{log_name}.err", "w") as err:
            trainer = subprocess.Popen([sys.executable, "-m", "trainer.train", "--config", CONFIG, *OVERRIDES],
                                       cwd=REPO, env={**os.environ, **run.env, **extra_env}, stdout=out, stderr=err)
        started.append(trainer)
        return trainer

    yield start
    for trainer in started:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait()


def read_or_empty(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_sigusr1_mid_step_saves_that_step_and_a_restart_trains_each_step_once(
    run: Run, art_e_data_dir: Path, start_trainer: Callable[..., subprocess.Popen]
) -> None:
    marker = run.art_path / TRAINING_MARKER
    trainer = start_trainer("first", ART_FAKE_TRAIN_SECONDS="0.5", ART_FAKE_SAVE_SECONDS="0.5")
    wait_for(lambda: read_or_empty(marker) == "1", "step 2 to be training")
    trainer.send_signal(signal.SIGUSR1)
    time.sleep(0.6)  # now inside the checkpoint save
    trainer.send_signal(signal.SIGTERM)  # a second signal must not cut the save short

    assert trainer.wait(timeout=30) == EXIT_STOPPED_FOR_TIME
    assert run.trained == [0, 1]
    assert is_complete(step_dir(run.model_dir, 2)) and run.steps_on_disk() == [0, 1, 2]
    assert run.run_dir.read_progress()["step"] == 2 and run.run_dir.read_done() is None

    restarted = start_trainer("second")
    assert restarted.wait(timeout=60) == 0
    assert run.trained == [0, 1, 2], "each step trained exactly once across the stop"
    assert trained_scenario_ids(run) == batch_scenario_ids(art_e_data_dir)
    assert run.run_dir.read_done()["final_step"] == TOTAL


def test_sigusr1_during_rollouts_exits_75_without_training_that_step(
    run: Run, start_trainer: Callable[..., subprocess.Popen]
) -> None:
    with OpenAIServer(scripted(policy_delay=5.0)) as slow:
        trainer = start_trainer("slow", ART_FAKE_INFERENCE_URL=slow.base_url)
        wait_for(lambda: any(r.model != JUDGE_MODEL for r in slow.requests), "the first rollout request")
        trainer.send_signal(signal.SIGUSR1)
        began = time.monotonic()
        assert trainer.wait(timeout=30) == EXIT_STOPPED_FOR_TIME
        assert time.monotonic() - began < 5.0, "the rollouts were abandoned, not waited for"

    assert run.trained == [] and run.steps_on_disk() == [0]
    assert "abandoning" in (run.run_dir.path.parent / "slow.out").read_text()


# -- stopping at a step boundary (hpc/job/deadline.py) and what a stop throws away -----------------------


def boundary_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "would not end before the job's stop signal" in r.getMessage()]


def end_job_in(monkeypatch: pytest.MonkeyPatch, seconds_left: float) -> None:
    """The job's end such that ``seconds_left`` remain before its stop signal may come (30 s grace, 30 s margin)."""
    monkeypatch.setenv("HPC_JOB_END_TIME", str(time.time() + 30 + 30 + seconds_left))
    monkeypatch.setenv("HPC_SIGNAL_GRACE", "30")


def test_a_step_that_would_not_end_before_the_jobs_stop_signal_stops_the_job_before_the_backend_starts(
    run: Run, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    run.run_dir.append_step({"step": 0, "seconds": 600.0})  # an earlier job's 10-minute steps, no start-up recorded
    end_job_in(monkeypatch, 40)
    caplog.set_level("INFO", logger="trainer")

    assert train_in_process() == EXIT_STOPPED_FOR_TIME

    assert read_calls(run.art_path) == [] and run.trained == [] and run.steps_on_disk() == [], "nothing started"
    [stop] = run.run_dir.read_stops()
    assert (stop["reason"], stop["step"], stop["predicted_step_seconds"], stop["lost_rollout_seconds"]) == (
        "boundary", 0, 720.0, 0.0), "the longest recent step x 1.2, an instant start-up before it"
    assert 20 < stop["seconds_left"] <= 40, "end - 30 s grace - 30 s margin, less the trainer's start"
    [line] = boundary_lines(caplog)
    assert line.startswith("the backend's start (none recorded yet) and step 1 (predicted 720.0s) would not end "
                           "before the job's stop signal may come: ")
    assert line.endswith(" left: not starting the backend; stopping with 0 steps done "
                         "(exit 75, the next job continues at once)")


def record_history(run: Run, steps: list[float], startups: list[float]) -> None:
    """Earlier jobs' trained steps (1, 2, ...) with their checkpoints, and their backends' start-ups."""
    precreate_checkpoints(run, range(0, len(steps) + 1))
    for number, seconds in enumerate(steps, 1):
        run.run_dir.append_step({"step": number, "seconds": seconds})
    for seconds in startups:
        run.run_dir.append_startup(seconds)


def test_a_resumed_run_whose_start_up_and_next_step_would_not_fit_exits_75_without_starting_the_backend(
    run: Run, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    record_history(run, steps=[30.0, 34.5], startups=[90.0, 100.0])  # predicted: a 120 s start-up, a 41.4 s step
    (step_dir(run.model_dir, 3) / ADAPTER_CONFIG).parent.mkdir(parents=True)  # a save torn by the last job's end
    (step_dir(run.model_dir, 3) / ADAPTER_CONFIG).write_text("{}")
    end_job_in(monkeypatch, 150)  # each would fit alone; not both
    caplog.set_level("INFO", logger="trainer")

    assert train_in_process() == EXIT_STOPPED_FOR_TIME

    assert read_calls(run.art_path) == [], "the backend was neither constructed nor registered"
    assert run.trained == [] and run.steps_on_disk() == [0, 1, 2], "the torn step 3 moved aside, nothing new"
    [stop] = run.run_dir.read_stops()
    assert (stop["reason"], stop["step"], stop["predicted_step_seconds"]) == ("boundary", 2, 161.4)
    assert 140 < stop["seconds_left"] <= 150
    assert len(run.run_dir.read_startups()) == 2, "no start-up happened, none recorded"
    [line] = boundary_lines(caplog)
    assert line.startswith("the backend's start (predicted 120.0s) and step 3 (predicted 41.4s) would not end "
                           "before the job's stop signal may come: ")
    assert line.endswith(" left: not starting the backend; stopping with 2 steps done "
                         "(exit 75, the next job continues at once)")


def test_with_enough_time_left_the_backend_starts_trains_and_records_its_start_up(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_history(run, steps=[30.0, 34.5], startups=[90.0, 100.0])
    end_job_in(monkeypatch, 3600)

    assert train_in_process() == 0

    assert read_calls(run.art_path) == ["construct", "register"]
    assert run.trained == [2] and run.steps_on_disk() == [0, 1, 2, 3]
    *earlier, startup = run.run_dir.read_startups()
    assert [r["seconds"] for r in earlier] == [90.0, 100.0]
    assert startup["job_id"] == "local" and 0 <= startup["seconds"] < 30, "this job's own start-up, appended"
    phases = startup["phases"]  # the double writes no vLLM log: registration is one phase
    assert sorted(phases) == ["construct", "model", "register"]
    assert sum(phases.values()) == pytest.approx(startup["seconds"], abs=0.01)
    assert [s["reason"] for s in run.run_dir.read_stops()] == ["finished"]


def test_a_run_without_step_history_starts_the_backend_even_with_no_time_left(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    run.run_dir.append_startup(500.0)  # a start-up recorded, no step trained yet: nothing to predict a step from
    end_job_in(monkeypatch, -10)

    assert train_in_process() == EXIT_STOPPED_FOR_TIME

    assert read_calls(run.art_path) == ["construct", "register"]
    assert run.trained == [0], "the first step starts (no prediction); the second has history and does not fit"
    [stop] = run.run_dir.read_stops()
    assert (stop["reason"], stop["step"]) == ("boundary", 1)


def test_a_start_up_longer_than_predicted_still_has_the_first_step_checked_after_it(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_history(run, steps=[1.0], startups=[0.0])  # predicted: 1.2 s in all
    monkeypatch.setenv("ART_FAKE_REGISTER_SECONDS", "2.5")  # the model loads slower this time
    end_job_in(monkeypatch, 3)

    assert train_in_process() == EXIT_STOPPED_FOR_TIME

    assert read_calls(run.art_path) == ["construct", "register"] and run.trained == []
    [stop] = run.run_dir.read_stops()
    assert (stop["reason"], stop["step"], stop["predicted_step_seconds"]) == ("boundary", 1, 1.2)
    assert stop["seconds_left"] < 1.2
    assert run.run_dir.read_startups()[-1]["seconds"] >= 2.5, "the slow start-up is recorded for the next job"


def test_the_step_a_job_resumes_from_is_the_latest_checkpoint_else_the_last_recorded_step(tmp_path: Path) -> None:
    paths = Paths(RunDir(tmp_path / "run"), tmp_path / "art", "run", tmp_path / "model", tmp_path / "data",
                  tmp_path / "judge")
    assert resume_step(paths) == 0, "a new run"
    paths.run_dir.append_step({"step": 4, "seconds": 1.0})
    assert resume_step(paths) == 4, "a backend that keeps its checkpoints elsewhere"
    save_adapter(step_dir(paths.model_dir, 6), 6)
    assert resume_step(paths) == 6, "the checkpoint ART resumes from wins"


def test_the_end_is_read_before_every_step_and_training_stops_at_the_next_boundary(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HPC_JOB_END_TIME", str(time.time() + 3600))
    calls = itertools.count(1)

    def shorten_the_job() -> None:  # during step 2's rollouts (4 a step): the job now ends in 10 s
        if next(calls) == 5:
            os.environ["HPC_JOB_END_TIME"] = str(time.time() + 10)

    with OpenAIServer(scripted(on_policy=shorten_the_job)) as endpoint:
        monkeypatch.setenv("ART_FAKE_INFERENCE_URL", endpoint.base_url)
        assert train_in_process() == EXIT_STOPPED_FOR_TIME

    assert run.trained == [0, 1] and run.steps_on_disk() == [0, 1, 2], "step 2 finished and saved; 3 not started"
    [stop] = run.run_dir.read_stops()
    assert (stop["reason"], stop["step"]) == ("boundary", 2) and stop["seconds_left"] < -19
    assert [s["step"] for s in run.run_dir.read_steps()] == [1, 2]


def test_a_validation_due_first_is_not_started_when_it_would_not_fit(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    precreate_checkpoints(run, range(0, 3))  # step 2 done: the validation at step 2 is due
    run.run_dir.record_validation({"step": 0, "accuracy": 0.5, "seconds": 500.0}, [])
    run.run_dir.append_step({"step": 2, "seconds": 1.0})
    monkeypatch.setenv("HPC_JOB_END_TIME", str(time.time() + 130))  # 100 s left: a step fits, a validation not
    with_validation = [*OVERRIDES[:-1], "val_set_size=2", "eval_steps=2"]

    assert train_in_process(overrides=with_validation) == EXIT_STOPPED_FOR_TIME

    assert [v["step"] for v in run.run_dir.read_validations()] == [0] and run.trained == []
    [stop] = run.run_dir.read_stops()
    assert (stop["reason"], stop["step"], stop["predicted_step_seconds"]) == ("boundary", 2, 600.0)

    monkeypatch.setenv("HPC_JOB_END_TIME", str(time.time() + 3600))
    assert train_in_process(overrides=with_validation) == 0
    validations = run.run_dir.read_validations()
    assert [v["step"] for v in validations] == [0, 2, 3] and all(v["seconds"] >= 0 for v in validations)
    assert [s["reason"] for s in run.run_dir.read_stops()] == ["boundary", "finished"]


def test_a_stop_during_rollouts_records_the_rollout_seconds_it_threw_away(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    stop = StopRequest()
    timer = threading.Timer(0.5, stop.request, ("SIGUSR1",))  # 0.5 s after the first rollout asked the policy
    first_call = threading.Lock()

    def start_the_timer_once() -> None:
        if first_call.acquire(blocking=False):
            timer.start()

    with OpenAIServer(scripted(policy_delay=3.0, on_policy=start_the_timer_once)) as slow:
        monkeypatch.setenv("ART_FAKE_INFERENCE_URL", slow.base_url)
        assert train_in_process(stop) == EXIT_STOPPED_FOR_TIME

    [record] = run.run_dir.read_stops()
    assert (record["reason"], record["step"], record["predicted_step_seconds"]) == ("signal", 0, None)
    assert 4 * 0.5 <= record["lost_rollout_seconds"] < 4 * 1.0, "the step's 4 rollouts ran ~0.5 s each"


def test_a_finished_run_records_its_finish_and_no_time_lost(run: Run) -> None:
    assert train_in_process() == 0

    [stop] = run.run_dir.read_stops()
    assert (stop["reason"], stop["step"], stop["lost_rollout_seconds"]) == ("finished", TOTAL, 0.0)
    assert [s["step"] for s in run.run_dir.read_steps()] == [1, 2, 3]
    assert all(0 <= s["rollout_seconds"] <= s["seconds"] for s in run.run_dir.read_steps())


# -- errors: one line, exit 78 (a configuration error: job control gives the run up) ---------------


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainer.train", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env={**os.environ, **(env or {})})


def test_an_unknown_config_exits_78_with_one_line() -> None:
    result = run_cli("--config", "agent_009")

    assert result.returncode == EXIT_CONFIG_ERROR == 78
    assert result.stderr.strip().splitlines() == [
        "trainer.train: error: unknown config 'agent_009'; known configs: agent_008, learning_curve, smoke"]


def test_an_unknown_override_exits_78_naming_the_accepted_keys() -> None:
    result = run_cli("--config", "agent_008", "learning_rat=1e-5")

    assert result.returncode == EXIT_CONFIG_ERROR
    [line] = result.stderr.strip().splitlines()
    assert "unknown config key 'learning_rat'" in line and "learning_rate" in line


def test_missing_data_exits_78_naming_the_prepare_command(tmp_path: Path) -> None:
    env = {"DATA_DIR": str(tmp_path / "no-data"), "HPC_RUN_DIR": str(tmp_path / "run")}
    result = run_cli("--config", CONFIG, *OVERRIDES, "preflight=false", env=env)

    assert result.returncode == EXIT_CONFIG_ERROR
    [line] = result.stderr.strip().splitlines()
    assert "python -m trainer.data prepare" in line and "no-data" in line


def test_the_preflight_fails_a_job_in_seconds_before_art_is_imported(tmp_path: Path) -> None:
    env = {"DATA_DIR": str(tmp_path / "no-data"), "HPC_RUN_DIR": str(tmp_path / "run"),
           "JUDGE_API_BASE": "http://127.0.0.1:9/v1", "PYTHONVERBOSE": "1"}
    began = time.monotonic()
    result = run_cli("--config", CONFIG, *OVERRIDES, env=env)

    assert result.returncode == EXIT_CONFIG_ERROR and time.monotonic() - began < 30
    errors = [line for line in result.stderr.splitlines() if line.startswith("preflight check")]
    assert [line.split("'")[1] for line in errors] == ["scenarios", "judge", "data"]
    assert "fix: stage it on a login node with internet: `python -m trainer.data prepare`" in errors[-1]
    assert "import 'trainer.training.judge_ping'" in result.stderr  # PYTHONVERBOSE lists every import...
    assert "import 'art'" not in result.stderr  # ... and ART's never came
    assert "import 'litellm'" not in result.stderr  # nor litellm's: the judge check is one plain HTTP POST


def test_a_passing_preflight_logs_its_checks_and_asks_the_judge_once(run: Run, server: OpenAIServer) -> None:
    result = run_cli("--config", CONFIG, *OVERRIDES, "training_dataset_size=2", "preflight_min_free_gb=0",
                     env=run.env)

    assert result.returncode == 0, result.stderr
    assert "preflight: 7 of 7 checks passed" in result.stdout and "preflight check" not in result.stderr
    first_judge = next(r for r in server.requests if r.model == JUDGE_MODEL)
    assert first_judge.messages == [{"role": "user", "content": "Reply with the word OK."}]


def test_a_backend_that_cannot_be_loaded_is_a_setup_error() -> None:
    with pytest.raises(SetupError, match="cannot load 'no_such_module:Backend'.*accepted: 'local'"):
        backend_class("no_such_module:Backend")


# -- pieces ----------------------------------------------------------------------------------------


@given(st.integers(1, 60), st.integers(1, 13), st.integers(1, 4))
def test_total_steps_is_what_iterate_dataset_yields(n: int, groups_per_step: int, epochs: int) -> None:
    from art.utils import iterate_dataset

    config = load_config(CONFIG, [f"groups_per_step={groups_per_step}", f"num_epochs={epochs}"])
    batches = iterate_dataset(list(range(n)), groups_per_step, epochs, use_tqdm=False)
    assert total_steps(n, config) == sum(1 for _ in batches)


def test_gpu_memory_settings_reach_arts_internal_config() -> None:
    model = build_model(load_config("agent_008", ["gpu_memory_utilization=0.6", "max_seq_length=8192"]), "lr_2e-5", [])

    assert model._internal_config["engine_args"]["gpu_memory_utilization"] == 0.6
    assert model._internal_config["init_args"]["max_seq_length"] == 8192
    assert model._internal_config["engine_args"]["max_model_len"] == 8192, "vLLM's context is the planned one"
    assert (model.name, model.run_name, model.project, model.base_model) == (
        "email-agent-008", "lr_2e-5", "email_agent", "Qwen/Qwen2.5-14B-Instruct")


def test_load_in_4bit_reaches_unsloths_init_args() -> None:
    assert build_model(load_config("agent_008"), "r", [])._internal_config["init_args"]["load_in_4bit"] is True
    made = build_model(load_config("learning_curve"), "r", [])
    assert made._internal_config["init_args"]["load_in_4bit"] is False


def test_no_internet_makes_wandb_and_hugging_face_offline(tmp_path: Path) -> None:
    env: dict[str, str] = {"HPC_NO_INTERNET": "1"}
    configure_environment(env, interactive=True, run_dir=tmp_path)

    assert env["WANDB_MODE"] == "offline" and env["HF_HUB_OFFLINE"] == "1"
    assert env["WANDB_DIR"] == str(tmp_path), "offline W&B runs are kept in the run directory"


def test_with_internet_the_network_settings_are_left_alone(tmp_path: Path) -> None:
    env: dict[str, str] = {"WANDB_MODE": "online"}
    configure_environment(env, interactive=True, run_dir=tmp_path)

    assert env["WANDB_MODE"] == "online" and "HF_HUB_OFFLINE" not in env


def test_progress_bars_are_off_in_job_logs_but_not_in_a_terminal(tmp_path: Path) -> None:
    job: dict[str, str] = {}
    configure_environment(job, interactive=False, run_dir=tmp_path)
    terminal: dict[str, str] = {}
    configure_environment(terminal, interactive=True, run_dir=tmp_path)

    assert job["TQDM_DISABLE"] == "1" and "TQDM_DISABLE" not in terminal


def test_wandb_logging_needs_an_api_key_and_the_wandb_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(environment.importlib.util, "find_spec", lambda name: object())
    assert metrics_reporters({}) == []
    assert metrics_reporters({"WANDB_API_KEY": "k"}) == ["wandb"]
    monkeypatch.setattr(environment.importlib.util, "find_spec", lambda name: None)
    assert metrics_reporters({"WANDB_API_KEY": "k"}) == []


def test_a_pack_jobs_vllm_port_is_what_art_serves_the_run_on():
    """Each run of a pack job gets its own port (hpc/job/pack.py); ART's register takes it as vLLM's."""
    assert server_config({"HPC_VLLM_PORT": "41234"}) == {"server_args": {"port": 41234}}
    assert server_config({}) is None and server_config({"HPC_VLLM_PORT": "x"}) is None


def test_a_fast_start_run_gives_arts_vllm_its_own_sampler_not_flashinfers_jit_built_one(tmp_path: Path) -> None:
    """FlashInfer builds its sampling kernels on a machine's first vLLM start (82 s of an H200's)."""
    fast: dict[str, str] = {}
    configure_environment(fast, interactive=True, run_dir=tmp_path, fast_start=True)
    plain: dict[str, str] = {}
    configure_environment(plain, interactive=True, run_dir=tmp_path)
    chosen: dict[str, str] = {"VLLM_USE_FLASHINFER_SAMPLER": "1"}
    configure_environment(chosen, interactive=True, run_dir=tmp_path, fast_start=True)

    assert fast["VLLM_USE_FLASHINFER_SAMPLER"] == "0" and "VLLM_USE_FLASHINFER_SAMPLER" not in plain
    assert chosen["VLLM_USE_FLASHINFER_SAMPLER"] == "1"


def test_arts_vllm_runtime_gets_vllms_v1_runner_unless_the_user_chose(tmp_path: Path) -> None:
    """vLLM 0.25.1's V2 runner fails ART's policy-tracking patch at start-up (seen on an H200)."""
    env: dict[str, str] = {}
    configure_environment(env, interactive=True, run_dir=tmp_path)
    chosen: dict[str, str] = {"VLLM_USE_V2_MODEL_RUNNER": "1"}
    configure_environment(chosen, interactive=True, run_dir=tmp_path)

    assert env["VLLM_USE_V2_MODEL_RUNNER"] == "0" and chosen["VLLM_USE_V2_MODEL_RUNNER"] == "1"


def test_a_fixed_kv_cache_reaches_vllm_as_bytes_so_it_skips_memory_profiling() -> None:
    fixed = build_model(load_config("smoke", ["vllm_kv_cache_gb=1.5"]), "r", [])
    curve = build_model(load_config("learning_curve", ["base_model=/m", "gpu_mode=shared"]), "r", [])

    assert fixed._internal_config["engine_args"]["kv_cache_memory_bytes"] == 1536 * 2**20
    assert curve._internal_config["engine_args"]["kv_cache_memory_bytes"] == 2 * 2**30
    assert "kv_cache_memory_bytes" not in build_model(load_config("smoke"), "r", [])._internal_config["engine_args"]


def test_a_fast_start_run_gives_vllm_eager_mode_without_kernel_autotuning() -> None:
    fast = build_model(load_config("smoke", ["vllm_fast_start=true"]), "r", [])
    plain = build_model(load_config("smoke"), "r", [])

    assert fast._internal_config["engine_args"] == {"gpu_memory_utilization": 0.75, "max_model_len": 16384,
                                                    "enforce_eager": True,
                                                    "kernel_config": {"enable_flashinfer_autotune": False}}
    assert plain._internal_config["engine_args"] == {"gpu_memory_utilization": 0.75, "max_model_len": 16384}


# -- a run moved to another place (hpc/run/bundle.py, hpc/run/unbundle.py) ------------------------------------


def test_a_run_moved_after_step_1_trains_the_next_batches_of_the_same_data_order_in_its_new_place(
    run: Run, art_e_data_dir: Path, start_trainer: Callable[..., subprocess.Popen], tmp_path: Path
) -> None:
    from hpc.run.bundle import bundle
    from hpc.run.ownership import claim
    from hpc.run.unbundle import unbundle
    from tests.doubles.ledger_lines import write_record

    write_record(run.run_dir, "submit", job_id="1", cluster="local")
    claim(run.run_dir, run.model_dir)
    first = start_trainer("first", ART_FAKE_TRAIN_SECONDS="0.5")
    wait_for(lambda: read_or_empty(run.art_path / TRAINING_MARKER) == "0", "step 1 to be training")
    first.send_signal(signal.SIGUSR1)
    assert first.wait(timeout=30) == EXIT_STOPPED_FOR_TIME and run.trained == [0]

    bundle(run.run_dir, tmp_path / "bundle", part_mib=1)
    arrived = unbundle(tmp_path / "bundle", tmp_path / "runs_b", str(tmp_path / "art_b"))
    moved = Run({**run.env, "HPC_RUN_DIR": str(arrived.place.run_dir), "ART_PATH": str(tmp_path / "art_b")},
                RunDir(arrived.place.run_dir), tmp_path / "art_b", arrived.place.model_dir)
    second = start_trainer("second", HPC_RUN_DIR=moved.env["HPC_RUN_DIR"], ART_PATH=moved.env["ART_PATH"])
    assert second.wait(timeout=60) == 0

    assert moved.trained == [1, 2], "the new place trains from step 1's checkpoint on: no step again"
    assert trained_scenario_ids(run) + trained_scenario_ids(moved) == batch_scenario_ids(art_e_data_dir)
    assert moved.run_dir.read_done()["final_step"] == TOTAL and run.run_dir.read_done() is None


# -- what keeps it stable, and the decline rule's decisions ---------------------------------------


def test_the_scheduled_rate_and_the_kl_penalty_reach_the_backend_and_steps_record_them(run: Run) -> None:
    overrides = [*OVERRIDES, "learning_rate=1e-4", "lr_schedule=linear", "kl_penalty_coef=0.1",
                 "kl_penalty_reference=initial", "epsilon=0.2"]
    assert train_in_process(overrides=overrides) == 0
    records = read_train_log(run.art_path)
    rates = [r["learning_rate"] for r in records]
    assert rates[0] == pytest.approx(1e-4) and rates == sorted(rates, reverse=True) and rates[-1] > 0
    assert {(r["objective"]["kl_penalty_coef"], r["objective"]["kl_penalty_reference_step"], r["objective"]["epsilon"])
            for r in records} == {(0.1, 0, 0.2)}
    steps = run.run_dir.read_steps()
    assert [s["learning_rate"] for s in steps] == rates and steps[0]["kl_penalty_coef"] == 0.1


def record_rollback(run: Run, to_step: int) -> None:
    """What a job killed between its rollback decision and the copy leaves: the ledger's record."""
    from hpc.run import ledger
    from hpc.run.ledger import Decline

    run.run_dir.path.mkdir(parents=True, exist_ok=True)
    run.run_dir.record_validation({"step": 0, "accuracy": 0.9}, [])
    run.run_dir.record_validation({"step": to_step - 1, "accuracy": 0.2}, [])
    ledger.append(run.run_dir, Decline(action="rollback", step=to_step - 1, accuracy=0.2, best_step=0,
                                       best_accuracy=0.9, reason="r", rollback=1, to_step=to_step, lr_scale=0.5))


def test_a_job_restarted_mid_rollback_copies_the_best_forward_and_trains_on_at_the_scaled_rate(run: Run) -> None:
    precreate_checkpoints(run, range(0, 2))  # the run declined at step 1; its best is step 0
    record_rollback(run, to_step=2)

    assert train_in_process(overrides=[*OVERRIDES, "learning_rate=1e-4"]) == 0

    assert run.trained == [2], "resumed from the copy, step 2"
    assert (step_dir(run.model_dir, 2) / "adapter_model.safetensors").read_bytes() == (
        step_dir(run.model_dir, 0) / "adapter_model.safetensors").read_bytes()
    assert [r["learning_rate"] for r in read_train_log(run.art_path)] == [pytest.approx(5e-5)]
    assert run.steps_on_disk() == [0, 1, 2, 3], "nothing deleted"


def test_a_run_the_decline_rule_stopped_starts_no_backend_and_is_marked_done(run: Run) -> None:
    from hpc.run import ledger
    from hpc.run.ledger import Decline

    precreate_checkpoints(run, range(0, 2))
    run.run_dir.path.mkdir(parents=True, exist_ok=True)
    ledger.append(run.run_dir, Decline(action="stop", step=1, accuracy=0.2, best_step=0, best_accuracy=0.9,
                                       reason="held-out accuracy fell", steps_left=2))

    assert train_in_process() == 0

    assert run.trained == [] and read_calls(run.art_path) == []
    done = run.run_dir.read_done()
    assert (done["final_step"], done["steps_left"], done["reason"]) == (1, 2, "declined: held-out accuracy fell")
