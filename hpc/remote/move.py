"""``python -m hpc.run move RUN --from DEST1 --to DEST2``: a run carried between clusters from the laptop.

Over the ``--remote`` connections (ssh.py: one login to each, kept for later commands), with
the laptop's checkout synced to both (sync.py): ``python -m hpc.run bundle`` on DEST1 into a
folder of the checkout there (``.hpc-move/``), each part carried through the laptop (``cat`` there,
``cat >`` on DEST2: the clusters never need to reach each other), the manifest last, then
``python -m hpc.run unbundle`` on DEST2, which checks every part before it writes anything.
Progress goes to stderr part by part (and every 64 MiB within a large one). When the carrying
or the unbundling fails, the run is taken back on DEST1 (``reclaim``): it is never left moved
to nowhere. The bundle folders are removed on both sides at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from hpc.errors import UsageError
from hpc.job.workload_env import HPC_REMOTE_DIR, REPO_DIR
from hpc.remote.commands import RUN
from hpc.remote.options import DEFAULT_DIR, SWITCH, checked_dest, checked_dir
from hpc.remote.ssh import Connection, RemoteError
from hpc.remote.sync import IN_CHECKOUT, ensure_synced, last_line, local_tree

PROG = "python -m hpc.run move"
STAGE = ".hpc-move"
CHUNK = 1024 * 1024
SAY_EVERY = 64 * CHUNK
CAT = IN_CHECKOUT + 'cd "$d" || exit 1\nexec cat -- "$2"\n'
RECEIVE = IN_CHECKOUT + 'cd "$d" || exit 1\nmkdir -p -- "$(dirname -- "$2")" && cat > "$2"\n'
REMOVE = IN_CHECKOUT + 'cd "$d" || exit 1\ncase $2 in ' + STAGE + '/*) rm -rf -- "$2" ;; esac\n'


@dataclass(frozen=True)
class Side:
    """One end of the move: its connection, its checkout and the flags its command gets."""

    conn: Connection
    checkout: str
    flags: tuple[str, ...]

    def python(self, *args: str, capture: bool = False) -> subprocess.CompletedProcess:
        """``python -m hpc.run ARGS`` in the checkout there, its output streamed (or captured)."""
        argv = self.conn.command(RUN, self.checkout, ".venv/bin/python", "-m", "hpc.run", *args)
        done = subprocess.run(argv, capture_output=capture, text=True, stdin=subprocess.DEVNULL)
        self.conn.lost(done.returncode)
        return done


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see {PROG} -h)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="the run's name under DEST1's runs directory")
    parser.add_argument("--from", dest="source", required=True, help="ssh destination of the cluster it leaves")
    parser.add_argument("--to", dest="dest", required=True, help="ssh destination of the cluster it goes to")
    default_dir = os.environ.get(HPC_REMOTE_DIR) or DEFAULT_DIR
    parser.add_argument("--from_dir", default=default_dir, help=f"the checkout on DEST1 (default: {default_dir})")
    parser.add_argument("--to_dir", default=default_dir, help=f"the checkout on DEST2 (default: {default_dir})")
    parser.add_argument("--from_runs_dir", default=None, help="the runs directory on DEST1 (default: its RUNS_DIR)")
    parser.add_argument("--to_runs_dir", default=None, help="the runs directory on DEST2 (default: its RUNS_DIR)")
    parser.add_argument("--to_cluster", default=None, help="DEST2's cluster name (default: detected there)")
    parser.add_argument("--to_env", action="append", default=[], metavar="NAME=VALUE",
                        help="as hpc.launch's --env on DEST2 (ART_PATH: where the model folder goes)")
    parser.add_argument("--part_mib", default="2048", help="largest part in MiB (default: 2048)")
    parser.add_argument(SWITCH, action="store_true", help="also sync your uncommitted changes")
    return parser


def sides(args: argparse.Namespace) -> tuple[Side, Side]:
    source = Side(Connection.to(checked_dest(args.source)), checked_dir(args.from_dir),
                  ("--runs_dir", args.from_runs_dir) if args.from_runs_dir else ())
    flags = [*(("--runs_dir", args.to_runs_dir) if args.to_runs_dir else ()),
             *(("--cluster", args.to_cluster) if args.to_cluster else ()),
             *(arg for pair in args.to_env for arg in ("--env", pair))]
    return source, Side(Connection.to(checked_dest(args.dest)), checked_dir(args.to_dir), tuple(flags))


def main(argv: list[str]) -> int:
    try:
        return move(build_parser().parse_args(argv))
    except UsageError as error:
        print(f"hpc.run move: error: {error}", file=sys.stderr)
        return UsageError.exit_code
    except RemoteError as error:
        print(f"hpc.run move: error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        return 130


def move(args: argparse.Namespace) -> int:
    source, target = sides(args)
    local = local_tree(REPO_DIR, args.remote_uncommitted)
    for side in (source, target):
        side.conn.open()  # one login each (the same DEST twice: one)
        ensure_synced(side.conn, side.checkout, local, PROG)
    stage = f"{STAGE}/{args.run}-{secrets.token_hex(6)}"
    where = f"{args.dest}:{args.to_dir}" + (f" (runs {args.to_runs_dir})" if args.to_runs_dir else "")
    made = source.python("bundle", args.run, "--out", stage, "--part_mib", args.part_mib, "--to", where,
                         *source.flags)
    if made.returncode != 0:
        return made.returncode
    try:
        return carry_and_unbundle(source, target, args.run, stage)
    finally:
        for side in (source, target):
            subprocess.run(side.conn.command(REMOVE, side.checkout, stage), capture_output=True)


def carry_and_unbundle(source: Side, target: Side, run: str, stage: str) -> int:
    """The parts and the manifest to DEST2, then unbundle there; on any failure the run is taken back."""
    try:
        manifest = json.loads(read_there(source, f"{stage}/manifest.json"))
        names = [row["name"] for row in manifest["parts"]]
        total = sum(int(row["size"]) for row in manifest["parts"])
        carried = 0
        for number, name in enumerate(names, 1):
            carried += carry(source, target, f"{stage}/{name}", (number, len(names), carried, total))
        carry(source, target, f"{stage}/manifest.json", None)
        code = target.python("unbundle", stage, *target.flags).returncode
        if code != 0:
            raise RemoteError(f"unbundling on {target.conn.dest} failed (exit {code}; its message is above)", code)
    except (RemoteError, ValueError, KeyError) as error:
        source.python("reclaim", run, *source.flags, capture=True)
        raise RemoteError(f"{error}; run {run} stays on {source.conn.dest} (taken back: it trains there)",
                          getattr(error, "exit_code", 1)) from None
    print(f"hpc.run move: run {run} moved from {source.conn.dest} to {target.conn.dest}; launch it there "
          f"(python -m hpc.launch --remote {target.conn.dest} ...)", file=sys.stderr)
    return 0


def read_there(side: Side, path: str) -> str:
    done = subprocess.run(side.conn.command(CAT, side.checkout, path), capture_output=True, text=True)
    side.conn.lost(done.returncode)
    if done.returncode != 0:
        raise RemoteError(f"cannot read {path} on {side.conn.dest} ({last_line(done.stderr)})")
    return done.stdout


def carry(source: Side, target: Side, path: str, progress: tuple[int, int, int, int] | None) -> int:
    """One file from DEST1 to DEST2 through this machine, in chunks; the bytes carried."""
    reader = subprocess.Popen(source.conn.command(CAT, source.checkout, path), stdout=subprocess.PIPE)
    writer = subprocess.Popen(target.conn.command(RECEIVE, target.checkout, path), stdin=subprocess.PIPE)
    assert reader.stdout is not None and writer.stdin is not None
    count = 0
    with reader.stdout, writer.stdin:
        while chunk := reader.stdout.read(CHUNK):
            writer.stdin.write(chunk)
            count += len(chunk)
            if progress is not None and count % SAY_EVERY < CHUNK <= count:
                say(path, progress, count)
    if reader.wait() != 0 or writer.wait() != 0:
        raise RemoteError(f"carrying {Path(path).name} from {source.conn.dest} to {target.conn.dest} failed")
    if progress is not None:
        say(path, progress, count, whole=True)
    return count


def say(path: str, progress: tuple[int, int, int, int], count: int, whole: bool = False) -> None:
    number, parts, before, total = progress
    state = "carried" if whole else "carrying"
    print(f"hpc.run move: {state} part {number} of {parts} ({(before + count) / CHUNK:.0f} of {total / CHUNK:.0f} "
          "MiB)", file=sys.stderr, flush=True)
