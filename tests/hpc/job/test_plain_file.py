"""hpc/job/plain_file.py: the files a job script redirects into are plain files of the run, never a link."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpc.job.plain_file import main, make_plain
from hpc.run.safe_io import OutsideRun

REPO = Path(__file__).resolve().parents[3]


def test_a_missing_log_is_made_empty_with_its_folders_and_an_existing_one_keeps_its_lines(tmp_path: Path) -> None:
    run = tmp_path / "run"
    make_plain(run, run / "judge" / "server.log")
    assert (run / "judge" / "server.log").read_text() == ""
    (run / "judge" / "server.log").write_text("earlier job\n")
    make_plain(run, run / "judge" / "server.log")
    assert (run / "judge" / "server.log").read_text() == "earlier job\n"


@pytest.mark.parametrize("planted", ["file", "folder"])
def test_a_link_planted_on_the_way_is_refused_and_its_target_untouched(tmp_path: Path, planted: str) -> None:
    run, target = tmp_path / "run", tmp_path / "victim"
    target.mkdir()
    (target / "server.log").write_text("precious\n")
    (run / "judge").mkdir(parents=True) if planted == "file" else run.mkdir()
    link = run / "judge" / "server.log" if planted == "file" else run / "judge"
    os.symlink(target / "server.log" if planted == "file" else target, link)
    with pytest.raises(OutsideRun):
        make_plain(run, run / "judge" / "server.log")
    assert (target / "server.log").read_text() == "precious\n" and sorted(os.listdir(target)) == ["server.log"]


def test_a_fifo_is_no_log(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "server.log")
    with pytest.raises(OSError):
        make_plain(tmp_path, tmp_path / "server.log")


def test_the_command_says_which_path_in_one_line_and_exits_1(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    os.symlink(tmp_path / "elsewhere.log", run / "vllm.log")
    result = subprocess.run([sys.executable, "-S", "-m", "hpc.job.plain_file", str(run), str(run / "ok.log"),
                             str(run / "vllm.log")], cwd=REPO, capture_output=True, text=True, timeout=60)
    [line] = result.stderr.strip().splitlines()
    assert result.returncode == 1 and f"refusing to write {run / 'vllm.log'}" in line
    assert (run / "ok.log").is_file() and not (tmp_path / "elsewhere.log").exists()
    assert main([str(run), str(tmp_path / "outside.log")]) == 1 and main([str(run)]) == 2
