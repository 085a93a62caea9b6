"""The laptop's committed tree, synced into the checkout on the cluster; ``bash setup.sh`` there
on first use.

What is synced is a git tree: HEAD's, or with ``--remote_uncommitted`` the work tree as ``git add
-A`` would commit it (ignored files never: .venv, runs/, data/, .env), sent as ``git archive``
through the shared connection. The cluster needs only sh and tar. There the archive is
unpacked into a temporary folder and counted first; only a complete one replaces the files of
the previous sync (removing those gone), and the marker that says which tree is there and its
commit (hpc/synced_checkout.py: what the ledger records) is removed before and written last,
so a sync cut off anywhere is never taken for a complete one: the next command syncs again.

A checkout is synced only when its tree differs from the laptop's; setup.sh runs when the
checkout has no .venv yet, or setup.sh or pyproject.toml changed since it last succeeded.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import IO

from hpc.remote.options import DEFAULT_DIR, printable
from hpc.remote.ssh import Connection, RemoteError
from hpc.synced_checkout import FILES, FOLDER, KEPT, MARKER, SETUP

SETUP_INPUTS = ("setup.sh", "pyproject.toml")  # a change in either runs setup.sh again
EXCLUDED = tuple(f":(exclude){name}" for name in KEPT)  # never synced, even if committed

# Every remote script starts here: $1 is the checkout, ~/ and relative paths from the home there.
IN_CHECKOUT = """d=$1
case $d in "~") d=$HOME ;; "~/"*) d=$HOME/${d#"~/"} ;; /*) ;; *) d=$HOME/$d ;; esac
"""

# One line: "notdir", "foreign NAME", or "new|ours TREE SETUP VENV" ("-" for none).
PROBE = IN_CHECKOUT + f"""venv=no; [ -x "$d/.venv/bin/python" ] && venv=yes
if [ -e "$d" ] && [ ! -d "$d" ]; then echo notdir; exit 0; fi
if [ -d "$d/{FOLDER}" ]; then
  tree=$(sed -n 's/^tree=//p' "$d/{MARKER}" 2>/dev/null || true)
  setup=$(cat "$d/{SETUP}" 2>/dev/null || true)
  echo "ours ${{tree:--}} ${{setup:--}} $venv"; exit 0
fi
if [ -d "$d" ]; then
  for f in "$d"/* "$d"/.[!.]* "$d"/..?*; do
    [ -e "$f" ] || [ -L "$f" ] || continue
    case ${{f##*/}} in {'|'.join(KEPT)}) ;; *) echo "foreign ${{f##*/}}"; exit 0 ;; esac
  done
fi
echo "new - - $venv"
"""

# $2 tree, $3 commit, $4 the number of files; the archive (tar.gz) on stdin.
RECEIVE = IN_CHECKOUT + f"""set -eu
tree=$2 commit=$3 count=$4 m={FOLDER}
mkdir -p "$d/$m" && cd "$d"
if command -v flock >/dev/null 2>&1; then
  exec 9>"$m/lock"
  flock -w 300 9 || {{ echo "another sync into $d did not finish within 300 s" >&2; exit 1; }}
fi
tmp=$(mktemp -d "$m/incoming.XXXXXX")
trap 'rm -rf "$tmp" "$m/files.new"' EXIT
tar -xzf - -C "$tmp"
got=$(cd "$tmp" && find . ! -type d | wc -l)
[ "$got" -eq "$count" ] || {{ echo "received $got of $count files: the transfer was cut off" >&2; exit 1; }}
rm -f "{MARKER}"
(cd "$tmp" && find . ! -type d) | LC_ALL=C sort > "$m/files.new"
if [ -f "{FILES}" ]; then
  LC_ALL=C comm -23 "{FILES}" "$m/files.new" | while IFS= read -r f; do rm -f "$f" || true; done
fi
(cd "$tmp" && find . ! -type d | tar -cf - -T -) | tar -xf -  # files only: the folder keeps its mode
mv "$m/files.new" "{FILES}"
printf 'tree=%s\\ncommit=%s\\n' "$tree" "$commit" > "$m/synced.new"
mv "$m/synced.new" "{MARKER}"
"""

# $2 what the setup is for (SETUP_INPUTS' blobs), recorded once setup.sh succeeded.
SETUP_SCRIPT = IN_CHECKOUT + f"""cd "$d" || exit 1
bash setup.sh >&2 || exit $?
printf '%s\\n' "$2" > "{SETUP}"
"""


@dataclass(frozen=True)
class LocalTree:
    """What is synced: a git tree of the laptop's checkout, and the commit the ledger records."""

    repo: Path
    tree: str
    commit: str  # HEAD, or HEAD-dirty when the tree carries uncommitted changes
    files: int
    setup_key: str


class FolderKind(StrEnum):
    """What the probe found at the checkout's place on the cluster (its first word)."""

    NEW = "new"  # nothing there, or an empty folder
    OURS = "ours"  # a checkout --remote keeps
    FOREIGN = "foreign"  # a folder holding something else: never written into
    NOTDIR = "notdir"  # a file where the folder goes


@dataclass(frozen=True)
class RemoteState:
    """The probe's answer about the checkout on the cluster."""

    kind: FolderKind
    tree: str | None = None
    setup_key: str | None = None
    has_venv: bool = False
    foreign_name: str = ""


def git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RemoteError(f"git {args[0]} in {repo} failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return done.stdout.strip()


def local_tree(repo: Path, uncommitted: bool) -> LocalTree:
    """The tree to sync; refused (exit 2) when the checkout has uncommitted changes and
    ``uncommitted`` does not say to send them."""
    require_checkout(repo)
    head = git(repo, "rev-parse", "HEAD")
    changed = git(repo, "diff", "HEAD", "--name-only").splitlines()  # staged or not
    if changed and not uncommitted:
        raise RemoteError(f"your checkout has uncommitted changes ({len(changed)} file(s), e.g. "
                          f"{changed[0]}): commit them, or add --remote_uncommitted to sync them as they are", 2)
    tree = work_tree(repo) if uncommitted else git(repo, "rev-parse", "HEAD^{tree}")
    label = head if tree == git(repo, "rev-parse", "HEAD^{tree}") else f"{head}-dirty"
    blobs = tree_files(repo, tree)
    setup_key = "-".join(blobs.get(name, "none")[:12] for name in SETUP_INPUTS)
    return LocalTree(repo, tree, label, len(blobs), setup_key)


def require_checkout(repo: Path) -> None:
    top = subprocess.run(["git", "-C", str(repo), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != repo.resolve():
        raise RemoteError(f"{repo} is not a git checkout: --remote syncs a checkout's committed tree "
                          "(git clone the project, then run the command from it)", 2)


def work_tree(repo: Path) -> str:
    """The work tree as a git tree (tracked changes and new files that are not ignored), made in
    an index of its own: the user's index and stash are left alone."""
    with tempfile.TemporaryDirectory() as folder:
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(folder) / "index")}
        git(repo, "read-tree", "HEAD", env=env)
        git(repo, "add", "-A", env=env)
        return git(repo, "write-tree", env=env)


def tree_files(repo: Path, tree: str) -> dict[str, str]:
    """Path -> blob id of every file the archive holds (the KEPT names left out, as the archive does)."""
    listing = git(repo, "ls-tree", "-r", "-z", "--full-tree", tree)
    files = {}
    for entry in filter(None, listing.split("\0")):
        meta, path = entry.split("\t", 1)
        _, kind, blob = meta.split()
        if kind == "blob" and path.split("/", 1)[0] not in KEPT:
            files[path] = blob
    return files


def probe(conn: Connection, remote_dir: str) -> RemoteState:
    done = subprocess.run(conn.command(PROBE, remote_dir), capture_output=True, text=True)
    conn.lost(done.returncode)
    words = done.stdout.strip().split(" ", 1)
    if done.returncode != 0 or not words[0]:
        raise RemoteError(f"cannot look into {conn.dest}:{remote_dir} ({last_line(done.stderr)})")
    kind = folder_kind(words[0], f"{conn.dest}:{remote_dir}")
    if kind in (FolderKind.NOTDIR, FolderKind.FOREIGN):
        return RemoteState(kind, foreign_name=words[1] if len(words) > 1 else "")
    _, tree, setup_key, venv = done.stdout.split()
    return RemoteState(kind, none_if_dash(tree), none_if_dash(setup_key), venv == "yes")


def folder_kind(word: str, where: str) -> FolderKind:
    """The probe's first word as a FolderKind; another word (a probe of another release) is an error,
    never taken for a folder that may be written into."""
    try:
        return FolderKind(word)
    except ValueError:
        raise RemoteError(f"cannot look into {where}: the probe answered {printable(word)!r}, not one of "
                          f"{', '.join(FolderKind)}") from None


def none_if_dash(word: str) -> str | None:
    return None if word == "-" else word


def last_line(text: str) -> str:
    return (text.strip().splitlines() or ["no message"])[-1]


def ensure_synced(conn: Connection, remote_dir: str, local: LocalTree, prog: str) -> None:
    """The checkout there holds ``local``'s tree and a working setup, or this raises why not."""
    state = probe(conn, remote_dir)
    refuse_foreign(conn, remote_dir, state)
    if state.tree != local.tree:
        push(conn, remote_dir, local)
        print(f"{prog}: synced {local.commit[:12]} ({local.files} files) to {conn.dest}:{remote_dir}",
              file=sys.stderr)
    if state.setup_key != local.setup_key or not state.has_venv:
        run_setup(conn, remote_dir, local, prog)


def refuse_foreign(conn: Connection, remote_dir: str, state: RemoteState) -> None:
    """Never write into a folder that is neither new nor one of ours (a home, a clone of its own)."""
    where = f"--remote_dir {remote_dir} on {conn.dest}"
    if state.kind is FolderKind.NOTDIR:
        raise RemoteError(f"{where} is a file, not a folder: pass a new or empty folder (default {DEFAULT_DIR})", 2)
    if state.kind is FolderKind.FOREIGN:
        name = printable(state.foreign_name)  # a file name there may hold a newline
        raise RemoteError(f"{where} is not a checkout that --remote keeps (it holds '{name}' and no {FOLDER}/): "
                          f"pass a new or empty folder (default {DEFAULT_DIR})", 2)


def push(conn: Connection, remote_dir: str, local: LocalTree) -> None:
    """``git archive`` of the tree into the checkout there."""
    archive = subprocess.Popen(["git", "-C", str(local.repo), "-c", "tar.umask=022", "archive", "--format=tar.gz",
                                local.tree, "--", ".", *EXCLUDED], stdout=subprocess.PIPE)
    assert archive.stdout is not None  # stdout=PIPE
    try:
        send(conn, remote_dir, local, archive.stdout)
    finally:
        archive.stdout.close()
        archive.wait()


def send(conn: Connection, remote_dir: str, local: LocalTree, stream: IO[bytes]) -> None:
    """The archive on ``stream`` into the checkout; a cut-off or refused one leaves no marker."""
    done = subprocess.run(conn.command(RECEIVE, remote_dir, local.tree, local.commit, str(local.files)),
                          stdin=stream, capture_output=True, text=True)
    conn.lost(done.returncode)
    if done.returncode != 0:
        raise RemoteError(f"the sync into {conn.dest}:{remote_dir} failed ({last_line(done.stderr)}); "
                          "the checkout there is marked incomplete: run the command again")


def run_setup(conn: Connection, remote_dir: str, local: LocalTree, prog: str) -> None:
    """``bash setup.sh`` in the checkout, its output on our stderr (stdout stays the command's)."""
    print(f"{prog}: running bash setup.sh in {conn.dest}:{remote_dir} (first use, or setup.sh or "
          "pyproject.toml changed; its output follows)", file=sys.stderr)
    sys.stderr.flush()
    code = subprocess.run(conn.command(SETUP_SCRIPT, remote_dir, local.setup_key), stdout=sys.stderr).returncode
    conn.lost(code)
    if code != 0:
        raise RemoteError(f"bash setup.sh failed in {conn.dest}:{remote_dir} (exit {code}; its messages are above): "
                          f"fix what it says there (e.g. a Python module loaded in ~/.bashrc), then run the command "
                          "again")
