"""The cards users have, emulated (trainer/proof/cards.py): the arithmetic of a capped card, the
launcher's decision for agent_008 on each cluster's card, and the decision held against what ART's
vLLM does there, with a runtime double doing vLLM's memory arithmetic on a pretend card."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.proof.cards import (
    Card,
    CardCheck,
    Emulation,
    VllmOutcome,
    launcher_decision,
    physical_decision,
    start_vllm,
)
from trainer.proof.full_size import training_half
from trainer.proof.memory import VllmMemory
from trainer.proof.workspace import ProofFailed
from trainer.serving.vllm_server import ServerSpec, free_port

REPO = Path(__file__).resolve().parents[3]
H200_GIB, H100_GIB = 143771 / 1024, 81559 / 1024


def test_a_card_is_emulated_as_a_share_of_a_larger_one_and_never_of_a_smaller_one(tmp_path: Path) -> None:
    gh200 = Emulation(Card.of("vista"), H200_GIB)
    assert gh200.card == Card("vista", 96.0, "shared", 1)
    assert gh200.fraction == pytest.approx(96 / H200_GIB) and gh200.problem() is None
    assert gh200.utilization(0.75) == round(0.75 * 96 / H200_GIB, 4) == 0.5128
    env = gh200.env(tmp_path / "peaks")
    assert env["HPC_PROOF_GPU_FRACTION"] == "0.6838" and env["PYTHONPATH"].startswith(str(REPO / "trainer" / "proof" / "card_emulation"))
    assert "cannot be emulated on this 79.6 GiB one" in Emulation(Card.of("vista"), H100_GIB).problem()
    assert Emulation(Card.of("lonestar6"), H100_GIB).problem() is None


def test_the_launchers_decisions_for_agent_008_on_the_users_cards() -> None:
    a100 = launcher_decision(Card.of("lonestar6"))
    assert not a100.fits and a100.gpu_mode == "dedicated"
    assert a100.first_way_overrides() == ["max_seq_length=22528"]
    assert launcher_decision(Card.of("vista")).fits and launcher_decision(Card.of("vista")).gpu_mode == "shared"
    assert launcher_decision(Card.of("local")).fits
    assert physical_decision(H100_GIB, 1).fits and physical_decision(H100_GIB, 1).gpu_mode == "shared"
    assert launcher_decision(Card.of("lonestar6"), ["max_seq_length=22528"]).fits


SERVING = "import sys; from tests.doubles.fake_art_runtime import main; sys.exit(main(sys.argv[1:]))"


@pytest.mark.parametrize("length, started", [(32768, False), (22528, True)])
def test_a_vllm_start_ends_started_or_refused_with_vllms_reason(tmp_path: Path, length: int, started: bool) -> None:
    port = free_port()
    engine = json.dumps({"gpu_memory_utilization": round(0.9 * 40 / H200_GIB, 4), "max_model_len": length})
    command = [sys.executable, "-c", SERVING, f"--port={port}", f"--engine-args-json={engine}"]
    outcome = start_vllm(command, {**os.environ, "PYTHONPATH": str(REPO)}, ServerSpec("m", port=port),
                         tmp_path / "vllm.log", timeout=60)
    assert outcome.started is started and outcome.memory.max_model_len == length
    if not started:
        assert outcome.why.startswith("To serve at least one request with the model's max seq len (32768)")


def test_a_vllm_that_neither_answers_nor_exits_fails_the_check(tmp_path: Path) -> None:
    with pytest.raises(ProofFailed, match="did not answer within 2s"):
        start_vllm([sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ), ServerSpec("m", port=free_port()),
                   tmp_path / "vllm.log", timeout=2)


def test_a_check_holds_when_vllm_did_what_the_launcher_decided() -> None:
    started = VllmOutcome(True, 60.0, VllmMemory(max_model_len=22528), Path("x"))
    refused = VllmOutcome(False, 50.0, VllmMemory(refused="To serve ..."), Path("x"), "To serve ...")
    not_free = VllmOutcome(False, 20.0, VllmMemory(not_free="Free memory on device ..."), Path("x"), "Free memory ...")
    crashed = VllmOutcome(False, 20.0, VllmMemory(), Path("x"), "CUDA error: out of memory")
    assert CardCheck("as planned", False, refused).as_decided and CardCheck("way", True, started).as_decided
    assert not CardCheck("as planned", True, refused).as_decided
    assert "NOT as the launcher decided" in CardCheck("as planned", True, refused).line()
    assert not CardCheck("as planned", False, not_free).as_decided, "another process's memory is not the plan's refusal"
    assert not CardCheck("as planned", False, crashed).as_decided


def test_a_card_check_needs_a_free_gpu(fake_gpu) -> None:
    from trainer.proof.cards import check_free

    fake_gpu.set(500)
    check_free("0")
    fake_gpu.set(30 * 1024)
    with pytest.raises(ProofFailed, match="GPU 0 holds 30.0 GiB before vLLM's start on an emulated card: not free"):
        check_free("0")


@pytest.mark.parametrize("mode, memory, words", [
    ("dedicated", {"training_peak": 16.2}, "16.2 GiB on a card of its own: 40.0 GiB left, fits"),
    ("shared", {"training_peak": 16.2, "vllm_asleep": 30.0}, "vLLM asleep (30.0 GiB): 10.0 GiB left, does NOT fit"),
    ("dedicated", {}, "not measured"),
])
def test_the_training_half_is_the_main_runs_measured_peak_against_the_card(mode: str, memory: dict, words: str) -> None:
    from trainer.proof.cards import Decision

    line = training_half(Decision(True, mode, ""), Emulation(Card.of("lonestar6"), H200_GIB), {"memory_gib": memory})
    assert words in line


def test_the_cards_stage_checks_each_emulated_card_and_says_what_it_cannot_emulate(
        tmp_path: Path, art_e_data_dir: Path, backend_python: Path, fake_gpu) -> None:
    """python -m trainer.proof --only cards, as the lead runs it, on a pretend 80 GB card. The A100's
    decision is held against ART's own command for the trainer's engine arguments and a runtime
    double doing vLLM's arithmetic: refused at 32768 as decided, started with the launcher's way,
    whose max_seq_length=22528 must reach vLLM as its max_model_len. The GH200 is said not to fit."""
    from trainer.staging.data import main as data_main

    assert data_main(["make-model", str(tmp_path / "model"), "--size", "tiny", "--data_dir", str(art_e_data_dir)]) == 0
    fake_gpu.state.update(total_mib=81559, used_mib=300)
    fake_gpu.save()
    runtime = tmp_path / "art-vllm-runtime-server"
    runtime.write_text(f"#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable} -m tests.doubles.fake_art_runtime \"$@\"\n")
    runtime.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(REPO), "ART_VLLM_RUNTIME_BIN": str(runtime), "HF_HUB_OFFLINE": "1",
           "FAKE_RUNTIME_TOTAL_GIB": str(81559 / 1024)}
    result = subprocess.run([str(backend_python), "-m", "trainer.proof", "--work", str(tmp_path / "proof"), "--only",
                             "cards", "--model14b", str(tmp_path / "model"), "--emulate", "lonestar6", "vista"],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    out = result.stdout
    assert "lonestar6 (40 GiB, gpu_mode dedicated): the launcher refuses it" in out
    assert out.count("as the launcher decided") == 2 and "NOT as the launcher decided" not in out
    assert "as planned (dedicated): vLLM refused (To serve at least one request with the model's max seq len (32768)" in out
    assert "with the launcher's way (max_seq_length=22528): vLLM started" in out and "max_model_len 22528" in out
    assert "training half: not measured (run agent008-14b in the same proof first)" in out
    assert "vista: vista's 96 GiB card cannot be emulated on this 79.6 GiB one" in out
    assert "ok cards" in out
