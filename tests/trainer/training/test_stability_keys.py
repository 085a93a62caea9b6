"""The keys that keep RL stable and the decline rule's: each value's range (one line, the key and
what is accepted), through the trainer's config and the launcher's --train_arg (exit 2)."""

from __future__ import annotations

import pytest

from hpc.launcher import launch
from trainer.training.config import ConfigError, decline_settings, load_config

BAD = [
    ("kl_penalty_coef=-0.1", "kl_penalty_coef.*from 0 to 10"),
    ("kl_penalty_coef=11", "kl_penalty_coef.*from 0 to 10"),
    ("kl_penalty_coef=lots", "kl_penalty_coef.*a number"),
    ("kl_penalty_reference=step3", "kl_penalty_reference.*base or initial or best"),
    ("kl_penalty_source=learner", "kl_penalty_source.*current_learner or sample"),
    ("epsilon=0", "epsilon.*above 0, at most 1"),
    ("epsilon=1.5", "epsilon.*above 0, at most 1"),
    ("epsilon_high=0", "epsilon_high.*above 0, at most 10"),
    ("epsilon_high=11", "epsilon_high.*above 0, at most 10"),
    ("lr_schedule=exponential", "lr_schedule.*constant, warmup, linear, cosine"),
    ("lr_warmup_steps=-1", "lr_warmup_steps.*>= 0"),
    ("lr_warmup_steps=2.5", "lr_warmup_steps.*an integer"),
    ("lr_min_ratio=1.5", "lr_min_ratio.*fraction from 0 to 1"),
    ("lr_min_ratio=-0.1", "lr_min_ratio.*fraction from 0 to 1"),
    ("on_decline=rewind", "on_decline.*continue, stop, rollback"),
    ("decline_points=0", "decline_points.*above 0, at most 100"),
    ("decline_points=101", "decline_points.*above 0, at most 100"),
    ("decline_validations=0", "decline_validations.*>= 1"),
    ("decline_on_collapse=sometimes", "decline_on_collapse.*true or false"),
    ("rollback_lr_scale=1", "rollback_lr_scale.*above 0, below 1"),
    ("rollback_lr_scale=0", "rollback_lr_scale.*above 0, below 1"),
    ("max_rollbacks=-1", "max_rollbacks.*>= 0"),
]


@pytest.mark.parametrize("override, expected", BAD)
def test_a_new_keys_bad_value_is_one_line_naming_the_key_and_the_range(override: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected) as error:
        load_config("smoke", [override])
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("overrides, expected", [
    (["lr_schedule=warmup"], "lr_schedule 'warmup' needs lr_warmup_steps >= 1"),
    (["kl_penalty_reference=initial"], "kl_penalty_reference 'initial' has no effect with kl_penalty_coef 0"),
])
def test_keys_that_do_not_go_together_are_refused_in_one_line(overrides: list[str], expected: str) -> None:
    with pytest.raises(ConfigError, match=expected) as error:
        load_config("smoke", overrides)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("override, expected", [BAD[0], BAD[9], BAD[14], BAD[19]])
def test_the_launchers_train_arg_refuses_a_bad_new_key_with_exit_2_and_submits_nothing(
        capsys: pytest.CaptureFixture[str], tmp_path, override: str, expected: str) -> None:
    runs = tmp_path / "runs"
    code = launch.main(["--cluster", "local", "--job_name", "r", "--time_limit", "30", "--runs_dir", str(runs),
                        "--config", "smoke", "--train_arg", override, "--dry_run"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert override.split("=")[0] in err
    assert not runs.exists(), "nothing written"


def test_good_values_load_and_make_the_decline_settings() -> None:
    config = load_config("smoke", ["kl_penalty_coef=0.05", "kl_penalty_reference=best", "kl_penalty_source=sample",
                                   "epsilon=0.2", "epsilon_high=0.28", "lr_schedule=cosine", "lr_warmup_steps=3",
                                   "lr_min_ratio=0.1", "on_decline=rollback", "decline_points=8",
                                   "decline_validations=3", "decline_on_collapse=false", "rollback_lr_scale=0.25",
                                   "max_rollbacks=0"])
    assert (config.kl_penalty_coef, config.epsilon, config.epsilon_high) == (0.05, 0.2, 0.28)
    settings = decline_settings(config)
    assert (settings.action, settings.points, settings.validations, settings.on_collapse, settings.lr_scale,
            settings.max_rollbacks) == ("rollback", 8.0, 3, False, 0.25, 0)


def test_agent_008_keeps_art_es_objective_and_only_reports_a_decline() -> None:
    config = load_config("agent_008")
    assert (config.kl_penalty_coef, config.epsilon, config.epsilon_high, config.lr_schedule) == (0.0, None, None,
                                                                                                "constant")
    assert config.on_decline == "continue"
