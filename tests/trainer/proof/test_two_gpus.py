"""The two-GPU stages' parts that need no GPU (trainer/proof/two_gpus.py): the judge block of a job
script started as the judge stage starts it (a fake vLLM behind it), the pack's slots, the baseline's figures."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tests.doubles.fake_vllm import write_executable
from trainer.proof import cli
from trainer.proof.two_gpus import (
    PackSlot,
    ServedJudge,
    check_judge_counts,
    check_same_objective,
    check_slots,
    pack_slots,
)
from trainer.proof.workspace import ProofFailed, Work
from trainer.serving.vllm_server import free_port


def test_the_pack_gives_each_run_its_own_gpu_and_vllm_port(tmp_path: Path) -> None:
    work = Work(tmp_path)
    runs = [work.for_run("a"), work.for_run("b")]
    slots = pack_slots(work, runs, "3,5")
    assert [(s.run_name, s.devices) for s in slots] == [("a", "3"), ("b", "5")]
    assert len({s.port for s in slots}) == 2


def test_the_judge_block_serves_on_the_jobs_second_gpu_gives_the_run_the_first_and_stops_with_it(
        tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("VLLM_BIN", str(write_executable(tmp_path / "vllm")))
    monkeypatch.setenv("FAKE_VLLM_GPUS", str(tmp_path / "judge-gpus"))
    work = Work(tmp_path)
    work.model.mkdir()
    judge = ServedJudge(work, work.run.judge_dir, "4,7", port=free_port())  # the run's judge/, as a job has it
    judge.judge_dir.mkdir(parents=True)
    try:
        workload = judge.start()
        assert workload == {"CUDA_VISIBLE_DEVICES": "4", "HPC_SETUP_ERROR": ""}
        assert (tmp_path / "judge-gpus").read_text() == "7"
        assert (work.run.judge_dir / "address").read_text().strip() == f"127.0.0.1:{judge.port}"
    finally:
        judge.stop()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", judge.port), timeout=2).close()


def test_a_judge_whose_log_is_a_planted_link_is_not_started_and_nothing_is_written_through(
        tmp_path: Path, monkeypatch) -> None:
    """The judge block redirects its server's output with ``>``, which follows a link: its logs are
    made plain files of the run first (hpc/job/plain_file.py), and a link there fails the setup."""
    monkeypatch.setenv("VLLM_BIN", str(write_executable(tmp_path / "vllm")))
    monkeypatch.setenv("FAKE_VLLM_GPUS", str(tmp_path / "judge-gpus"))
    work = Work(tmp_path)
    work.model.mkdir()
    judge = ServedJudge(work, work.run.judge_dir, "4,7", port=free_port())
    judge.judge_dir.mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (judge.judge_dir / "server.log").symlink_to(victim)
    try:
        workload = judge.start()
    finally:
        judge.stop()
    assert workload["HPC_SETUP_ERROR"].startswith("the judge server did not start")
    assert victim.read_text() == "precious\n" and not (tmp_path / "judge-gpus").exists()
    assert "refusing to write" in work.log("judge-job").read_text()


def test_the_served_judges_answers_are_counted_by_status_from_its_access_log(tmp_path: Path) -> None:
    judge = ServedJudge(Work(tmp_path), tmp_path, "0,1")
    (tmp_path / "vllm.log").write_text('INFO: 127.0.0.1:5 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
                                       'INFO: 127.0.0.1:5 - "GET /health HTTP/1.1" 200 OK\n'
                                       'INFO: 127.0.0.1:6 - "POST /v1/chat/completions HTTP/1.1" 400 Bad Request\n'
                                       'INFO: 127.0.0.1:6 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n')
    assert judge.responses() == {"200": 2, "400": 1}


def test_a_pack_whose_slots_are_not_exactly_one_per_member_fails(tmp_path: Path) -> None:
    members = [Work(tmp_path).for_run("a"), Work(tmp_path).for_run("b")]
    good = [PackSlot("a", "0", "8001"), PackSlot("b", "1", "8002")]
    assert check_slots(good, members) == good
    for bad in ([good[0]], [good[0], good[0]], [good[0], PackSlot("b", "0", "8002")], [*good, PackSlot("c", "2", "8003")]):
        with pytest.raises(ProofFailed, match="not exactly one slot each"):
            check_slots(bad, members)


@pytest.mark.parametrize("asked, answered, ok", [
    ({200: 73}, {"200": 73}, True),
    ({200: 73}, {"200": 72}, False),  # a verdict the judge's log does not show answered
    ({200: 72, 400: 1}, {"200": 72, "400": 1}, False),
    ({200: 1}, {"200": 1}, False),  # the preflight's ping alone: no verdict was asked
    ({}, {}, False),
])
def test_the_judge_stage_holds_only_when_every_request_asked_was_answered_200(
        asked: dict, answered: dict, ok: bool, tmp_path: Path) -> None:
    from collections import Counter

    if ok:
        check_judge_counts(Counter(asked), Counter(answered), tmp_path / "vllm.log")
        return
    with pytest.raises(ProofFailed, match="not every verdict asked was answered with 200"):
        check_judge_counts(Counter(asked), Counter(answered), tmp_path / "vllm.log")


def test_the_judges_log_is_read_from_where_this_invocation_began(tmp_path: Path) -> None:
    judge = ServedJudge(Work(tmp_path), tmp_path, "0,1")
    log = tmp_path / "vllm.log"
    log.write_text('INFO: 127.0.0.1:5 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n' * 5)
    offset = judge.log_offset()
    with log.open("a") as out:
        out.write('INFO: 127.0.0.1:6 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n')
    assert judge.responses(offset) == {"200": 1} and judge.responses() == {"200": 6}


def test_the_minimal_loops_objective_must_be_the_trainers() -> None:
    ppo = {"learning_rate": 5e-05, "loss_fn": "ppo", "scale_rewards": True, "importance_sampling_level": "token"}
    check_same_objective(f"baseline objective: {json.dumps(ppo)}\n", ppo)
    with pytest.raises(ProofFailed, match="not trainer.train's"):
        check_same_objective(f"baseline objective: {json.dumps({**ppo, 'loss_fn': 'cispo'})}\n", ppo)
    with pytest.raises(ProofFailed, match="is not printed"):
        check_same_objective("baseline rollouts/s 4.7\n", ppo)


@pytest.mark.parametrize("figures, ok", [
    ([(5.0, 5.0), (4.5, 5.0), (5.5, 5.0)], True),  # median 1.0, spread 0.9-1.1
    ([(4.0, 5.0), (4.5, 5.0), (6.0, 5.0)], False),  # median 0.9: one lucky round does not carry it
])
def test_the_baseline_holds_the_median_round_to_the_target_and_shows_the_spread(
        figures: list[tuple[float, float]], ok: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trainer.proof import two_gpus

    rounds = iter(figures)
    monkeypatch.setattr(two_gpus, "cost_round", lambda work, args, n: (*next(rounds), "side by side"))
    args = cli.parse_args(["--only", "baseline", "--model", str(tmp_path), "--cost_rounds", "3"])
    if ok:
        lines = two_gpus.stage_baseline(Work(tmp_path), args)
        assert "median of 3 rounds; spread 0.900-1.100" in lines[-1]
        return
    with pytest.raises(ProofFailed, match="0.900 of the minimal loop .* below the target 0.95"):
        two_gpus.stage_baseline(Work(tmp_path), args)
