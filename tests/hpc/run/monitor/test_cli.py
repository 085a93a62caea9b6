"""hpc/run/monitor/cli.py: the commands of python -m hpc.run.monitor."""

from __future__ import annotations

from hpc.run.monitor.cli import main


def test_monitor_refuses_unknown_commands_with_exit_2(capsys):
    assert main(["bogus"]) == 2
    assert "bad arguments" in capsys.readouterr().err
