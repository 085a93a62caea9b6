"""The continuation modes' one definition, as the command lines that take one show it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hpc.job.continuation_modes import LAUNCH_CHOICES, MODE_CHOICES, SUCCESSOR_CHOICES, ContinuationMode


def refusal(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *command], capture_output=True, text=True, timeout=60)


def test_a_bad_continuation_at_launch_is_one_line_naming_the_accepted_words_and_exit_2():
    done = refusal("hpc.launch", "--dry_run", "--continuation", "sometimes")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "invalid choice: 'sometimes' (choose from 'auto', 'requeue', 'afterany')" in done.stderr


@pytest.mark.parametrize("command, accepted", [
    (["hpc.job.continuation", "end", "--mode", "chained"], "'requeue', 'afterany', 'chain'"),
    (["hpc.job.pack", "end", "--mode", "chain"], "'requeue', 'afterany'"),
])
def test_an_end_hooks_bad_mode_names_the_accepted_words_and_exits_2(command, accepted):
    done = refusal(*command)
    assert done.returncode == 2 and f"(choose from {accepted})" in done.stderr.splitlines()[-1]


def test_the_choices_are_the_modes_words():
    assert MODE_CHOICES == tuple(mode.value for mode in ContinuationMode)
    assert LAUNCH_CHOICES == ("auto", *SUCCESSOR_CHOICES) and "chain" not in SUCCESSOR_CHOICES
