"""trainer.data make-model: a Hugging Face folder written here, loadable by what the GPU path uses.

Without torch (the frontend): the folder's files, the safetensors layout Qwen2ForCausalLM loads, the
bf16 rounding, the tokenizer's special and tool-call tokens, the chat template's Qwen2.5 format, the
architectures as data (model_sizes.yaml, Qwen2.5-14B-Instruct's published numbers), shards written
tensor by tensor, the disk check. With the real backend (.venv-backend, as
tests/trainer/training/test_real_backend.py): transformers loads the folder (no weight missing or
unexpected), runs it, and the supervised warm-up trains it for two steps; a sharded folder written
with torch's values loads the same way.
"""

from __future__ import annotations

import json
import math
import os
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainer.agent.tools import TOOL_SCHEMAS
from trainer.staging.data import main as data_main
from trainer.staging.model_maker import (
    CHAT_TEMPLATE,
    SIZES,
    ModelMakerError,
    check_size,
    load_sizes,
    model_config,
    padded_vocab,
    tensor_shapes,
)
from trainer.staging.random_weights import parameter_count, to_bfloat16, value_source, write_model_weights

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
    with pytest.raises(ModelMakerError, match="--size 'huge' is not a model size; accepted: tiny, small, inbox, qwen2.5-14b"):
        check_size("huge")
    assert data_main(["make-model", str(tmp_path / "m"), "--data_dir", str(tmp_path / "nothing")]) == 2
    assert "no email database at" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


# -- the architectures are data -----------------------------------------------------------------------------


def test_qwen25_14b_is_the_published_config_of_qwen25_14b_instruct() -> None:
    size = SIZES["qwen2.5-14b"]
    config = model_config(size, size.embedding_rows(1700), FakeTokenizer())
    published = {"hidden_size": 5120, "intermediate_size": 13824, "num_hidden_layers": 48, "num_attention_heads": 40,
                 "num_key_value_heads": 8, "vocab_size": 152064, "max_position_embeddings": 32768,
                 "max_window_layers": 70, "rope_theta": 1000000.0, "rms_norm_eps": 1e-06, "hidden_act": "silu",
                 "tie_word_embeddings": False, "use_sliding_window": False, "sliding_window": 131072,
                 "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "torch_dtype": "bfloat16"}
    assert {key: config[key] for key in published} == published
    assert config["head_dim"] == 128
    shapes = dict(tensor_shapes(size, config["vocab_size"]))
    assert shapes["lm_head.weight"] == shapes["model.embed_tokens.weight"] == (152064, 5120)  # untied
    assert sum(math.prod(shape) for shape in shapes.values()) == 14_770_033_664  # the 14.77B of hpc/launcher/models.yaml


def test_the_launchers_shape_of_agent_008s_model_is_the_made_architectures() -> None:
    from hpc.launcher.gpu_memory import known_models

    shape, size = known_models()["Qwen/Qwen2.5-14B-Instruct"], SIZES["qwen2.5-14b"]
    assert (shape.layers, shape.kv_heads, shape.head_dim, shape.hidden) == (
        size.num_hidden_layers, size.num_key_value_heads, size.head_dim, size.hidden_size)
    assert shape.params_b == round(sum(math.prod(s) for _, s in tensor_shapes(size, 152064)) / 1e9, 2)


class FakeTokenizer:
    def token_to_id(self, token: str) -> int:
        return {"<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2}[token]


def test_an_unknown_key_in_the_sizes_file_is_an_error_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "sizes.yaml"
    bad.write_text("sizes:\n  odd: {about: x, hidden_size: 64, intermediate_size: 128, num_hidden_layers: 1,\n"
                   "         num_attention_heads: 1, num_key_value_heads: 1, tokenizer_vocab: 300, vocab_size: null,\n"
                   "         hiden_act: silu}\n")
    with pytest.raises(ValueError, match="size 'odd' has unknown key\\(s\\) hiden_act"):
        load_sizes(bad)


# -- weights: sharded, tensor by tensor -------------------------------------------------------------------------


def test_shards_hold_every_tensor_in_order_each_written_when_its_turn_comes(tmp_path: Path) -> None:
    tensors = [(f"t{i}", (4, 8)) for i in range(5)] + [("big", (64, 8))]
    asked: list[str] = []

    def values(name: str, shape: tuple[int, ...]) -> bytes:
        asked.append(name)
        return bytes([len(asked)]) * (math.prod(shape) * 2)

    written = write_model_weights(tmp_path, tensors, values, max_shard_bytes=150)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert files == [f"model-0000{i}-of-00004.safetensors" for i in range(1, 5)]  # 2+2+1 small, big alone
    assert asked == [name for name, _ in tensors] and list(index["weight_map"]) == asked
    assert index["metadata"]["total_size"] == sum(math.prod(shape) * 2 for _, shape in tensors)
    assert written == sum((tmp_path / f).stat().st_size for f in files)
    big = tmp_path / index["weight_map"]["big"]
    header = safetensors_header(big)
    start = 8 + len(json.dumps(header, separators=(",", ":")))
    start += -start % 8
    assert big.read_bytes()[start:] == bytes([6]) * (64 * 8 * 2)
    assert parameter_count(tmp_path) == sum(math.prod(shape) for _, shape in tensors)


def test_one_shard_is_model_safetensors_with_no_index(made: Path) -> None:
    assert not (made / "model.safetensors.index.json").exists()
    assert parameter_count(made) == json.loads((made / "made_by.json").read_text())["parameters"]


def test_without_torch_the_values_are_numpy_s(made: Path) -> None:
    assert value_source(0, prefer_torch=False).name == "numpy"
    assert json.loads((made / "made_by.json").read_text())["values_from"] in ("numpy", "torch on cpu")


def test_a_size_the_disk_cannot_hold_is_refused_before_any_weight_is_written(
        tmp_path: Path, art_e_data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trainer.staging import model_maker

    monkeypatch.setattr(model_maker.shutil, "disk_usage", lambda path: shutil_usage(free=20 * 10**9))
    texts = model_maker.corpus(art_e_data_dir / "enron_emails.db")
    with pytest.raises(ModelMakerError, match=r"--size qwen2.5-14b needs 31.0 GB free in .*, which has 20.0 GB"):
        model_maker.make_model(tmp_path / "m", texts, "qwen2.5-14b")
    assert not list((tmp_path / "m").glob("*.safetensors"))


def shutil_usage(free: int):
    import shutil

    return shutil._ntuple_diskusage(10**12, 10**12 - free, free)


def test_an_id_beyond_the_made_tokenizer_decodes_to_nothing(made: Path) -> None:
    """What vLLM's detokenizer (tokenizers' DecodeStream) makes of an id the model samples between
    the tokenizer's size and the embedding's: None, which vLLM turns into ''."""
    from tokenizers import Tokenizer
    from tokenizers.decoders import DecodeStream

    tokenizer = Tokenizer.from_file(str(made / "tokenizer.json"))
    hello = tokenizer.encode("Hello there").ids
    stream = DecodeStream(skip_special_tokens=True)
    pieces = [stream.step(tokenizer, token) for token in [hello[0], tokenizer.get_vocab_size() + 7, *hello[1:]]]
    assert pieces[1] is None and "".join(p or "" for p in pieces) == "Hello there"


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
from trainer.staging.model_maker import corpus, make_model
sharded = __import__("pathlib").Path(out) / "sharded"
made = make_model(sharded, corpus(__import__("pathlib").Path(data) / "enron_emails.db"), "tiny", max_shard_bytes=1_000_000)
loaded, sharded_info = AutoModelForCausalLM.from_pretrained(sharded, output_loading_info=True)
print(json.dumps({"missing": sorted(info["missing_keys"]), "unexpected": sorted(info["unexpected_keys"]), "shape": list(logits.shape),
                  "vocab": model.config.vocab_size, "tool_call": tokenizer.convert_tokens_to_ids("<tool_call>"),
                  "losses": [report.first_loss, report.last_loss], "conversations": report.conversations,
                  "sharded": {"values_from": made.values_from, "shards": len(list(sharded.glob("model-*.safetensors"))),
                              "missing": sorted(sharded_info["missing_keys"]) + sorted(sharded_info["unexpected_keys"]),
                              "std": float(loaded.model.layers[0].mlp.up_proj.weight.float().std()),
                              "norm": float(loaded.model.norm.weight.float().mean())}}))
"""


def test_transformers_loads_runs_and_warms_up_the_made_model_and_a_sharded_one(made: Path, art_e_data_dir: Path, tmp_path: Path,
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
    sharded = found["sharded"]  # a sharded folder written with torch's values loads the same way
    assert sharded["values_from"] == "torch on cpu" and sharded["shards"] > 1 and sharded["missing"] == []
    assert abs(sharded["std"] - 0.02) < 0.002 and sharded["norm"] == 1.0


TARGETS_CHECK = """
import json, sys
from pathlib import Path
from transformers import AutoTokenizer
from trainer.agent.email_db import EmailDB
from trainer.agent.rollout import AgentConfig
from trainer.agent.scenarios import load_scenarios
from trainer.staging.warmup import scripted_conversations, to_example
path, data = sys.argv[1:3]
tokenizer = AutoTokenizer.from_pretrained(path)
with EmailDB(Path(data) / "enron_emails.db") as db:
    messages = scripted_conversations(load_scenarios(Path(data), "train", limit=None), db, AgentConfig(max_turns=4))[0]
def labelled(targets):
    example = to_example(tokenizer, messages, targets)
    return example.input_ids, [label != -100 for label in example.labels]
ids, assistant = labelled("assistant")
same_ids, conversation = labelled("conversation")
decode = lambda flags: tokenizer.decode([i for i, f in zip(ids, flags) if f])
print(json.dumps({"same_ids": ids == same_ids, "subset": all(c for a, c in zip(assistant, conversation) if a),
                  "first": conversation.index(True), "assistant_first": assistant.index(True),
                  "tail": all(conversation[conversation.index(True):]),
                  "assistant_text": decode(assistant), "conversation_text": decode(conversation),
                  "question": messages[1]["content"], "result": messages[3]["content"]}))
"""


def test_the_warmups_loss_counts_the_assistant_turns_or_everything_after_the_system_prompt(
        made: Path, art_e_data_dir: Path, backend_python: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    result = subprocess.run([str(backend_python), "-c", TARGETS_CHECK, str(made), str(art_e_data_dir)],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["same_ids"] and found["subset"] and found["tail"]
    assert found["first"] < found["assistant_first"]  # the question is a target too, the system prompt is not
    assert found["question"] not in found["assistant_text"] and found["question"] in found["conversation_text"]
    assert found["result"][:40] in found["conversation_text"] and found["result"][:40] not in found["assistant_text"]
    assert "search_emails" in found["assistant_text"]
