"""The judge served in the job: its settings, and the cap on every reply its job script starts it with."""

import pytest

from hpc.errors import UsageError
from hpc.launcher.envfiles import MergedEnv
from hpc.launcher.judge_serve import DEFAULT_MAX_OUTPUT_TOKENS, judge_serve
from hpc.launcher.render import render


def settings(**values: str) -> MergedEnv:
    return MergedEnv(dict(values))


def test_a_served_judge_caps_its_replies_by_default_and_the_dotenv_can_change_it():
    assert judge_serve("Qwen/Qwen2.5-32B-Instruct", None, settings(), 4).max_output_tokens == DEFAULT_MAX_OUTPUT_TOKENS
    judge = judge_serve("Qwen/Qwen2.5-32B-Instruct", None, settings(JUDGE_SERVE_MAX_OUTPUT_TOKENS="256"), 4)
    assert judge.max_output_tokens == 256 and judge.placed(3).max_output_tokens == 256
    small = judge_serve("Qwen/Qwen2.5-32B-Instruct", None, settings(JUDGE_SERVE_MAX_MODEL_LEN="600"), 4)
    assert small.max_output_tokens == 599  # never more than the window leaves


@pytest.mark.parametrize("value", ["0", "16384", "lots"])
def test_a_cap_outside_the_judges_window_is_a_one_line_usage_error(value):
    with pytest.raises(UsageError, match=f"invalid JUDGE_SERVE_MAX_OUTPUT_TOKENS '{value}': accepted an integer 16..16383"):
        judge_serve("Qwen/Qwen2.5-32B-Instruct", None, settings(JUDGE_SERVE_MAX_OUTPUT_TOKENS=value), 4)


def test_the_job_script_starts_the_judge_with_its_cap():
    judge = judge_serve("Qwen/Qwen2.5-32B-Instruct", None, settings(JUDGE_SERVE_MAX_OUTPUT_TOKENS="512"), 4).placed(3)
    block = render("_judge_server.sh.j2", {"judge": judge, "judge_dir": "/runs/j/judge", "pack": None})
    assert "--max_model_len 16384 --max_output_tokens 512 " in block
