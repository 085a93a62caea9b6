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

from hpc.remote.options import RemoteOptions
from hpc.remote.ssh import Connection, RemoteError
from hpc.remote.sync import IN_CHECKOUT, last_line

REPORT = "report.md"
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
    out.mkdir(parents=True, exist_ok=True)
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
