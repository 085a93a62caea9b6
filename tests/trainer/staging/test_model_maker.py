"""trainer.data make-model: a Hugging Face folder written here, loadable by what the GPU path uses.

Without torch (the frontend): the folder's files, the safetensors layout Qwen2ForCausalLM loads, the
bf16 rounding, the tokenizer's special and tool-call tokens, the chat template's Qwen2.5 format.
With the real backend (.venv-backend, as tests/trainer/training/test_real_backend.py): transformers loads the
folder (no weight missing or unexpected), runs it, and the supervised warm-up trains it for two steps.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainer.staging.data import main as data_main
from trainer.staging.model_maker import (
    CHAT_TEMPLATE,
    SIZES,
    ModelMakerError,
    check_size,
    padded_vocab,
    tensor_shapes,
    to_bfloat16,
)
from trainer.agent.tools import TOOL_SCHEMAS

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory, art_e_data_dir: Path) -> Path:
    out = tmp_path_factory.mktemp("made") / "model"
    assert data_main(["make-model", str(out), "--size", "tiny", "--data_dir", str(art_e_data_dir)]) == 0
    return out


def safetensors_header(path: Path) -> dict:
    with path.open("rb") as handle:
        (size,) = struct.unpack("<Q", handle.read(8))
        return json.loads(handle.read(size))


def test_make_model_writes_an_ordinary_hugging_face_folder(made: Path) -> None:
    names = {p.name for p in made.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "vocab.json",
            "merges.txt", "special_tokens_map.json", "generation_config.json", "made_by.json"} <= names
    config = json.loads((made / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForCausalLM"] and config["model_type"] == "qwen2"
    assert config["hidden_size"] // config["num_attention_heads"] == config["head_dim"] == 64


def test_the_weights_are_every_qwen2_parameter_with_its_shape_and_byte_range(made: Path) -> None:
    config = json.loads((made / "config.json").read_text())
    header = safetensors_header(made / "model.safetensors")
    expected = dict(tensor_shapes(SIZES["tiny"], config["vocab_size"]))
    tensors = {name: info for name, info in header.items() if name != "__metadata__"}
    assert {name: tuple(info["shape"]) for name, info in tensors.items()} == expected
    assert all(info["dtype"] == "BF16" for info in tensors.values())
    ends = sorted(info["data_offsets"] for info in tensors.values())
    assert ends[0][0] == 0 and all(a[1] == b[0] for a, b in zip(ends, ends[1:]))  # contiguous, no overlap
    data_bytes = (made / "model.safetensors").stat().st_size - 8 - len(json.dumps(header, separators=(",", ":")))
    assert ends[-1][1] <= data_bytes + 8  # the header's padding is at most 7 bytes


@given(st.lists(st.floats(-1e4, 1e4, allow_nan=False, width=32), min_size=1, max_size=50))
def test_bfloat16_bytes_round_to_the_nearest_representable_value(values: list[float]) -> None:
    array = np.array(values, np.float32)
    back = (np.frombuffer(to_bfloat16(array), "<u2").astype(np.uint32) << 16).view(np.float32)
    assert np.all(np.abs(back - array) <= np.abs(array) * 2.0 ** -8 + 1e-30)


def test_the_tokenizer_has_qwens_special_tokens_and_single_token_tool_call_markers(made: Path) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(made / "tokenizer.json"))
    config = json.loads((made / "tokenizer_config.json").read_text())
    decoder = {record["content"]: record for record in config["added_tokens_decoder"].values()}
    for token in ("<|endoftext|>", "<|im_start|>", "<|im_end|>"):
        assert decoder[token]["special"] is True
    for token in ("<tool_call>", "</tool_call>"):  # vLLM's hermes parser looks them up, and must see them
        assert decoder[token]["special"] is False
        assert tokenizer.encode(f"x {token} y").tokens.count(token) == 1
    assert config["eos_token"] == "<|im_end|>" and config["pad_token"] == "<|endoftext|>"
    assert padded_vocab(tokenizer.get_vocab_size()) == json.loads((made / "config.json").read_text())["vocab_size"]


def render(messages: list[dict], tools: list | None = None, prompt: bool = False) -> str:
    from jinja2 import Environment

    env = Environment()
    env.filters["tojson"] = lambda value: json.dumps(value, ensure_ascii=False)
    return env.from_string(CHAT_TEMPLATE).render(messages=messages, tools=tools, add_generation_prompt=prompt)


def test_the_chat_template_writes_qwen25s_tool_format() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "search_emails", "arguments": '{"keywords": ["x"]}'}}
    text = render([{"role": "system", "content": "S"}, {"role": "user", "content": "Q"},
                   {"role": "assistant", "content": "", "tool_calls": [call]},
                   {"role": "tool", "tool_call_id": "c1", "content": "R1"},
                   {"role": "tool", "tool_call_id": "c2", "content": "R2"}], TOOL_SCHEMAS, prompt=True)
    assert text.startswith("<|im_start|>system\nS\n\n# Tools\n")
    assert json.dumps(TOOL_SCHEMAS[0], ensure_ascii=False) in text
    assert ('<|im_start|>assistant\n<tool_call>\n{"name": "search_emails", "arguments": {"keywords": ["x"]}}\n'
            "</tool_call><|im_end|>\n") in text
    assert "<|im_start|>user\n<tool_response>\nR1\n</tool_response>\n<tool_response>\nR2\n</tool_response><|im_end|>\n" in text
    assert text.endswith("<|im_start|>assistant\n")
    assert render([{"role": "user", "content": "Q"}]).startswith("<|im_start|>system\nYou are a helpful assistant.")


def test_a_bad_size_or_missing_data_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ModelMakerError, match="--size 'huge' is not a model size; accepted: tiny, small"):
        check_size("huge")
    assert data_main(["make-model", str(tmp_path / "m"), "--data_dir", str(tmp_path / "nothing")]) == 2
    assert "no email database at" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


# -- with the real backend: transformers loads, runs and warms up the made model ---------------------------------

BACKEND_CHECK = """
import json, sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from trainer.agent.tools import TOOL_SCHEMAS
from trainer.staging.warmup import warm_up
path, data, out = sys.argv[1:4]
tokenizer = AutoTokenizer.from_pretrained(path)
model, info = AutoModelForCausalLM.from_pretrained(path, output_loading_info=True)
text = tokenizer.apply_chat_template([{"role": "user", "content": "When?"}], tools=TOOL_SCHEMAS, tokenize=False,
                                     add_generation_prompt=True)
ids = tokenizer(text, return_tensors="pt")["input_ids"]
logits = model(ids).logits
report = warm_up(__import__("pathlib").Path(path), __import__("pathlib").Path(out), __import__("pathlib").Path(data),
                 steps=2, batch_size=2, learning_rate=1e-3, max_turns=4, check=1, say=lambda line: None)
print(json.dumps({"missing": sorted(info["missing_keys"]), "unexpected": sorted(info["unexpected_keys"]), "shape": list(logits.shape),
                  "vocab": model.config.vocab_size, "tool_call": tokenizer.convert_tokens_to_ids("<tool_call>"),
                  "losses": [report.first_loss, report.last_loss], "conversations": report.conversations}))
"""


def test_transformers_loads_runs_and_warms_up_the_made_model(made: Path, art_e_data_dir: Path, tmp_path: Path,
                                                             backend_python: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    result = subprocess.run([str(backend_python), "-c", BACKEND_CHECK, str(made), str(art_e_data_dir), str(tmp_path / "w")],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["missing"] == [] and found["unexpected"] == []
    assert found["shape"][-1] == found["vocab"] and found["tool_call"] > 0
    assert found["conversations"] > 0 and found["losses"][1] < found["losses"][0]
    assert (tmp_path / "w" / "model.safetensors").is_file() and (tmp_path / "w" / "tokenizer.json").is_file()
    assert json.loads((tmp_path / "w" / "made_by.json").read_text())["warmup"]["steps"] == 2
