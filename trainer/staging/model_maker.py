"""A model the project makes: ``python -m trainer.data make-model DIR``.

No weights can be fetched on the project's machines, and offline clusters often
cannot fetch them either; a cluster's whole GPU stack (Unsloth loading, ART's vLLM
runtime serving a LoRA, tool calls, GRPO, checkpoints) can still be checked with a
model written here. ``DIR`` becomes an ordinary Hugging Face folder:

- ``config.json`` and ``model.safetensors``: a Qwen2-architecture causal LM with
  random weights (bf16; ``--size``: ``tiny`` about 5 MB, ``small`` about 30 MB);
- ``tokenizer.json``: a byte-level BPE that the ``tokenizers`` library trains here on
  the staged email corpus (Qwen2's pre-tokenizer), with Qwen2.5's special tokens
  (``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``) and its tool-call markers
  (``<tool_call>``, ``</tool_call>``: single tokens, not special, as vLLM's ``hermes``
  tool parser, which ART configures, expects);
- ``tokenizer_config.json`` with a chat template that writes Qwen2.5's format (tools
  in the system turn, ``<tool_call>`` JSON, ``<tool_response>`` turns), so Unsloth,
  vLLM and ART's tokenization take the folder unchanged.

Then ``--config smoke --train_arg base_model=DIR`` checks a cluster without a 30 GB
download. Only numpy and tokenizers are needed (the frontend has both): the
safetensors file is written by hand (its format is a JSON header and raw tensors).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from trainer.staging.random_weights import INIT_STD, initial_value, to_bfloat16, write_safetensors

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # Qwen2.5's, in its order
TOOL_TOKENS = ("<tool_call>", "</tool_call>")  # added, not special: the parser must see them in the text
EOS, PAD = "<|im_end|>", "<|endoftext|>"
# Qwen2's pre-tokenizer: contractions, letters with one leading non-letter, single digits, punctuation runs, spaces
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
MAX_POSITIONS = 32768

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
    """The shape of a made model: Qwen2's layout, small enough to write in a second."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int  # the tokenizer's target; the model's embedding is rounded up to a multiple of 64

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


SIZES = {
    # head_dim 64 everywhere: FlashAttention's and vLLM's kernels take it
    "tiny": ModelSize(256, 768, 2, 4, 2, 4096),
    "small": ModelSize(512, 1536, 4, 8, 2, 8192),
}


class ModelMakerError(ValueError):
    """Bad input to make-model: one line naming the value and what is accepted."""


def check_size(name: str) -> ModelSize:
    if name not in SIZES:
        raise ModelMakerError(f"--size {name!r} is not a model size; accepted: {', '.join(SIZES)}")
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
    eos, pad = tokenizer.token_to_id(EOS), tokenizer.token_to_id(PAD)
    return {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
        "vocab_size": vocab, "hidden_size": size.hidden_size, "intermediate_size": size.intermediate_size,
        "num_hidden_layers": size.num_hidden_layers, "num_attention_heads": size.num_attention_heads,
        "num_key_value_heads": size.num_key_value_heads, "head_dim": size.head_dim,
        "max_position_embeddings": MAX_POSITIONS, "max_window_layers": size.num_hidden_layers,
        "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "hidden_act": "silu", "attention_dropout": 0.0,
        "initializer_range": INIT_STD, "tie_word_embeddings": True, "use_cache": True,
        "use_sliding_window": False, "sliding_window": None,
        "bos_token_id": pad, "eos_token_id": eos, "pad_token_id": pad,
        "torch_dtype": "bfloat16",
    }


def tensor_shapes(size: ModelSize, vocab: int) -> Iterator[tuple[str, tuple[int, ...]]]:
    """Qwen2ForCausalLM's parameters, named as transformers and vLLM load them (the LM head is tied)."""
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


def write_weights(out: Path, size: ModelSize, vocab: int, seed: int) -> int:
    rng = np.random.default_rng(seed)
    return write_safetensors(out / "model.safetensors", (
        (name, shape, to_bfloat16(initial_value(name, shape, rng))) for name, shape in tensor_shapes(size, vocab)))


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


def write_json(path: Path, value: dict) -> None:
    path.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def make_model(out: Path, texts: list[str], size_name: str = "small", seed: int = 0) -> MadeModel:
    """Write the model folder ``out`` (created; files in it are replaced) from ``texts``."""
    size = check_size(size_name)
    if not texts:
        raise ModelMakerError("no text to train the tokenizer on: stage the data first (python -m trainer.data prepare)")
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(texts, size.vocab_size)
    vocab = padded_vocab(tokenizer.get_vocab_size())
    write_tokenizer(tokenizer, out)
    config = model_config(size, vocab, tokenizer)
    write_json(out / "config.json", config)
    write_json(out / "generation_config.json", {"bos_token_id": config["bos_token_id"], "pad_token_id": config["pad_token_id"],
                                                "eos_token_id": [config["eos_token_id"], config["pad_token_id"]]})
    weight_bytes = write_weights(out, size, vocab, seed)
    parameters = sum(int(np.prod(shape)) for _, shape in tensor_shapes(size, vocab))
    made = MadeModel(str(out), size_name, vocab, parameters, weight_bytes, len(texts))
    write_json(out / "made_by.json", {"made_by": "python -m trainer.data make-model", "seed": seed, **asdict(made)})
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
