"""trainer.staging.model_cache and ``python -m trainer.data stage-model``: which repositories a
job loads, a file-based HF cache like huggingface_hub's, and the offline check."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.staging import data as trainer_data
from trainer.staging import model_cache
from trainer.staging.model_cache import (
    Repo,
    hub_cache,
    is_cached,
    missing_repos,
    offline_cache_problem,
    required_repos,
    stage,
)

BASE = "Qwen/Qwen2.5-14B-Instruct"
QUANTIZED = "unsloth/qwen2.5-14b-instruct-unsloth-bnb-4bit"


def cache_repo(hub: Path, repo_id: str, *, weights: bool = True, revision: str = "abc123") -> None:
    """What snapshot_download leaves: refs/main naming a snapshot with config and weights
    (no tokenizer: a made-up tokenizer.json would not load, a missing one is skipped)."""
    folder = hub / ("models--" + repo_id.replace("/", "--"))
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(revision)
    snapshot = folder / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    if weights:
        (snapshot / "model-00001-of-00002.safetensors").write_bytes(b"\0" * 8)


def test_a_14b_run_loads_the_base_for_vllm_and_unsloths_lowercased_4bit_repo() -> None:
    assert required_repos(BASE) == [Repo(BASE, "vLLM serves it (bf16 weights, tokenizer)"),
                                    Repo(QUANTIZED, "Unsloth trains the LoRA on its 4-bit weights")]


def test_unsloths_own_mapper_answers_where_unsloth_is_installed(tmp_path: Path, monkeypatch) -> None:
    package = tmp_path / "unsloth"
    (package / "models").mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('importing unsloth needs a GPU')\n")
    (package / "models" / "mapper.py").write_text("FLOAT_TO_INT_MAPPER = {'org/m': 'unsloth/m-bnb-4bit'}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert model_cache.unsloth_4bit_repo("Org/M") == "unsloth/m-bnb-4bit"
    assert model_cache.unsloth_4bit_repo("org/other") is None  # Unsloth quantizes it itself


def test_a_snapshot_needs_its_ref_config_and_weights(tmp_path: Path) -> None:
    cache_repo(tmp_path, BASE)
    cache_repo(tmp_path, QUANTIZED, weights=False)  # interrupted download
    assert is_cached(BASE, tmp_path) and not is_cached(QUANTIZED, tmp_path)
    assert not is_cached("other/model", tmp_path)
    assert missing_repos(required_repos(BASE), tmp_path) == [required_repos(BASE)[1]]


def test_the_hub_cache_follows_huggingface_hubs_variables(tmp_path: Path) -> None:
    assert hub_cache({"HF_HUB_CACHE": "/x/hub", "HF_HOME": "/y"}) == Path("/x/hub")
    assert hub_cache({"HF_HOME": "/y"}) == Path("/y/hub")
    assert hub_cache({"XDG_CACHE_HOME": "/z"}) == Path("/z/huggingface/hub")


def test_the_offline_problem_names_each_missing_repository_and_the_staging_command(tmp_path: Path) -> None:
    env = {"HF_HOME": str(tmp_path)}
    problem = offline_cache_problem(BASE, env)
    assert problem is not None and BASE in problem and QUANTIZED in problem
    assert f"python -m trainer.data stage-model --base_model {BASE}" in problem
    cache_repo(tmp_path / "hub", BASE)
    cache_repo(tmp_path / "hub", QUANTIZED)
    assert offline_cache_problem(BASE, env) is None


def test_stage_downloads_only_what_is_missing(tmp_path: Path) -> None:
    cache_repo(tmp_path, BASE)
    calls = []

    def download(repo_id: str, cache_dir: str) -> str:
        calls.append(repo_id)
        cache_repo(Path(cache_dir), repo_id)
        return f"{cache_dir}/{repo_id}"

    lines = stage(required_repos(BASE), tmp_path, download)
    assert calls == [QUANTIZED]
    assert lines[0].startswith(f"cached:     {BASE}") and lines[1].startswith(f"downloaded: {QUANTIZED}")
    assert missing_repos(required_repos(BASE), tmp_path) == []


def test_stage_model_command_writes_into_the_jobs_hf_home(tmp_path: Path, monkeypatch, capsys) -> None:
    downloaded = []
    monkeypatch.setattr("huggingface_hub.snapshot_download",
                        lambda repo_id, cache_dir: downloaded.append((repo_id, cache_dir)) or cache_dir)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert trainer_data.main(["stage-model", "--config", "agent_008"]) == 0
    hub = str(tmp_path / "hf" / "hub")
    assert downloaded == [(BASE, hub), (QUANTIZED, hub)]
    assert f"HF cache:   {hub}" in capsys.readouterr().out


def test_stage_model_with_an_unknown_config_is_one_line_exit_2(capsys) -> None:
    assert trainer_data.main(["stage-model", "--config", "nope"]) == 2
    assert capsys.readouterr().err.startswith("error: unknown config 'nope'")


@pytest.mark.parametrize("offline", ["1", "0"])
def test_the_trainer_checks_the_cache_only_offline_and_only_for_arts_backend(tmp_path: Path, offline: str) -> None:
    from trainer.training.backend import check_models_cached
    from trainer.training.config import load_config
    from trainer.training.exits import SetupError

    env = {"HF_HOME": str(tmp_path), "HF_HUB_OFFLINE": offline}
    check_models_cached(load_config("agent_008", ["backend=tests.doubles.art_backend:FakeBackend"]), env)
    if offline == "1":
        with pytest.raises(SetupError, match="lacks Qwen/Qwen2.5-14B-Instruct"):
            check_models_cached(load_config("agent_008"), env)
    else:
        check_models_cached(load_config("agent_008"), env)
