"""bench/warmup_step.py's report of the graph variant: how it ran, and how far from the eager losses."""

from __future__ import annotations

import pytest

from bench.warmup_step import VARIANTS, fallback_only, parse_args, sameness
from trainer.staging.warmup_steps import Training


def test_the_bench_measures_the_graph_beside_the_old_and_new_steps() -> None:
    assert list(VARIANTS) == ["old", "new", "graph"]


def test_the_graph_variant_is_reported_with_how_it_ran_and_its_largest_loss_difference() -> None:
    line = sameness(Training([2.5, 2.25, 2.0], "eager (no CUDA)"), Training([2.5, 2.0, 2.125], "eager (asked)"))
    assert line == ("graph variant ran as: eager (no CUDA); its losses against new's over the first 3 steps: "
                    "max abs difference 2.50e-01 (new's loss 2.5000 -> 2.1250)")


def test_of_the_warm_ups_lines_only_a_failed_capture_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    fallback_only("warmup step 1/10: loss 3.1")
    fallback_only("warmup: no CUDA graph, eager steps from the same start (capture failed: RuntimeError: x)")
    assert capsys.readouterr().out.splitlines() == [
        "warmup: no CUDA graph, eager steps from the same start (capture failed: RuntimeError: x)"]


@pytest.mark.parametrize("bad", [["--steps", "0"], ["--steps", "-3"], ["--rounds", "0"], ["--batch_size", "0"]])
def test_a_count_below_one_is_refused_in_one_line_not_taken_for_the_default(
        bad: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        parse_args(bad)
    [line] = [text for text in capsys.readouterr().err.splitlines() if "error:" in text]
    assert stopped.value.code == 2 and "accepted integers >= 1" in line
