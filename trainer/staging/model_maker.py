"""A model the project makes: ``python -m trainer.data make-model DIR [--size NAME]``.

No weights can be fetched on the project's machines, and offline clusters often
cannot fetch them either; a cluster's whole GPU stack (Unsloth loading, ART's vLLM
runtime serving a LoRA, tool calls, GRPO, checkpoints) can still be checked with a
model written here. ``DIR`` becomes an ordinary Hugging Face folder:

- ``config.json`` and the weights: a Qwen2-architecture causal LM with random bf16 weights
  (trainer/staging/random_weights.py: ``model.safetensors``, or shards and their index). The
  architectures are data, ``trainer/staging/model_sizes.yaml``: ``tiny`` (about 5 MB),
  ``small`` (about 25 MB) and ``qwen2.5-14b``, Qwen2.5-14B-Instruct's published config
  (14.77B parameters, 29.5 GB; written with torch on the GPU in about a minute);
- ``tokenizer.json``: a byte-level BPE that the ``tokenizers`` library trains here on
  the staged email corpus (Qwen2's pre-tokenizer), with Qwen2.5's special tokens
  (``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``) and its tool-call markers
  (``<tool_call>``, ``</tool_call>``: single tokens, not special, as vLLM's ``hermes``
  tool parser, which ART configures, expects);
- ``tokenizer_config.json`` with a chat template that writes Qwen2.5's format (tools
  in the system turn, ``<tool_call>`` JSON, ``<tool_response>`` turns), so Unsloth,
  vLLM and ART's tokenization take the folder unchanged.

What differs from a real model beyond the weights: the vocabulary. The made tokenizer has a
few thousand tokens (Qwen2.5's has 151,665) at other ids; the embedding keeps the size's
rows (152,064 for ``qwen2.5-14b``). An id the model samples beyond the tokenizer decodes to
nothing (``tokenizers``' DecodeStream gives None, vLLM an empty string); vLLM accepts prompt
ids below the embedding's size, Unsloth only checks for tokens beyond the embedding, and ART
trains on vLLM's token ids, not on re-tokenized text.

Then ``--config smoke --train_arg base_model=DIR`` checks a cluster without a 30 GB
download. The frontend needs only numpy and tokenizers; with torch (the backend) the values
come from torch's generator, on the GPU where there is one.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

from hpc import yamlfile
from trainer.agent.proof_reward import MADE_BY
from trainer.staging.random_weights import INIT_STD, SHARD_BYTES, tensor_bytes, value_source, write_model_weights

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # Qwen2.5's, in its order
TOOL_TOKENS = ("<tool_call>", "</tool_call>")  # added, not special: the parser must see them in the text
EOS, PAD = "<|im_end|>", "<|endoftext|>"
# Qwen2's pre-tokenizer: contractions, letters with one leading non-letter, single digits, punctuation runs, spaces
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
MAX_POSITIONS = 32768  # the tokenizer's model_max_length; a size's own is max_position_embeddings
SIZES_FILE = Path(__file__).with_name("model_sizes.yaml")
DISK_MARGIN = 1.05  # free space asked beyond the weights' bytes (tokenizer, config, filesystem)

# Qwen2.5's chat format, written for this project: a system turn (with the tools' JSON
# schemas and the call format when there are tools), user and assistant turns, assistant
# tool calls as <tool_call> JSON lines, and tool results grouped into one user turn of
# <tool_response> blocks. Arguments that arrive as a JSON string are written as they are.
CHAT_TEMPLATE = (
    "{%- set default_system = 'You are a helpful assistant.' %}"
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content }}{%- else %}{{- default_system }}{%- endif %}"
    "{{- '\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\\n</tool_call><|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\\n' + default_system + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant' }}"
    "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for tool_call in message.tool_calls or [] %}"
    "{%- set call = tool_call.function if tool_call.function is defined else tool_call %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' + call.name + '\", \"arguments\": ' }}"
    "{%- if call.arguments is string %}{{- call.arguments }}{%- else %}{{- call.arguments | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


@dataclass(frozen=True)
class ModelSize:
    """A made model's architecture: one entry of model_sizes.yaml (config.json's keys of
    Qwen2ForCausalLM, and make-model's own: ``about``, ``tokenizer_vocab``, ``vocab_size``)."""

    name: str
    about: str
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    tokenizer_vocab: int  # the BPE's target size
    vocab_size: int | None  # the embedding's rows; None: the tokenizer's size rounded up to 64
    head_dim: int
    max_position_embeddings: int
    max_window_layers: int
    rope_theta: float
    rms_norm_eps: float
    hidden_act: str
    tie_word_embeddings: bool
    use_sliding_window: bool
    sliding_window: int | None

    def embedding_rows(self, tokens: int) -> int:
        """The embedding's rows for a tokenizer of ``tokens`` tokens."""
        return self.vocab_size if self.vocab_size is not None else padded_vocab(tokens)


# What an entry of model_sizes.yaml may leave out (head_dim and max_window_layers follow its shape).
DEFAULTS = {"max_position_embeddings": MAX_POSITIONS, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
            "hidden_act": "silu", "tie_word_embeddings": True, "use_sliding_window": False, "sliding_window": None}


def load_sizes(path: Path = SIZES_FILE) -> dict[str, ModelSize]:
    """Every size of ``path``; a key it does not know is an error naming the file and the entry."""
    known = {f.name for f in fields(ModelSize)} - {"name"}
    sizes = {}
    for name, entry in yamlfile.load(path.read_text())["sizes"].items():
        unknown = sorted(set(entry) - known)
        if unknown:
            raise ValueError(f"{path}: size {name!r} has unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        values = {**DEFAULTS, "head_dim": entry["hidden_size"] // entry["num_attention_heads"],
                  "max_window_layers": entry["num_hidden_layers"], **entry}
        sizes[name] = ModelSize(name=name, **values)
    return sizes


SIZES = load_sizes()


class ModelMakerError(ValueError):
    """Bad input to make-model: one line naming the value and what is accepted."""


def check_size(name: str) -> ModelSize:
    if name not in SIZES:
        raise ModelMakerError(f"--size {name!r} is not a model size; accepted: {', '.join(SIZES)} "
                              f"({SIZES_FILE.name} beside {Path(__file__).name})")
    return SIZES[name]


# -- tokenizer ------------------------------------------------------------------------------------------


def train_tokenizer(texts: Iterable[str], vocab_size: int):  # -> tokenizers.Tokenizer
    """Byte-level BPE with Qwen2's pre-tokenizer, trained on ``texts``; the special tokens come
    first (ids 0..2), the tool-call markers next, then the learned vocabulary."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS + TOOL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(texts, trainer=trainer)
    tokenizer.add_special_tokens([AddedToken(token, normalized=False) for token in SPECIAL_TOKENS])
    tokenizer.add_tokens([AddedToken(token, normalized=False, special=False) for token in TOOL_TOKENS])
    return tokenizer


def added_tokens_decoder(tokenizer) -> dict[str, dict]:
    """``tokenizer_config.json``'s record of the added tokens, as transformers writes it."""
    return {
        str(tokenizer.token_to_id(token)): {"content": token, "lstrip": False, "normalized": False, "rstrip": False,
                                            "single_word": False, "special": token in SPECIAL_TOKENS}
        for token in SPECIAL_TOKENS + TOOL_TOKENS
    }


def tokenizer_config(tokenizer) -> dict:
    return {
        "tokenizer_class": "Qwen2Tokenizer",
        "added_tokens_decoder": added_tokens_decoder(tokenizer),
        "additional_special_tokens": list(SPECIAL_TOKENS[1:]),
        "bos_token": None,
        "eos_token": EOS,
        "pad_token": PAD,
        "unk_token": None,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "errors": "replace",
        "model_max_length": MAX_POSITIONS,
        "split_special_tokens": False,
        "chat_template": CHAT_TEMPLATE,
    }


def write_tokenizer(tokenizer, out: Path) -> None:
    """tokenizer.json (what fast tokenizers load), vocab.json and merges.txt (what a
    Qwen2Tokenizer built from files reads), tokenizer_config.json and the special tokens map."""
    tokenizer.save(str(out / "tokenizer.json"))
    model = json.loads(tokenizer.to_str())["model"]
    (out / "vocab.json").write_text(json.dumps(model["vocab"], ensure_ascii=False))
    merges = [" ".join(pair) if isinstance(pair, list) else pair for pair in model["merges"]]
    (out / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    write_json(out / "tokenizer_config.json", tokenizer_config(tokenizer))
    write_json(out / "special_tokens_map.json", {"eos_token": EOS, "pad_token": PAD,
                                                 "additional_special_tokens": list(SPECIAL_TOKENS[1:])})


# -- weights ----------------------------------------------------------------------------------------------


def padded_vocab(tokens: int) -> int:
    """The embedding's rows: the tokenizer's size rounded up to 64, as Qwen2.5 pads its vocabulary."""
    return -(-tokens // 64) * 64


def model_config(size: ModelSize, vocab: int, tokenizer) -> dict:
    """config.json: the size's architecture, this tokenizer's special-token ids."""
    eos, pad = tokenizer.token_to_id(EOS), tokenizer.token_to_id(PAD)
    return {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
        "vocab_size": vocab, "hidden_size": size.hidden_size, "intermediate_size": size.intermediate_size,
        "num_hidden_layers": size.num_hidden_layers, "num_attention_heads": size.num_attention_heads,
        "num_key_value_heads": size.num_key_value_heads, "head_dim": size.head_dim,
        "max_position_embeddings": size.max_position_embeddings, "max_window_layers": size.max_window_layers,
        "rope_theta": size.rope_theta, "rms_norm_eps": size.rms_norm_eps, "hidden_act": size.hidden_act,
        "attention_dropout": 0.0, "initializer_range": INIT_STD, "tie_word_embeddings": size.tie_word_embeddings,
        "use_cache": True, "use_sliding_window": size.use_sliding_window, "sliding_window": size.sliding_window,
        "bos_token_id": pad, "eos_token_id": eos, "pad_token_id": pad,
        "torch_dtype": "bfloat16",
    }


def tensor_shapes(size: ModelSize, vocab: int) -> Iterator[tuple[str, tuple[int, ...]]]:
    """Qwen2ForCausalLM's parameters, named as transformers and vLLM load them (an untied LM head last)."""
    hidden, q, kv = size.hidden_size, size.num_attention_heads * size.head_dim, size.num_key_value_heads * size.head_dim
    yield "model.embed_tokens.weight", (vocab, hidden)
    for layer in range(size.num_hidden_layers):
        prefix = f"model.layers.{layer}"
        yield f"{prefix}.input_layernorm.weight", (hidden,)
        for name, rows in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
            yield f"{prefix}.self_attn.{name}.weight", (rows, hidden)
            yield f"{prefix}.self_attn.{name}.bias", (rows,)
        yield f"{prefix}.self_attn.o_proj.weight", (hidden, q)
        yield f"{prefix}.post_attention_layernorm.weight", (hidden,)
        yield f"{prefix}.mlp.gate_proj.weight", (size.intermediate_size, hidden)
        yield f"{prefix}.mlp.up_proj.weight", (size.intermediate_size, hidden)
        yield f"{prefix}.mlp.down_proj.weight", (hidden, size.intermediate_size)
    yield "model.norm.weight", (hidden,)
    if not size.tie_word_embeddings:
        yield "lm_head.weight", (vocab, hidden)


def check_disk(out: Path, size: ModelSize, vocab: int) -> None:
    """Refuse before writing when the folder's filesystem cannot hold the weights."""
    need = sum(tensor_bytes(shape) for _, shape in tensor_shapes(size, vocab)) * DISK_MARGIN
    free = shutil.disk_usage(out).free
    if free < need:
        raise ModelMakerError(f"--size {size.name} needs {need / 1e9:.1f} GB free in {out}, which has "
                              f"{free / 1e9:.1f} GB: free some, or give another folder")


# -- the folder --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MadeModel:
    """What make-model wrote: where, how big, how many tokens and parameters."""

    path: str
    size: str
    vocab_size: int
    parameters: int
    weight_bytes: int
    corpus_texts: int
    tokenizer_tokens: int
    values_from: str  # "torch on cuda", "torch on cpu" or "numpy"
    weight_seconds: float


def write_json(path: Path, value: dict) -> None:
    path.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def make_model(out: Path, texts: list[str], size_name: str = "small", seed: int = 0,
               max_shard_bytes: int = SHARD_BYTES, prefer_torch: bool = True) -> MadeModel:
    """Write the model folder ``out`` (created; files in it are replaced) from ``texts``."""
    size = check_size(size_name)
    if not texts:
        raise ModelMakerError("no text to train the tokenizer on: stage the data first (python -m trainer.data prepare)")
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(texts, size.tokenizer_vocab)
    vocab = size.embedding_rows(tokenizer.get_vocab_size())
    check_disk(out, size, vocab)
    write_tokenizer(tokenizer, out)
    config = model_config(size, vocab, tokenizer)
    write_json(out / "config.json", config)
    write_json(out / "generation_config.json", {"bos_token_id": config["bos_token_id"], "pad_token_id": config["pad_token_id"],
                                                "eos_token_id": [config["eos_token_id"], config["pad_token_id"]]})
    values = value_source(seed, prefer_torch)
    began = time.monotonic()
    weight_bytes = write_model_weights(out, tensor_shapes(size, vocab), values, max_shard_bytes)
    parameters = sum(int(np.prod(shape)) for _, shape in tensor_shapes(size, vocab))
    made = MadeModel(str(out), size_name, vocab, parameters, weight_bytes, len(texts), tokenizer.get_vocab_size(),
                     values.name, round(time.monotonic() - began, 1))
    write_json(out / MADE_BY, {"made_by": "python -m trainer.data make-model", "seed": seed, **asdict(made)})
    return made


def corpus(db_path: Path, limit: int = 20000) -> list[str]:
    """Texts to train the tokenizer on: the staged emails (subject and body) and the tools'
    own words (their JSON schemas), so tool calls tokenize as compactly as emails."""
    import sqlite3

    from trainer.agent.tools import TOOL_SCHEMAS

    if not db_path.is_file():
        raise ModelMakerError(f"no email database at {db_path}: stage the data first (python -m trainer.data prepare)")
    with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT subject, body FROM emails LIMIT ?", (limit,)).fetchall()
    schemas = json.dumps(TOOL_SCHEMAS)
    return [f"{subject}\n{body}" for subject, body in rows] + [schemas, CHAT_TEMPLATE]
