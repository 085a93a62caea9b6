"""trainer.warmup's scripted trajectories: what a good agent does, played through the real tools."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from trainer.agent.rollout import AgentConfig, system_prompt
from trainer.agent.scenarios import load_scenarios
from trainer.agent.tools import READ_EMAIL, RETURN_FINAL_ANSWER, SEARCH_EMAILS
from trainer.staging.warmup import keywords, main, parsed_tool_call, scripted_conversation, scripted_conversations

REPO = Path(__file__).resolve().parents[3]


def test_keywords_are_the_questions_longest_words_that_the_email_holds() -> None:
    assert keywords("When is the Houston pipeline meeting?", "The pipeline meeting moved to Houston.") == \
        ["pipeline", "houston"]  # longest first; ties in the question's order
    assert keywords("What about it?", "unrelated text") == []


def test_each_scripted_conversation_searches_reads_and_answers_through_the_real_tools(art_e_data_dir, email_db) -> None:
    scenarios = load_scenarios(art_e_data_dir, "train", limit=None)
    agent = AgentConfig(max_turns=4)
    conversations = scripted_conversations(scenarios, email_db, agent)
    assert 0 < len(conversations) <= len(scenarios)
    for messages in conversations:
        system, user, search, found, read, email, answer = messages
        scenario = next(s for s in scenarios if s.question == user["content"])
        assert system["content"] == system_prompt(scenario, agent)
        names = [m["tool_calls"][0]["function"]["name"] for m in (search, read, answer)]
        assert names == [SEARCH_EMAILS, READ_EMAIL, RETURN_FINAL_ANSWER]
        target = scenario.message_ids[0]
        assert target in found["content"] and found["tool_call_id"] == search["tool_calls"][0]["id"]
        assert json.loads(email["content"])["message_id"] == target
        final = json.loads(answer["tool_calls"][0]["function"]["arguments"])
        assert final == {"answer": scenario.answer, "sources": [target]}


def test_a_scenario_whose_email_is_missing_gives_no_conversation(art_e_data_dir, email_db) -> None:
    from dataclasses import replace

    scenario = load_scenarios(art_e_data_dir, "train", limit=None)[0]
    assert scripted_conversation(replace(scenario, message_ids=("<missing@x>",)), email_db, AgentConfig()) is None


def test_a_generated_turn_counts_as_a_tool_call_only_when_hermes_could_parse_it() -> None:
    good = '<tool_call>\n{"name": "search_emails", "arguments": {"keywords": ["x"]}}\n</tool_call><|im_end|>'
    assert parsed_tool_call(good) == {"name": "search_emails", "arguments": {"keywords": ["x"]}}
    assert parsed_tool_call('<tool_call>\n{"name": "search_emails", "arguments": \n</tool_call>') is None
    assert parsed_tool_call("I think the answer is Tuesday.") is None


COPY_LESSON = """
import json, sys
from pathlib import Path
from trainer.staging.warmup import WarmupError, warm_up
model, data, art_e, out = (Path(p) for p in sys.argv[1:5])
said = []
report = warm_up(model, out / "inbox", data, steps=2, batch_size=2, learning_rate=5e-4, max_turns=4, check=1,
                 policy="inbox-mix", good_share=0.5, copy_steps=3, say=said.append)
try:
    warm_up(model, out / "art-e", art_e, steps=2, batch_size=2, learning_rate=5e-4, max_turns=4, check=1, copy_steps=3,
            say=said.append)
    refused = None
except WarmupError as error:
    refused = str(error)
print(json.dumps({"said": said, "copy_steps": report.copy_steps, "refused": refused,
                  "made_by": json.loads((out / "inbox" / "made_by.json").read_text())["warmup"]}))
"""


def test_the_copy_lesson_trains_the_first_calls_before_the_conversations_and_needs_inbox_questions(
        inbox_model: Path, inbox_data_dir: Path, art_e_data_dir: Path, backend_python: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    result = subprocess.run([str(backend_python), "-c", COPY_LESSON, str(inbox_model), str(inbox_data_dir),
                             str(art_e_data_dir), str(tmp_path)], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    said = found["said"]
    lesson = next(i for i, line in enumerate(said) if line.startswith("copy lesson: "))
    assert said[lesson].endswith("first calls without the system prompt, 3 steps of 2")
    assert [line.split(":")[0] for line in said[lesson + 1:lesson + 4]] == [f"warmup step {n}/3" for n in (1, 2, 3)]
    assert said[lesson + 4].startswith("warmup: ")  # then the conversations, as before
    assert found["copy_steps"] == 3 and found["made_by"]["copy_steps"] == 3
    assert found["made_by"]["steps_by"] == "eager (no CUDA)"  # how the steps ran, for the bench's log
    assert found["refused"].startswith("--copy_steps needs the synthetic inboxes' questions")


def test_a_negative_copy_steps_is_a_one_line_error_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "base"), str(tmp_path / "out"), "--copy_steps", "-1"]) == 2
    error = capsys.readouterr().err.strip()
    assert error == "trainer.warmup: error: --copy_steps -1: accepted: an integer >= 0"
    assert not (tmp_path / "out").exists()


def test_unstaged_data_is_a_one_line_error_with_exit_2_before_any_model_loads(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text("{}")  # not a loadable model: the refusal must come first
    assert main([str(base), str(tmp_path / "out"), "--data_dir", str(tmp_path / "nodata")]) == 2
    error = capsys.readouterr().err.strip()
    assert error == (f"trainer.warmup: error: --data_dir {tmp_path / 'nodata'}: scenario file not found: "
                     f"{tmp_path / 'nodata' / 'scenarios' / 'train.jsonl'}; "
                     "stage the data with `python -m trainer.data prepare`")
    assert not (tmp_path / "out").exists()


BATCHED = """
import json, sys
from pathlib import Path
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from trainer.agent.email_db import EmailDB
from trainer.agent.rollout import AgentConfig
from trainer.agent.scenarios import load_scenarios
from trainer.staging.warmup import SPANS, collate, scripted_conversations, tokenised, train
path, data = sys.argv[1:3]
tokenizer = AutoTokenizer.from_pretrained(path)
with EmailDB(Path(data) / "enron_emails.db") as db:
    conversations = scripted_conversations(load_scenarios(Path(data), "train", limit=None), db, AgentConfig(max_turns=4))[:6]
def one_by_one(messages, targets):  # each token's label by the spans it begins in, one conversation at a time
    text, spans = SPANS[targets](tokenizer, messages)
    encoded = tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)
    return [t if any(a <= b < e for a, e in spans) else -100 for t, (b, _) in zip(encoded["input_ids"], encoded["offset_mapping"])]
same = {targets: [e.labels for e in tokenised(tokenizer, conversations, targets)] == [one_by_one(m, targets) for m in conversations]
        for targets in SPANS}
examples = tokenised(tokenizer, conversations, "assistant")
examples = [examples[0], type(examples[0])(examples[1].input_ids[:-40], examples[1].labels[:-40])]  # unequal lengths
torch.manual_seed(0)
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
batch = collate(examples, tokenizer.pad_token_id, "cpu")
unmasked = float(model(**batch).loss.detach())
mask = (torch.arange(batch["input_ids"].shape[1])[None, :] < torch.tensor([[len(e.input_ids)] for e in examples])).long()
masked = float(model(**batch, attention_mask=mask).loss.detach())
losses = {p: train(model, examples, tokenizer.pad_token_id, steps=3, batch_size=2, learning_rate=5e-4, seed=0,
                   device="cpu", say=lambda _: None, precision=p) for p in ("float32", "bf16")}
print(json.dumps({"same": same, "keys": sorted(batch), "unmasked": unmasked, "masked": masked, "losses": losses,
                  "dtype": str(next(model.parameters()).dtype)}))
"""


def test_batched_tokenising_labels_as_one_at_a_time_and_the_unmasked_padded_loss_is_the_masked_one(
        inbox_model: Path, inbox_data_dir: Path, backend_python: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    result = subprocess.run([str(backend_python), "-c", BATCHED, str(inbox_model), str(inbox_data_dir)], cwd=REPO,
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["same"] == {"assistant": True, "conversation": True}
    assert found["keys"] == ["input_ids", "labels"]  # right-padded, no attention mask
    assert found["unmasked"] == pytest.approx(found["masked"], rel=1e-5)
    assert all(len(losses) == 3 and all(loss > 0 for loss in losses) for losses in found["losses"].values())
    assert found["losses"]["bf16"] != found["losses"]["float32"]  # autocast ran the passes in bf16
    assert found["dtype"] == "torch.float32"  # while the weights stayed float32


def test_an_unknown_precision_is_refused_naming_the_accepted_ones(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([str(tmp_path / "base"), str(tmp_path / "out"), "--precision", "fp8"])
    assert exit_.value.code == 2
    assert "argument --precision: invalid choice: 'fp8' (choose from 'float32', 'bf16')" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


DEVICE_BATCHES = """
import json, random, torch
from trainer.staging.warmup import Example, batches, collate
from trainer.staging.warmup_batches import DeviceBatches
rng = random.Random(7)
distinct = [Example([rng.randrange(1, 50) for _ in range(n)], [rng.choice([-100, 3, 4]) for _ in range(n)])
            for n in (5, 9, 2, 14, 9, 1, 7)]
examples = distinct + distinct[:3] + [distinct[3]] * 4  # repeats: the same object more than once
old = [collate(batch, 0, "cpu") for batch in batches(examples, 4, 25, seed=11)]
new = list(DeviceBatches(examples, 0, "cpu").batches(4, 25, seed=11))
same = [sorted(o) == sorted(n) and all(torch.equal(o[k], n[k]) for k in o) for o, n in zip(old, new)]
widths = sorted({int(o["input_ids"].shape[1]) for o in old})
print(json.dumps({"steps": [len(old), len(new)], "same": same, "widths": widths,
                  "empty": list(DeviceBatches(examples, 0, "cpu").batches(4, 0, seed=11))}))
"""


def test_device_batches_equal_the_collated_batches_of_the_same_draws(backend_python: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    result = subprocess.run([str(backend_python), "-c", DEVICE_BATCHES], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["steps"] == [25, 25] and all(found["same"])
    assert len(found["widths"]) > 1  # batches trimmed to their own longest row, not the table's
    assert found["empty"] == []
