"""trainer.data: data paths, reading every kind of source, and `python -m trainer.data prepare`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.conftest import FIXTURE_EMAILS, FIXTURE_QUESTIONS, fixture_rows
from trainer.agent.email_db import DB_FILENAME, EmailDB
from trainer.agent.scenarios import load_scenarios
from trainer.staging.data import DataPaths, data_paths, default_data_dir, prepare
from trainer.staging.data import main as data_main
from trainer.staging.sources import SourceError, email_rows, question_rows, resolve_source

REPO = Path(__file__).resolve().parents[3]
EMAILS, QUESTIONS = fixture_rows(FIXTURE_EMAILS), fixture_rows(FIXTURE_QUESTIONS)
KEPT = 204  # the fixture's emails after ART-E's filters


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trainer.data", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})})


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def files_under(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file()) if path.exists() else []


# ---------------------------------------------------------------------------
# Paths


def test_data_paths_put_the_database_and_scenarios_in_the_data_dir(tmp_path: Path) -> None:
    paths = data_paths(tmp_path)
    assert paths == DataPaths(data_dir=tmp_path, db=tmp_path / "enron_emails.db", scenarios_dir=tmp_path / "scenarios")
    assert paths.scenarios("train") == tmp_path / "scenarios" / "train.jsonl"


def test_default_data_dir_is_DATA_DIR_else_the_clusters_dotenv_setting(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:
    monkeypatch.setenv("DATA_DIR", str(tmp_path))
    assert default_data_dir() == tmp_path
    monkeypatch.delenv("DATA_DIR")
    monkeypatch.setenv("HPC_HOSTNAME", "workstation.example.org")  # local: dotenv/common.env's ${HPC_REPO}/data
    assert default_data_dir() == REPO / "data"
    monkeypatch.setenv("HPC_HOSTNAME", "jrlogin05.jureca")  # where JURECA's jobs will look
    monkeypatch.setenv("SCRATCH", "/p/scratch/proj")
    monkeypatch.setenv("USER", "alice")
    assert default_data_dir() == Path("/p/scratch/proj/alice/art-e-data")


def test_prepare_without_the_dotenv_base_it_needs_is_one_line_exit_2(monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("DATA_DIR", raising=False)
    monkeypatch.delenv("SCRATCH", raising=False)
    monkeypatch.setenv("HPC_HOSTNAME", "jrlogin05.jureca")
    assert data_main(["prepare"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "SCRATCH" in err and "--data_dir" in err


# ---------------------------------------------------------------------------
# prepare


def test_prepare_stages_the_database_and_both_scenario_files(art_e_data_dir: Path) -> None:
    paths = data_paths(art_e_data_dir)
    with EmailDB(paths.db) as db:
        assert db.count() == KEPT
    for split in ("train", "test"):
        rows = [json.loads(line) for line in paths.scenarios(split).read_text().splitlines()]
        assert [r["id"] for r in rows] == [q["id"] for q in QUESTIONS if q["split"] == split]
        assert all(r["split"] == split for r in rows)


def test_prepare_keeps_what_is_staged_and_opens_no_source(tmp_path: Path) -> None:
    prepare(tmp_path, str(FIXTURE_EMAILS), str(FIXTURE_QUESTIONS), show_progress=False)
    before = {p: p.read_bytes() for p in files_under(tmp_path)}
    report = prepare(tmp_path, "nobody/no-emails", "nobody/no-questions", show_progress=False)
    assert report.database is None and report.scenarios is None
    assert {p: p.read_bytes() for p in files_under(tmp_path)} == before


def test_prepare_force_rebuilds_from_the_sources(tmp_path: Path) -> None:
    fewer = write_jsonl(tmp_path / "src" / "emails.jsonl", EMAILS[:20])
    prepare(tmp_path / "data", str(fewer), str(FIXTURE_QUESTIONS), show_progress=False)
    assert prepare(tmp_path / "data", str(FIXTURE_EMAILS), str(FIXTURE_QUESTIONS), show_progress=False).database is None
    report = prepare(tmp_path / "data", str(FIXTURE_EMAILS), str(FIXTURE_QUESTIONS), force=True, show_progress=False)
    assert report.database is not None and report.database.inserted == KEPT
    assert report.scenarios == {"train": 15, "test": 7}


def test_prepare_writes_files_with_umask_permissions_and_no_leftovers(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        prepare(tmp_path, str(FIXTURE_EMAILS), str(FIXTURE_QUESTIONS), show_progress=False)
    finally:
        os.umask(old)
    names = [p.relative_to(tmp_path).as_posix() for p in files_under(tmp_path)]
    assert names == ["enron_emails.db", "scenarios/test.jsonl", "scenarios/train.jsonl"]
    assert {p.stat().st_mode & 0o777 for p in files_under(tmp_path)} == {0o644}


def test_prepare_counts_scenarios_whose_answer_email_is_missing(tmp_path: Path) -> None:
    questions = [dict(q) for q in QUESTIONS]
    questions[0]["message_ids"] = ["<not in the corpus>"]
    questions[-1]["message_ids"] = [questions[-1]["message_ids"][0], "<also missing>"]
    source = write_jsonl(tmp_path / "q.jsonl", questions)
    report = prepare(tmp_path / "data", str(FIXTURE_EMAILS), str(source), show_progress=False)
    assert report.unanswerable == {"train": 1, "test": 1}


# ---------------------------------------------------------------------------
# Sources


def _email_dicts() -> list[dict[str, Any]]:
    return [{**row, "date": datetime.fromisoformat(row["date"])} for row in EMAILS]


def _check_staged(data_dir: Path) -> None:
    with EmailDB(data_dir / DB_FILENAME) as db:
        assert db.count() == KEPT
        first = EMAILS[0]
        assert db.read(first["message_id"]).to_addresses == first["to"]
    assert len(load_scenarios(data_dir, "test", max_messages=None)) == 5


def test_a_save_to_disk_dataset_and_datasetdict_are_read_without_importing_datasets(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    datasets.disable_progress_bars()
    datasets.Dataset.from_list(_email_dicts()).save_to_disk(str(tmp_path / "emails"))
    questions = {split: datasets.Dataset.from_list([{k: v for k, v in q.items() if k != "split"}
                                                    for q in QUESTIONS if q["split"] == split])
                 for split in ("train", "test")}
    datasets.DatasetDict(questions).save_to_disk(str(tmp_path / "questions"))
    datasets.DatasetDict({"train": datasets.Dataset.from_list(_email_dicts())}).save_to_disk(str(tmp_path / "dd"))
    code = ("import sys; from pathlib import Path; from trainer.data import prepare\n"
            f"prepare(Path({str(tmp_path / 'a')!r}), {str(tmp_path / 'emails')!r}, {str(tmp_path / 'questions')!r},"
            " show_progress=False)\n"
            f"prepare(Path({str(tmp_path / 'b')!r}), {str(tmp_path / 'dd')!r}, {str(tmp_path / 'questions')!r},"
            " show_progress=False)\n"
            "print('datasets' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "False"
    _check_staged(tmp_path / "a")
    _check_staged(tmp_path / "b")


def test_a_parquet_file_and_a_folder_of_split_named_parquet_files_are_read(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.Table.from_pylist(_email_dicts()), tmp_path / "emails.parquet")
    for split in ("train", "test"):  # the Hugging Face hub's own parquet layout
        rows = [{k: v for k, v in q.items() if k != "split"} for q in QUESTIONS if q["split"] == split]
        (tmp_path / "questions" / "data").mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), tmp_path / "questions" / "data" / f"{split}-00000-of-00001.parquet")
    prepare(tmp_path / "data", str(tmp_path / "emails.parquet"), str(tmp_path / "questions"), show_progress=False)
    _check_staged(tmp_path / "data")


def test_a_folder_of_split_named_jsonl_files_is_read(tmp_path: Path) -> None:
    for split in ("train", "test"):
        write_jsonl(tmp_path / "questions" / f"{split}.jsonl",
                    [{k: v for k, v in q.items() if k != "split"} for q in QUESTIONS if q["split"] == split])
    prepare(tmp_path / "data", str(FIXTURE_EMAILS), str(tmp_path / "questions"), show_progress=False)
    _check_staged(tmp_path / "data")


def test_email_rows_reports_the_row_count_when_the_source_knows_it(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.Table.from_pylist(_email_dicts()), tmp_path / "emails.parquet")
    rows, total = email_rows(resolve_source(str(tmp_path / "emails.parquet")))
    assert total == len(EMAILS) and sum(1 for _ in rows) == len(EMAILS)
    assert email_rows(resolve_source(str(FIXTURE_EMAILS)))[1] is None


def test_questions_without_a_split_are_refused(tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "q.jsonl", [{k: v for k, v in q.items() if k != "split"} for q in QUESTIONS])
    with pytest.raises(SourceError, match="which split"):
        question_rows(resolve_source(str(source)))


def test_a_question_split_other_than_train_or_test_is_refused(tmp_path: Path) -> None:
    rows = [{**q, "split": "dev"} if i == 3 else q for i, q in enumerate(QUESTIONS)]
    source = write_jsonl(tmp_path / "q.jsonl", rows)
    with pytest.raises(SourceError, match=r"row 4: split 'dev'"):
        question_rows(resolve_source(str(source)))


def test_a_hub_id_looks_like_owner_slash_name() -> None:
    assert resolve_source("corbt/enron-emails").kind == "hub"
    with pytest.raises(SourceError, match="neither an existing path nor a Hugging Face dataset id"):
        resolve_source("no-slash-here")
    with pytest.raises(SourceError, match="'data/emails.jsonl': no such file"):
        resolve_source("data/emails.jsonl")


# ---------------------------------------------------------------------------
# The command line


def test_the_cli_prints_counts_skips_paths_and_seconds(tmp_path: Path) -> None:
    run = run_cli("prepare", "--data_dir", str(tmp_path), "--emails", str(FIXTURE_EMAILS),
                  "--questions", str(FIXTURE_QUESTIONS), "--quiet")
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert f"{tmp_path / DB_FILENAME}" in out and f"{KEPT} emails" in out
    assert "skipped 1 with bodies over 5000 characters, 1 with over 30 recipients, 8 duplicates" in out
    assert "train.jsonl 15, test.jsonl 7" in out and " s" in out and run.stderr == ""
    again = run_cli("prepare", "--data_dir", str(tmp_path))
    assert again.returncode == 0 and "exists, kept" in again.stdout


def test_the_data_dir_defaults_to_DATA_DIR(tmp_path: Path) -> None:
    run = run_cli("prepare", "--emails", str(FIXTURE_EMAILS), "--questions", str(FIXTURE_QUESTIONS), "--quiet",
                  env={"DATA_DIR": str(tmp_path)})
    assert run.returncode == 0, run.stderr
    assert (tmp_path / DB_FILENAME).is_file() and (tmp_path / "scenarios" / "train.jsonl").is_file()


def test_the_cli_help_explains_the_command_and_the_sources() -> None:
    top, sub = run_cli("--help"), run_cli("prepare", "--help")
    assert top.returncode == sub.returncode == 0
    assert "prepare" in top.stdout and "login node" in top.stdout
    for text in ("--data_dir", "--emails", "--questions", "--force", "DATA_DIR", "save_to_disk", "parquet", "JSONL"):
        assert text in sub.stdout


def _bad_sources(tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    no_body = write_jsonl(tmp_path / "src" / "no_body.jsonl", [{k: v for k, v in r.items() if k != "body"}
                                                               for r in EMAILS])
    bad_date = write_jsonl(tmp_path / "src" / "bad_date.jsonl",
                           EMAILS[:100] + [{**EMAILS[100], "date": "soon"}] + EMAILS[101:])
    no_split = write_jsonl(tmp_path / "src" / "no_split.jsonl", [{k: v for k, v in q.items() if k != "split"}
                                                                for q in QUESTIONS])
    bad_question = write_jsonl(tmp_path / "src" / "bad_q.jsonl", [{**q, "id": "seven"} for q in QUESTIONS])
    (tmp_path / "src" / "emails.csv").write_text("message_id,body\n")
    q, e = str(FIXTURE_QUESTIONS), str(FIXTURE_EMAILS)
    return {
        "missing path": (["--emails", str(tmp_path / "nowhere" / "emails"), "--questions", q],
                         "neither an existing path"),
        "missing file": (["--emails", str(tmp_path / "nowhere" / "emails.jsonl"), "--questions", q], "no such file"),
        "unsupported file": (["--emails", str(tmp_path / "src" / "emails.csv"), "--questions", q],
                             "unsupported file type '.csv'"),
        "missing column": (["--emails", str(no_body), "--questions", q], "lacks column(s) body"),
        "malformed row": (["--emails", str(bad_date), "--questions", q], "date 'soon' is not ISO 8601"),
        "no split": (["--emails", e, "--questions", str(no_split)], "which split"),
        "bad question": (["--emails", e, "--questions", str(bad_question)], "id must be an integer"),
    }


@pytest.mark.parametrize("case", ["missing path", "missing file", "unsupported file", "missing column",
                                  "malformed row", "no split", "bad question"])
def test_bad_input_is_one_line_exit_2_and_nothing_written(tmp_path: Path, case: str) -> None:
    args, message = _bad_sources(tmp_path)[case]
    data_dir = tmp_path / "data"
    run = run_cli("prepare", "--data_dir", str(data_dir), "--quiet", *args)
    assert run.returncode == 2, run.stderr
    assert run.stderr.startswith("error: ") and run.stderr.count("\n") == 1 and message in run.stderr
    assert files_under(data_dir) == []


def test_an_uncached_hub_dataset_offline_is_one_line_naming_it(tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    run = run_cli("prepare", "--data_dir", str(tmp_path / "data"), "--emails", "nobody/absent-emails",
                  "--questions", str(FIXTURE_QUESTIONS), env={"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"})
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and "'nobody/absent-emails'" in run.stderr
    assert "HF_HUB_OFFLINE" in run.stderr and "login node" in run.stderr
    assert files_under(tmp_path / "data") == []


def test_trainer_data_modules_import_nothing_heavy() -> None:
    code = ("import sys, trainer.data, trainer.agent.email_db, trainer.agent.scenarios\n"
            "heavy = ('art', 'litellm', 'datasets', 'torch', 'pyarrow', 'tqdm')\n"
            "print(' '.join(m for m in heavy if m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout.strip() == "", run.stdout + run.stderr


def test_a_staged_database_from_another_version_is_one_line_saying_force(tmp_path: Path) -> None:
    run_cli("prepare", "--data_dir", str(tmp_path), "--emails", str(FIXTURE_EMAILS), "--questions",
            str(FIXTURE_QUESTIONS), "--quiet")
    import sqlite3

    conn = sqlite3.connect(tmp_path / DB_FILENAME)
    conn.execute("DROP INDEX emails_pos")
    conn.commit()
    conn.close()
    run = run_cli("prepare", "--data_dir", str(tmp_path))
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "--force" in run.stderr


def test_a_single_files_name_does_not_decide_the_split_of_its_rows(tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "test_and_train.jsonl", QUESTIONS)
    by_split = question_rows(resolve_source(str(source)))
    assert {split: len(rows) for split, rows in by_split.items()} == {"train": 15, "test": 7}


def test_a_hub_dataset_is_read_through_datasets_load_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hub path without a network: load_dataset returns what the hub would (a DatasetDict)."""
    datasets = pytest.importorskip("datasets")
    datasets.disable_progress_bars()
    hub = {
        "corbt/enron-emails": datasets.DatasetDict({"train": datasets.Dataset.from_list(_email_dicts())}),
        "corbt/enron_emails_sample_questions": datasets.DatasetDict({
            split: datasets.Dataset.from_list([{k: v for k, v in q.items() if k != "split"}
                                               for q in QUESTIONS if q["split"] == split])
            for split in ("train", "test")}),
    }
    asked: list[str] = []

    def load_dataset(name: str, *args: Any, **kwargs: Any) -> Any:
        asked.append(name)
        return hub[name]

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    report = prepare(tmp_path, "corbt/enron-emails", "corbt/enron_emails_sample_questions", show_progress=False)
    assert sorted(asked) == sorted(hub) and report.database.inserted == KEPT
    _check_staged(tmp_path)


@pytest.mark.parametrize("given, message", [
    ("", "bad --data_dir '' (accepted: a folder path"),
    ("  ", "bad --data_dir '  '"),
    ("/etc/passwd", "bad --data_dir '/etc/passwd': it is not a folder"),
    ("/etc/passwd/data", "it is under /etc/passwd, which is not a folder"),
    ("/dev/null", "it is not a folder"),
    ("d\nx", "bad --data_dir 'd\\nx'"),
])
def test_a_data_dir_that_is_empty_or_no_folder_is_refused_and_nothing_lands_here(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], given: str,
        message: str) -> None:
    monkeypatch.chdir(tmp_path)
    code = data_main(["prepare", "--data_dir", given, "--quiet", "--emails", str(FIXTURE_EMAILS),
                      "--questions", str(FIXTURE_QUESTIONS)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1 and message in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("first_line, message", [
    ("[" * 100_000, "not JSON (nested too deeply)"),
    ('{"a": ' * 50_000, "not JSON"),
    (b"\xff\xfe{}", "not UTF-8 text"),
])
def test_a_source_whose_first_line_defeats_the_json_parser_is_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], first_line: str | bytes, message: str) -> None:
    source = tmp_path / "questions.jsonl"
    if isinstance(first_line, bytes):
        source.write_bytes(first_line + b"\n")
    else:
        source.write_text(first_line + "\n")
    code = data_main(["prepare", "--data_dir", str(tmp_path / "data"), "--quiet", "--emails", str(FIXTURE_EMAILS),
                      "--questions", str(source)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and message in err and str(source) in err, err
    assert files_under(tmp_path / "data") == []


def test_a_source_with_a_deep_line_further_down_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "emails.jsonl"
    source.write_text(json.dumps(EMAILS[0]) + "\n" + "[" * 100_000 + "\n")
    code = data_main(["prepare", "--data_dir", str(tmp_path / "data"), "--quiet", "--emails", str(source),
                      "--questions", str(FIXTURE_QUESTIONS)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and f"{source}:2: not JSON (nested too deeply)" in err, err
