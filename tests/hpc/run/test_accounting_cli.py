"""hpc/run/accounting_cli.py (``python -m hpc.accounting RUN``): the table printed terminal-safe, a bad
argument refused in one line, records skipped and named; sacct's rows are the test's."""

from __future__ import annotations

import pytest

from hpc.run import accounting_cli
from hpc.run.rundir import RunDir
from hpc.slurm import calls
from tests.hpc.run.test_accounting import FakeRun, fake, requeued_run  # a fixture


def test_the_command_prints_the_breakdown_per_job_and_the_runs_figures(fake, monkeypatch, capsys):
    files, rows = requeued_run(fake)
    monkeypatch.setattr(calls, "job_runs", lambda ids, *a, **kw: [r for r in rows if r.job_id in ids])
    assert accounting_cli.main([str(fake.path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Run r: where the GPU-hours went (2 job run(s))\nJOB ")
    assert "\n11 (run 2)  RUNNING " in out and "\n11          REQUEUED " in out
    for figure in ("GPU-hours charged", "goodput", "restart gaps", "projected GPU-h to finish"):
        assert f"\n{figure} " in out


def test_the_command_refuses_a_directory_that_is_no_run_in_one_line(tmp_path, capsys):
    assert accounting_cli.main([str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert "is not a run directory" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("sibling", [b"\xff\xfe\x00\x01" * 20 + b"\n", b"[" * 5000 + b"\n", b'{"a": ' * 3000 + b"\n",
                                     b"[1, 2]\n", b'{"event": "job_start", "job_id": "11", "time": NaN}\n', b"\x00"])
def test_a_corrupt_ledger_beside_the_run_never_breaks_its_accounting(fake, monkeypatch, capsys, sibling):
    """A pack job's runs read each other's ledgers: a neighbour's bytes cost the neighbour only."""
    files, rows = requeued_run(fake)
    neighbour = fake.path.parent / "neighbour"
    neighbour.mkdir()
    (neighbour / "ledger.jsonl").write_bytes(sibling)
    monkeypatch.setattr(calls, "job_runs", lambda ids, *a, **kw: [r for r in rows if r.job_id in ids])
    assert accounting_cli.main([str(fake.path)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("Run r: where the GPU-hours went (2 job run(s))") and err == ""
    assert "UNREADABLE" not in out, "the neighbour's records are the neighbour's to show"


@pytest.mark.parametrize("line, named", [
    (b"[1]", "ledger.jsonl line 3: not a JSON object (a list)"),
    (b'{"event": "job_end", "job_id": "11", "step": "four"}', "ledger.jsonl line 3: step 'four' is not a whole number"),
    (b"\xff", "ledger.jsonl line 3: not UTF-8 text"),
])
def test_the_commands_accounting_names_the_records_it_skipped(fake, monkeypatch, capsys, line, named):
    files, rows = requeued_run(fake)
    ledger = RunDir(fake.path).ledger
    records = ledger.read_bytes().splitlines(keepends=True)
    ledger.write_bytes(b"".join(records[:2]) + line + b"\n" + b"".join(records[2:]))
    monkeypatch.setattr(calls, "job_runs", lambda ids, *a, **kw: [r for r in rows if r.job_id in ids])
    assert accounting_cli.main([str(fake.path)]) == 0
    out = capsys.readouterr().out
    assert "\n11 (run 2)  RUNNING " in out, "the rest of the run is accounted"
    assert out.rstrip().splitlines()[-1].startswith(f"UNREADABLE: 1 unreadable record(s) skipped: {named}")


@pytest.mark.parametrize("name", ["r\x1b[2J\x1b[31mred", "r\rfake", "r\x07bell", "r\x9bcsi", "r\u202eevil"])
def test_a_run_folder_named_with_control_characters_is_printed_escaped(tmp_path, monkeypatch, capsys, name):
    fake = FakeRun(tmp_path / name)
    files, rows = requeued_run(fake)
    monkeypatch.setattr(calls, "job_runs", lambda ids, *a, **kw: [r for r in rows if r.job_id in ids])
    assert accounting_cli.main([str(fake.path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"Run {name.encode('unicode_escape').decode()}: where the GPU-hours went")
    assert all(ch.isprintable() for ch in out.replace("\n", "")), "no control character reaches the terminal"


def test_a_folder_with_control_characters_that_is_no_run_is_named_escaped(tmp_path, capsys):
    assert accounting_cli.main([str(tmp_path / "x\x1b]0;owned\x07")]) == 2
    err = capsys.readouterr().err
    assert "x\\x1b]0;owned\\x07 is not a run directory" in err and all(c.isprintable() for c in err.rstrip("\n"))
