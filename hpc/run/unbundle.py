"""``python -m hpc.run unbundle DIR``: a bundle (hpc/run/bundle.py) made a run here.

Every part is checked before anything is written: its header (this run, this bundle, this
part), its size and its sha256 against the manifest; a part missing, short, changed, of
another run's bundle or of another bundle of this run, a part-like file the manifest does not
list, or a run of that name already in the runs directory is one line (exit 2) and nothing is
written. Then the stream is unpacked into a temporary folder beside each destination (the run's
inside the runs directory; the model folder's beside it, where ART_PATH puts it on this
cluster), the sha256s checked again as it is read, the records made this place's (model.json's
model folder, the folder's ``hpc_owner.json``, a ``moved_in`` ledger record), and each folder
renamed into place: the run's last, so a run that is there is whole. The next ``hpc.launch``
of the run continues at the bundle's step + 1. Stdlib only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Iterator

from hpc.errors import UsageError
from hpc.run import ledger
from hpc.run.bundle import FORMAT, MANIFEST, MIB, MODEL, OWNER_FILE, PART_MAGIC, RUN, Progress
from hpc.run.checkpoints import model_dir as art_model_dir
from hpc.run.ledger import MovedIn
from hpc.run.records import read_json
from hpc.run.rundir import UNBUNDLING, RunDir, is_run_name, utc_now
from hpc.run.safe_io import write_json_atomic

PART_FILE = re.compile(r"(?P<run>.+)\.(?P<bundle>[0-9a-f]{12})\.part(?P<number>\d{4,})")
HEADER_LIMIT = 4096
READ_BYTES = 4 * MIB


@dataclass(frozen=True)
class Bundle:
    """A bundle's folder and its manifest, checked."""

    folder: Path
    manifest: dict[str, Any]

    @property
    def run(self) -> str:
        return str(self.manifest["run"])

    @property
    def id(self) -> str:
        return str(self.manifest["bundle"])

    @property
    def step(self) -> int:
        return int(self.manifest["step"])

    @property
    def parts(self) -> list[dict[str, Any]]:
        return list(self.manifest["parts"])


# -- checking, before anything is written ----------------------------------------------------------


def read_manifest(folder: Path) -> Bundle:
    if not folder.is_dir():
        raise UsageError(f"bundle folder {folder} does not exist or is not a folder")
    manifest = read_json(folder / MANIFEST)
    if manifest is None:
        raise UsageError(f"{folder} has no readable {MANIFEST}: not a whole bundle (a bundle cut off writes none)")
    problem = manifest_problem(manifest)
    if problem:
        raise UsageError(f"{folder / MANIFEST} is no bundle manifest this release reads: {problem}")
    return Bundle(folder, manifest)


def manifest_problem(manifest: dict[str, Any]) -> str | None:
    if manifest.get("format") != FORMAT:
        return f"format {manifest.get('format')!r}, expected {FORMAT!r}"
    if not isinstance(manifest.get("run"), str) or not is_run_name(manifest["run"]):
        return f"run name {manifest.get('run')!r} is not a run name"
    if not isinstance(manifest.get("bundle"), str) or not re.fullmatch(r"[0-9a-f]{32}", manifest["bundle"]):
        return "no bundle id"
    if not isinstance(manifest.get("step"), int) or not isinstance(manifest.get("project"), str):
        return "no step or project"
    parts = manifest.get("parts")
    if not isinstance(parts, list) or not parts or not all(part_row_ok(p) for p in parts):
        return "its parts are not listed as name, size and sha256"
    return None


def part_row_ok(row: Any) -> bool:
    return (isinstance(row, dict) and isinstance(row.get("name"), str) and "/" not in row["name"]
            and isinstance(row.get("size"), int) and isinstance(row.get("sha256"), str))


def check(bundle: Bundle) -> None:
    """Every part there, whole and this bundle's; no part of another bundle beside them."""
    listed = {row["name"] for row in bundle.parts}
    for number, row in enumerate(bundle.parts, 1):
        check_part(bundle, number, row)
    for path in sorted(bundle.folder.iterdir()):
        match = PART_FILE.fullmatch(path.name)
        if match and path.name not in listed:
            raise UsageError(stray_part(bundle, path, match))


def stray_part(bundle: Bundle, path: Path, match: re.Match[str]) -> str:
    whose = (f"another bundle of run {bundle.run} ({match['bundle']}...)" if match["run"] == bundle.run
             else f"run {match['run']}'s bundle")
    return (f"{path} is a part of {whose}, not of this bundle ({bundle.id[:12]}...): nothing written; a bundle's "
            f"parts go in a folder of their own (move that file out)")


def check_part(bundle: Bundle, number: int, row: dict[str, Any]) -> None:
    path = bundle.folder / row["name"]
    if not path.is_file():
        raise UsageError(f"part {number} of {len(bundle.parts)} ({path}) is missing: nothing written; copy it "
                         "from the bundle's folder")
    header_problem(bundle, number, path)
    size = path.stat().st_size
    if size != row["size"]:
        kind = "short (cut off in transfer?)" if size < row["size"] else "longer than the manifest says"
        raise UsageError(f"part {number} ({path}) is {size} bytes, the manifest says {row['size']}: {kind}; "
                         "nothing written; copy it again")
    digest = sha256_of(path)
    if digest != row["sha256"]:
        raise UsageError(f"part {number} ({path}) has sha256 {digest[:16]}..., the manifest says "
                         f"{row['sha256'][:16]}...: its bytes changed (a flipped bit in transfer or storage); "
                         "nothing written; copy it again")


def header_problem(bundle: Bundle, number: int, path: Path) -> None:
    header = read_header(path)
    where = f"part {number} ({path})"
    if header is None:
        raise UsageError(f"{where} is not a bundle part (no part header): nothing written")
    if header.get("run") != bundle.run:
        raise UsageError(f"{where} is a part of run {header.get('run')}'s bundle, not of run {bundle.run}'s: "
                         "a foreign part; nothing written")
    if header.get("bundle") != bundle.id:
        raise UsageError(f"{where} is a part of another bundle of run {bundle.run} "
                         f"({str(header.get('bundle'))[:12]}..., not {bundle.id[:12]}...): nothing written; "
                         "use the parts of one bundle")
    if header.get("part") != number:
        raise UsageError(f"{where} is part {header.get('part')}, not part {number}: nothing written")


def read_header(path: Path) -> dict[str, Any] | None:
    with open(path, "rb") as handle:
        line = handle.readline(HEADER_LIMIT)
    if not line.startswith(PART_MAGIC) or not line.endswith(b"\n"):
        return None
    try:
        value = json.loads(line[len(PART_MAGIC):])
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(READ_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


# -- where it goes -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Place:
    """Where the run and its model folder go on this cluster."""

    run_dir: Path
    model_dir: Path

    @property
    def model_inside(self) -> bool:
        return self.model_dir.is_relative_to(self.run_dir)


def place_of(bundle: Bundle, runs_dir: Path, art_path: str | None) -> Place:
    """The run under ``runs_dir``; its model folder where the launcher will look for it: ART_PATH
    (this cluster's), else the run's ``art/`` (the launcher's default)."""
    run_dir = runs_dir.absolute() / bundle.run
    art = Path(art_path) if art_path else run_dir / "art"
    return Place(run_dir, art_model_dir(art, bundle.manifest["project"], bundle.run).absolute())


def check_place(bundle: Bundle, place: Place) -> None:
    if os.path.lexists(place.run_dir):
        raise UsageError(f"a run named {bundle.run} is already in {place.run_dir.parent} ({place.run_dir}): "
                         "nothing written; unbundle into another --runs_dir (a run has one name per runs directory)")
    if not place.model_inside and os.path.lexists(place.model_dir):
        raise UsageError(f"the model folder {place.model_dir} (this cluster's ART_PATH) already exists: "
                         "nothing written; it may be another run's checkpoints")


# -- unpacking ---------------------------------------------------------------------------------------------


class PartsReader:
    """The parts' payloads as one stream (headers skipped), each part's sha256 checked again at its
    end: a part changed after the check fails the unpacking, which then leaves nothing."""

    def __init__(self, bundle: Bundle, progress: Progress) -> None:
        self.rows, self.folder, self.progress = iter(bundle.parts), bundle.folder, progress
        self.handle: IO[bytes] | None = None
        self.row: dict[str, Any] = {}
        self.digest = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        while True:
            if self.handle is None and not self._open_next():
                return b""
            assert self.handle is not None
            data = self.handle.read(size if size >= 0 else READ_BYTES)
            if data:
                self.digest.update(data)
                self.progress.add(len(data))
                return data
            self._finish_part()

    def _open_next(self) -> bool:
        row = next(self.rows, None)
        if row is None:
            return False
        self.row, self.digest = row, hashlib.sha256()
        self.handle = open(self.folder / row["name"], "rb")
        header = self.handle.readline(HEADER_LIMIT)
        self.digest.update(header)
        return True

    def _finish_part(self) -> None:
        assert self.handle is not None
        self.handle.close()
        self.handle = None
        if self.digest.hexdigest() != self.row["sha256"]:
            raise UsageError(f"part {self.row['name']} changed while it was read (sha256 differs): nothing written")

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()


def unpack(bundle: Bundle, run_tmp: Path, model_tmp: Path) -> None:
    """The stream's ``run/`` into ``run_tmp`` and ``model/`` into ``model_tmp`` (tarfile's data
    filter: no links out, no devices, no absolute paths)."""
    total = sum(int(row["size"]) for row in bundle.parts)
    reader = PartsReader(bundle, Progress(f"unbundle {bundle.run}", total))
    try:
        with tarfile.open(fileobj=reader, mode="r|") as tar:  # type: ignore[call-overload]
            for member in tar:
                top, _, rest = member.name.partition("/")
                if top not in (RUN, MODEL) or not rest:
                    raise UsageError(f"the bundle holds {member.name!r}, outside its run/ and model/: nothing written")
                member.name = rest
                tar.extract(member, run_tmp if top == RUN else model_tmp, filter="data")
        while reader.read():  # the rest of the last part (tar's padding): checked too
            pass
    except tarfile.TarError as error:
        raise UsageError(f"the bundle's stream does not unpack ({error}): nothing written") from None
    finally:
        reader.close()


@dataclass(frozen=True)
class Arrived:
    bundle: Bundle
    place: Place


def unbundle(folder: Path, runs_dir: Path, art_path: str | None) -> Arrived:
    """Check every part, then make the run here (see the module's docstring)."""
    bundle = read_manifest(folder)
    check(bundle)
    place = place_of(bundle, runs_dir, art_path)
    check_place(bundle, place)
    with temporary(place.run_dir.parent, bundle.run) as run_tmp, \
            temporary(run_tmp if place.model_inside else place.model_dir.parent, bundle.run) as model_tmp:
        unpack(bundle, run_tmp, model_tmp)
        make_local(bundle, place, run_tmp, model_tmp)
        install(place, run_tmp, model_tmp)
    return Arrived(bundle, place)


@contextlib.contextmanager
def temporary(parent: Path, name: str) -> Iterator[Path]:
    """A new folder in ``parent`` (same filesystem: renamed into place), removed if still there."""
    parent.mkdir(parents=True, exist_ok=True)
    folder = parent / f"{UNBUNDLING}{name}-{secrets.token_hex(6)}"
    folder.mkdir()
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def make_local(bundle: Bundle, place: Place, run_tmp: Path, model_tmp: Path) -> None:
    """This place's records: model.json names the new model folder (its lineage kept), the folder's
    owner file names the new run, and the ledger says where the run came from."""
    run = RunDir(run_tmp)
    record = run.read_model_record() or {}
    source = bundle.manifest.get("source") or {}
    record.update({"model_dir": str(place.model_dir), "claimed": utc_now(),
                   "moved_in": {"bundle": bundle.id, "step": bundle.step, "run_dir": source.get("run_dir"),
                                "model_dir": source.get("model_dir"), "host": source.get("host")}})
    run.write_model_record(record)
    write_json_atomic(model_tmp / OWNER_FILE, {"run_dir": str(place.run_dir), "job_name": bundle.run,
                                               "claimed": utc_now()})
    ledger.append(run, MovedIn(source=f"{source.get('host')}:{source.get('run_dir')}", step=bundle.step,
                               bundle=bundle.id))
    run.remove(run.lock_file)


def install(place: Place, run_tmp: Path, model_tmp: Path) -> None:
    """The model folder into place, then the run (the run's rename last: a run there is whole)."""
    if place.model_inside:
        target = run_tmp / place.model_dir.relative_to(place.run_dir)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(model_tmp, target)
        os.rename(run_tmp, place.run_dir)
        return
    os.rename(model_tmp, place.model_dir)
    try:
        os.rename(run_tmp, place.run_dir)
    except OSError:
        os.rename(place.model_dir, model_tmp)
        raise
