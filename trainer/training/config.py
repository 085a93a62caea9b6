"""Trainer configs: ``trainer/configs/<name>.yaml`` plus ``key=value`` overrides.

One frozen record holds every knob of a run, so the training loop never reads
YAML or the command line itself. Overrides arrive as text (the launcher's
``--train_arg key=value``, passed on as ``python -m trainer.train --config NAME
key=value ...``) and are coerced to the field's declared type, so a typo or a
wrong type fails at once, in one line, instead of hours into a job.

Stdlib + PyYAML only: cheap to import anywhere (the launcher itself reads the
YAML directly, see ``hpc.launcher.jobspec.trainer_project``, and must keep working
without ART installed).
"""

from __future__ import annotations

import math
import re
import types
import typing
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any, Callable

import yaml

from hpc import yamlfile
from hpc.digits import ascii_float, ascii_int
from hpc.errors import one_line
from hpc.job.deadline import DEFAULT_SETTINGS as DEFAULT_BOUNDARY
from hpc.job.gpu_modes import AUTO, CONFIG_CHOICES, GpuMode
from hpc.run.decline import ACTIONS as DECLINE_ACTIONS
from hpc.run.decline import DeclineSettings
from hpc.run.ledger import DeclineAction
from trainer.agent.proof_reward import PROOF_REWARD, refusal
from trainer.serving import fast_start

CONFIGS_DIR = Path(__file__).resolve().parents[1] / "configs"
REWARDS = ("judge", "ruler", PROOF_REWARD)  # the last: the GPU proof's, for a made model only (proof_reward.py)
LOSS_FUNCTIONS = ("ppo", "cispo")  # what ART's LocalBackend.train accepts
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence", "average", "geometric_average")
KL_REFERENCES = ("base", "initial", "best")  # trainer/training/training_step.py: which adapter ART compares against
KL_SOURCES = ("current_learner", "sample")  # ART 0.5's kl_penalty_source
LR_SCHEDULES = ("constant", "warmup", "linear", "cosine")  # trainer/training/schedule.py
# vLLM's share of its GPU when the config leaves gpu_memory_utilization null: beside the
# 4-bit training model (ART's default share), or a GPU of its own.
VLLM_SHARE: dict[str, float] = {GpuMode.SHARED: 0.75, GpuMode.DEDICATED: 0.9}
# `local` (ART's LocalBackend) or an import path `package.module:ClassName`.
BACKEND_RE = re.compile(r"local|[A-Za-z_][\w.]*:[A-Za-z_]\w*")
NONE_WORDS = ("null", "none", "~")
TRUE_WORDS = ("true", "yes", "on", "1")
FALSE_WORDS = ("false", "no", "off", "0")


class ConfigError(ValueError):
    """A config problem, worded as the single line the user will see."""


@dataclass(frozen=True)
class TrainerConfig:
    """Everything one training run needs to know. Defaults are agent_008's."""

    # ART names: checkpoints live in ${ART_PATH}/<project>/models/<run_name>/checkpoints/NNNN,
    # where run_name is the job name (one folder per run); model_name is the alias vLLM
    # serves the LoRA under (ART's TrainableModel.name).
    project: str
    model_name: str
    base_model: str
    # Which ART backend trains the model: `local` = art.local.LocalBackend (vLLM +
    # Unsloth on this node), or `module:Class` for a site-provided backend class.
    backend: str = "local"

    # Agent
    tool_calling: bool = True
    max_turns: int = 10
    max_tokens: int = 2048
    temperature: float = 1.0

    # GRPO
    trajectories_per_group: int = 4
    groups_per_step: int = 12
    learning_rate: float = 1.2e-5
    num_epochs: int = 3
    # The objective, passed to ART's backend.train (ART 0.5's own defaults in brackets):
    loss_fn: str = "ppo"  # ["cispo"] PPO's clipped ratio, the objective ART trained ART-E with
    scale_rewards: bool = True  # [True] advantages divided by the group's reward std (GRPO)
    importance_sampling_level: str = "token"  # ["token"] per-token ratios
    rollout_concurrency: int = 10  # rollouts in flight at once (ART-E: 10)
    # What keeps RL stable, passed to backend.train each step (ART 0.5's defaults in brackets):
    kl_penalty_coef: float = 0.0  # [0.0] advantages reduced where tokens diverge from the KL reference
    kl_penalty_reference: str = "base"  # base (LoRA off) | initial (the run's step 0) | best (validated)
    kl_penalty_source: str = "current_learner"  # ["current_learner"] whose logprobs meet the reference
    epsilon: float | None = None  # [ppo 0.2, cispo 1.0] the ratio's lower clip 1 - epsilon
    epsilon_high: float | None = None  # [epsilon; cispo 4.0] the ratio's upper clip 1 + epsilon_high
    # The learning rate passed at each step (trainer/training/schedule.py): constant, warmup (a linear
    # ramp over lr_warmup_steps, then constant), linear or cosine (that ramp, then a decay to
    # lr_min_ratio x learning_rate at the last step).
    lr_schedule: str = "constant"
    lr_warmup_steps: int = 0
    lr_min_ratio: float = 0.0

    # A run that stops getting better (hpc/run/decline.py): held-out accuracy below the best by more
    # than decline_points for decline_validations validations in a row (or, with decline_on_collapse,
    # COLLAPSED and below the best by more than decline_points at a validation). continue: recorded and
    # told, nothing else; stop: the run ends (done.json says why); rollback: the run continues from
    # its best checkpoint with the learning rate x rollback_lr_scale, at most max_rollbacks times (then stop).
    on_decline: str = "continue"
    decline_points: float = 5.0
    decline_validations: int = 2
    decline_on_collapse: bool = True
    rollback_lr_scale: float = 0.5
    max_rollbacks: int = 2

    # Data
    training_dataset_size: int | None = 2510  # None = every training scenario
    training_dataset_seed: int | None = None  # None = dataset order (ART-E); an integer shuffles
    # A replicate's seed (a sweep over seed=1,2,3): shuffles the training scenarios with it, as
    # ART-E's seed sweeps did with training_dataset_seed; None keeps training_dataset_seed's order.
    seed: int | None = None
    max_messages: int = 1
    # Validation during training (trainer/training/validation.py) and the checkpoints kept
    val_set_size: int = 100  # held-out test questions validated on; 0 = no validation
    eval_steps: int = 30  # validate every N steps (and after the last one)
    eval_concurrency: int = 32  # questions in flight at once during a validation or evaluation
    prune_checkpoints: bool = True  # after each validation keep only the latest, the best and every Nth
    keep_every_steps: int = 0  # also keep every Nth step's checkpoint (0 = none)

    # Reward
    reward: str = "judge"
    ruler_judge_model: str | None = None
    judge_concurrency: int = 8
    judge_retries: int = 3
    max_rollout_exceptions: float = 0.0  # ART-E: gather's max_exceptions=0

    # Preflight (trainer/training/preflight.py): checks that fail a job in seconds, before the expensive start
    preflight: bool = True  # false: no checks (the job finds problems at start-up, minutes later)
    preflight_judge: bool = True  # false: the judge is not asked its one tiny request
    preflight_min_free_gb: float = 10.0  # free space the run's output filesystems need (0: no floor)
    preflight_timeout: float = 30.0  # seconds each network check (judge, W&B) may take

    # Stop at a step boundary (hpc/job/deadline.py): a step, or a validation due before it, starts
    # only if predicted (the longest of the last boundary_recent_steps x boundary_safety_factor)
    # to end before the job's stop signal may come (its end - signal grace - boundary_margin_seconds);
    # else the job stops there (exit 75) and the run continues at once. SIGUSR1 stays the safety net.
    stop_at_boundary: bool = True
    boundary_recent_steps: int = DEFAULT_BOUNDARY.recent_steps
    boundary_safety_factor: float = DEFAULT_BOUNDARY.safety_factor
    boundary_margin_seconds: float = DEFAULT_BOUNDARY.margin_seconds

    # GPU memory
    gpu_memory_utilization: float | None = None  # vLLM's share of its GPU; None: VLLM_SHARE[gpu mode]
    # vLLM's KV cache, fixed, in GiB (vLLM's kv_cache_memory_bytes): vLLM then skips its memory
    # profiling, which refuses to start when another process on the GPU frees memory meanwhile (a
    # run beside it sleeping or waking its own vLLM). None: vLLM sizes the cache from its share.
    vllm_kv_cache_gb: float | None = None
    # Unsloth's copy of the base model, which the LoRA trains on: 4 bits (QLoRA, ART's default) or, false,
    # bf16 as vLLM serves it. A small model's 4-bit copy gives other token probabilities than the
    # model vLLM samples from, and PPO's ratio against vLLM's logprobs then clips what should train.
    load_in_4bit: bool = True
    max_seq_length: int = 32768
    # shared: vLLM and training take turns on one GPU (vLLM sleeps while training: ART's
    # default); dedicated: training on the run's first GPU, vLLM on its second (ART's
    # trainer_gpu_ids / inference_gpu_ids), no swap each step, two GPUs per run; auto: the
    # cluster's default (hpc/launcher/clusters.yaml gpu_mode), which the launcher passes on.
    gpu_mode: str = AUTO
    # vLLM without CUDA graphs, FlashInfer's kernel autotuning or its JIT-built sampler
    # (trainer/serving/fast_start.py): it starts minutes sooner and generates more slowly.
    # For smoke checks and small models, not long runs.
    vllm_fast_start: bool = False


def shuffle_seed(config: "TrainerConfig") -> int | None:
    """The seed the training scenarios are shuffled with (None: the dataset's own order)."""
    return config.seed if config.seed is not None else config.training_dataset_seed


def decline_settings(config: "TrainerConfig") -> DeclineSettings:
    """The decline rule of this run (hpc/run/decline.py)."""
    return DeclineSettings(DeclineAction(config.on_decline), config.decline_points, config.decline_validations,
                           config.decline_on_collapse, config.rollback_lr_scale, config.max_rollbacks)


def vllm_share(config: "TrainerConfig", gpu_mode: str) -> float:
    """The vLLM memory share a run uses in ``gpu_mode`` (shared or dedicated)."""
    return config.gpu_memory_utilization or VLLM_SHARE[gpu_mode]


FOLDER_NAME_RE = re.compile(r"[A-Za-z0-9._-]+")

# Value checks beyond the type: (predicate, what is accepted).
Check = tuple[Callable[[Any], bool], str]
_POSITIVE: Check = (lambda v: v >= 1, "an integer >= 1")
_NON_NEGATIVE: Check = (lambda v: v >= 0, "an integer >= 0")
CHECKS: dict[str, Check] = {
    # A folder under ART_PATH (<project>/models/<run>): never a path out of it (/etc, ../..).
    "project": (lambda v: bool(FOLDER_NAME_RE.fullmatch(v)) and v not in (".", ".."),
                "a folder name of letters, digits and . _ - (not '.' or '..')"),
    "model_name": (lambda v: bool(v.strip()), "a non-empty name"),
    "base_model": (lambda v: bool(v.strip()), "a Hugging Face model id"),
    "backend": (lambda v: bool(BACKEND_RE.fullmatch(v)), "'local' or an import path 'package.module:ClassName'"),
    "max_turns": _POSITIVE,
    "max_tokens": _POSITIVE,
    "temperature": (lambda v: v >= 0, "a number >= 0"),
    "trajectories_per_group": _POSITIVE,
    "groups_per_step": _POSITIVE,
    "learning_rate": (lambda v: v >= 0, "a number >= 0 (0 trains nothing: a control run)"),
    "num_epochs": _POSITIVE,
    "training_dataset_size": (lambda v: v >= 1, "an integer >= 1, or null for all scenarios"),
    "max_messages": _POSITIVE,
    "val_set_size": _NON_NEGATIVE,
    "eval_steps": _POSITIVE,
    "eval_concurrency": _POSITIVE,
    "keep_every_steps": _NON_NEGATIVE,
    "reward": (lambda v: v in REWARDS, " or ".join(REWARDS)),
    "judge_concurrency": _POSITIVE,
    "judge_retries": _NON_NEGATIVE,
    "loss_fn": (lambda v: v in LOSS_FUNCTIONS, " or ".join(LOSS_FUNCTIONS)),
    "importance_sampling_level": (lambda v: v in IMPORTANCE_SAMPLING_LEVELS, ", ".join(IMPORTANCE_SAMPLING_LEVELS)),
    "rollout_concurrency": _POSITIVE,
    "kl_penalty_coef": (lambda v: 0 <= v <= 10, "a number from 0 to 10 (0: no KL penalty)"),
    "kl_penalty_reference": (lambda v: v in KL_REFERENCES, " or ".join(KL_REFERENCES)),
    "kl_penalty_source": (lambda v: v in KL_SOURCES, " or ".join(KL_SOURCES)),
    "epsilon": (lambda v: 0 < v <= 1, "a number above 0, at most 1 (the lower clip 1 - epsilon), or null"),
    "epsilon_high": (lambda v: 0 < v <= 10, "a number above 0, at most 10, or null"),
    "lr_schedule": (lambda v: v in LR_SCHEDULES, ", ".join(LR_SCHEDULES)),
    "lr_warmup_steps": _NON_NEGATIVE,
    "lr_min_ratio": (lambda v: 0 <= v <= 1, "a fraction from 0 to 1"),
    "on_decline": (lambda v: v in DECLINE_ACTIONS, ", ".join(DECLINE_ACTIONS)),
    "decline_points": (lambda v: 0 < v <= 100, "accuracy points above 0, at most 100"),
    "decline_validations": _POSITIVE,
    "rollback_lr_scale": (lambda v: 0 < v < 1, "a fraction above 0, below 1"),
    "max_rollbacks": _NON_NEGATIVE,
    "gpu_mode": (lambda v: v in CONFIG_CHOICES, " or ".join(CONFIG_CHOICES)),
    "max_rollout_exceptions": (lambda v: 0 <= v <= 1, "a fraction from 0 to 1"),
    "preflight_min_free_gb": (lambda v: v >= 0, "a number of GB >= 0"),
    "preflight_timeout": (lambda v: v > 0, "a number of seconds > 0"),
    "boundary_recent_steps": _POSITIVE,
    "boundary_safety_factor": (lambda v: v >= 1, "a number >= 1"),
    "boundary_margin_seconds": (lambda v: v >= 0, "seconds >= 0"),
    "gpu_memory_utilization": (lambda v: 0 < v <= 1, "a fraction above 0, at most 1"),
    "vllm_kv_cache_gb": (lambda v: v > 0, "a number of GiB > 0"),
    "max_seq_length": _POSITIVE,
}


def vllm_engine_args(config: "TrainerConfig", gpu_mode: str) -> dict[str, Any]:
    """The vLLM engine arguments a run sets: its memory share, its context (``max_seq_length``, as
    ``trainer.serve`` and ``trainer.eval`` give their vLLM), ``vllm_fast_start``'s, and a fixed KV
    cache (``vllm_kv_cache_gb``).

    ART passes no ``max_model_len``, so vLLM would take the model's own (32768 for Qwen2.5) and refuse
    to start where the KV cache of that context does not fit, whatever ``max_seq_length`` the launcher
    planned the GPU's memory with (hpc/launcher/gpu_memory.py: a 40 GB A100 fits agent_008 at
    ``max_seq_length=22528``). A conversation longer than ``max_seq_length`` cannot be trained on
    anyway (ART drops it)."""
    fast = fast_start.ENGINE_ARGS if config.vllm_fast_start else {}
    kv = {} if config.vllm_kv_cache_gb is None else {"kv_cache_memory_bytes": int(config.vllm_kv_cache_gb * 2**30)}
    return {"gpu_memory_utilization": vllm_share(config, gpu_mode), "max_model_len": config.max_seq_length, **fast, **kv}


def known_configs() -> list[str]:
    """Config names, i.e. the YAML files in trainer/configs/."""
    return sorted(path.stem for path in CONFIGS_DIR.glob("*.yaml"))


def config_keys() -> list[str]:
    return [f.name for f in fields(TrainerConfig)]


def load_config(name: str, overrides: list[str] | tuple[str, ...] = ()) -> TrainerConfig:
    """The named config with ``key=value`` overrides applied (later ones win)."""
    values = read_yaml(name)
    for pair in overrides:
        key, value = parse_override(pair)
        values[key] = value
    return build_config(values, source=f"config {name!r}")


def read_yaml(name: str) -> dict[str, Any]:
    if name not in known_configs():
        raise ConfigError(f"unknown config {name!r}; known configs: {', '.join(known_configs()) or '(none)'}")
    path = CONFIGS_DIR / f"{name}.yaml"
    try:
        data = yamlfile.load(path.read_text())
    except yaml.YAMLError as error:
        raise ConfigError(f"config {name!r} ({path}) is not valid YAML: {one_line(error)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config {name!r} ({path}) must be a mapping of key: value")
    return data


def parse_override(pair: str) -> tuple[str, str]:
    key, sep, value = pair.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"invalid override {pair!r}: expected key=value, e.g. learning_rate=1e-5")
    check_key(key)
    return key, value


def check_key(key: str) -> None:
    if key not in config_keys():
        raise ConfigError(f"unknown config key {key!r}; accepted keys: {', '.join(config_keys())}")


def build_config(values: dict[str, Any], source: str = "config") -> TrainerConfig:
    """Coerce and check every value, then build the record."""
    hints = typing.get_type_hints(TrainerConfig)
    for key in values:
        check_key(key)
    required = [f.name for f in fields(TrainerConfig) if f.default is MISSING and f.default_factory is MISSING]
    missing = [key for key in required if key not in values]
    if missing:
        raise ConfigError(f"{source} is missing required key(s): {', '.join(missing)}")
    coerced = {key: coerce(key, value, hints[key]) for key, value in values.items()}
    for key, value in coerced.items():
        check_value(key, value)
    config = TrainerConfig(**coerced)
    refused = refusal(config.reward, config.base_model) or combination_problem(config)
    if refused:
        raise ConfigError(f"{source}: {refused}")
    return config


def combination_problem(config: TrainerConfig) -> str | None:
    """Keys valid alone that do not go together, in one line (or None)."""
    if config.lr_schedule == "warmup" and config.lr_warmup_steps < 1:
        return (f"lr_schedule 'warmup' needs lr_warmup_steps >= 1 (got {config.lr_warmup_steps}); "
                "or lr_schedule constant")
    if config.kl_penalty_reference != "base" and config.kl_penalty_coef == 0:
        return (f"kl_penalty_reference {config.kl_penalty_reference!r} has no effect with kl_penalty_coef 0: "
                "set kl_penalty_coef above 0, or kl_penalty_reference base")
    return None


def check_value(key: str, value: Any) -> None:
    if key not in CHECKS or value is None:  # null passed coerce(), so the field allows it
        return
    accepts, accepted = CHECKS[key]
    if not accepts(value):
        raise ConfigError(f"invalid value {value!r} for config key {key!r}: expected {accepted}")


# -- type coercion --------------------------------------------------------------------


def coerce(key: str, value: Any, hint: Any) -> Any:
    """``value`` (YAML-native or override text) as the field's type, or a ConfigError."""
    kinds, nullable = split_optional(hint)
    if value is None or (isinstance(value, str) and nullable and value.strip().lower() in NONE_WORDS):
        if nullable:
            return None
        raise ConfigError(f"config key {key!r} may not be null: expected {describe(kinds)}")
    (kind,) = kinds
    try:
        return COERCERS[kind](value)
    except (TypeError, ValueError):
        expected = describe(kinds) + (", or null" if nullable else "")
        raise ConfigError(f"invalid value {value!r} for config key {key!r}: expected {expected}") from None


def split_optional(hint: Any) -> tuple[tuple[type, ...], bool]:
    """``int | None`` -> ((int,), True); ``float`` -> ((float,), False)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = typing.get_args(hint)
        return tuple(a for a in args if a is not type(None)), type(None) in args
    return (hint,), False


def describe(kinds: tuple[type, ...]) -> str:
    names = {bool: "true or false", int: "an integer", float: "a number", str: "text"}
    return " or ".join(names[k] for k in kinds)


def to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.strip().lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
    raise ValueError(value)


def to_int(value: Any) -> int:
    if isinstance(value, bool):  # bool is an int subclass; `true` is no step count
        raise ValueError(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        return ascii_int(value)
    raise ValueError(value)


def to_float(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, (int, float, str)):
        number = ascii_float(value) if isinstance(value, str) else float(value)
        if math.isfinite(number):
            return number
    raise ValueError(value)


def to_str(value: Any) -> str:
    if isinstance(value, str):
        return value
    raise ValueError(value)  # YAML turned it into a number/bool: quote it in the YAML file


COERCERS: dict[type, Callable[[Any], Any]] = {bool: to_bool, int: to_int, float: to_float, str: to_str}
