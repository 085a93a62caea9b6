"""bench/learning_curve.py on CPU: its plan, its results (the issue's JSON schema, Wilson intervals,
the targets, the picture), and its runs stage driving trainer.train with the learning_curve config on
synthetic inboxes, with the backend double and a scripted agent in place of the GPU."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import pytest

from bench import learning_curve as bench
from bench.learning_curve_results import heldout_points, plot, redraw, results, verdicts, wilson, write_json
from hpc.run.rundir import RunDir
from trainer.agent.scenarios import load_scenarios
from trainer.proof.loopback_openai import OpenAIServer, Reply, tool_call
from trainer.proof.string_match_judge import string_match_verdict
from trainer.proof.workspace import Work
from trainer.staging.synthetic_inbox import search_plan

REPO = Path(__file__).resolve().parents[2]


# -- results ---------------------------------------------------------------------------------------------


def record(run: RunDir, step: int, correct: int, n: int) -> None:
    """A validation as the trainer records it (trainer.evaluation.engine's summary and per-question records)."""
    from trainer.evaluation.engine import QuestionResult, records, summarize

    results = [QuestionResult(id=i, question="q", expected="12345", answer="12345" if i < correct else "54321",
                              correct=i < correct, i_dont_know=False, sources=[], found_source=True,
                              read_source=i < correct, turns=3, latency_s=0.1, prompt_tokens=900,
                              completion_tokens=90, reward=1.4 if i < correct else -0.8, tool_error=False,
                              judge_failed=False) for i in range(n)]
    run.record_validation({"step": step, **summarize(results)}, records(results))


def curve(root: Path, name: str, points: list[tuple[int, int]], n: int = 300) -> RunDir:
    run = RunDir(root / name)
    for step, correct in points:
        record(run, step, correct, n)
    return run


def test_the_json_has_the_issues_schema_with_each_validation_counted_from_its_questions(tmp_path: Path) -> None:
    seeds = {1: curve(tmp_path, "seed1", [(0, 75), (4, 150), (8, 240)]), 2: curve(tmp_path, "seed2", [(0, 80)])}
    data = results("1 x NVIDIA H100 80GB HBM3", "made model", "2026-11-27", seeds, curve(tmp_path, "control", [(0, 77)]))
    assert data == {"device": "1 x NVIDIA H100 80GB HBM3", "model": "made model", "date": "2026-11-27",
                    "runs": [{"seed": 1, "heldout": [{"step": 0, "correct": 75, "n": 300},
                                                    {"step": 4, "correct": 150, "n": 300},
                                                    {"step": 8, "correct": 240, "n": 300}]},
                             {"seed": 2, "heldout": [{"step": 0, "correct": 80, "n": 300}]}],
                    "control": {"heldout": [{"step": 0, "correct": 77, "n": 300}]}}
    written = write_json(data, tmp_path / "out" / "learning_curve.json")
    assert json.loads(written.read_text()) == data


def test_a_validation_without_its_question_records_is_counted_from_its_summary(tmp_path: Path) -> None:
    run = curve(tmp_path, "run", [(0, 77)])
    run.validation_details(0).unlink()
    assert heldout_points(run) == [{"step": 0, "correct": 77, "n": 300}]


def test_wilson_intervals_are_the_textbook_ones() -> None:
    low, high = wilson(50, 100)
    assert (round(low, 4), round(high, 4)) == (0.4038, 0.5962)
    assert wilson(0, 300)[0] == pytest.approx(0.0, abs=1e-12) and round(wilson(0, 300)[1], 4) == 0.0126
    assert wilson(0, 0) == (0.0, 1.0)


def points(*pairs: tuple[int, int], n: int = 300) -> list[dict[str, int]]:
    return [{"step": step, "correct": correct, "n": n} for step, correct in pairs]


def test_the_targets_are_met_only_by_a_rise_of_20_points_with_intervals_apart_and_a_flat_control() -> None:
    data = {"runs": [{"seed": 1, "heldout": points((0, 75), (20, 240))},
                     {"seed": 2, "heldout": points((0, 75), (20, 136))},  # +20.3 points, intervals overlap at n=300?
                     {"seed": 3, "heldout": points((0, 75))}],
            "control": {"heldout": points((0, 75), (20, 92))}}
    seed1, seed2, seed3, control = verdicts(data)
    assert seed1.met and "+55.0%" in seed1.line() and "apart" in seed1.line()
    assert not seed3.met and "no first and last point" in seed3.measured
    assert not control.met and "+5.7%" in control.line()  # 5.7 points: not under 5
    assert seed2.met == (wilson(75, 300)[1] < wilson(136, 300)[0])
    flat = verdicts({"runs": [], "control": {"heldout": points((0, 75), (20, 80))}})[0]
    assert flat.met and flat.line().startswith("met")


def test_a_rise_whose_intervals_overlap_misses_the_target_even_at_20_points() -> None:
    (verdict, _) = verdicts({"runs": [{"seed": 1, "heldout": points((0, 20), (8, 30), n=50)}],
                             "control": {"heldout": []}})
    assert not verdict.met and "+20.0%" in verdict.measured and "overlap" in verdict.measured
    (exact, _) = verdicts({"runs": [{"seed": 1, "heldout": points((0, 40), (8, 60), n=100)}], "control": {"heldout": []}})
    assert exact.met and "apart" in exact.measured  # 20 points exactly, counted without rounding error


def test_a_fall_clear_of_noise_misses_the_target_and_is_not_called_an_overlap() -> None:
    """The first curve's seed 2 fell from 142/300 to 0/300 and the bench said "intervals overlap"."""
    (fell, _) = verdicts({"runs": [{"seed": 2, "heldout": points((0, 142), (64, 0))}], "control": {"heldout": []}})
    assert not fell.met and fell.measured.endswith("-47.3%, intervals apart, the last below the first")


def test_the_picture_is_drawn_from_the_json_alone(tmp_path: Path) -> None:
    data = {"device": "1 x NVIDIA H100 80GB HBM3", "model": "made model", "date": "2026-11-27",
            "runs": [{"seed": 1, "heldout": points((0, 75), (4, 150), (8, 240))},
                     {"seed": 2, "heldout": points((0, 80), (4, 170), (8, 230))}],
            "control": {"heldout": points((0, 77), (4, 74), (8, 79))}}
    png = plot(data, tmp_path / "a" / "learning_curve.png")
    json_path = write_json(data, tmp_path / "b" / "learning_curve.json")
    result = subprocess.run([sys.executable, "-m", "bench.learning_curve", "plot", str(json_path)], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    redrawn = json_path.with_suffix(".png")
    assert png.read_bytes()[:8] == redrawn.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert redraw(json_path, tmp_path / "c.png").stat().st_size > 10_000


# -- the plan and the command line ---------------------------------------------------------------------------


def test_the_plan_names_every_run_its_gpus_and_an_estimate_within_the_budget() -> None:
    result = subprocess.run([sys.executable, "-m", "bench.learning_curve", "plan", "--gpus", "0", "--minutes", "20"],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "gpu_mode shared" in out and "seed1 (seed 1, CUDA_VISIBLE_DEVICES=0)" in out
    assert "control (seed 1, lr 0, CUDA_VISIBLE_DEVICES=0)" in out and "at step 0 and every 10" in out
    total = float(re.search(r"expected total ~([\d.]+) min of 20", out).group(1))
    assert 10 < total <= 20


def test_on_two_gpus_each_run_trains_on_one_and_samples_from_the_other() -> None:
    specs = bench.run_specs(["2", "3"])
    assert [(s.name, s.devices) for s in specs] == [("seed1", "2,3"), ("seed2", "3,2"), ("control", "2,3")]
    assert [s.learning_rate for s in specs] == [None, None, 0.0] and len({s.port for s in specs}) == 3
    assert specs[2].overrides(Path("/m"), "dedicated") == ["base_model=/m", "seed=1", "gpu_mode=dedicated",
                                                           "learning_rate=0.0"]


@pytest.mark.parametrize("args, expected", [(["--gpus", "0,1,2"], "invalid --gpus"), (["--gpus", "0,0"], "invalid --gpus"),
                                            (["--minutes", "1"], "invalid --minutes"), (["plot"], "plot needs the JSON")])
def test_bad_arguments_are_one_line_errors_with_exit_2(args: list[str], expected: str) -> None:
    command = args if args == ["plot"] else ["plan", *args]
    result = subprocess.run([sys.executable, "-m", "bench.learning_curve", *command], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2 and expected in result.stderr.strip().splitlines()[-1]


def test_status_before_any_bench_says_so(tmp_path: Path) -> None:
    assert bench.status_lines(Work(tmp_path), ["0"]) == [f"no bench in {tmp_path} yet"]


def test_status_shows_how_the_warmed_models_first_turns_search(tmp_path: Path) -> None:
    work = Work(tmp_path)
    bench.stage(work, "scripted")
    (tmp_path / "first_turns.json").write_text(json.dumps(
        {"model": "model", "questions": 200, "temperature": 1.0, "counts": {"good": 14, "weak": 186}}))
    assert "  first turns of model on 200 held-out questions at temperature 1: good 7.0%, weak 93.0%" in \
        bench.status_lines(work, ["0"])


# -- the runs stage on CPU -------------------------------------------------------------------------------------


def searches_well(question: str) -> bool:
    """The scripted agent's choice: the good search for entities from A to L, the weak one after."""
    return search_plan(question).good[0] < "M"


def inbox_agent() -> Callable[[dict[str, Any]], Reply]:
    """A scripted agent playing the warm-up's two searches (``searches_well`` picks), reading the
    first result and answering its number; the judge's requests get the bench's string match."""

    def respond(body: dict[str, Any]) -> Reply:
        if "tools" not in body:
            return string_match_verdict(body)
        last = body["messages"][-1]
        if last["role"] == "user":
            plan = search_plan(last["content"])
            return tool_call("search_emails", {"keywords": plan.good if searches_well(last["content"]) else plan.weak})
        found = json.loads(last["content"])
        if isinstance(found, list):
            return tool_call("read_email", {"message_id": found[0]["message_id"]})
        number = re.search(r"\b\d{5}\b", found["body"]).group()
        return tool_call("return_final_answer", {"answer": number, "sources": [found["message_id"]]})

    return respond


CPU_OVERRIDES = ("backend=tests.doubles.art_backend:FakeBackend", "training_dataset_size=4", "groups_per_step=2",
                 "trajectories_per_group=2", "val_set_size=8", "eval_steps=1", "preflight_min_free_gb=0")


def test_the_runs_stage_validates_each_run_at_step_0_and_every_eval_steps_and_collects_the_json(
        tmp_path: Path, inbox_data_dir: Path) -> None:
    with OpenAIServer(inbox_agent()) as server:
        work = Work(tmp_path, server.base_url, devices="")
        work.data.parent.mkdir(parents=True, exist_ok=True)
        work.data.symlink_to(inbox_data_dir)
        bench.record_plan(work, bench.plan_of(["0"], 20))
        bench.stage(work, "runs")
        lines = bench.train_runs(work, ["0"], time.time() + 600, CPU_OVERRIDES, ART_FAKE_INFERENCE_URL=server.base_url)
    assert all(" exit 0 " in line for line in lines), lines
    written, met = bench.collect(work, tmp_path / "out", ["0"])
    data = json.loads((tmp_path / "out" / "learning_curve.json").read_text())
    assert set(data) == {"device", "model", "date", "runs", "control"} and [r["seed"] for r in data["runs"]] == [1, 2]
    right = sum(searches_well(s.question) for s in load_scenarios(inbox_data_dir, "test", limit=8, shuffle=False))
    assert 0 < right < 8
    for heldout in [run["heldout"] for run in data["runs"]] + [data["control"]["heldout"]]:
        assert heldout == [{"step": step, "correct": right, "n": 8} for step in (0, 1, 2)]
    assert (tmp_path / "out" / "learning_curve.png").is_file() and not met  # nothing learned: a flat scripted agent
    assert "control: 2 steps, LoRA changed at" in "\n".join(written)  # the backend double writes a new one each step
    assert "seed1: 2 steps" in "\n".join(bench.status_lines(work, ["0"]))
    timing = "\n".join(written)
    assert re.search(rf"register \(the slowest seed\): predicted {float(bench.ESTIMATE['register'])} s, measured \d+\.\d s", timing)
    assert re.search(r"each run's, from its own start: seed1 \d+ s \(backend \d+ s\), seed2 \d+ s \(backend \d+ s\), "
                     r"control \d+ s \(backend \d+ s\)", timing)
    assert re.search(r"    seed1: construct \d+ s, model \d+ s, register \d+ s", timing)  # the double writes no vLLM log
    assert set(bench.run_starts(work)) == {"seed1", "seed2", "control"}
    assert re.search(r"steps reached \(the fewest seed\): predicted \d+\.0 steps, measured 2\.0 steps", timing)
    assert "  the control: 2 steps" in timing


def test_hpc_report_draws_the_held_out_curve_of_a_bench_run(tmp_path: Path) -> None:
    from hpc.run.report import write_report

    run = curve(tmp_path, "seed1", [(0, 75), (4, 150), (8, 240)])
    for step in range(1, 9):
        run.append_step({"step": step, "seconds": 20.0, "reward_mean": -0.5 + step / 8, "reward_spread": 0.9})
    report = write_report(run).read_text()
    assert (run.report_dir / "training.png").is_file() and "![training reward and validation accuracy]" in report
    assert "| 8 | 80.0% |" in report


def test_the_data_and_scripted_stages_stage_the_inboxes_and_measure_the_warm_ups_policy(tmp_path: Path) -> None:
    """The warm-up gets inboxes of its own: on two H100s (2026-11-27) a warm-up that had seen every
    training question let training accuracy average 94% while held-out accuracy fell to 51-70%."""
    from trainer.agent.scenarios import load_scenarios

    work = Work(tmp_path)
    staged = "\n".join(bench.make_data(work))
    assert (f"{bench.TRAIN_INBOXES} train and {bench.HELDOUT_INBOXES} held-out inboxes, {bench.WARMUP_INBOXES} the "
            "warm-up's; 0 held-out") in staged
    assert "900 train, 600 test questions" in staged and "(2,700 questions as its train split" in staged
    inboxes = {name: {s.inbox_address for s in load_scenarios(data, split, limit=None)} for name, data, split in (
        ("warm-up", bench.warmup_data(work), "train"), ("train", work.data, "train"), ("test", work.data, "test"))}
    assert [len(inboxes[name]) for name in ("warm-up", "train", "test")] == [450, 150, 100]
    assert not inboxes["warm-up"] & inboxes["train"] and not (inboxes["warm-up"] | inboxes["train"]) & inboxes["test"]
    (line,) = bench.scripted(work)
    assert line == ("scripted policy on 300 questions with the real tools: good search 100.0% right, weak search "
                    "0.0% right, the warm-up's mix (50% good) 50.0% right on average")


def test_a_budget_with_room_for_fewer_than_two_validations_is_refused_before_anything_starts(tmp_path: Path) -> None:
    """Seen on an H100 (2026-11-27): --minutes 9 ended before any validation, three registrations at
    once took 292 s. A curve needs two held-out points; a budget that cannot give them starts nothing
    (7 minutes at today's planning figures)."""
    work = tmp_path / "bench"
    result = subprocess.run([sys.executable, "-m", "bench.learning_curve", "start", "--gpus", "0", "--minutes", "7",
                             "--work", str(work)], cwd=REPO, capture_output=True, text=True, timeout=120)
    [line] = result.stderr.strip().splitlines()
    assert result.returncode == 2 and "--minutes 7 leaves room for 0 held-out validation(s)" in line
    least = math.ceil(bench.plan_of(["0"], 7).minutes_for(2))
    assert f"give --minutes {least} or more" in line and least > 7 and not work.exists()


def test_the_plan_counts_the_seeds_registrations_as_measured_and_promises_no_validation_that_cannot_fit() -> None:
    assert bench.ESTIMATE["register"] >= 177  # the slower seed, the first start on two H200s, 2026-11-28
    short = bench.plan_of(["0"], 7)
    enough = bench.plan_of(["0"], math.ceil(short.minutes_for(2)))
    assert short.validations == [] and bench.too_short(short) is not None
    assert len(enough.validations) >= 2 and bench.too_short(enough) is None


def test_a_picture_of_a_bench_that_measured_nothing_says_so(tmp_path: Path) -> None:
    data = {"device": "1 x GPU", "model": "m", "date": "2026-11-27", "runs": [{"seed": 1, "heldout": []}],
            "control": {"heldout": []}}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "no artists with labels" legend warning
        path = plot(data, tmp_path / "empty.png")
    assert path.stat().st_size > 0


def test_a_curve_at_no_question_or_every_question_is_drawn_with_its_intervals(tmp_path: Path) -> None:
    """Seen on an H100 (2026-11-27): 0/600 gave a Wilson low end 4e-19 above 0, so an error bar below
    0 that matplotlib refused, and the bench's results were lost with the picture."""
    assert wilson(0, 600)[0] == 0.0 and wilson(600, 600)[1] == 1.0
    data = {"device": "2 x GPU", "model": "m", "date": "2026-11-27",
            "runs": [{"seed": 1, "heldout": points((0, 0), (4, 0), (8, 0))},
                     {"seed": 2, "heldout": points((0, 0), (4, 300))}], "control": {"heldout": []}}
    assert plot(data, tmp_path / "flat.png").stat().st_size > 10_000


def test_without_a_fixed_kv_cache_runs_whose_vllms_share_a_gpu_register_one_after_another(
        tmp_path: Path) -> None:
    """Only runs whose vLLMs share a GPU wait: seed 1's and seed 2's vLLMs are on different GPUs of two."""
    class Started:
        def __init__(self) -> None:
            self.done = False

        def ended(self) -> bool:
            return self.done

    work = Work(tmp_path)
    for gpus, waits in ((["0"], [[], ["seed1"], ["seed1", "seed2"]]), (["0", "1"], [[], [], ["seed1"]])):
        processes = [Started() for _ in range(3)]
        conditions = bench.start_conditions(work, gpus, processes, fixed_cache=False)
        assert [condition() for condition in conditions] == [not wait for wait in waits]
        for process in processes[:2]:
            process.done = True  # an earlier run that ended (failed) lets the next start
        assert all(condition() for condition in conditions)
    registered = Work(tmp_path / "b")
    registered.for_run("seed1").run.path.mkdir(parents=True)
    registered.for_run("seed1").run.append_startup(100.0)
    assert bench.start_conditions(registered, ["0", "1"], [Started() for _ in range(3)], fixed_cache=False)[2]()


@pytest.mark.parametrize("gpus", [["0"], ["0", "1"]])
def test_with_the_configs_fixed_kv_cache_the_seeds_start_at_once_and_the_control_once_both_registered(
        tmp_path: Path, gpus: list[str]) -> None:
    """On one H200 (2026-11-28) the control's vLLM, profiling memory while seed 1's slept or woke,
    refused to start; with the KV cache fixed no vLLM profiles, so the seeds need not wait for each
    other; the control waits for both, so the seeds' registrations are not slowed by a third."""
    from trainer.training.config import load_config

    class Running:
        def ended(self) -> bool:
            return False

    assert load_config(bench.CONFIG, ["base_model=/m"]).vllm_kv_cache_gb == 2
    work = Work(tmp_path)
    conditions = bench.start_conditions(work, gpus, [Running(), Running(), Running()])
    assert [condition() for condition in conditions] == [True, True, False]
    for seed, expected in (("seed1", False), ("seed2", True)):
        work.for_run(seed).run.path.mkdir(parents=True)
        work.for_run(seed).run.append_startup(100.0)
        assert conditions[2]() is expected


@pytest.mark.parametrize("good, questions, starts", [(0, 100, False), (3, 200, False), (4, 200, True), (14, 200, True)])
def test_no_run_starts_on_a_model_that_too_rarely_searches_well(good: int, questions: int, starts: bool) -> None:
    found = {"questions": questions, "temperature": 1.0, "counts": {"good": good, "weak": questions - good}}
    problem = bench.too_few_good_searches(found)
    assert (problem is None) == starts
    if not starts:
        assert f"good searches {good / questions:.1%} < 2%" in problem and "--warmup_steps" in problem


def test_a_bench_stopped_before_its_runs_writes_no_results_and_exits_1(tmp_path: Path, monkeypatch, capsys) -> None:
    def too_few(work: Work, warmup_steps: int, gpus: list[str]) -> None:
        raise bench.ProofFailed("first turns of model on 200 held-out questions: weak 100.0%; good searches 0.0% < 2%")

    monkeypatch.setattr(bench, "before_runs", too_few)
    out = tmp_path / "out"
    assert bench.main(["run", "--work", str(tmp_path / "w"), "--gpus", "0", "--minutes", "30", "--out", str(out)]) == 1
    assert not out.exists() and not (tmp_path / "w" / "runs").exists()
    stage = json.loads((tmp_path / "w" / "stage.json").read_text())["stage"]
    assert stage.startswith("stopped before the runs") and "good searches 0.0% < 2%" in capsys.readouterr().out


def test_collect_names_the_card_the_runs_had_not_the_one_it_runs_on(tmp_path: Path) -> None:
    work = Work(tmp_path)
    curve(work.runs, "seed1", [(0, 10), (4, 90)])
    (tmp_path / bench.DEVICE_FILE).write_text(json.dumps({"device": "2 x NVIDIA H100 80GB HBM3", "gpus": ["0", "1"]}))
    bench.collect(work, tmp_path / "out", ["0", "1"])
    data = json.loads((tmp_path / "out" / "learning_curve.json").read_text())
    assert data["device"] == "2 x NVIDIA H100 80GB HBM3" and data["runs"][0]["heldout"][-1]["correct"] == 90


def test_curves_that_coincide_are_drawn_side_by_side_and_a_run_without_points_is_named() -> None:
    """Seen with the two-GPU run's records: seed 1's 0% points hid under seed 2's on the frame."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bench.learning_curve_results import draw_series

    fig, axis = plt.subplots()
    draw_series(axis, "seed 1", points((0, 0), (4, 0)), "tab:blue", "-", "o", offset=-0.12)
    draw_series(axis, "seed 2", points((0, 0), (4, 0)), "tab:green", "-", "o", offset=0.12)
    draw_series(axis, "control", [], "tab:grey", "--", "s")
    xs = [list(container.lines[0].get_xdata()) for container in axis.containers]  # each errorbar's data line
    assert xs == [[-0.12, 3.88], [0.12, 4.12]]
    assert "control: no validation measured" in axis.get_legend_handles_labels()[1]
    plt.close(fig)


def test_the_runs_start_from_the_warm_up_whose_first_turns_on_training_questions_search_well_more_often(
        tmp_path: Path, monkeypatch) -> None:
    """Both recipes warm up side by side, one a GPU; the choice reads training questions only."""
    good = {"conversation": 31, "assistant": 9}
    calls: list[tuple[str, list[str], dict]] = []

    def command(work: Work, name: str, args: list[str], timeout: float = 600, **env: str) -> str:
        calls.append((name, args, env))
        if name == "make-model" or name.startswith("warmup-"):
            Path(args[3]).mkdir(parents=True)
            return "model: made\n" if name == "make-model" else f"warmup done: {name}\n"
        recipe, out = name.removeprefix("first-turns-"), Path(args[args.index("--out") + 1])
        counts = {"good": good[recipe], "weak": 200 - good[recipe]}
        out.write_text(json.dumps({"model": f"model-{recipe}", "questions": 200, "temperature": 1.0, "counts": counts,
                                   "split": args[args.index("--split") + 1]}))
        return ""

    monkeypatch.setattr(bench, "command", command)
    monkeypatch.setattr(bench, "RECIPES", {"assistant": {"targets": "assistant", "learning_rate": 5e-4},
                                           "conversation": {"targets": "conversation", "learning_rate": 1e-3}})
    lines = bench.make_model(Work(tmp_path), 10, ["0", "1"])
    (tmp_path / "stage.json").write_text(json.dumps({"stage": "model", "time": time.time()}))
    shown = bench.status_lines(Work(tmp_path), ["0", "1"])
    assert "  conversation (chosen): first turns of model-conversation on 200 training questions at temperature 1: " \
           "good 15.5%, weak 84.5%" in shown
    assert (tmp_path / "model").is_dir() and not (tmp_path / "model-conversation").exists()
    assert (tmp_path / "model-assistant").is_dir()  # the other kept, not deleted
    chosen = json.loads((tmp_path / "recipes.json").read_text())
    assert chosen["chosen"] == "conversation"
    assert chosen["first_turns_on_training_questions"]["assistant"]["counts"]["good"] == 9
    assert lines[-1] == ("chosen: conversation (--targets conversation --learning_rate 0.001; good searches on "
                         "training questions 15.5%)")
    turns = [(name, args, env) for name, args, env in calls if name.startswith("first-turns-")]
    assert {args[args.index("--split") + 1] for _, args, _ in turns} == {"train"}
    devices = {name: env.get("CUDA_VISIBLE_DEVICES") for name, _, env in calls if name.startswith("warmup-")}
    assert devices == {"warmup-assistant": "0", "warmup-conversation": "1"}
    flags = {name: [a for a in args if a.startswith(("--targets", "--learning_rate"))] for name, args, _ in calls
             if name.startswith("warmup-")}
    assert flags == {"warmup-assistant": ["--targets=assistant", "--learning_rate=0.0005"],
                     "warmup-conversation": ["--targets=conversation", "--learning_rate=0.001"]}
    assert all("--precision=bf16" in args for name, args, _ in calls if name.startswith("warmup-"))  # WARMUP's


def test_a_tie_between_the_warm_ups_goes_to_the_first_recipe() -> None:
    from trainer.staging.first_turns import FirstTurns

    first, second = list(bench.RECIPES)
    found = {recipe: FirstTurns(recipe, 200, 1.0, {"good": 20}, "train") for recipe in bench.RECIPES}
    assert bench.chosen_recipe(found) == first
    found[second] = FirstTurns("b", 200, 1.0, {"good": 21}, "train")
    assert bench.chosen_recipe(found) == second


def test_every_warm_up_runs_at_a_learning_rate_the_made_model_learned_to_copy_at() -> None:
    """On two H200s no warm-up at 2e-3 or 5e-3 ever copied the question's entity (0 good searches in
    200); on CPU, bench/warmup_copy.py's proxy learned the copy at 5e-4 in 300 steps, never at 2e-3."""
    assert all(0 < recipe["learning_rate"] <= 5e-4 for recipe in bench.RECIPES.values())
    assert "learning_rate" not in bench.WARMUP  # each recipe says its own


def test_every_warm_up_starts_with_a_copy_lesson_long_enough_to_learn_the_copy() -> None:
    """Whole conversations never taught the made model to copy the question's entity (two H200s,
    0-0.5% good first searches); the first calls alone did, in 300-400 steps (bench/warmup_copy.py:
    0.77 of held-out entities at 300 on an H200, all at 400)."""
    assert all(recipe["copy_steps"] >= 400 for recipe in bench.RECIPES.values())


DIGIT_THREE = ["\u0663", "\u06f3", "\u0969", "\uff13", "\U0001d7d1", "\u00b3"]


@pytest.mark.parametrize("flag, template", [("--gpus", "{}"), ("--gpus", "0,{}"), ("--gpus", "1{}"),
                                            ("--minutes", "2{}"), ("--warmup_steps", "{}")])
@pytest.mark.parametrize("digit", DIGIT_THREE)
def test_a_number_with_a_digit_that_is_not_ascii_is_refused(capsys, flag: str, template: str, digit: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        bench.main(["plan", flag, template.format(digit)])
    assert exit_.value.code == 2 and f"invalid {flag}" in capsys.readouterr().err.replace("invalid value", f"invalid {flag}")


@pytest.mark.parametrize("out", ["/etc/passwd", "/etc/passwd/x", "/dev/null", ""])
def test_collect_refuses_an_out_that_cannot_be_a_folder_before_reading_anything(capsys, tmp_path: Path, out: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        bench.main(["collect", "--work", str(tmp_path / "work"), "--out", out])
    assert exit_.value.code == 2 and "invalid --out" in capsys.readouterr().err
    assert not (tmp_path / "work").exists()


@pytest.mark.parametrize("content", [None, "", "{}", "[1]", "[" * 100_000, '{"runs": 5}'])
def test_plot_of_a_json_that_is_not_there_or_not_the_benchs_is_one_line(capsys, tmp_path: Path, content) -> None:
    path = tmp_path / "curve.json"
    if content is not None:
        path.write_text(content)
    try:
        code = bench.main(["plot", str(path)])
    except SystemExit as exit_:  # argparse's refusal of a path that is not there
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and "error: " in err.strip().splitlines()[-1]
    assert not path.with_suffix(".png").exists()


def test_the_model_stage_is_planned_from_the_warm_ups_steps_slower_where_two_share_a_gpu() -> None:
    one, two = bench.model_seconds(["0"], 6000), bench.model_seconds(["0", "1"], 6000)
    copy_steps = bench.RECIPES["assistant"]["copy_steps"]
    assert one == pytest.approx(bench.ESTIMATE["model_fixed"] + (6000 + copy_steps) * bench.ESTIMATE["warmup_step_two"])
    assert two == pytest.approx(bench.ESTIMATE["model_fixed"] + (6000 + copy_steps) * bench.ESTIMATE["warmup_step_alone"])
    assert bench.model_seconds(["0"], 3000) < one and two < one
    assert f"more often: ~{bench.plan_of(['0'], 24, 3000).model:.0f} s" in "\n".join(bench.plan_lines(["0"], 24, 3000))


def test_the_plan_says_how_fast_a_step_must_be_for_100_steps() -> None:
    plan = bench.plan_of(["0"], 24)
    validations = 100 // plan.eval_steps + 1
    assert plan.step_needed() == pytest.approx((plan.budget - validations * bench.ESTIMATE["validation"]) / 100)
    assert (f"100 steps need a step every {plan.step_needed():.1f} s or less (the {validations} validations aside); "
            f"planned {plan.step:g} s") in "\n".join(bench.plan_lines(["0"], 24))


def test_status_prints_each_stages_predicted_seconds_beside_the_measured_and_says_when_it_is_off_by_20_percent(
        tmp_path: Path) -> None:
    work = Work(tmp_path)
    assert bench.timing_lines(work, ["0"]) == ["timing: no plan recorded in this WORK (run or start writes it)"]
    bench.record_plan(work, bench.plan_of(["0"], 24))
    predicted = json.loads((tmp_path / bench.PLAN_FILE).read_text())
    seconds = {"data": 14.0, "model": predicted["model"] * 1.1, "first turns": 30.0, "scripted": 5.0, "runs": 0.0}
    begun = 1_800_000_000.0
    with (tmp_path / bench.STAGES_FILE).open("w") as file:
        for name, took in seconds.items():
            file.write(json.dumps({"stage": name, "time": begun}) + "\n")
            begun += took
    lines = bench.timing_lines(work, ["0"])
    assert lines[0] == "timing, the plan against this bench:"
    assert "  data: predicted 6.2 s, measured 14.0 s (+126%, OFF by more than 20%)" in lines
    assert any(line.startswith("  model: predicted") and "(+10%, within 20%)" in line for line in lines)
    assert "  register (the slowest seed): predicted 177.0 s, not measured yet" in lines
    two = 1000 * bench.ESTIMATE["warmup_step_two"]  # ms: a step of one of two warm-ups on one GPU
    for folder, targets, seconds in (("model", "assistant", 6.6 * two * 1.11), ("model-conversation", "conversation",
                                                                            6.6 * two * 1.39)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "made_by.json").write_text(json.dumps({"warmup": {
            "targets": targets, "steps": 6000, "copy_steps": 600, "train_seconds": seconds}}))
    lines = bench.timing_lines(work, ["0"])
    assert f"  warm-up step (assistant): predicted {two:.1f} ms, measured {two * 1.11:.1f} ms (+11%, within 20%)" in lines
    assert (f"  warm-up step (conversation): predicted {two:.1f} ms, measured {two * 1.39:.1f} ms (+39%, OFF by more "
            "than 20%)") in lines
    run = work.for_run("seed1").run
    run.path.mkdir(parents=True)
    for step in range(1, 4):
        run.append_step({"step": step, "seconds": 20.0})
    assert "  step (median): predicted 12.0 s, measured 20.0 s (+67%, OFF by more than 20%)" in bench.timing_lines(work, ["0"])


def test_the_planned_steps_count_the_steps_after_the_last_validation_until_the_deadline(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two H200s, 2026-11-28, --minutes 21: the seeds trained 85 and 84 steps where whole blocks of 10
    would have said 80; at that run's measured figures the plan says 88."""
    measured = {"data": 7.1, "first_turns": 21.3, "scripted": 0.6, "register": 206, "step_dedicated": 5.9,
                "validation": 17, "model_fixed": 54, "warmup_step_alone": 0.030}
    monkeypatch.setattr(bench, "ESTIMATE", {**bench.ESTIMATE, **measured})
    plan = bench.plan_of(["0", "1"], 21)
    assert plan.steps == 88 and plan.validations == list(range(0, 81, 10))
    assert plan.seconds_for(88) <= plan.budget < plan.seconds_for(89)
    assert bench.plan_of(["0", "1"], 120).steps == plan.total_steps == 100  # never past the config's steps
