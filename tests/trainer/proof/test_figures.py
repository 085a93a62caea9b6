"""The figures and checks read from a run directory and a trainer's log (trainer/proof/figures.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpc.run.checkpoints import step_dir
from tests.doubles.step_trainer import safetensors_of
from tests.trainer.proof.proof_records import append_step
from trainer.proof.figures import (
    ServedWatch,
    check_consecutive,
    check_served,
    check_trained,
    seconds_to_register,
    served_at,
)
from trainer.proof.loopback_openai import OpenAIServer, text
from trainer.proof.workspace import ProofFailed, RecordMark, Work


def test_register_seconds_run_from_the_config_line_to_registered() -> None:
    log = ("2026-11-26T06:30:00 [trainer] config smoke: run ...\nnoise\n"
           "2026-11-26T06:33:26 [trainer] registered: inference at http://127.0.0.1:8123/v1 as smoke@3\n")
    assert seconds_to_register(log) == 206
    assert served_at(log) == ("http://127.0.0.1:8123/v1", "smoke@3")


def write_checkpoint(work: Work, step: int, weights: list[float]) -> None:
    folder = step_dir(work.model_dir, step)
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text("{}")
    weights_file = safetensors_of({"lora_A.weight": ("F32", [1, len(weights)], weights)}, {"step": str(step)})
    (folder / "adapter_model.safetensors").write_bytes(weights_file)  # the metadata differs at every step




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


def test_steps_lost_or_repeated_fail_the_check(tmp_path: Path) -> None:
    work = Work(tmp_path)
    for step in (1, 2, 2):
        append_step(work, step)
    with pytest.raises(ProofFailed, match=r"steps lost or repeated: \[1, 2, 2\]"):
        check_consecutive(work)


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
