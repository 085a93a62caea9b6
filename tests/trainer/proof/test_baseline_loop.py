"""trainer/proof/baseline_loop.py's ``start`` with ART's LocalBackend (the real ART, no GPU: nothing
starts until the model registers): both halves of the fast start its baseline runs with."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PROBE = """
import json, os, sys
from pathlib import Path
from trainer.proof.baseline_loop import proof_config, start
_, model = start(proof_config("/models/made", ["backend=local"]), Path(sys.argv[1]))
print(json.dumps({"engine_args": model._internal_config["engine_args"],
                  "sampler": os.environ.get("VLLM_USE_FLASHINFER_SAMPLER")}))
"""


def test_the_baseline_loops_local_backend_gets_fast_starts_engine_arguments_and_environment(
        backend_python: Path, tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key != "VLLM_USE_FLASHINFER_SAMPLER"}
    result = subprocess.run([str(backend_python), "-c", PROBE, str(tmp_path / "art")], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    started = json.loads(result.stdout.strip().splitlines()[-1])
    assert started["engine_args"]["enforce_eager"] is True and started["sampler"] == "0"
