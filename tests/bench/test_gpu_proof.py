"""The GPU proof's parts that need no GPU (bench/gpu_proof.py, gpu_proof_kit.py, gpu_proof_two_gpus.py).

The stages themselves run on a GPU node only; what they are built from runs here: the
judge block of a job script started as the judge stage starts it (a fake vLLM behind it),
the pack's slots, processes stopped by SIGUSR1 once their own condition holds, the
"trained something" check on checkpoint files, and the log and nvidia-smi readings.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from bench import gpu_proof
from bench.gpu_proof_kit import (
    Process, ProofFailed, Work, check_trained, parse_gpu_memory, run_together, seconds_to_register, served_at)
from bench.gpu_proof_two_gpus import ServedJudge, pack_slots
from hpc.run.checkpoints import step_dir
from tests.doubles.fake_vllm import write_executable
from trainer.serving.vllm_server import free_port


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


def test_two_gpu_stages_are_skipped_and_said_so_on_one_gpu(tmp_path: Path, capsys) -> None:
    assert gpu_proof.main(["--work", str(tmp_path), "--gpus", "0", "--only", "dedicated", "judge", "pack"]) == 0
    out = capsys.readouterr().out
    assert out.count("it needs two GPUs and the proof has 1") == 3


# -- trained something ------------------------------------------------------------------------------------


def write_checkpoint(work: Work, step: int, weights: bytes) -> None:
    folder = step_dir(work.model_dir, step)
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text("{}")
    (folder / "adapter_model.safetensors").write_bytes(weights)


def test_a_step_whose_lora_did_not_change_fails_the_check_naming_the_steps_that_did(tmp_path: Path) -> None:
    work = Work(tmp_path)
    for step, weights in enumerate([b"a", b"b", b"b"]):
        write_checkpoint(work, step, weights)
    for step in (1, 2):
        work.run.append_step({"step": step, "seconds": 1.0, "rollout_seconds": 0.5, "trajectories": 12})
    assert [r["step"] for r in check_trained(work, 75, "", 1)] == [1, 2]
    with pytest.raises(ProofFailed, match=r"of 2 steps only \[1\] changed the LoRA"):
        check_trained(work, 75, "", 2)
    with pytest.raises(ProofFailed, match="exited 1, not 75"):
        check_trained(work, 1, "", 1)


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
    judge = ServedJudge(work, tmp_path / "judge", "4,7", port=free_port())
    judge.judge_dir.mkdir()
    try:
        workload = judge.start()
        assert workload == {"CUDA_VISIBLE_DEVICES": "4", "HPC_SETUP_ERROR": ""}
        assert (tmp_path / "judge-gpus").read_text() == "7"
        assert (tmp_path / "judge" / "address").read_text().strip() == f"127.0.0.1:{judge.port}"
    finally:
        judge.stop()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", judge.port), timeout=2).close()


def test_the_served_judges_answers_are_counted_by_status_from_its_access_log(tmp_path: Path) -> None:
    judge = ServedJudge(Work(tmp_path), tmp_path, "0,1")
    (tmp_path / "vllm.log").write_text('INFO: 127.0.0.1:5 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
                                       'INFO: 127.0.0.1:5 - "GET /health HTTP/1.1" 200 OK\n'
                                       'INFO: 127.0.0.1:6 - "POST /v1/chat/completions HTTP/1.1" 400 Bad Request\n'
                                       'INFO: 127.0.0.1:6 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n')
    assert judge.responses() == {"200": 2, "400": 1}
