"""trainer.training.schedule: the learning rate each step passes, and the objective's stabilisers
reaching backend.train only where the config sets them."""

from __future__ import annotations

import pytest

from trainer.training.config import load_config
from trainer.training.schedule import learning_rate_at, shape
from trainer.training.training_step import Objective


def rates(schedule: str, total: int = 10, warmup: int = 0, floor: float = 0.0) -> list[float]:
    return [round(shape(schedule, step, total, warmup, floor), 4) for step in range(1, total + 1)]


def test_constant_passes_the_configs_rate_at_every_step() -> None:
    assert rates("constant") == [1.0] * 10


def test_warmup_ramps_linearly_then_holds() -> None:
    assert rates("warmup", warmup=4) == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]


def test_linear_decays_from_the_full_rate_towards_the_floor_and_the_last_step_still_trains() -> None:
    linear = rates("linear", total=10, floor=0.1)
    assert linear[0] == 1.0 and linear == sorted(linear, reverse=True)
    assert linear[-1] == pytest.approx(0.1 + 0.9 * 0.1) and linear[-1] > 0.1


def test_cosine_after_a_warmup_starts_full_and_ends_near_the_floor() -> None:
    cosine = rates("cosine", total=12, warmup=2, floor=0.0)
    assert cosine[:3] == [0.5, 1.0, 1.0]
    assert cosine[2:] == sorted(cosine[2:], reverse=True) and 0 < cosine[-1] < 0.05


def test_a_rollbacks_scale_multiplies_the_scheduled_rate() -> None:
    config = load_config("smoke", ["learning_rate=1e-4", "lr_schedule=warmup", "lr_warmup_steps=2"])
    assert learning_rate_at(config, 1, 10) == pytest.approx(5e-5)
    assert learning_rate_at(config, 5, 10, scale=0.25) == pytest.approx(2.5e-5)


def test_the_stabilisers_reach_train_only_where_set_and_steps_record_them() -> None:
    plain = Objective.from_config(load_config("smoke"))
    assert set(plain.train_kwargs()) == {"learning_rate", "loss_fn", "scale_rewards", "importance_sampling_level"}
    config = load_config("smoke", ["kl_penalty_coef=0.1", "kl_penalty_reference=initial", "epsilon=0.2",
                                   "epsilon_high=0.28"])
    objective = Objective.from_config(config, learning_rate=3e-6, kl_reference_step=0)
    kwargs = objective.train_kwargs()
    assert kwargs["learning_rate"] == 3e-6
    assert (kwargs["kl_penalty_coef"], kwargs["kl_penalty_reference_step"], kwargs["kl_penalty_source"]) == (
        0.1, 0, "current_learner")
    assert (kwargs["epsilon"], kwargs["epsilon_high"]) == (0.2, 0.28)
    assert objective.record() == {"learning_rate": 3e-6, "kl_penalty_coef": 0.1, "kl_penalty_reference_step": 0,
                                  "kl_penalty_source": "current_learner", "epsilon": 0.2, "epsilon_high": 0.28}


def local_backend_train_parameters() -> set[str]:
    """The keyword parameters of ART's installed ``LocalBackend.train``, read from its source (importing
    it needs torch)."""
    import ast
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("art")
    assert spec is not None and spec.origin is not None
    tree = ast.parse((Path(spec.origin).parent / "local" / "backend.py").read_text())
    backend = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "LocalBackend")
    train = next(node for node in backend.body if isinstance(node, ast.AsyncFunctionDef) and node.name == "train")
    return {arg.arg for arg in train.args.args + train.args.kwonlyargs}


def test_the_passed_keywords_are_ones_arts_local_backend_train_accepts() -> None:
    accepted = local_backend_train_parameters()
    config = load_config("smoke", ["kl_penalty_coef=0.1", "epsilon=0.2", "epsilon_high=0.3"])
    assert set(Objective.from_config(config, 1e-5, 0).train_kwargs()) <= accepted
