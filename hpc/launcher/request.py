"""One launch as ``python -m hpc.launch`` read it at the door: the parsed flags, and the command line as
the run's ledger records it (``submit``/``chain``'s ``argv``: every secret value, and each ``--env`` of a
secret name, as ***), redacted here once. The raw command line stays in hpc/launcher/launch.py; the
modules that submit and record a run get this request."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Sequence

from hpc.launcher.envfiles import MergedEnv, redact_argv


@dataclass(frozen=True)
class LaunchRequest:
    args: argparse.Namespace
    command: tuple[str, ...]  # the launch's arguments as the ledger records them (secrets as ***)

    @classmethod
    def read(cls, args: argparse.Namespace, argv: Sequence[str], envs: Sequence[MergedEnv]) -> LaunchRequest:
        """The request of a launch whose runs get ``envs`` (one per run: a sweep's runs share their
        env files and --env flags, so each run's ledger records the one command line, with whatever any
        run holds as a secret redacted)."""
        return cls(args, tuple(redact_argv(argv, *envs)))

    @property
    def restart(self) -> bool:
        return bool(self.args.restart)
