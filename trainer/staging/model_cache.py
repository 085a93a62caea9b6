"""Which Hugging Face repositories a training run loads, and whether they are cached.

On clusters whose compute nodes have no internet the job runs with
``HF_HUB_OFFLINE=1``: every model must already be in the Hugging Face cache
(``HF_HOME`` of the cluster's dotenv, on the shared filesystem). A training
run with ART's LocalBackend loads two repositories, not one:

- the base model, in bf16, which vLLM serves (weights and tokenizer);
- the 4-bit weights Unsloth trains the LoRA on. ART loads with
  ``load_in_4bit=True`` and Unsloth then swaps the base model for its
  pre-quantized repository (``Qwen/Qwen2.5-14B-Instruct`` becomes
  ``unsloth/qwen2.5-14b-instruct-unsloth-bnb-4bit``), lower-cased, as its
  mapper writes it; the cache folder is named after that exact id.

``python -m trainer.data stage-model`` downloads both on a login node;
``check_offline_cache`` makes the job fail in seconds, naming what is missing,
instead of after minutes of start-up. Stdlib only at import:
``huggingface_hub`` is imported by the download alone.
"""

from __future__ import annotations

import importlib.util
import os
import runpy
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

# Unsloth's choice for base models this project ships configs for, used where Unsloth
# itself is not installed (a login node with the frontend only). With the backend
# installed, Unsloth's own mapper answers for any model.
KNOWN_4BIT_REPOS = {
    "qwen/qwen2.5-14b-instruct": "unsloth/qwen2.5-14b-instruct-unsloth-bnb-4bit",
    "qwen/qwen2.5-7b-instruct": "unsloth/qwen2.5-7b-instruct-unsloth-bnb-4bit",
}
WEIGHT_SUFFIXES = (".safetensors", ".bin")


@dataclass(frozen=True)
class Repo:
    """A repository a job will load, and what for."""

    repo_id: str
    purpose: str


def required_repos(base_model: str) -> list[Repo]:
    """The repositories a LocalBackend run of ``base_model`` loads (a local path needs none)."""
    if Path(base_model).is_dir():
        return []
    repos = [Repo(base_model, "vLLM serves it (bf16 weights, tokenizer)")]
    quantized = unsloth_4bit_repo(base_model)
    if quantized and quantized != base_model:
        repos.append(Repo(quantized, "Unsloth trains the LoRA on its 4-bit weights"))
    return repos


def unsloth_4bit_repo(base_model: str) -> str | None:
    """The repository Unsloth loads for ``base_model`` at 4 bit, or None if it quantizes
    the base model itself. Read from Unsloth's mapper where Unsloth is installed (the
    mapper module is plain data: loaded by path, because importing unsloth needs a GPU)."""
    mapper = _unsloth_float_to_int()
    if mapper is not None:
        return mapper.get(base_model.lower())
    return KNOWN_4BIT_REPOS.get(base_model.lower())


def _unsloth_float_to_int() -> dict[str, str] | None:
    spec = importlib.util.find_spec("unsloth")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "models" / "mapper.py"
    if not path.is_file():
        return None
    return runpy.run_path(str(path)).get("FLOAT_TO_INT_MAPPER")


def hub_cache(env: Mapping[str, str] = os.environ) -> Path:
    """The hub cache folder huggingface_hub uses under ``env``."""
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    home = env.get("HF_HOME") or Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface"
    return Path(home).expanduser() / "hub"


def is_cached(repo_id: str, hub: Path) -> bool:
    """True when the cache holds a snapshot of ``repo_id`` (its ``refs/main``) with a
    config and weights: what ``from_pretrained`` needs offline."""
    folder = hub / ("models--" + repo_id.replace("/", "--"))
    try:
        revision = (folder / "refs" / "main").read_text().strip()
    except OSError:
        return False
    snapshot = folder / "snapshots" / revision
    has_weights = any(p.name.endswith(WEIGHT_SUFFIXES) for p in snapshot.glob("*")) if snapshot.is_dir() else False
    return (snapshot / "config.json").is_file() and has_weights


def missing_repos(repos: list[Repo], hub: Path) -> list[Repo]:
    return [repo for repo in repos if not is_cached(repo.repo_id, hub)]


def offline_cache_problem(base_model: str, env: Mapping[str, str] = os.environ) -> str | None:
    """One line naming what an offline job would fail to load, or None if all is cached."""
    hub = hub_cache(env)
    missing = missing_repos(required_repos(base_model), hub)
    if not missing:
        return None
    names = ", ".join(f"{repo.repo_id} ({repo.purpose})" for repo in missing)
    return (f"this node is offline (HF_HUB_OFFLINE=1) and the HF cache {hub} lacks {names}; stage them on a "
            f"login node with internet: python -m trainer.data stage-model --base_model {base_model}")


Downloader = Callable[..., str]


def stage(repos: list[Repo], hub: Path, download: Downloader | None = None) -> list[str]:
    """Download every repository not yet cached into ``hub``; return one line per repository."""
    if download is None:
        from huggingface_hub import snapshot_download  # only when a model is staged

        download = snapshot_download
    lines = []
    for repo in repos:
        if is_cached(repo.repo_id, hub):
            lines.append(f"cached:     {repo.repo_id} ({repo.purpose})")
            continue
        path = download(repo_id=repo.repo_id, cache_dir=str(hub))
        lines.append(f"downloaded: {repo.repo_id} -> {path} ({repo.purpose})")
    return lines
