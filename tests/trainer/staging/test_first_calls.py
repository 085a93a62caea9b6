"""trainer/staging/first_calls.py: the first turn alone, the question then its good search, in each context."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
CHECK = """
import json, sys
from pathlib import Path
from transformers import AutoTokenizer
from trainer.agent.scenarios import load_scenarios
from trainer.staging.first_calls import CONTEXTS, first_calls
from trainer.staging.synthetic_inbox import search_plan
model, data, art_e = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
tokenizer = AutoTokenizer.from_pretrained(str(model))
scenarios = load_scenarios(data, "test", limit=None, shuffle=False)
found = {}
for context in CONTEXTS:
    calls = first_calls(tokenizer, scenarios, context)
    row = calls[0]
    found[context] = {"count": len(calls), "prompt": tokenizer.decode(row.input_ids[:row.prompt]),
                      "copied": tokenizer.decode(row.input_ids[row.prompt:row.prompt + row.copied]),
                      "target_is_the_call": tokenizer.decode([t for t in row.labels if t != -100])
                                            == tokenizer.decode(row.input_ids[row.prompt:])}
found["question"] = scenarios[0].question
found["entity"] = search_plan(scenarios[0].question).good[0]
found["scenarios"] = len(scenarios)
found["art_e"] = len(first_calls(tokenizer, load_scenarios(art_e, "train", limit=None)))
print(json.dumps(found))
"""


def test_each_context_puts_its_part_before_the_question_and_targets_the_call_up_to_the_entity(
        inbox_model: Path, inbox_data_dir: Path, art_e_data_dir: Path, backend_python: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    result = subprocess.run([str(backend_python), "-c", CHECK, str(inbox_model), str(inbox_data_dir), str(art_e_data_dir)],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    none, system, tools = found["none"], found["system"], found["tools"]
    assert none["count"] == system["count"] == tools["count"] == found["scenarios"]  # every inbox question has a plan
    assert all(found["question"] in c["prompt"] and c["target_is_the_call"] for c in (none, system, tools))
    assert all(c["copied"].endswith(f'["{found["entity"]}') for c in (none, system, tools))
    assert "email search agent" not in none["prompt"] and "<tools>" not in none["prompt"]
    assert "email search agent" in system["prompt"] and "<tools>" not in system["prompt"]
    assert "email search agent" in tools["prompt"] and "<tools>" in tools["prompt"]
    assert found["art_e"] == 0  # ART-E's questions have no planned search: no lesson from them
