"""hpc/run/rundir.py: a run's files are never read or written through a link out of the run
directory (however the link is spelled), and a record that is not what its file holds is skipped
and named, never raised, while the run's other records are read."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

import pytest

from hpc.run import ledger
from hpc.run.ledger import Submit
from hpc.run.rundir import RunDir
from hpc.run.safe_io import OutsideRun

CANARY = '{"step": 7, "accuracy": 0.5, "event": "submit", "ended": "2026-01-01T00:00:00+00:00"}\n'


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder beside the run, with a file, that nothing of the run may touch."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "file").write_text(CANARY)
    return folder


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def link(run: RunDir, name: str, target: Path, spelling: str) -> None:
    """``<run>/name`` a link to ``target``: absolute, relative, or through a second link."""
    path = run.path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if spelling == "absolute":
        path.symlink_to(target)
    elif spelling == "relative":
        path.symlink_to(os.path.relpath(target, path.parent))
    else:  # a link to a link beside the run, that leads out
        hop = run.path.parent / f"hop-{name.replace('/', '-')}"
        hop.symlink_to(target)
        path.symlink_to(hop)


SPELLINGS = ["absolute", "relative", "chain"]
WRITES: list[tuple[str, str, Callable[[RunDir], object]]] = [  # (the link, to a file or a folder, the write)
    ("ledger.jsonl", "file", lambda run: ledger.append(run, Submit(job_id="1"))),
    ("steps.jsonl", "file", lambda run: run.append_step({"step": 1})),
    ("stops.jsonl", "file", lambda run: run.append_stop({"reason": "boundary"})),
    ("progress.json", "file", lambda run: run.write_progress({"step": 1})),
    ("done.json", "file", lambda run: run.mark_done(1, 1)),
    ("validation", "folder", lambda run: run.record_validation({"step": 1, "accuracy": 0.5}, [{"id": 1}])),
    ("validation.jsonl", "file", lambda run: run.record_validation({"step": 2, "accuracy": 0.5}, [])),
    (".lock", "file", lambda run: run.locked().__enter__()),
    ("report", "folder", lambda run: run.write_bytes(run.report_dir / "report.md", b"# report\n")),
    ("report/report.md", "file", lambda run: run.write_bytes(run.report_dir / "report.md", b"# report\n")),
    ("logs", "folder", lambda run: run.make_dirs(run.logs_dir)),
    ("scripts", "folder", lambda run: run.write_new(run.scripts_dir / "a.sbatch", b"#!/bin/bash\n")),
    ("serve", "folder", lambda run: run.write_json(run.serve_dir / "address.json", {"host": "h"})),
]


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize("name, kind, write", WRITES, ids=[w[0] for w in WRITES])
def test_no_writer_follows_a_link_out_of_the_run(tmp_path, outside, name, kind, write, spelling) -> None:
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    link(run, name, outside if kind == "folder" else outside / "file", spelling)
    before = snapshot(outside)
    try:
        write(run)
    except OutsideRun as refusal:  # refused: a link below the run; or the link itself replaced
        assert "a link, not followed" in str(refusal)
    assert snapshot(outside) == before, "nothing outside the run was written"


READS: list[tuple[str, Callable[[RunDir], object]]] = [
    ("ledger.jsonl", ledger.readable),
    ("steps.jsonl", RunDir.read_steps),
    ("validation.jsonl", RunDir.read_validations),
    ("progress.json", RunDir.read_progress),
    ("done.json", RunDir.read_done),
    ("failed.json", RunDir.read_failed),
    ("model.json", RunDir.read_model_record),
    ("sweep_member.json", RunDir.read_sweep_member),
]


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize("name, read", READS, ids=[r[0] for r in READS])
def test_no_reader_follows_a_link_out_of_the_run_and_the_link_is_named(tmp_path, outside, name, read,
                                                                       spelling) -> None:
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    (outside / "file").write_text(json.dumps({"step": 1, "accuracy": 0.5, "event": "submit", "model_dir": "/m",
                                              "sweep": "s", "ended": "2026-01-01T00:00:00+00:00"}) + "\n")
    link(run, name, outside / "file", spelling)
    assert not read(run), "what the link leads to is not read"
    assert [str(s) for s in run.unreadable] == [f"{name}: a link, not followed (a run's files stay inside its directory)"]


def test_a_file_below_a_linked_folder_is_not_read(tmp_path, outside) -> None:
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    (outside / "address.json").write_text(json.dumps({"host": "h", "port": 1, "node": "n"}))
    link(run, "serve", outside, "absolute")
    assert run.read_object(run.serve_dir / "address.json") is None
    assert run.unreadable[0].file == "serve/address.json" and "a link" in run.unreadable[0].why


def test_the_run_folder_itself_may_be_a_link(tmp_path) -> None:
    """A user's runs on another filesystem: the run's own folder is theirs to place."""
    real = RunDir(tmp_path / "scratch" / "run")
    ledger.append(real, Submit(job_id="1"))
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "run").symlink_to(real.path)
    assert [r.job_id for r in ledger.read(RunDir(tmp_path / "runs" / "run"))] == ["1"]


@pytest.mark.parametrize("make", [os.mkfifo, os.mkdir], ids=["fifo", "folder"])
def test_a_marker_that_is_no_regular_file_is_named_and_never_waited_on(tmp_path, make) -> None:
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    make(run.progress_file)
    assert run.read_progress() is None
    assert run.unreadable[0].file == "progress.json"


BAD_LINES = {
    b"[1, 2]": "not a JSON object (a list)",
    b'"text"': "not a JSON object (the value 'text')",
    b"7": "not a JSON object (the value 7)",
    b"null": "not a JSON object (the value None)",
    b'{"step": NaN, "accuracy": 0.5}': "NaN is not a number JSON allows",
    b'{"step": 1, "accuracy": Infinity}': "Infinity is not a number JSON allows",
    b'{"step": 1, "accuracy": -Infinity}': "-Infinity is not a number JSON allows",
    b'{"step": 1, "accuracy": 1e400}': "accuracy inf is not a number from 0 to 1",
    b'{"step": 1, "accuracy": "high"}': "accuracy 'high' is not a number from 0 to 1",
    b'{"step": 1, "accuracy": 1.5}': "accuracy 1.5 is not a number from 0 to 1",
    b'{"step": -1, "accuracy": 0.5}': "step -1 is not a whole number",
    b'{"step": true, "accuracy": 0.5}': "step True is not a whole number",
    b'{"step": 1.5, "accuracy": 0.5}': "step 1.5 is not a whole number",
    b'{"step": [1], "accuracy": 0.5}': "step (a JSON list) is not a whole number",
    b'{"accuracy": 0.5}': "no 'step'",
    b'{"step": 1, "accuracy": 0.5, "time": "yesterday"}': "time 'yesterday' is not an ISO-8601 time",
    b'{"step": 1, "accuracy": 0.5, "time": "0001-01-01T00:00:00"}': "is not an ISO-8601 time (years 1970 to 2999)",
    b'{"step": 1, "accuracy": 0.5, "questions": "4"}': "questions '4' is not a whole number",
    b"[" * 100_000: "JSON nested too deeply",
    b'{"a": ' * 50_000 + b"1" + b"}" * 50_000: "JSON nested too deeply",
    b"\xff\xfe{\x00}\x00": "not UTF-8 text",
    b"\x00\x01\x02 binary": "not JSON",
    b'{"step": ' + b"9" * 5000 + b', "accuracy": 0.5}': "Exceeds the limit",
    b"{'step': 1}": "not JSON",
}


@pytest.mark.parametrize("line, why", BAD_LINES.items(), ids=[f"line{i}" for i in range(len(BAD_LINES))])
def test_a_bad_record_is_skipped_and_named_and_the_others_are_read(tmp_path, line, why) -> None:
    run = RunDir(tmp_path / "run")
    good = [json.dumps({"step": step, "accuracy": 0.5}).encode() for step in (1, 2)]
    run.path.mkdir()
    run.validation_file.write_bytes(b"\n".join([good[0], line, good[1]]) + b"\n")
    assert [v["step"] for v in run.read_validations()] == [1, 2]
    (skipped,) = run.unreadable
    assert (skipped.file, skipped.line) == ("validation.jsonl", 2) and why in skipped.why, skipped
    assert "\n" not in str(skipped) and len(str(skipped)) < 300


@pytest.mark.parametrize("text", [b"[1, 2]", b'{"step": NaN}', b'{"total_steps": Infinity}', b'{"step": "3"}',
                                  b"\xff\xfe", b"[" * 100_000, b"", b"{"])
def test_a_bad_progress_file_is_skipped_and_named(tmp_path, text) -> None:
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    run.progress_file.write_bytes(text)
    assert run.read_progress() is None
    assert [s.file for s in run.unreadable] == ["progress.json"]


def test_a_torn_last_line_is_dropped_quietly_as_a_crash_leaves_it(tmp_path) -> None:
    run = RunDir(tmp_path / "run")
    ledger.append(run, Submit(job_id="1"))
    with open(run.ledger, "a") as handle:
        handle.write('{"event": "job_st')
    assert [type(r) for r in ledger.read(run)] == [Submit] and run.unreadable == []


def test_each_skipped_record_is_named_once_however_often_it_is_read(tmp_path) -> None:
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    run.ledger.write_text('[1]\n{"event": "submit", "job_id": "1", "time": "2026-01-01T00:00:00+00:00"}\n')
    for _ in range(3):
        ledger.read(run)
    assert run.unreadable_line() == "1 unreadable record(s) skipped: ledger.jsonl line 1: not a JSON object (a list)"
