"""bench/warmup_copy.py: the CPU proxy of whether a made model learns to copy the question's entity."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHECK = """
import json, sys
from pathlib import Path
from transformers import AutoTokenizer
from bench.warmup_copy import calls, main
from trainer.agent.scenarios import load_scenarios
from trainer.staging.synthetic_inbox import search_plan
model, data = Path(sys.argv[1]), Path(sys.argv[2])
tokenizer = AutoTokenizer.from_pretrained(str(model))
row = calls(tokenizer, data, "test", 1)[0]
copied = tokenizer.decode(row.input_ids[row.prompt:row.prompt + row.copied])
target = tokenizer.decode([t for t in row.labels if t != -100])
entity = search_plan(load_scenarios(data, "test", limit=None, shuffle=False)[0].question).good[0]
print(json.dumps({"copied": copied, "entity": entity,
                  "target_is_the_call": target == tokenizer.decode(row.input_ids[row.prompt:])}))
main([str(model), "--data_dir", str(data), "--steps", "2", "--every", "1", "--questions", "3", "--batch_size", "2"])
"""


def test_the_proxy_targets_the_first_call_counts_up_to_the_entity_and_measures_each_step(
        inbox_model: Path, inbox_data_dir: Path, backend_python: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    result = subprocess.run([str(backend_python), "-c", CHECK, str(inbox_model), str(inbox_data_dir)], cwd=REPO,
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    first, *steps = result.stdout.strip().splitlines()
    found = json.loads(first)
    assert found["target_is_the_call"]
    assert found["copied"].endswith(f'["{found["entity"]}')  # the call up to the entity's end, nothing after
    assert [line.split(":")[0] for line in steps] == ["step 1", "step 2"]
    assert all("held-out entity copied 0." in line or "copied 1.00" in line for line in steps)


def test_bad_input_is_a_one_line_error_with_exit_2(tmp_path: Path, backend_python: Path) -> None:
    result = subprocess.run([str(backend_python), "-m", "bench.warmup_copy", str(tmp_path), "--data_dir", str(tmp_path),
                             "--steps", "0"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "invalid --steps 0" in result.stderr
