"""python -m hpc.report from a real test run: the trainer's own loop (backend double,
scripted agent that answers better as its checkpoint step grows), two jobs with the
continuation hooks between them, validations, and baselines from trainer.eval. The
PNGs are checked as images (size, the series' colours) and the README shows this output
(UPDATE_README=1 refreshes docs/images/)."""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
from pathlib import Path

import pytest

from hpc.job import begin_hook, end_hook
from hpc.run import ledger
from hpc.run.ledger import Submit
from hpc.run.report import DPI, FIG_SIZE, model_bars
from hpc.run.report import main as report_main
from hpc.run.rundir import RunDir
from tests.doubles.ledger_lines import write_record
from tests.doubles.openai_server import OpenAIServer, Reply, text, tool_call
from tests.trainer.conftest import art_e_data_dir  # a fixture
from tests.trainer.training.test_train import JUDGE_MODEL, Run, run, server, train_in_process  # fixtures
from trainer.evaluation.eval import main as eval_main
from trainer.training.stop_request import StopRequest

pytestmark = pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")
REPO = Path(__file__).resolve().parents[3]
IMAGES = REPO / "docs" / "images"
LONG_RUN = ["backend=tests.doubles.art_backend:FakeBackend", "training_dataset_size=13", "groups_per_step=2",
            "trajectories_per_group=2", "num_epochs=4", "judge_retries=0", "val_set_size=4", "eval_steps=4",
            "eval_concurrency=4"]
STAND_INS = {"o3-stand-in": 13, "gpt-4.1-stand-in": 7}  # baselines answer as the checkpoint of that step would
GREEN, BLUE = (0x2C, 0xA0, 0x2C), (0x1F, 0x77, 0xB4)  # tab:green (validation), tab:blue (reward, evaluations)


def improving_agent(validation: dict[str, str], training: dict[str, str]):
    """Answers the k-th test question right after step 3k, and a training question
    right on a share of its calls that grows with the step; the judge accepts an answer equal
    to the reference."""
    ordered = sorted(validation)
    calls = iter(range(10**9))

    def respond(body: dict) -> Reply:
        last = body["messages"][-1]["content"]
        if body.get("model") == JUDGE_MODEL:
            found = re.search(r"Reference answer: (.*)\nAI answer: (.*)", last, re.S)
            return text(json.dumps({"thinking": "scripted", "accept": found[1] == found[2]}))
        step = int(body["model"].rsplit("@", 1)[-1]) if "@" in body["model"] else STAND_INS[body["model"]]
        if last in validation:
            right = ordered.index(last) * 3 < step
            return tool_call("return_final_answer", {"answer": validation[last] if right else "I don't know",
                                                     "sources": []})
        right = next(calls) * 13 % 32 < step + 4
        return tool_call("return_final_answer", {"answer": training.get(last, "?") if right else "wrong",
                                                 "sources": []})

    return respond


@pytest.fixture
def report_run(run: Run, art_e_data_dir: Path, monkeypatch) -> RunDir:
    """A run of 24 steps over two jobs, validated every 4 steps, with two baselines evaluated."""
    questions = {split: {q["question"]: q["answer"] for q in map(json.loads, (
        art_e_data_dir / "scenarios" / f"{split}.jsonl").read_text().splitlines())} for split in ("test", "train")}
    with OpenAIServer(improving_agent(questions["test"], questions["train"])) as endpoint:
        for name, value in {"ART_FAKE_INFERENCE_URL": endpoint.base_url, "JUDGE_API_BASE": endpoint.base_url,
                            "JUDGE_MODEL": JUDGE_MODEL, "OPENAI_API_BASE": endpoint.base_url,
                            "OPENAI_API_KEY": "test"}.items():
            monkeypatch.setenv(name, value)
        for job, stop_after in (("1001", 11), ("1002", None)):
            monkeypatch.setenv("SLURM_JOB_ID", job)
            begin_hook.begin(run.run_dir, run.model_dir, job, 0)
            stop = StopRequest()
            if stop_after is not None:
                watch_steps(run.run_dir, stop_after, stop)
            code = train_in_process(stop, overrides=LONG_RUN)
            end_hook.end(end_hook.EndArgs(run.run_dir, run.model_dir, job, code, "chain", Path("x"), 5, 2,
                                                  None))
        monkeypatch.delenv("HPC_RUN_DIR")
        monkeypatch.setenv("RUNS_DIR", str(run.run_dir.path.parent))
        for model in ("openai/o3-stand-in", "openai/gpt-4.1-stand-in"):
            assert eval_main(["--config", "smoke", "--model", model, "--run", run.run_dir.name, "limit=4"]) == 0
    return run.run_dir


def watch_steps(run: RunDir, after: int, stop: StopRequest) -> None:
    """Ask the trainer to stop (as a job's USR1 does) once ``after`` steps are done."""
    def watch() -> None:
        while len(run.read_steps()) < after:
            threading.Event().wait(0.05)
        stop.request("SIGUSR1")

    threading.Thread(target=watch, daemon=True).start()


def pixels(path: Path) -> tuple[tuple[int, int], set[tuple[int, int, int]]]:
    import matplotlib.image

    image = matplotlib.image.imread(path)
    rgb = {tuple(int(round(255 * c)) for c in pixel[:3]) for row in image for pixel in row}
    return (image.shape[1], image.shape[0]), rgb


def test_the_report_draws_reward_validation_jobs_and_every_evaluated_model(report_run: RunDir, capsys) -> None:
    assert report_main([str(report_run.path)]) == 0
    out = report_run.report_dir
    size = (FIG_SIZE[0] * DPI, FIG_SIZE[1] * DPI)
    for name in ("training.png", "models.png"):
        shape, colors = pixels(out / name)
        assert shape == size, name
    assert {GREEN, BLUE} <= pixels(out / "training.png")[1], "reward and validation series drawn"
    validations = report_run.read_validations()
    assert [v["step"] for v in validations] == [0, 4, 8, 12, 16, 20, 24]  # 12 scenarios, 2 a step, 4 epochs
    assert validations[0]["accuracy"] < validations[-1]["accuracy"] == 1.0
    bars, key = model_bars(report_run)
    labels = [b.label for b in bars]
    assert "openai/o3-stand-in" in labels and "openai/gpt-4.1-stand-in" in labels and key == validations[-1]["split_key"]
    assert any("[published]" in label for label in labels)  # the fixture's questions are about Enron inboxes
    assert {v["inbox_domain"] for v in validations} == {"enron.com"}
    markdown = (out / "report.md").read_text()
    assert "![training reward and validation accuracy](training.png)" in markdown and "| 24 | 100.0% |" in markdown
    if os.environ.get("UPDATE_README") == "1":
        IMAGES.mkdir(parents=True, exist_ok=True)
        for name in ("training.png", "models.png"):
            shutil.copy(out / name, IMAGES / f"report-{name}")


def test_the_evaluation_page_shows_the_reports_pictures() -> None:
    page = (REPO / "docs" / "evaluation.md").read_text()
    for name in ("training.png", "models.png"):
        assert f"](images/report-{name})" in page
        assert pixels(IMAGES / f"report-{name}")[0] == (FIG_SIZE[0] * DPI, FIG_SIZE[1] * DPI)


def test_a_directory_that_is_no_run_is_one_line_exit_2(tmp_path: Path, capsys) -> None:
    assert report_main([str(tmp_path)]) == 2
    assert "is not a run directory" in capsys.readouterr().err


def test_python_m_hpc_report_writes_the_sections_other_modules_register(tmp_path: Path) -> None:
    """As a user runs it: ``python -m hpc.report RUN`` (hpc/run/report.py as __main__) writes the
    Accounting section hpc/run/accounting_report.py registers (it says why it has no figures here)."""
    import subprocess
    import sys

    run = RunDir(tmp_path / "r")
    write_record(run, "submit", job_id="5", cluster="local")
    result = subprocess.run([sys.executable, "-m", "hpc.report", str(run.path)], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "## Accounting" in (run.report_dir / "report.md").read_text()


def test_a_run_without_rewards_or_evaluations_gets_no_empty_pictures(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "r")
    write_record(run, "submit", job_id="5", cluster="local")
    run.append_step({"step": 1, "seconds": 2.0})  # a step without reward_mean
    assert report_main([str(run.path)]) == 0
    markdown = (run.report_dir / "report.md").read_text()
    assert "None" not in markdown and "No training step with a reward recorded yet." in markdown
    assert "No model evaluated on this run's questions yet" in markdown
    assert not (run.report_dir / "training.png").exists() and not (run.report_dir / "models.png").exists()


def test_the_report_gives_the_best_beside_the_last_the_rates_passed_and_the_decline_rules_decisions(
        tmp_path: Path) -> None:
    from hpc.run.ledger import Decline

    run = RunDir(tmp_path / "r")
    write_record(run, "submit", job_id="5", cluster="local")
    for step, rate in ((1, 1e-4), (2, 1e-4), (3, 5e-5)):
        run.append_step({"step": step, "reward_mean": 0.1, "learning_rate": rate, "kl_penalty_coef": 0.05})
    for step, accuracy in ((0, 0.4), (1, 0.9), (2, 0.6)):
        run.record_validation({"step": step, "accuracy": accuracy}, [])
    ledger.append(run, Decline(action="rollback", step=2, accuracy=0.6, best_step=1, best_accuracy=0.9,
                               reason="held-out accuracy fell", rollback=1, to_step=3, lr_scale=0.5))
    assert report_main([str(run.path)]) == 0
    markdown = (run.report_dir / "report.md").read_text()
    assert "Best: step 1 (90.0%), `run:r@best`; last: step 2 (60.0%)." in markdown
    assert "Learning rate passed: 0.0001 at step 1, 5e-05 at step 3 (from 5e-05 to 0.0001)." in markdown
    assert "Stabilisers: kl_penalty_coef 0.05." in markdown
    assert "| 2 | rollback | step 1 (90.0%) | 60.0% | 3 | x0.5 | - | held-out accuracy fell |" in markdown


def test_a_run_with_rewards_but_no_validation_draws_the_reward_panel_alone(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "r")
    for step in (1, 2, 3):
        run.append_step({"step": step, "reward_mean": 0.1 * step})
    assert report_main([str(run.path)]) == 0
    size, colors = pixels(run.report_dir / "training.png")
    assert size == (FIG_SIZE[0] * DPI, FIG_SIZE[1] * DPI) and BLUE in colors and GREEN not in colors


@pytest.mark.parametrize("domain, published", [("enron.com", True), ("mail.synth", False), (None, False),
                                               ("no field", True)])
def test_arte_published_figures_stand_only_beside_questions_about_its_enron_inboxes(tmp_path: Path, domain,
                                                                                    published) -> None:
    """The learning curve's synthetic inboxes (mail.synth) reached 98%: set beside ART-E's 96% it read
    as a comparison. Questions of mixed domains (None) are no ART-E set either; a record from
    before records named the domain ("no field") keeps the figures it was drawn with."""
    run = RunDir(tmp_path / "r")
    write_record(run, "submit", job_id="5", cluster="local")
    named = {} if domain == "no field" else {"inbox_domain": domain}
    for step, accuracy in ((0, 0.47), (4, 0.91)):
        run.record_validation({"step": step, "accuracy": accuracy, "split_key": "test-300-a0a78499", **named}, [])
    assert report_main([str(run.path)]) == 0
    labels = [b.label for b in model_bars(run)[0]]
    assert any("[published]" in label for label in labels) == published
    markdown = (run.report_dir / "report.md").read_text()
    assert ("ART-E's published figures are left out" in markdown) != published
    assert (run.report_dir / "models.png").exists()


UNREADABLE = {  # a run's file, what is in it, and how the report names what it skipped
    "ledger.jsonl": (b"\xff\xfe\x00{}\n", "`ledger.jsonl` line 1: not UTF-8 text"),
    "progress.json": (b"[1, 2]", "`progress.json`: not a JSON object (a list)"),
    "steps.jsonl": (b'"a step"\n{"step": 2, "ended": "2026-01-01T00:00:00+00:00", "reward_mean": "high"}\n',
                    "`steps.jsonl` line 1: not a JSON object (the value 'a step')"),
    "validation.jsonl": (b'{"step": 1}\n', "`validation.jsonl` line 1: no 'accuracy'"),
    "done.json": (b'{"final_step": NaN}', "`done.json`: NaN is not a number JSON allows"),
}


@pytest.mark.parametrize("name", UNREADABLE)
def test_a_run_with_unreadable_records_gets_its_report_with_them_named(tmp_path: Path, capsys, name) -> None:
    run = RunDir(tmp_path / "r")
    ledger.append(run, Submit(job_id="5", cluster="local"))
    run.write_progress({"step": 1, "total_steps": 4})
    run.record_validation({"step": 1, "accuracy": 0.5}, [])  # only the figures a record must have: '-' for the rest
    text, named = UNREADABLE[name]
    (run.path / name).write_bytes(text)
    assert report_main([str(run.path)]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hpc.report: warning: ") and "unreadable record(s) skipped" in err
    markdown = (run.report_dir / "report.md").read_text()
    assert "## Unreadable records" in markdown and named in markdown


def test_a_run_whose_folder_is_a_progress_file_gets_its_report(tmp_path: Path, capsys) -> None:
    run = RunDir(tmp_path / "r")
    ledger.append(run, Submit(job_id="5", cluster="local"))
    run.progress_file.mkdir()
    assert report_main([str(run.path)]) == 0
    assert "`progress.json`: a folder, not a file" in (run.report_dir / "report.md").read_text()


@pytest.mark.parametrize("progress, done, line", [
    ({"step": 1}, None, "Step 1; in progress."),
    ({"step": 3, "total_steps": None}, None, "Step 3; in progress."),
    ({"step": 3, "total_steps": 8}, None, "Step 3 of 8; in progress."),
    ({}, (8, None), "Step 8; finished."),
])
def test_the_report_says_the_step_and_its_total_only_where_the_total_is_known(tmp_path: Path, progress, done,
                                                                            line) -> None:
    run = RunDir(tmp_path / "r")
    ledger.append(run, Submit(job_id="5", cluster="local"))
    run.write_progress(progress)
    if done:
        run.mark_done(*done)
    assert report_main([str(run.path)]) == 0
    markdown = (run.report_dir / "report.md").read_text()
    assert line in markdown and "None" not in markdown


@pytest.mark.parametrize("where", ["report", "report/report.md", "report/training.png"])
def test_the_report_is_never_written_through_a_link(tmp_path: Path, capsys, where) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "report.md").write_text("someone else's file\n")
    run = RunDir(tmp_path / "r")
    for step in (1, 2):
        run.append_step({"step": step, "reward_mean": 0.5})
    link = run.path / where
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside if where == "report" else outside / "report.md")
    code = report_main([str(run.path)])
    err = capsys.readouterr().err
    assert (outside / "report.md").read_text() == "someone else's file\n" and sorted(os.listdir(outside)) == ["report.md"]
    if where == "report":  # the folder itself: refused, in one line
        assert code == 2 and err.count("\n") == 1 and "a link, not followed" in err
    else:  # a link in the run's own report folder is replaced by the report's file
        assert code == 0 and not link.is_symlink()


@pytest.mark.parametrize("where", ["report/report.md", "report/training.png"])
def test_a_folder_where_a_report_file_goes_is_named_not_its_temporary_file(tmp_path: Path, capsys, where) -> None:
    run = RunDir(tmp_path / "r")
    for step in (1, 2):
        run.append_step({"step": step, "reward_mean": 0.5})
    (run.path / where).mkdir(parents=True)
    assert report_main([str(run.path)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line == f"hpc.report: error: cannot write the report: {run.path / where}: Is a directory", line
    assert sorted(p.name for p in run.report_dir.iterdir() if p.name.startswith(".")) == []  # no temporary left


@pytest.mark.parametrize("name", ["", ".", ".."])
def test_a_run_name_that_names_a_folder_around_the_runs_is_refused(tmp_path: Path, capsys, name) -> None:
    assert report_main([name, "--runs_dir", str(tmp_path)]) == 2
    assert f"bad RUN {name!r}" in capsys.readouterr().err
