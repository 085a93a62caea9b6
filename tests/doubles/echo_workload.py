"""Test double of a workload: records what the job handed it, then exits 0.

Run by test jobs as `python -m tests.doubles.echo_workload --config X ...`.
It writes $HPC_RUN_DIR/echo.json with its argv and the variables named in
ECHO_ENV_NAMES (comma-separated), so a test can check that every value made
it through rendering and shell quoting byte for byte. Secrets are checked
without writing them: ECHO_HASH_NAMES' values are recorded as SHA-256 digests.
ECHO_PROBE_JUDGE=1 also records the models the judge at JUDGE_API_BASE lists."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import urllib.request
from pathlib import Path


def judge_models(base_url: str) -> list[str]:
    with urllib.request.urlopen(f"{base_url}/models", timeout=10) as answer:
        return [model["id"] for model in json.loads(answer.read())["data"]]


def main() -> int:
    names = [n for n in os.environ.get("ECHO_ENV_NAMES", "").split(",") if n]
    names += ["HPC_JOB_NAME", "HPC_RUN_DIR", "HPC_CLUSTER", "CUDA_VISIBLE_DEVICES", "SLURM_JOB_GPUS",
              "SLURM_JOB_ID"]
    hashed = [n for n in os.environ.get("ECHO_HASH_NAMES", "").split(",") if n]
    record = {"argv": sys.argv[1:], "env": {name: os.environ.get(name) for name in names},
              "sha256": {name: hashlib.sha256(os.environ[name].encode()).hexdigest()
                         for name in hashed if name in os.environ}}
    if os.environ.get("ECHO_PROBE_JUDGE") == "1":  # the models the judge at JUDGE_API_BASE serves
        record["judge_models"] = judge_models(os.environ["JUDGE_API_BASE"])
    out = Path(os.environ.get("ECHO_OUTPUT") or Path(os.environ["HPC_RUN_DIR"]) / "echo.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record))
    print(f"echo_workload: wrote {out}")
    # ECHO_SLEEP keeps the job running, for tests that need an active job.
    time.sleep(float(os.environ.get("ECHO_SLEEP", "0")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
