"""The real path, up to the GPU boundary: `python -m trainer.train --config agent_008` with
ART's real LocalBackend (openpipe-art[backend]: Unsloth, torch) on a machine without a GPU.

Everything before the GPU must run: config, the preflight (all 7 checks pass with the real
backend installed; a scripted judge answers its one request), data, the offline model-cache check, the
checkpoint quarantine, the backend, the model, and `register` reaching ART's model
service, which writes the model's folder and then stops where a CPU machine must:
Unsloth finding no accelerator. Never an import or API error.

The backend lives in its own virtual environment (several GB): `.ci/run` builds it with
`VENV=.venv-backend bash setup.sh --backend --no-runtime`; HPC_BACKEND_PYTHON names
another. Under CI=true a missing backend fails this test instead of skipping it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.doubles.openai_server import OpenAIServer, text
from tests.trainer.staging.test_model_cache import cache_repo
from trainer.staging.model_cache import required_repos

REPO = Path(__file__).resolve().parents[3]
GPU_BOUNDARY = "Unsloth cannot find any torch accelerator? You need a GPU."
API_ERRORS = ("ImportError", "ModuleNotFoundError", "AttributeError", "TypeError", "NameError")


def test_agent_008_runs_until_unsloth_finds_no_gpu(backend_python: Path, art_e_data_dir: Path, tmp_path: Path) -> None:
    hf_home = tmp_path / "hf"
    for repo in required_repos("Qwen/Qwen2.5-14B-Instruct"):  # staged, as stage-model leaves them
        cache_repo(hf_home / "hub", repo.repo_id)
    run_dir, art_path = tmp_path / "runs" / "agent_008", tmp_path / "art"
    env = {**os.environ, "HPC_RUN_DIR": str(run_dir), "ART_PATH": str(art_path), "DATA_DIR": str(art_e_data_dir),
           "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled",
           "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONPATH": str(REPO), "JUDGE_MODEL": "judge-model"}
    with OpenAIServer(lambda body: text("OK")) as judge:  # the preflight asks the judge once; nothing else does
        result = subprocess.run([str(backend_python), "-m", "trainer.train", "--config", "agent_008",
                                 "training_dataset_size=4"], cwd=REPO, env={**env, "JUDGE_API_BASE": judge.base_url},
                                capture_output=True, text=True, timeout=900)

    out, err = result.stdout, result.stderr
    print(out[-3000:], err[-6000:])  # the CI log shows the boundary
    assert result.returncode == 1, (result.returncode, err[-2000:])
    for stage in ("config agent_008: run email_agent/agent_008", "preflight ok: backend: ART's LocalBackend packages "
                  "found", "preflight: 7 of 7 checks passed", "data: ", "4 training scenarios",
                  "checkpoints checked:", "backend: art.local.backend.LocalBackend",
                  "model built: email-agent-008 (run agent_008", "registering with the backend"):
        assert stage in out, f"missing stage {stage!r}"
    assert (art_path / "email_agent" / "models" / "agent_008" / "model.json").is_file(), "register reached ART"
    assert GPU_BOUNDARY in err and "Child process 'model-service' exited" in err
    assert err.rstrip().splitlines()[-1].startswith("trainer.train: error: the training backend did not start")
    assert not [line for line in err.splitlines() if line.startswith(API_ERRORS)], "an import or API error"
