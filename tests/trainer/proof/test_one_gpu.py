"""The GPU proof's parts that need no GPU (bench/gpu_proof.py, gpu_proof_kit.py, gpu_proof_two_gpus.py).

The stages themselves run on a GPU node only; what they are built from runs here: the
judge block of a job script started as the judge stage starts it (a fake vLLM behind it),
the pack's slots, processes stopped by SIGUSR1 once their own condition holds, the
"trained something" check on checkpoint files, and the log and nvidia-smi readings.
"""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import pytest

from bench import gpu_proof
from trainer.proof.counting_forwarder import CountingForwarder
from trainer.proof.figures import ServedWatch, check_consecutive, check_served, check_trained, seconds_to_register, served_at
from trainer.proof.gpus import parse_gpu_memory
from trainer.proof.processes import Process, run_together, run_when_ready
from trainer.proof.workspace import ProofFailed, RecordMark, Work
from trainer.proof.two_gpus import (
    PackSlot,
    ServedJudge,
    check_judge_counts,
    check_same_objective,
    check_slots,
    pack_slots,
)
from hpc.run.checkpoints import step_dir
from tests.doubles.fake_vllm import write_executable
from trainer.proof.loopback_openai import OpenAIServer, failure, text
from tests.doubles.step_trainer import safetensors_of
from trainer.serving.vllm_server import free_port

# litellm noise in the forwarder's test (as tests/trainer/training/test_train.py)
pytestmark = pytest.mark.filterwarnings(
    "ignore:Pydantic serializer warnings:UserWarning", "ignore:There is no current event loop:DeprecationWarning")


# -- readings --------------------------------------------------------------------------------------------


def test_gpu_memory_is_read_by_index_and_junk_lines_are_left_out() -> None:
    assert parse_gpu_memory("0, 71234\n1, 2048\nNo devices were found\n") == {"0": 71234, "1": 2048}


def test_register_seconds_run_from_the_config_line_to_registered() -> None:
    log = ("2026-11-26T06:30:00 [trainer] config smoke: run ...\nnoise\n"
           "2026-11-26T06:33:26 [trainer] registered: inference at http://127.0.0.1:8123/v1 as smoke@3\n")
    assert seconds_to_register(log) == 206
    assert served_at(log) == ("http://127.0.0.1:8123/v1", "smoke@3")


@pytest.mark.parametrize("text", ["0,0", "a", "", "1,x"])
def test_a_bad_gpu_list_is_refused_naming_it(text: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        gpu_proof.parse_args(["--gpus", text])
    assert exit_.value.code == 2 and "invalid --gpus" in capsys.readouterr().err


def made_elsewhere(folder: Path) -> Path:
    """A model folder an earlier proof made and warmed up (only its record: the stages here do not load it)."""
    folder.mkdir(parents=True)
    (folder / "made_by.json").write_text(json.dumps({"size": "small", "warmup": {"steps": 300}}))
    return folder


def test_two_gpu_stages_are_skipped_and_said_so_on_one_gpu(tmp_path: Path, capsys) -> None:
    model = made_elsewhere(tmp_path / "earlier" / "model")
    assert gpu_proof.main(["--work", str(tmp_path / "proof"), "--gpus", "0", "--model", str(model),
                           "--only", "dedicated", "judge", "pack"]) == 0
    out = capsys.readouterr().out
    assert out.count("it needs two GPUs and the proof has 1") == 3


# -- trained something ------------------------------------------------------------------------------------


def write_checkpoint(work: Work, step: int, weights: list[float]) -> None:
    folder = step_dir(work.model_dir, step)
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text("{}")
    weights_file = safetensors_of({"lora_A.weight": ("F32", [1, len(weights)], weights)}, {"step": str(step)})
    (folder / "adapter_model.safetensors").write_bytes(weights_file)  # the metadata differs at every step


def append_step(work: Work, step: int, started: str | None = None) -> None:
    from hpc.run.rundir import utc_now

    work.run.append_step({"step": step, "started": started or utc_now(), "seconds": 1.0, "rollout_seconds": 0.5,
                          "trajectories": 12})


def test_a_step_whose_lora_did_not_change_fails_the_check_naming_the_steps_that_did(tmp_path: Path) -> None:
    work = Work(tmp_path)
    for step, weights in enumerate([[0.0, 1.0], [0.5, 1.0], [0.5, 1.0]]):
        write_checkpoint(work, step, weights)
    mark = RecordMark.take(work.run)
    for step in (1, 2):
        append_step(work, step)
    assert [r["step"] for r in check_trained(work, mark, 75, "", 1)] == [1, 2]
    with pytest.raises(ProofFailed, match=r"of 2 steps only \[1\] changed the LoRA"):
        check_trained(work, mark, 75, "", 2)
    with pytest.raises(ProofFailed, match="exited 1, not 75"):
        check_trained(work, mark, 1, "", 1)


# -- processes stopped by their own condition -------------------------------------------------------------


STOPPABLE = ("import signal, sys, time\n"
             "signal.signal(signal.SIGUSR1, lambda *_: sys.exit(75))\n"
             "print('started', flush=True)\n"
             "time.sleep(60)\n")


def test_each_process_gets_sigusr1_once_its_own_condition_holds(tmp_path: Path) -> None:
    script = tmp_path / "stoppable.py"
    script.write_text(STOPPABLE)
    work = Work(tmp_path)
    flag = tmp_path / "stop-first"

    def first_started_then_stop_it() -> bool:
        started = "started" in work.log("first").read_text()
        if started:
            flag.touch()
        return started

    first = Process(work, "first", [str(script)], until=flag.exists)
    second = Process(work, "second", [str(script)], until=first_started_then_stop_it)
    (code_a, log_a, _), (code_b, _, _) = run_together([first, second], timeout=60)
    assert (code_a, code_b) == (75, 75) and "started" in log_a


def test_a_process_past_its_time_is_killed_and_named(tmp_path: Path) -> None:
    script = tmp_path / "stoppable.py"
    script.write_text(STOPPABLE)
    with pytest.raises(ProofFailed, match="slow: still running after 1 s"):
        run_together([Process(Work(tmp_path), "slow", [str(script)])], timeout=1)


WRITES_STARTED = ("import pathlib, sys, time\n"
                  "time.sleep(0.5)\n"
                  "pathlib.Path(sys.argv[1]).write_text(str(time.time()))\n")


def test_a_process_starts_only_once_its_condition_holds(tmp_path: Path) -> None:
    """vLLMs sharing a GPU must not start together: the second waits for the first's record."""
    script = tmp_path / "writes.py"
    script.write_text(WRITES_STARTED)
    work = Work(tmp_path)
    marks = [tmp_path / "first.mark", tmp_path / "second.mark"]
    first = Process(work, "first", [str(script), str(marks[0])])
    second = Process(work, "second", [str(script), str(marks[1])])
    results = run_when_ready([first, second], [lambda: True, marks[0].exists], timeout=60)
    assert [code for code, _, _ in results] == [0, 0]
    assert second.began >= first.began + 0.5 and float(marks[1].read_text()) > float(marks[0].read_text())


def test_a_process_whose_condition_never_holds_starts_after_the_longest_wait(tmp_path: Path) -> None:
    script = tmp_path / "writes.py"
    script.write_text(WRITES_STARTED)
    work = Work(tmp_path)
    never = Process(work, "never", [str(script), str(tmp_path / "never.mark")])
    [(code, _, _)] = run_when_ready([never], [lambda: False], timeout=60, most_wait=1)
    assert code == 0 and (tmp_path / "never.mark").is_file()


# -- the two-GPU stages' job parts --------------------------------------------------------------------------


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


# -- every proof in a folder of its own, each stage with its own records ---------------------------------


def test_a_work_folder_with_an_earlier_proof_in_it_is_refused_and_nothing_runs(tmp_path: Path, capsys) -> None:
    (tmp_path / "runs").mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    assert gpu_proof.main(["--work", str(tmp_path), "--only", "env"]) == 2
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
        gpu_proof.parse_args(["--work", str(tmp_path), "--only", *only, *extra])
    assert exit_.value.code == 2 and named in capsys.readouterr().err


def test_a_model_from_an_earlier_proof_stands_in_for_the_model_stage(tmp_path: Path) -> None:
    args = gpu_proof.parse_args(["--only", "train", "--model", str(tmp_path)])
    assert args.only == ["train"] and args.model == tmp_path
    work = Work(tmp_path / "proof", made=tmp_path)
    assert work.for_run("proof-pack-a", devices="1").model == tmp_path, "every run of the proof trains on it"
    assert f"base_model={tmp_path}" in work.for_run("proof-judge").train_args()


def test_a_process_counts_only_the_records_written_after_it_started(tmp_path: Path) -> None:
    work = Work(tmp_path)
    append_step(work, 1)
    mark = RecordMark.take(work.run)
    append_step(work, 2)
    assert [r["step"] for r in mark.steps()] == [2]
    append_step(work, 3, started="2020-01-01T00:00:00+00:00")  # written after the mark, dated before it
    with pytest.raises(ProofFailed, match=r"1 record\(s\) dated before this process started"):
        mark.steps()


def test_steps_lost_or_repeated_fail_the_check(tmp_path: Path) -> None:
    work = Work(tmp_path)
    for step in (1, 2, 2):
        append_step(work, step)
    with pytest.raises(ProofFailed, match=r"steps lost or repeated: \[1, 2, 2\]"):
        check_consecutive(work)


# -- eval ------------------------------------------------------------------------------------------------


def write_evaluation(work: Work, records: list[dict], **summary: object) -> None:
    folder = work.run.evaluations_dir / "test-4" / "proof_4"
    folder.mkdir(parents=True)
    (folder / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (folder / "summary.json").write_text(json.dumps({"model": "proof@4", "questions": 4, "accuracy": 0.5, "failed": 0,
                                                     "time": "2030-01-01T00:00:00+00:00", **summary}))


FOUR = [{"correct": True}, {"correct": False}, {"correct": True}, {"correct": False}]


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
        found, kept = gpu_proof.check_evaluation(work, output, "2029-01-01T00:00:00+00:00")
        assert found["accuracy"] == 0.5 and len(kept) == 4
        return
    with pytest.raises(ProofFailed, match=re.escape(named)):
        gpu_proof.check_evaluation(work, output, "2029-01-01T00:00:00+00:00")


# -- pack, judge, boundary, resume -------------------------------------------------------------------------


def test_a_pack_whose_slots_are_not_exactly_one_per_member_fails(tmp_path: Path) -> None:
    members = [Work(tmp_path).for_run("a"), Work(tmp_path).for_run("b")]
    good = [PackSlot("a", "0", "8001"), PackSlot("b", "1", "8002")]
    assert check_slots(good, members) == good
    for bad in ([good[0]], [good[0], good[0]], [good[0], PackSlot("b", "0", "8002")], [*good, PackSlot("c", "2", "8003")]):
        with pytest.raises(ProofFailed, match="not exactly one slot each"):
            check_slots(bad, members)


def test_the_forwarder_passes_every_request_on_unchanged_and_counts_each_status() -> None:
    import litellm

    replies = iter([text('{"accept": true}'), failure(400, "prompt too long")])
    with OpenAIServer(lambda body: next(replies), served=("judge",)) as judge, CountingForwarder(judge.url) as forwarder:
        first = litellm.completion(model="openai/judge", api_base=forwarder.base_url, api_key="x",
                                   messages=[{"role": "user", "content": "q"}], max_retries=0)
        with pytest.raises(litellm.BadRequestError):
            litellm.completion(model="openai/judge", api_base=forwarder.base_url, api_key="x",
                               messages=[{"role": "user", "content": "q"}], max_retries=0, num_retries=0)
        assert first.choices[0].message.content == '{"accept": true}'
        assert forwarder.asked() == {200: 1, 400: 1}
        assert len(judge.requests) == 2 and judge.requests[0].messages == [{"role": "user", "content": "q"}]
    assert forwarder.handlers_alive() == 0  # litellm keeps its connections alive: leaving ends them


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


BOUNDARY_LINE = ("2026-11-26T10:00:04 [trainer] the backend's start (predicted 239.5s) and step 9 (predicted 22.2s) "
                 "would not end before the job's stop signal may come: 26.9s left: not starting the backend; stopping")


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
        gpu_proof.check_boundary(75, mark.stops(), log, line, seconds, mark)
        return
    with pytest.raises(ProofFailed, match=re.escape(named)):
        gpu_proof.check_boundary(75, mark.stops(), log, line, seconds, mark)


@pytest.mark.parametrize("served, ok", [
    (("base", "email-agent-smoke@2"), True),
    (("base", "email-agent-smoke@1"), False),  # ART's log line may say @2; vLLM serves another adapter
    (("base", "email-agent-smoke@2", "email-agent-smoke@3"), False),
])
def test_a_resume_counts_only_when_its_vllm_serves_the_checkpoint_it_resumed_from(
        tmp_path: Path, served: tuple[str, ...], ok: bool) -> None:
    work = Work(tmp_path)
    with OpenAIServer(lambda body: text("x"), served=served) as vllm:
        work.log("resume").write_text(f"2026-11-26T10:00:00 [trainer] registered: inference at {vllm.base_url} as "
                                      "email-agent-smoke@2 (start-up 100.0s)\n")
        watch = ServedWatch(work, "resume", lambda: True)
        assert watch() is True and watch.served == list(served)
    if ok:
        check_served(watch, "email-agent-smoke", 2)
        return
    with pytest.raises(ProofFailed, match=r"serves .* not email-agent-smoke@2|and later"):
        check_served(watch, "email-agent-smoke", 2)


def test_the_resume_watch_waits_for_the_registered_line_before_asking(tmp_path: Path) -> None:
    work = Work(tmp_path)
    work.log("resume").write_text("2026-11-26T10:00:00 [trainer] config smoke: ...\n")
    watch = ServedWatch(work, "resume", lambda: True)
    assert watch() is False and watch.served is None


# -- baseline --------------------------------------------------------------------------------------------


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
    from bench import gpu_proof_two_gpus

    rounds = iter(figures)
    monkeypatch.setattr(gpu_proof_two_gpus, "cost_round", lambda work, args, n: (*next(rounds), "side by side"))
    args = gpu_proof.parse_args(["--only", "baseline", "--model", str(tmp_path), "--cost_rounds", "3"])
    if ok:
        lines = gpu_proof_two_gpus.stage_baseline(Work(tmp_path), args)
        assert "median of 3 rounds; spread 0.900-1.100" in lines[-1]
        return
    with pytest.raises(ProofFailed, match="0.900 of the minimal loop .* below the target 0.95"):
        gpu_proof_two_gpus.stage_baseline(Work(tmp_path), args)


# -- in the background ---------------------------------------------------------------------------------------


def test_a_background_proof_outlives_its_start_and_is_followed_to_its_end(tmp_path: Path, capsys) -> None:
    work = tmp_path / "proof"
    model = made_elsewhere(tmp_path / "earlier" / "model")
    argv = ["--work", str(work), "--gpus", "0", "--model", str(model), "--only", "dedicated", "--background"]
    assert gpu_proof.main(argv) == 0
    assert "follow it with:" in capsys.readouterr().out and (work / "proof.pid").is_file()
    assert gpu_proof.main(["--work", str(work), "--follow", "120"]) == 0
    out = capsys.readouterr().out
    assert "skipped dedicated: it needs two GPUs" in out and "GPU proof: stages dedicated done" in out
    assert out.rstrip().endswith("== ended: exit 0; last stage dedicated")
    assert gpu_proof.main(["--work", str(work), "--follow", "1"]) == 0
    assert "skipped dedicated" not in capsys.readouterr().out, "a line is printed once"


def test_following_a_folder_with_no_background_proof_says_so(tmp_path: Path, capsys) -> None:
    assert gpu_proof.main(["--work", str(tmp_path), "--follow", "1"]) == 2
    assert "no background proof in" in capsys.readouterr().err
