"""trainer.training.config: YAML configs, key=value overrides coerced to each field's type,
and one-line errors that say what is accepted."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpc.launcher.jobspec import trainer_config
from trainer.training.config import (
    ConfigError,
    TrainerConfig,
    build_config,
    config_keys,
    known_configs,
    load_config,
    vllm_share,
)


def test_agent_008_config_has_the_published_hyperparameters() -> None:
    config = load_config("agent_008", [])
    assert (config.project, config.model_name, config.base_model) == (
        "email_agent", "email-agent-008", "Qwen/Qwen2.5-14B-Instruct")
    assert config.tool_calling is True and config.max_turns == 10
    assert (config.trajectories_per_group, config.groups_per_step, config.num_epochs) == (4, 12, 3)
    assert config.learning_rate == pytest.approx(1.2e-5)
    assert (config.training_dataset_size, config.val_set_size, config.eval_steps) == (2510, 100, 30)
    assert config.backend == "local"
    # What ART-E trained with, where ART 0.5's defaults differ (trainer/configs/agent_008.yaml says where from)
    assert (config.loss_fn, config.scale_rewards, config.importance_sampling_level) == ("ppo", True, "token")
    assert (config.max_rollout_exceptions, config.max_seq_length, config.rollout_concurrency) == (0, 32768, 10)
    assert config.training_dataset_seed is None, "ART-E trained on its scenarios in dataset order"
    assert (config.gpu_mode, config.gpu_memory_utilization) == ("auto", None)
    assert (vllm_share(config, "shared"), vllm_share(config, "dedicated")) == (0.75, 0.9)


@pytest.mark.parametrize("name", known_configs())
def test_every_config_file_loads_and_sets_every_key(name: str) -> None:
    import yaml

    from trainer.training.config import CONFIGS_DIR

    load_config(name, [])
    written = set(yaml.safe_load((CONFIGS_DIR / f"{name}.yaml").read_text()))
    assert written == set(config_keys()), "each YAML lists every key, so it documents the whole run"


def test_known_configs_include_agent_008_and_smoke() -> None:
    assert {"agent_008", "smoke"} <= set(known_configs())


def test_overrides_are_coerced_to_each_fields_type() -> None:
    config = load_config("smoke", [
        "max_turns=7", "learning_rate=3e-6", "tool_calling=false", "model_name=agent-x",
        "training_dataset_size=null", "ruler_judge_model=openai/gpt-4.1", "gpu_memory_utilization=0.6",
    ])
    assert config.max_turns == 7 and isinstance(config.max_turns, int)
    assert config.learning_rate == 3e-6 and isinstance(config.learning_rate, float)
    assert config.tool_calling is False
    assert config.model_name == "agent-x"
    assert config.training_dataset_size is None
    assert config.ruler_judge_model == "openai/gpt-4.1"
    assert config.gpu_memory_utilization == 0.6


@pytest.mark.parametrize("word, value", [("true", True), ("Yes", True), ("on", True), ("1", True),
                                         ("false", False), ("NO", False), ("off", False), ("0", False)])
def test_boolean_overrides_accept_the_usual_words(word: str, value: bool) -> None:
    assert load_config("smoke", [f"tool_calling={word}"]).tool_calling is value


def test_an_integer_override_for_a_float_key_becomes_a_float() -> None:
    config = load_config("smoke", ["temperature=1"])
    assert config.temperature == 1.0 and isinstance(config.temperature, float)


def test_the_last_override_of_a_key_wins() -> None:
    assert load_config("smoke", ["max_turns=3", "max_turns=5"]).max_turns == 5


def test_an_override_value_may_contain_equals_signs() -> None:
    assert load_config("smoke", ["ruler_judge_model=a=b"]).ruler_judge_model == "a=b"


@given(st.integers(min_value=1, max_value=10**9))
def test_any_positive_integer_override_round_trips(n: int) -> None:
    assert load_config("smoke", [f"groups_per_step={n}"]).groups_per_step == n


@given(st.floats(min_value=1e-12, max_value=1.0, allow_nan=False, allow_infinity=False))
def test_any_positive_float_override_round_trips(x: float) -> None:
    assert load_config("smoke", [f"learning_rate={x!r}"]).learning_rate == x


def test_a_learning_rate_of_0_is_a_control_run_that_trains_nothing() -> None:
    assert load_config("smoke", ["learning_rate=0"]).learning_rate == 0.0


def test_an_unknown_key_is_named_with_the_accepted_keys() -> None:
    with pytest.raises(ConfigError) as error:
        load_config("agent_008", ["learning_rat=1e-5"])
    message = str(error.value)
    assert "'learning_rat'" in message and "accepted keys:" in message
    assert all(key in message for key in config_keys())
    assert "\n" not in message


def test_an_unknown_config_is_named_with_the_known_configs() -> None:
    with pytest.raises(ConfigError, match=r"unknown config 'agent_009'; known configs: .*agent_008.*smoke"):
        load_config("agent_009", [])


@pytest.mark.parametrize("override, expected", [
    ("max_turns=ten", "max_turns.*an integer"),
    ("max_turns=1.5", "max_turns.*an integer"),
    ("max_turns=0", "max_turns.*>= 1"),
    ("learning_rate=fast", "learning_rate.*a number"),
    ("learning_rate=nan", "learning_rate.*a number"),
    ("learning_rate=-1e-5", "learning_rate.*>= 0 .0 trains nothing: a control run"),
    ("tool_calling=maybe", "tool_calling.*true or false"),
    ("reward=vibes", "reward.*judge or ruler"),
    ("gpu_memory_utilization=1.5", "gpu_memory_utilization.*fraction"),
    ("vllm_kv_cache_gb=0", "vllm_kv_cache_gb.*a number of GiB > 0"),
    ("vllm_kv_cache_gb=lots", "vllm_kv_cache_gb.*a number"),
    ("max_rollout_exceptions=-0.1", "max_rollout_exceptions.*fraction"),
    ("backend=not a class", "backend.*local.*module:ClassName"),
    ("max_turns=null", "max_turns.*an integer"),
    ("training_dataset_size=0", "training_dataset_size.*or null"),
])
def test_a_bad_value_names_the_key_and_what_is_accepted(override: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected) as error:
        load_config("smoke", [override])
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("override", ["learning_rate", "=3"])
def test_an_override_that_is_not_key_value_is_refused(override: str) -> None:
    with pytest.raises(ConfigError, match="expected key=value"):
        load_config("smoke", [override])


def test_a_yaml_number_where_text_belongs_is_refused() -> None:
    values = dataclasses.asdict(load_config("smoke", []))
    with pytest.raises(ConfigError, match="model_name.*text"):
        build_config({**values, "model_name": 8})


def test_a_yaml_null_for_a_key_that_needs_a_value_is_refused() -> None:
    values = dataclasses.asdict(load_config("smoke", []))
    with pytest.raises(ConfigError, match="'max_turns' may not be null: expected an integer"):
        build_config({**values, "max_turns": None})


def test_a_config_without_model_names_is_refused() -> None:
    with pytest.raises(ConfigError, match="missing required key.*model_name"):
        build_config({"project": "p", "base_model": "b"})


def test_defaults_fill_keys_a_config_leaves_out() -> None:
    config = build_config({"project": "p", "model_name": "m", "base_model": "b"})
    assert config.backend == "local" and config.max_turns == TrainerConfig.max_turns


def test_config_is_immutable() -> None:
    config = load_config("smoke", [])
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.max_turns = 3  # type: ignore[misc]


@pytest.mark.parametrize("overrides", [[], ["model_name=other-agent", "project=p2"]])
def test_launcher_reads_the_same_project_as_the_trainer(overrides: list[str]) -> None:
    config = load_config("agent_008", overrides)
    assert trainer_config("agent_008", overrides, "trainer.train") == config
    # Another entrypoint's own arguments are not trainer keys; its project= still counts.
    workload_args = [*overrides, "steps=6"]
    assert trainer_config("agent_008", workload_args, "tests.doubles.step_trainer").project == config.project


def test_the_dataclass_defaults_are_agent_008() -> None:
    assert load_config("agent_008", []) == TrainerConfig(
        project="email_agent", model_name="email-agent-008", base_model="Qwen/Qwen2.5-14B-Instruct")
