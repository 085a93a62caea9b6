"""The GPU proof at agent_008's size (trainer/proof/full_size.py), driven on CPU: the made model's check,
the plan and its predicted time, and the whole stage (train, stop, resume with vLLM asked what it
serves, the figures) with the backend double in place of ART's LocalBackend and a tiny made model."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import pytest

from trainer.proof import cli
from trainer.proof.cards import Card, Emulation, launcher_decision, physical_decision
from trainer.proof.full_size import FIGURES_FILE, FullPlan, check_made_14b, plan_lines, run_full_size
from trainer.proof.loopback_openai import OpenAIServer, text
from trainer.proof.string_match_judge import string_match_verdict
from trainer.proof.workspace import ProofFailed, Work

H200_GIB = 143771 / 1024
pytestmark = pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")


def made(folder: Path, size: str, **config: object) -> Path:
    folder.mkdir(parents=True)
    (folder / "made_by.json").write_text(json.dumps({"size": size, "parameters": 14_770_033_664, "tokenizer_tokens": 1627}))
    (folder / "config.json").write_text(json.dumps({"num_hidden_layers": 48, "hidden_size": 5120, "intermediate_size": 13824,
                                                    "num_attention_heads": 40, "num_key_value_heads": 8,
                                                    "vocab_size": 152064, "max_position_embeddings": 32768, **config}))
    return folder


def test_the_made_14b_is_checked_for_its_size_and_said_with_its_tokenizers_gap(tmp_path: Path) -> None:
    lines = check_made_14b(made(tmp_path / "m", "qwen2.5-14b"))
    assert lines[0].startswith("48 layers, hidden 5120, intermediate 13824, 40 attention heads, 8 KV heads, embedding "
                               "152064 rows, context 32768: 14.77B parameters")
    assert "a sampled id from 1627 to 152063 decodes to nothing" in lines[1]
    with pytest.raises(ProofFailed, match="is not a model make-model made at size qwen2.5-14b"):
        check_made_14b(made(tmp_path / "small", "small"))


def test_the_plan_names_agent_008s_settings_what_differs_and_the_predicted_sampling_time(tmp_path: Path) -> None:
    from trainer.staging.random_weights import safetensors_header

    model = made(tmp_path / "m", "qwen2.5-14b")
    (model / "model.safetensors").write_bytes(safetensors_header([("all", (14_770_033_664,))]))  # the header is read
    plan = FullPlan(model, "0", H200_GIB, launcher_decision(Card.of("vista")), Emulation(Card.of("vista"), H200_GIB),
                    deviations=("max_tokens=1024",))
    assert plan.overrides() == [f"base_model={model}", "reward=proof_only_text_hash",
                                "backend=trainer.proof.full_length_backend:FullLengthLocalBackend", "gpu_mode=shared",
                                "gpu_memory_utilization=0.5128", "max_tokens=1024"]
    lines = plan_lines(plan, 11, "NVIDIA H200")
    assert lines[0].startswith("agent_008 on vista's 96 GiB card: the launcher decides gpu_mode shared, fits")
    assert "vLLM gets gpu_memory_utilization 0.5128 (0.75 of 96 GiB)" in lines[1]
    assert "4 rollouts x 12 groups a step (11 here: the fixture has 11 training questions)" in lines[2]
    assert "reward=proof_only_text_hash (PROOF ONLY" in lines[3] and "max_tokens=1024 (against agent_008's setting)" in lines[3]
    assert "a step's 44 rollouts sample 1024 tokens each" in lines[4] and "5 waves of 10" in lines[4]


def test_a_card_the_launcher_refuses_is_not_run_and_a_larger_card_is_not_emulated(tmp_path: Path, fake_gpu) -> None:
    args = cli.parse_args(["--only", "agent008-14b", "--model14b", str(tmp_path), "--card", "vista"])
    args.gpus = ["0"]
    fake_gpu.state["total_mib"] = 81559
    fake_gpu.save()
    from trainer.proof.full_size import full_plan

    with pytest.raises(ProofFailed, match="vista's 96 GiB card cannot be emulated on this 79.6 GiB one"):
        full_plan(Work(tmp_path), args)


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
