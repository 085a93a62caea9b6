"""trainer/staging/warmup_graph.py: the warm-up's step as one static step (a CUDA graph's on a GPU).

No GPU here: the static step runs eagerly on CPU through an injected ``capture`` (the identity: the
step is its own replay), which is everything of the graph path but the capture itself. The torch
parts run in the backend's environment, in a subprocess, as tests/trainer/staging/test_warmup.py's."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from trainer.staging.warmup_graph import WARM_STEPS, capture_failure, prepared_masks
from trainer.staging.warmup_steps import eager_reason

REPO = Path(__file__).resolve().parents[3]

STATIC = """
import copy, json, random, torch
from transformers import Qwen2Config, Qwen2ForCausalLM
from trainer.staging.warmup import Example
from trainer.staging.warmup_steps import trained
from trainer.staging.warmup_batches import DeviceBatches
from trainer.staging.warmup_graph import static_step
torch.manual_seed(0)
config = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0)
model = Qwen2ForCausalLM(config)
rng = random.Random(7)
distinct = [Example([rng.randrange(1, 64) for _ in range(n)], [rng.choice([-100, 3, 4]) for _ in range(n)])
            for n in (5, 9, 2, 14, 9, 1, 7)]
examples = distinct + distinct[:3] + [distinct[3]] * 4  # repeats: the same object more than once
common = dict(steps=10, batch_size=4, learning_rate=1e-3, seed=11, device="cpu")
def run(capture=None, precision="float32", said=None):
    done = trained(copy.deepcopy(model), examples, 0, precision=precision, capture=capture,
                   say=(said.append if said is not None else lambda _: None), **common)
    return {"losses": done.losses, "steps_by": done.steps_by}
same = {p: {"static": run(lambda step: step, p), "eager": run(None, p)} for p in ("float32", "bf16")}
def raises(step):
    raise RuntimeError("CUDA error: operation not permitted when stream is capturing\\nCompile with TORCH_USE_CUDA_DSA")
said = []
fallback = run(raises, said=said)
table = DeviceBatches(examples, 0, "cpu")
step = static_step(copy.deepcopy(model), table, table.picks(4, 10, 11), 1e-3, "float32")
draws, widths = [], []
for batch in DeviceBatches(examples, 0, "cpu").batches(4, 10, seed=11):
    ids, labels = step.batch()
    width = batch["input_ids"].shape[1]
    widths.append([width, ids.shape[1]])
    draws.append(torch.equal(ids[:, :width], batch["input_ids"]) and torch.equal(labels[:, :width], batch["labels"])
                 and bool((ids[:, width:] == 0).all()) and bool((labels[:, width:] == -100).all()))
    step.index.add_(1)
print(json.dumps({"same": same, "fallback": fallback, "said": said, "eager": same["float32"]["eager"],
                  "draws": draws, "widths": widths}))
"""


@pytest.fixture(scope="module")
def static(backend_python: Path) -> dict[str, Any]:
    """The static step's and the eager loop's trainings of one tiny Qwen2 model on CPU (one subprocess)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    result = subprocess.run([str(backend_python), "-c", STATIC], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_padded_static_step_trains_to_the_eager_loops_losses(static: dict[str, Any]) -> None:
    for precision, tolerance in (("float32", 1e-6), ("bf16", 1e-3)):
        runs = static["same"][precision]
        assert runs["static"]["steps_by"] == "graph" and runs["eager"]["steps_by"] == "eager (no CUDA)"
        assert len(runs["static"]["losses"]) == 10
        assert runs["static"]["losses"] == pytest.approx(runs["eager"]["losses"], rel=tolerance)
        assert runs["static"]["losses"][-1] < runs["static"]["losses"][0]  # it trained


def test_a_capture_that_raises_falls_back_to_the_eager_loop_from_the_same_start_and_says_why(
        static: dict[str, Any]) -> None:
    why = "capture failed: RuntimeError: CUDA error: operation not permitted when stream is capturing"
    assert static["fallback"]["steps_by"] == f"eager ({why})"
    assert f"warmup: no CUDA graph, eager steps from the same start ({why})" in static["said"]
    # the warm-up steps before the capture had trained the model: the fallback started from its weights again
    assert static["fallback"]["losses"] == static["eager"]["losses"]


def test_the_static_steps_batches_are_device_batches_draws_padded_to_the_tables_width(
        static: dict[str, Any]) -> None:
    assert len(static["draws"]) == 10 and all(static["draws"])
    assert {full for _, full in static["widths"]} == {14}  # the table's width, every step
    assert len({width for width, _ in static["widths"]}) > 1  # where the eager batches are trimmed


def test_the_graph_is_tried_only_on_cuda_with_more_steps_than_the_eager_warm_up_ones() -> None:
    assert eager_reason(True, "cuda", None, WARM_STEPS + 1) is None
    assert eager_reason(True, "cpu", lambda step: step, WARM_STEPS + 1) is None  # an injected capture
    assert eager_reason(True, "cpu", None, 100) == "no CUDA"
    assert eager_reason(False, "cuda", None, 100) == "asked"
    assert eager_reason(True, "cuda", None, WARM_STEPS) == \
        f"{WARM_STEPS} steps: no more than the {WARM_STEPS} eager ones before a capture"


def test_the_masks_are_handed_over_prepared_only_where_every_layer_attends_fully() -> None:
    model = lambda *kinds: SimpleNamespace(config=SimpleNamespace(layer_types=list(kinds)))  # noqa: E731
    assert prepared_masks(model("full_attention", "full_attention")) == {"full_attention": None}
    assert prepared_masks(model("full_attention", "sliding_attention")) is None
    assert prepared_masks(SimpleNamespace(config=SimpleNamespace())) is None


def test_a_failure_is_named_in_one_line_of_at_most_300_characters_with_the_error_it_was_raised_over() -> None:
    assert capture_failure(RuntimeError("first\nsecond")) == "RuntimeError: first"
    assert len(capture_failure(ValueError("x" * 500))) == 300
    assert capture_failure(KeyError()) == "KeyError: "
    try:
        try:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing\nmore")
        except RuntimeError:
            raise RuntimeError("CUDA error: operation failed due to a previous error during capture") from None
    except RuntimeError as invalidated:
        assert capture_failure(invalidated) == "RuntimeError: CUDA error: operation failed due to a previous error during capture"
    try:
        try:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing\nmore")
        except RuntimeError:
            raise RuntimeError("CUDA error: operation failed due to a previous error during capture")  # noqa: B904 (implicit, as a graph's __exit__)
    except RuntimeError as invalidated:
        assert capture_failure(invalidated) == (
            "RuntimeError: CUDA error: operation failed due to a previous error during capture (raised over "
            "RuntimeError: CUDA error: operation not permitted when stream is capturing)")
