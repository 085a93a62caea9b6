"""Hostile run directories, drawn by hypothesis: every file a run directory holds (ledger,
progress, steps, validations, stops, start-ups, model.json, the done and failed markers, the
sweep and serve records, the report's folder) filled with random bytes, JSON of the wrong kinds,
NaN and Infinity, nesting deeper than the parser goes, or replaced by a link out of the run, a
folder or a FIFO; files and the run's folder itself owned by someone else or writable by anyone
(the launcher and the job refuse such a folder: tests/hpc/launcher/test_launch_fuzz.py). status (hpc.run.monitor's runs view, what status.sh prints), hpc.accounting
and hpc.report on that run and on a sound run beside it must: exit 0 or 2, say an error in one
line, never raise, never write outside the run directory, and still show the sound run."""

from __future__ import annotations

import getpass
import json
import os
import tempfile
from pathlib import Path
from typing import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpc.run import accounting_cli, ledger, report
from hpc.run.ledger import Submit
from hpc.run.monitor import cli as monitor
from hpc.run.rundir import RunDir

NOW = "2026-01-01T00:00:00+00:00"
FILES = ("ledger.jsonl", "progress.json", "steps.jsonl", "validation.jsonl", "stops.jsonl", "startups.jsonl",
         "model.json", "done.json", "failed.json", "sweep_member.json", "serve/address.json", "report",
         "report/report.md", "validation/step_0001.jsonl", "scripts/a.sbatch")
FIELDS = ("event", "job_id", "time", "step", "total_steps", "accuracy", "ended", "started", "seconds", "reward_mean",
          "reward_spread", "eta_seconds", "final_step", "model_dir", "script", "cluster", "pack_runs", "questions",
          "lost_rollout_seconds", "reason", "host", "port", "node", "sweep", "values", "split_key", "failed")

scalars = (st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.floats(allow_nan=True, allow_infinity=True)
           | st.text(max_size=12) | st.sampled_from([NOW, "0001-01-01T00:00:00", "9999-12-31T23:59:59", "1", "local"]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                           max_size=3), max_leaves=6)
records = st.dictionaries(st.sampled_from(FIELDS), values, max_size=8) | values
lines = st.lists(records.map(lambda r: json.dumps(r).encode()) | st.binary(max_size=40), min_size=1, max_size=4)
contents = st.one_of(
    lines.map(b"\n".join),
    lines.map(lambda ls: b"\n".join(ls) + b"\n"),
    st.binary(max_size=120),
    st.sampled_from([b"[" * 5_000, b'{"a": ' * 3_000, b'{"step": NaN}', b"Infinity", b"\xff\xfe\x00{",
                     b'{"step": ' + b"9" * 5000 + b"}", b'{"event": "submit", "job_id": "1", "time": "' + NOW.encode()
                     + b'"}\n[1]\n']),
    st.sampled_from(["link-to-file", "link-to-folder", "relative-link", "folder", "fifo"]),
    lines.map(lambda ls: (b"\n".join(ls) + b"\n", "neighbour's")), lines.map(lambda ls: (b"\n".join(ls), "mode 0666")),
)
NEIGHBOUR = 12345  # someone else: the tests run as root, and chown to them
FOLDER_OWNERS = st.sampled_from(["ours", "neighbour's", "mode 0777", "neighbour's, mode 0777"])
hostile = st.dictionaries(st.sampled_from(FILES), contents, min_size=1, max_size=6)


def sound_run(runs: Path) -> RunDir:
    """A run with a job's records, a step, a validation and its progress: what must stay shown."""
    run = RunDir(runs / "sound")
    ledger.append(run, Submit(job_id="local-1", cluster="local", argv=["--job_name", "sound"]))
    run.write_progress({"step": 3, "total_steps": 10, "reward_mean": 0.25})
    run.append_step({"step": 3, "started": NOW, "seconds": 2.0, "reward_mean": 0.25})
    run.record_validation({"step": 2, "accuracy": 0.75, "questions": 4}, [])
    return run


def plant(run: RunDir, name: str, content: bytes | str, outside: Path) -> None:
    """``content`` at ``<run>/name``: bytes, or a link out of the run, a folder or a FIFO."""
    path = run.path / name
    if path.parent.is_symlink() or path.parent.exists() and not path.parent.is_dir():
        return  # its folder was planted as something else (report/ as a file): that is the test
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        return  # a folder planted before (report/ under report/report.md): leave it
    if isinstance(content, tuple):  # bytes someone else owns, or anyone may write
        path.write_bytes(content[0])
        spoil(path, content[1])
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif content == "link-to-file":
        path.symlink_to(outside / "secret")
    elif content == "link-to-folder":
        path.symlink_to(outside)
    elif content == "relative-link":
        path.symlink_to(os.path.relpath(outside / "secret", path.parent))
    elif content == "folder":
        path.mkdir()
    else:
        os.mkfifo(path)


def spoil(path: Path, how: str) -> None:
    """``path`` made someone else's (``neighbour's``) and/or writable by anyone (``mode 0666``/``0777``)."""
    if "neighbour's" in how:
        os.chown(path, NEIGHBOUR, NEIGHBOUR)
    if "mode" in how:
        path.chmod(int(how.rsplit(" ", 1)[1], 8))


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def called(command: Callable[[], int], capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    """A command's exit code and output; it must never raise (a traceback)."""
    try:
        code = command()
    except SystemExit as exit_:  # argparse's way
        code = exit_.code if isinstance(exit_.code, int) else 1
    out, err = capsys.readouterr()
    assert code in (0, 2), (code, err)
    assert len(err.splitlines()) <= 1, err
    assert code == 0 or err.strip(), "an error says why"
    return code, out, err


def status(runs: Path) -> Callable[[], int]:
    return lambda: monitor.main(["runs", getpass.getuser(), str(runs)])


@pytest.mark.slurm
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow, HealthCheck.data_too_large])
@given(planted=hostile, folder=FOLDER_OWNERS)
def test_a_hostile_run_directory_breaks_no_view_and_is_written_outside_of_never(slurm, capsys, planted,
                                                                                folder) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        runs, outside = Path(scratch) / "runs", Path(scratch) / "outside"
        outside.mkdir()
        (outside / "secret").write_text('{"event": "submit", "job_id": "9", "step": 1, "accuracy": 1}\n')
        sound = sound_run(runs)
        bad = RunDir(runs / "hostile")
        ledger.append(bad, Submit(job_id="local-2", cluster="local"))
        for name, content in planted.items():
            plant(bad, name, content, outside)
        spoil(bad.path, folder)
        before = snapshot(outside)

        _, shown, _ = called(status(runs), capsys)
        assert any(line.startswith("sound ") and " 3/10 " in line and "75%@2" in line for line in shown.splitlines()), shown
        called(lambda: accounting_cli.main([str(bad.path)]), capsys)
        code, text, _ = called(lambda: accounting_cli.main([str(sound.path)]), capsys)
        assert code == 0 and "3 of 10" in text
        called(lambda: report.main([str(bad.path)]), capsys)
        code, _, _ = called(lambda: report.main([str(sound.path)]), capsys)
        assert code == 0 and "Step 3 of 10; in progress." in (sound.report_dir / "report.md").read_text()

        assert snapshot(outside) == before, "nothing outside the run directories was written"
        assert sorted(p.name for p in Path(scratch).iterdir()) == ["outside", "runs"]
