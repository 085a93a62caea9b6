"""The full-size stages' model and plan (trainer/proof/full_size_plan.py): the made 14B's check, the
plan's overrides and its predicted sampling time, a card the launcher refuses or that cannot be emulated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainer.proof import cli
from trainer.proof.cards import Card, Emulation, launcher_decision
from trainer.proof.full_size_plan import FullPlan, check_made_14b, full_plan, plan_lines
from trainer.proof.workspace import ProofFailed, Work

H200_GIB = 143771 / 1024


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
    with pytest.raises(ProofFailed, match="vista's 96 GiB card cannot be emulated on this 79.6 GiB one"):
        full_plan(Work(tmp_path), args)
