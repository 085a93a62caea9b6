"""trainer.serving.policy: the base model a checkpoint is served on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainer.serving.policy import PolicyError, base_model_for


def checkpoint(model_dir: Path, base: str | None, step: int = 3) -> Path:
    path = model_dir / "checkpoints" / f"{step:04d}"
    path.mkdir(parents=True)
    if base is not None:
        (model_dir / "model.json").write_text(json.dumps({"base_model": base}))
    return path


def test_a_checkpoint_is_served_on_the_base_its_run_trained_not_the_configs(tmp_path: Path) -> None:
    """A run launched with --train_arg base_model=DIR: its LoRA only fits DIR (seen serving the GPU proof's run)."""
    adapter = checkpoint(tmp_path / "run", "/models/made")
    assert base_model_for("Qwen/Qwen2.5-14B-Instruct", [adapter]) == "/models/made"
    assert base_model_for("Qwen/Qwen2.5-14B-Instruct", []) == "Qwen/Qwen2.5-14B-Instruct"
    assert base_model_for("Qwen/Qwen2.5-14B-Instruct", [checkpoint(tmp_path / "old", None)]) == "Qwen/Qwen2.5-14B-Instruct"


def test_checkpoints_of_different_bases_cannot_share_one_server(tmp_path: Path) -> None:
    adapters = [checkpoint(tmp_path / "a", "/models/one"), checkpoint(tmp_path / "b", "/models/two")]
    with pytest.raises(PolicyError, match="trained on different base models"):
        base_model_for("x", adapters)
