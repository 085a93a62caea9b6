"""The proof in the background (trainer/proof/background.py): started in a session of its own,
followed to its end."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.trainer.proof.proof_records import made_elsewhere
from trainer.polling import poll_until
from trainer.proof import cli
from trainer.proof.background import start_detached


def test_a_background_proof_outlives_its_start_and_is_followed_to_its_end(tmp_path: Path, capsys) -> None:
    work = tmp_path / "proof"
    model = made_elsewhere(tmp_path / "earlier" / "model")
    argv = ["--work", str(work), "--gpus", "0", "--model", str(model), "--only", "dedicated", "--background"]
    assert cli.main(argv) == 0
    assert "follow it with:" in capsys.readouterr().out and (work / "proof.pid").is_file()
    assert cli.main(["--work", str(work), "--follow", "120"]) == 0
    out = capsys.readouterr().out
    assert "skipped dedicated: it needs 2 GPUs" in out and "GPU proof: stages dedicated done" in out
    assert out.rstrip().endswith("== ended: exit 0; last stage dedicated")
    assert cli.main(["--work", str(work), "--follow", "1"]) == 0
    assert "skipped dedicated" not in capsys.readouterr().out, "a line is printed once"


def test_following_a_folder_with_no_background_proof_says_so(tmp_path: Path, capsys) -> None:
    assert cli.main(["--work", str(tmp_path), "--follow", "1"]) == 2
    assert "no background proof in" in capsys.readouterr().err


def test_a_detached_command_runs_in_a_session_of_its_own_and_writes_its_log(tmp_path: Path) -> None:
    """The one setsid launcher (the proof's --background and the learning curve's start)."""
    log = tmp_path / "logs" / "detached.log"
    log.parent.mkdir()
    log.write_text("earlier\n")
    script = "import os, sys; print(os.getsid(0) == os.getpid(), os.environ['PYTHONUNBUFFERED'])"
    pid = start_detached([sys.executable, "-c", script], log, tmp_path, append=False)
    assert pid != os.getpid()
    assert poll_until(lambda: log.read_text() == "True 1\n", timeout=30, interval=0.1), log.read_text()
    start_detached([sys.executable, "-c", "print('next')"], log, tmp_path)
    assert poll_until(lambda: log.read_text() == "True 1\nnext\n", timeout=30, interval=0.1), "appended by default"
