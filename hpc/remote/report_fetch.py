"""``hpc.report RUN --remote DEST --out DIR``: the report written on the cluster (into the run's
``report/`` there, as on a login node), then report.md and its pictures brought back into DIR.

The report prints the path of its report.md last; that folder's report.md and PNGs come back
as one archive through the same connection, unpacked beside DIR's files first and moved in
only once all arrived, so DIR never holds half a report.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from hpc.errors import UsageError
from hpc.remote.options import RemoteOptions, printable
from hpc.remote.ssh import Connection, RemoteError
from hpc.remote.sync import IN_CHECKOUT, last_line

REPORT = "report.md"
OUT_ACCEPTED = "a folder here that you can write, or one to be made"
# $2: the report.md the report printed (relative paths from the checkout).
FETCH = IN_CHECKOUT + f"""cd "$d" && cd "$(dirname "$2")" || exit 1
find . -maxdepth 1 -type f \\( -name {REPORT} -o -name '*.png' \\) | tar -czf - -T -
"""


def report_and_fetch(conn: Connection, options: RemoteOptions, argv: list[str], run_script: str) -> int:
    """Run the report there (its output streamed), then bring its files into --out."""
    code, last = run_streaming(conn.command(run_script, options.remote_dir, *argv))
    conn.lost(code)
    if code != 0:
        return code
    if not last.endswith(REPORT):
        raise RemoteError(f"the report on {conn.dest} printed no path of its {REPORT} (its last line: {last!r})")
    out = Path(options.extras.get("--out") or f"{Path(last).parent.parent.name}-report")
    moved = unpack(fetch(conn, options.remote_dir, last), out)
    print(f"hpc.report: brought {', '.join(moved)} back into {out}", file=sys.stderr)
    print(out / REPORT)
    return 0


def check_out(out: str | None) -> None:
    """--out, before the report runs there: a folder this user can write, or one that can be made
    (not a file, not /dev/null, not under a file); UsageError otherwise."""
    if out is None:
        return
    if not out.strip():
        raise UsageError(f"bad --out {out!r} (accepted: {OUT_ACCEPTED})")
    path = Path(out).expanduser()
    existing = next(p for p in (path, *path.absolute().parents) if p.exists() or p.is_symlink())
    if not existing.is_dir():
        what = "is not a folder" if existing == path else f"is under {existing}, which is not a folder"
        raise UsageError(f"bad --out '{printable(out)}': it {what} (accepted: {OUT_ACCEPTED})")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"bad --out '{printable(out)}': {existing} is not writable by you (accepted: {OUT_ACCEPTED})")


def run_streaming(argv: list[str]) -> tuple[int, str]:
    """Run, passing stdout through line by line; the exit code and the last line."""
    last = ""
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as process:
        assert process.stdout is not None  # stdout=PIPE
        for line in process.stdout:
            sys.stdout.write(line)
            last = line.strip() or last
    sys.stdout.flush()
    return process.returncode, last


def fetch(conn: Connection, remote_dir: str, report: str) -> bytes:
    done = subprocess.run(conn.command(FETCH, remote_dir, report), capture_output=True)
    conn.lost(done.returncode)
    if done.returncode != 0:
        why = last_line(done.stderr.decode(errors="replace"))
        raise RemoteError(f"cannot bring the report back from {conn.dest} ({why})")
    return done.stdout


def unpack(archive: bytes, out: Path) -> list[str]:
    """The archive's files into ``out``: all of them, or (an incomplete archive) none."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:  # a file there now, or a folder made unwritable since check_out
        raise RemoteError(f"cannot bring the report into {out}: {error.strerror}") from None
    with tempfile.TemporaryDirectory(dir=out, prefix=".incoming-") as folder:
        try:
            with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
                tar.extractall(folder, filter="data")
        except (tarfile.TarError, EOFError, OSError) as error:
            raise RemoteError(f"the report's files did not arrive whole ({error}); {out} is unchanged") from None
        names = sorted(path.name for path in Path(folder).iterdir() if path.is_file())
        if REPORT not in names:
            raise RemoteError(f"the report's folder on the cluster has no {REPORT}; {out} is unchanged")
        for name in names:
            os.replace(Path(folder) / name, out / name)
    return names
