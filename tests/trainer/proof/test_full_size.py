"""The GPU proof at agent_008's size (trainer/proof/full_size.py), driven on CPU: the whole stage (train, stop, resume with vLLM asked what it
serves, the figures) with the backend double in place of ART's LocalBackend and a tiny made model."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import pytest

from trainer.proof.cards import Card, Emulation, launcher_decision, physical_decision
from trainer.proof.full_size import FIGURES_FILE, run_full_size
from trainer.proof.full_size_plan import FullPlan
from trainer.proof.loopback_openai import OpenAIServer, text
from trainer.proof.string_match_judge import string_match_verdict
from trainer.proof.workspace import ProofFailed, Work

H200_GIB = 143771 / 1024
pytestmark = pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")


# -- the whole stage, with the backend double ------------------------------------------------------------------


def policy() -> object:
    """The random model's turn: text that is no tool call, a new one each time, after a while."""
    numbers = itertools.count()
    return lambda body: text(f"noise {next(numbers)} " * 5, delay=1.5)


@pytest.fixture
def full_size(tmp_path: Path, art_e_data_dir: Path, fake_gpu, monkeypatch: pytest.MonkeyPatch):
    """A proof folder with the fixture data, a tiny made model, a judge, and the policy double at
    ART_FAKE_INFERENCE_URL serving ``email-agent-008@2`` (what the resumed job must find)."""
    from trainer.staging.data import main as data_main

    work_root = tmp_path / "proof"
    (work_root / "data").parent.mkdir(parents=True)
    (work_root / "data").symlink_to(art_e_data_dir)
    model = tmp_path / "model"
    assert data_main(["make-model", str(model), "--size", "tiny", "--data_dir", str(art_e_data_dir)]) == 0
    fake_gpu.set(1000)
    monkeypatch.setenv("ART_FAKE_TRAIN_SECONDS", "0.5")
    with OpenAIServer(string_match_verdict) as judge, \
            OpenAIServer(policy(), served=("base", "email-agent-008@2")) as inference:
        monkeypatch.setenv("ART_FAKE_INFERENCE_URL", inference.base_url)
        yield Work(work_root, judge.base_url, devices="0"), model


def double_plan(model: Path, **extra: object) -> FullPlan:
    settings = ("groups_per_step=2", "trajectories_per_group=2", "max_turns=2", "val_set_size=2")
    return FullPlan(model, "0", H200_GIB, launcher_decision(Card.of("vista")), Emulation(Card.of("vista"), H200_GIB),
                    backend="tests.doubles.art_backend:FakeBackend", settings=settings, timeout=300, **extra)


def test_the_full_size_stage_trains_stops_resumes_on_the_checkpoint_vllm_serves_and_writes_its_figures(
        full_size, capsys) -> None:
    work, model = full_size
    lines = run_full_size(work, double_plan(model), "NVIDIA H200")
    printed = capsys.readouterr().out
    text_out = printed
    assert lines[0] == f"figures in {work.root / FIGURES_FILE}" and "not measured here" in lines[1]
    assert "registered (Unsloth loaded, vLLM serving)" in printed and "step 2 done:" in printed
    assert "LoRA changed at steps [1, 2]" in text_out
    assert "resumed from checkpoint 2" in text_out and "'email-agent-008@2'" in text_out
    assert "none (stopped once step 3 had started)" in text_out and "the run's steps [1, 2]: none lost, none repeated" in text_out
    figures = json.loads((work.root / FIGURES_FILE).read_text())
    assert len(figures["step_seconds"]) == 2 and figures["served_on_resume"] == ["base", "email-agent-008@2"]
    assert figures["predicted_step_seconds"] == pytest.approx(1.2 * figures["step_seconds"][0], abs=0.01)
    assert figures["predicted_startup_seconds"] == pytest.approx(1.2 * figures["startup_seconds"], abs=0.01)
    assert figures["card"] == "vista" and figures["deviations"][0].startswith("reward=proof_only_text_hash")
    assert "nvidia-smi listed no compute process here" in text_out and "not measured here" in text_out
    assert "the GPU at most 1.0 GiB of the card's 96.0 GiB" in text_out


def test_the_full_size_stage_fails_when_vllm_serves_another_checkpoint_on_resume(full_size, monkeypatch) -> None:
    work, model = full_size
    with OpenAIServer(policy(), served=("base", "email-agent-008@1")) as other:
        monkeypatch.setenv("ART_FAKE_INFERENCE_URL", other.base_url)
        with pytest.raises(ProofFailed, match=r"serves \['base', 'email-agent-008@1'\], not email-agent-008@2"):
            run_full_size(work, double_plan(model), "NVIDIA H200")


def test_an_emulated_card_holds_the_run_only_if_the_gpus_total_never_passed_its_size(fake_gpu, tmp_path: Path) -> None:
    from trainer.proof.full_size import check_card_held
    from trainer.proof.memory import ProcessMemory

    plan = double_plan(tmp_path)
    memory = ProcessMemory(gpu="0", phase=lambda: "training")
    fake_gpu.set(90 * 1024)
    memory.sample()
    check_card_held(plan, memory)
    fake_gpu.set(100 * 1024)
    memory.sample()
    with pytest.raises(ProofFailed, match="held 100.0 GiB at its peak, more than the emulated 96 GiB card"):
        check_card_held(plan, memory)
    check_card_held(FullPlan(tmp_path, "0", H200_GIB, plan.decision), memory)  # the lent card itself: nothing emulated


def test_the_physical_card_is_planned_as_the_launcher_plans_a_shared_one() -> None:
    decision = physical_decision(81559 / 1024, 1)
    assert decision.fits and "this 79.6 GiB card" in decision.line


def test_the_full_size_stage_in_two_segments_bundles_after_the_first_and_resumes_from_it_in_a_fresh_folder(
        full_size, tmp_path: Path, capsys) -> None:
    work, model = full_size
    bundle = tmp_path / "bundle"
    run_full_size(work, double_plan(model, bundle_to=bundle, part_mib=1), "NVIDIA H200")
    first = capsys.readouterr().out
    assert "bundled at step 2 into" in first and "resumed from" not in first
    assert json.loads((work.root / FIGURES_FILE).read_text())["bundle"]["step"] == 2

    fresh_root = tmp_path / "fresh"
    fresh_root.mkdir()
    (fresh_root / "data").symlink_to((work.root / "data").resolve())
    fresh = Work(fresh_root, work.judge_url, devices="0")
    run_full_size(fresh, double_plan(model, from_bundle=bundle), "NVIDIA H200")
    second = capsys.readouterr().out
    assert "unbundled" in second and "resumed from checkpoint 2" in second and "'email-agent-008@2'" in second
    assert "the run's steps [1, 2]: none lost, none repeated" in second
    assert json.loads((fresh_root / FIGURES_FILE).read_text())["bundle"]["step"] == 2

    other = tmp_path / "other-model"
    shutil.copytree(model, other)
    shard = next(other.glob("*.safetensors"))
    shard.write_bytes(shard.read_bytes()[:-1] + b"\x01")  # made again, but not the same weights
    (tmp_path / "third").mkdir()
    (tmp_path / "third" / "data").symlink_to((work.root / "data").resolve())
    with pytest.raises(ProofFailed, match="not the one segment 1 trained on"):
        run_full_size(Work(tmp_path / "third", work.judge_url, devices="0"), double_plan(other, from_bundle=bundle),
                      "NVIDIA H200")
    assert not (tmp_path / "third" / "runs").exists()  # refused before anything was unbundled
