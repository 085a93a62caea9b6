"""Reading the sources ``python -m trainer.data prepare`` stages: a Hugging Face dataset id, or a local
copy of one (a ``datasets`` ``save_to_disk`` folder, parquet or JSONL files), as rows of emails
and of questions with their splits. ``datasets`` is imported only for Hugging Face ids; local
copies are read with pyarrow, a batch at a time.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from trainer.agent.scenarios import SPLITS, Scenario

EMAIL_COLUMNS = ("message_id", "subject", "from", "to", "cc", "bcc", "date", "body", "file_name")
QUESTION_COLUMNS = ("id", "question", "answer", "message_ids", "how_realistic", "inbox_address", "query_date")
SOURCE_FORMS = ("a Hugging Face dataset id (owner/name)", "a datasets save_to_disk folder",
                "a parquet file or folder", "a JSONL file")
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
_BATCH_ROWS = 4096
_FILE_SUFFIXES = (".parquet", ".jsonl")


class SourceError(Exception):
    """Bad input to ``prepare``: the message is one line naming the value and what is accepted."""


@dataclass(frozen=True)
class Source:
    """Where rows come from: ``kind`` is hub, saved (save_to_disk), files (parquet/JSONL)."""

    text: str
    kind: str
    path: Path | None = None

    def describe(self) -> str:
        return f"{self.text} (Hugging Face)" if self.kind == "hub" else str(self.path)


@dataclass(frozen=True)
class Part:
    """One readable piece of a source: its split (None when unnamed) and how to get its rows."""

    split: str | None
    rows: Callable[[], Iterator[dict[str, Any]]]
    columns: tuple[str, ...]
    count: int | None


def resolve_source(text: str) -> Source:
    """Decide what kind of source ``text`` names; a local path wins over a hub id."""
    path = Path(text).expanduser()
    if path.exists():
        if path.is_dir():
            if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
                return Source(text, "saved", path)
            return Source(text, "files", path)
        if path.suffix in _FILE_SUFFIXES:
            return Source(text, "files", path)
        raise SourceError(f"source {text!r}: unsupported file type {path.suffix or '(none)'!r}; "
                          f"accepted: {', '.join(SOURCE_FORMS)}")
    if path.suffix in _FILE_SUFFIXES:
        raise SourceError(f"source {text!r}: no such file; accepted: {', '.join(SOURCE_FORMS)}")
    if _HUB_ID.fullmatch(text) and not text.startswith((".", "/", "~")):
        return Source(text, "hub")
    raise SourceError(f"source {text!r} is neither an existing path nor a Hugging Face dataset id; "
                      f"accepted: {', '.join(SOURCE_FORMS)}")


def source_parts(source: Source) -> list[Part]:
    """The readable pieces of a source, each with its split when the source names one."""
    if source.kind == "hub":
        return _hub_parts(source)
    path = cast(Path, source.path)  # a local source's: resolve_source sets it for every kind but hub
    if source.kind == "saved":
        return _saved_parts(path)
    return _file_parts(path)


def _hub_parts(source: Source) -> list[Part]:
    datasets = _import_datasets()
    try:
        loaded = datasets.load_dataset(source.text)
    except Exception as error:  # noqa: BLE001 - offline, missing, private...: all end in the same advice
        raise SourceError(_hub_failure(source.text, error)) from None
    return [_dataset_part(split, dataset) for split, dataset in loaded.items()]


def _import_datasets() -> Any:
    try:
        import datasets  # seconds to import: only for a Hugging Face id
    except ImportError:
        raise SourceError("reading a Hugging Face dataset id needs the `datasets` package "
                          "(bash setup.sh installs it); or pass a local copy") from None
    return datasets


def _hub_failure(dataset_id: str, error: Exception) -> str:
    first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return (f"dataset {dataset_id!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set: "
                "run `python -m trainer.data prepare` where there is internet (a login node), "
                "or pass a local copy (save_to_disk folder, parquet or JSONL)")
    return (f"could not load Hugging Face dataset {dataset_id!r} ({first_line}); check the id and the network, "
            "or pass a local copy (save_to_disk folder, parquet or JSONL)")


def _dataset_part(split: str | None, dataset: Any) -> Part:
    def rows() -> Iterator[dict[str, Any]]:
        for table in dataset.with_format("arrow").iter(batch_size=_BATCH_ROWS):
            yield from _table_rows(table)

    return Part(split, rows, tuple(dataset.column_names), len(dataset))


def _saved_parts(folder: Path) -> list[Part]:
    """A save_to_disk folder read straight from its Arrow files (no ``datasets`` import, no mmap)."""
    manifest = folder / "dataset_dict.json"
    if manifest.is_file():
        splits = _json_file(manifest).get("splits", [])
        return [_saved_dataset_part(folder / split, split) for split in splits]
    return [_saved_dataset_part(folder, None)]


def _saved_dataset_part(folder: Path, split: str | None) -> Part:
    state = _json_file(folder / "state.json")
    files = [folder / entry["filename"] for entry in state.get("_data_files", [])]
    if not files or not all(f.is_file() for f in files):
        raise SourceError(f"source {folder}: state.json lists missing Arrow files; save the dataset again")
    import pyarrow as pa  # only for a local copy's files

    with pa.OSFile(str(files[0])) as handle:
        columns = tuple(pa.ipc.open_stream(handle).schema.names)
    return Part(split, lambda: _arrow_rows(files), columns, None)


def _json_file(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as error:
        raise SourceError(f"source file {path} is unreadable ({error}); save the dataset again") from None


def _arrow_rows(files: list[Path]) -> Iterator[dict[str, Any]]:
    import pyarrow as pa  # only for a local copy's files

    for path in files:
        with pa.OSFile(str(path)) as handle:
            for batch in pa.ipc.open_stream(handle):
                yield from _table_rows(batch)


def _file_parts(path: Path) -> list[Part]:
    if path.is_file():  # one file: its rows say their split, if they need one
        return [_file_part(path, None)]
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in _FILE_SUFFIXES)
    if not files:
        raise SourceError(f"source {path}: no .parquet or .jsonl files in it; accepted: {', '.join(SOURCE_FORMS)}")
    return [_file_part(f, _split_of(f, path)) for f in files]


def _split_of(file: Path, root: Path) -> str | None:
    """The split a file in a folder belongs to by name: ``train-0000.parquet``, ``test.jsonl``, ``train/x.parquet``."""
    relative = file.relative_to(root)
    names = [part.lower() for part in relative.parent.parts]
    names.append(re.split(r"[-_.]", file.name.lower(), maxsplit=1)[0])
    for split in SPLITS:
        if split in names:
            return split
    return None


def _file_part(path: Path, split: str | None) -> Part:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq  # only for a local copy's files

        try:
            meta = pq.ParquetFile(path)
        except Exception as error:  # noqa: BLE001 - pyarrow's errors for a bad file are of many kinds
            raise SourceError(f"source {path}: not a readable parquet file ({error})") from None
        return Part(split, lambda: _parquet_rows(path), tuple(meta.schema_arrow.names), meta.metadata.num_rows)
    return Part(split, lambda: _jsonl_rows(path), _jsonl_columns(path), None)


def _parquet_rows(path: Path) -> Iterator[dict[str, Any]]:
    import pyarrow.parquet as pq  # only for a local copy's files

    for batch in pq.ParquetFile(path).iter_batches(batch_size=_BATCH_ROWS):
        yield from _table_rows(batch)


def _jsonl_columns(path: Path) -> tuple[str, ...]:
    for number, line in _text_lines(path):
        if line.strip():
            row = _json_line(path, number, line)
            return tuple(row) if isinstance(row, dict) else ()
    return ()


def _jsonl_rows(path: Path) -> Iterator[dict[str, Any]]:
    for number, line in _text_lines(path):
        if not line.strip():
            continue
        row = _json_line(path, number, line)
        if not isinstance(row, dict):
            raise SourceError(f"source {path}:{number}: expected a JSON object, got {type(row).__name__}")
        yield row


def _text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """The file's numbered lines; text that is not UTF-8 is a SourceError naming the file."""
    with path.open(encoding="utf-8") as lines:
        try:
            yield from enumerate(lines, 1)
        except UnicodeDecodeError:
            raise SourceError(f"source {path}: not UTF-8 text (expected JSON lines)") from None


def _json_line(path: Path, number: int, line: str) -> Any:
    """One JSON line; not JSON, or nested deeper than the parser goes (100k '['), is a SourceError."""
    try:
        return json.loads(line)
    except (ValueError, RecursionError) as error:
        why = "nested too deeply" if isinstance(error, RecursionError) else str(error)
        raise SourceError(f"source {path}:{number}: not JSON ({why})") from None


def _table_rows(table: Any) -> Iterator[dict[str, Any]]:
    """Rows of an Arrow table or batch as dicts, converted a column at a time (much faster than per row)."""
    names = table.schema.names
    columns = [table.column(i).to_pylist() for i in range(len(names))]
    for values in zip(*columns):
        yield dict(zip(names, values))


def _require_columns(source: Source, parts: list[Part], needed: tuple[str, ...], what: str) -> None:
    for part in parts:
        missing = [c for c in needed if c not in part.columns]
        if missing:
            raise SourceError(f"{what} source {source.describe()} lacks column(s) {', '.join(missing)}; "
                              f"{what} need {', '.join(needed)}")


def email_rows(source: Source) -> tuple[Iterable[dict[str, Any]], int | None]:
    """The email rows of a source (its ``train`` split, or its only one) and their count if known."""
    parts = source_parts(source)
    named = [p for p in parts if p.split == "train"]
    if named:
        parts = named
    elif len({p.split for p in parts}) > 1:
        splits = sorted({str(p.split) for p in parts})
        raise SourceError(f"emails source {source.describe()} has splits {', '.join(splits)} but no 'train'; "
                          "give the split's folder or file instead")
    _require_columns(source, parts, EMAIL_COLUMNS, "emails")
    counts = [p.count for p in parts]
    known = [c for c in counts if c is not None]
    total = sum(known) if len(known) == len(counts) else None

    def rows() -> Iterator[dict[str, Any]]:
        for part in parts:
            yield from part.rows()

    return rows(), total


def question_rows(source: Source) -> dict[str, list[Scenario]]:
    """Every scenario of each split, validated; SourceError naming the row if one is malformed."""
    parts = source_parts(source)
    _require_columns(source, parts, QUESTION_COLUMNS, "questions")
    by_split: dict[str, list[Scenario]] = {split: [] for split in SPLITS}
    for part in parts:
        for number, row in enumerate(part.rows(), 1):
            split = part.split if part.split is not None else row.get("split")
            if split not in SPLITS:
                raise SourceError(_no_split_message(source, part, row, number))
            try:
                by_split[split].append(Scenario.from_row(row, split))
            except ValueError as error:
                raise SourceError(f"questions source {source.describe()}, {split} row {number}: {error}") from None
    empty = [split for split, rows in by_split.items() if not rows]
    if empty:
        raise SourceError(f"questions source {source.describe()} has no {' or '.join(empty)} questions; "
                          "it needs both 'train' and 'test' splits")
    return by_split


def _no_split_message(source: Source, part: Part, row: Mapping[str, Any], number: int) -> str:
    if part.split is None and "split" not in row:
        return (f"questions source {source.describe()} does not say which split its rows belong to; give a "
                "DatasetDict with train/test, files named train*/test*, or rows with a 'split' field")
    return (f"questions source {source.describe()}, row {number}: split {row.get('split')!r} is not one of "
            f"{', '.join(SPLITS)}")
