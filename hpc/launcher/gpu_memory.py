"""Will a training config fit the cluster's GPUs? An estimate the launcher checks.

A run that cannot fit fails minutes into its first job (vLLM refuses to start,
or Unsloth runs out of memory), after queueing for hours. The launcher
estimates instead, from the base model's shape (``hpc/launcher/models.yaml``) and the
config's GPU settings, and refuses with one line naming the ways that fit.

What ART's LocalBackend puts on a GPU (sizes in GiB; ``G`` is one GPU):

- vLLM serves the base model in bf16 (2 bytes a parameter) with room for the
  KV cache of at least one ``max_seq_length`` sequence (vLLM refuses to start
  otherwise), plus about 2 GiB of CUDA graphs and activations, all within its
  share ``gpu_memory_utilization x G``.
- Unsloth keeps the base model at 4 bit (about 0.55 bytes a parameter with
  scales and the bf16 embeddings; 2 bytes in bf16 with ``load_in_4bit: false``)
  plus the LoRA and its optimizer state resident, and while training adds, for
  each of the ``TRAIN_ROWS`` rows of ``max_seq_length`` tokens it trains on at once
  (ART's per_device_train_batch_size): the log-softmax over the whole vocabulary
  in fp32, which ART computes chunk by chunk but keeps for the backward pass (4
  bytes a token and vocabulary entry), a bf16 attention bias of sequence x sequence,
  and the checkpointed activations (a few bytes a token and hidden unit). On an H200
  agent_008's 14B training process holds 48.6 GiB while it trains rows of 32768 tokens
  (tests/hpc/launcher/test_gpu_memory.py); a term in the hidden size alone comes to 10.8 GiB.
- ``gpu_mode: shared`` (ART's default): both on one GPU. vLLM sleeps while
  Unsloth trains, but Unsloth's weights stay while vLLM serves, so they must fit
  beside vLLM's share. ``dedicated``: vLLM on one GPU, Unsloth on another.

These are estimates with stated margins, not measurements: a config near the
edge passes and may still need tuning on the GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from hpc import yamlfile
from hpc.job.gpu_modes import GpuMode
from hpc.launcher.trainer_config import VLLM_SHARE

MODELS_FILE = Path(__file__).with_name("models.yaml")
GIB = 2**30
CUDA_CONTEXT_GIB = 1.0  # per process on a GPU
VLLM_OVERHEAD_GIB = 2.0  # CUDA graphs, activations, LoRA slots
QUANT_BYTES_PER_PARAM = 0.55  # NF4 weights + scales + bf16 embeddings, averaged
BF16_BYTES_PER_PARAM = 2.0  # the training copy with load_in_4bit: false
LORA_AND_OPTIMIZER_GIB = 1.0
ACTIVATION_BYTES_PER_TOKEN_HIDDEN = 8  # checkpointed, offloaded activations
TRAIN_ROWS = 2  # sequences trained on at once: ART's per_device_train_batch_size (art/dev/get_model_config.py)
LOGPROB_BYTES_PER_TOKEN_VOCAB = 4  # fp32 log-softmax of every chunk, kept for backward (art/unsloth/train.py)
ATTENTION_BIAS_BYTES = 2  # bf16, rows x sequence x sequence (art/unsloth/train.py's calculate_attn_bias)
_SIZE_IN_NAME = re.compile(r"(\d+(?:\.\d+)?)[Bb](?![a-z])")


@dataclass(frozen=True)
class ModelShape:
    """What sizes a model's memory: parameters and the attention shape of its KV cache."""

    name: str
    params_b: float
    layers: int
    kv_heads: int
    head_dim: int
    hidden: int
    vocab: int  # vocab_size: the rows of the output layer ART's training takes the log-softmax over
    estimated: bool = False  # True when guessed from the size in the name

    def kv_gib_per_token(self) -> float:
        return 2 * self.layers * self.kv_heads * self.head_dim * 2 / GIB  # K and V, bf16


@dataclass(frozen=True)
class Plan:
    """The GPU settings of one run."""

    gpu_gib: float
    gpu_mode: str
    utilization: float
    max_seq_length: int
    load_in_4bit: bool = True  # the config key: Unsloth's copy of the base model in 4 bits (else bf16)


@dataclass(frozen=True)
class Estimate:
    """What a plan needs against what it gets, per consumer (GiB)."""

    vllm_need: float
    vllm_budget: float
    train_resident: float
    train_resident_budget: float
    train_peak: float
    train_peak_budget: float

    @property
    def fits(self) -> bool:
        return (self.vllm_need <= self.vllm_budget and self.train_resident <= self.train_resident_budget
                and self.train_peak <= self.train_peak_budget)

    def summary(self) -> str:
        return (f"vLLM {self.vllm_need:.1f} of {self.vllm_budget:.1f} GiB, training "
                f"{self.train_peak:.1f} of {self.train_peak_budget:.1f} GiB")


@lru_cache(maxsize=1)
def known_models() -> dict[str, ModelShape]:
    raw = yamlfile.load(MODELS_FILE.read_text())["models"]
    return {name: ModelShape(name, **fields) for name, fields in raw.items()}


def model_shape(base_model: str) -> ModelShape | None:
    """The model's shape from hpc/launcher/models.yaml, else scaled from the size in its name, else None."""
    known = {name.lower(): shape for name, shape in known_models().items()}
    if base_model.lower() in known:
        return known[base_model.lower()]
    size = _SIZE_IN_NAME.search(base_model.rsplit("/", 1)[-1])
    if not size:
        return None
    ref = known_models()["Qwen/Qwen2.5-14B-Instruct"]
    scale = float(size.group(1)) / ref.params_b
    return ModelShape(base_model, float(size.group(1)), max(1, round(ref.layers * scale ** 0.5)), ref.kv_heads,
                      ref.head_dim, ref.hidden, ref.vocab, estimated=True)


def estimate(shape: ModelShape, plan: Plan) -> Estimate:
    vllm_need = (shape.params_b * 1e9 * 2 / GIB + shape.kv_gib_per_token() * plan.max_seq_length
                 + VLLM_OVERHEAD_GIB)
    per_param = QUANT_BYTES_PER_PARAM if plan.load_in_4bit else BF16_BYTES_PER_PARAM
    resident = shape.params_b * 1e9 * per_param / GIB + LORA_AND_OPTIMIZER_GIB + CUDA_CONTEXT_GIB
    peak = resident + training_activations_gib(shape, plan.max_seq_length)
    usable = plan.gpu_gib - CUDA_CONTEXT_GIB
    if plan.gpu_mode == GpuMode.DEDICATED:
        return Estimate(vllm_need, plan.utilization * usable, resident, usable, peak, usable)
    beside_vllm = (1 - plan.utilization) * plan.gpu_gib
    return Estimate(vllm_need, plan.utilization * usable, resident, beside_vllm, peak, usable)


def training_activations_gib(shape: ModelShape, seq: int) -> float:
    """What a training step adds to the resident model, for TRAIN_ROWS rows of ``seq`` tokens."""
    per_token = shape.vocab * LOGPROB_BYTES_PER_TOKEN_VOCAB + shape.hidden * ACTIVATION_BYTES_PER_TOKEN_HIDDEN
    return TRAIN_ROWS * seq * (per_token + seq * ATTENTION_BIAS_BYTES) / GIB


@dataclass(frozen=True)
class Fit:
    """The verdict for one config on one cluster: ``ways`` are the alternatives that fit."""

    ok: bool
    line: str
    ways: tuple[str, ...] = ()


def check_fit(base_model: str, plan: Plan, gpus_per_node: int, where: str) -> Fit:
    shape = model_shape(base_model)
    if shape is None:
        return Fit(True, f"{base_model}: unknown size, not estimated (add it to hpc/launcher/models.yaml)")
    result = estimate(shape, plan)
    guess = " (size guessed from its name)" if shape.estimated else ""
    line = f"{base_model}{guess}, {plan.gpu_mode}, {where}: {result.summary()}"
    if result.fits:
        return Fit(True, line)
    return Fit(False, line, tuple(ways_that_fit(shape, plan, gpus_per_node)))


def ways_that_fit(shape: ModelShape, plan: Plan, gpus_per_node: int) -> list[str]:
    """Launcher flags that make the estimate fit, best first."""
    ways = []
    if plan.gpu_mode == GpuMode.SHARED and gpus_per_node >= 2:
        dedicated = replace(plan, gpu_mode=GpuMode.DEDICATED, utilization=max(plan.utilization, VLLM_SHARE[GpuMode.DEDICATED]))
        if estimate(shape, dedicated).fits:
            ways.append(train_args(gpu_mode=GpuMode.DEDICATED, gpu_memory_utilization=dedicated.utilization))
        elif (seq := longest_sequence(shape, dedicated)) is not None:
            ways.append(train_args(gpu_mode=GpuMode.DEDICATED, gpu_memory_utilization=dedicated.utilization,
                                   max_seq_length=seq))
    if (seq := longest_sequence(shape, plan)) is not None:
        ways.append(train_args(max_seq_length=seq))
    if (smaller := largest_model_that_fits(shape, plan)) is not None:
        ways.append(train_args(base_model=smaller))
    ways.append(f"a partition whose GPUs have at least {smallest_gpu_that_fits(shape, plan)} GB (--partition)")
    return ways


def train_args(**settings: object) -> str:
    """``--train_arg k=v ...`` as a user types it; dedicated mode also needs two GPUs."""
    text = " ".join(f"--train_arg {key}={value}" for key, value in settings.items())
    return text + (" --gpus_per_node 2" if settings.get("gpu_mode") == GpuMode.DEDICATED else "")


def longest_sequence(shape: ModelShape, plan: Plan, step: int = 1024) -> int | None:
    """The longest max_seq_length (a multiple of ``step``, at least 8192) that fits, if any."""
    for seq in range(plan.max_seq_length - step, 8191, -step):
        if estimate(shape, replace(plan, max_seq_length=seq)).fits:
            return seq
    return None


def largest_model_that_fits(shape: ModelShape, plan: Plan) -> str | None:
    """The largest smaller known model that fits, of the same family where one does."""
    smaller = [m for m in known_models().values() if m.params_b < shape.params_b and estimate(m, plan).fits]
    same_family = [m for m in smaller if family(m.name) == family(shape.name)]
    pool = same_family or smaller
    return max(pool, key=lambda m: m.params_b).name if pool else None


def family(name: str) -> str:
    """A model's name without its size: Qwen/Qwen2.5-14B-Instruct -> qwen/qwen2.5--instruct."""
    return _SIZE_IN_NAME.sub("", name.lower())


def smallest_gpu_that_fits(shape: ModelShape, plan: Plan) -> int:
    gib = int(plan.gpu_gib) + 1
    while not estimate(shape, replace(plan, gpu_gib=gib)).fits:
        gib += 1
    return gib
