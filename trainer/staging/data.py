"""Data staging: where the email database and scenarios live, and ``python -m trainer.data prepare``.

Compute nodes are often offline, so a login node with internet stages
everything into ``DATA_DIR`` (a shared filesystem; the launcher's dotenv sets
it) before any job runs::

    python -m trainer.data prepare [--data_dir D] [--emails SRC] [--questions SRC] [--force]
    python -m trainer.data stage-model [--config agent_008] [--base_model ID] [--hf_home DIR]
    python -m trainer.data make-model DIR [--size NAME] [--data_dir D]   # trainer/staging/model_maker.py, model_sizes.yaml
    python -m trainer.data make-inboxes DIR [--seed S]   # synthetic inboxes to prepare (trainer/staging/synthetic_inbox.py)

A source (SRC) is a Hugging Face dataset id, or a local copy of one:

* a ``datasets`` ``save_to_disk`` folder (a DatasetDict or a Dataset),
* a parquet file, or a folder of parquet (or JSONL) files,
* a JSONL file (one JSON object per line).

Questions need both splits: a DatasetDict with ``train`` and ``test``, files
named ``train*``/``test*`` (or in ``train/``/``test/`` folders), or rows with a
``split`` field. ``datasets`` is imported only for Hugging Face ids; local
copies are read with pyarrow, a batch at a time.

What exists is kept unless ``--force``: a second run on a staged directory
opens no source and touches no network.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.training.config import ConfigError
from trainer.agent.email_db import DB_FILENAME, MAX_BODY_CHARS, MAX_RECIPIENTS, BuildReport, build_database, temporary_file
from trainer.agent.scenarios import SCENARIOS_DIRNAME, SPLITS, Scenario, scenario_file

REPO = Path(__file__).resolve().parents[2]
DEFAULT_EMAILS = "corbt/enron-emails"
DEFAULT_QUESTIONS = "corbt/enron_emails_sample_questions"
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
class DataPaths:
    data_dir: Path
    db: Path
    scenarios_dir: Path

    def scenarios(self, split: str) -> Path:
        return scenario_file(self.data_dir, split)


def data_paths(data_dir: Path) -> DataPaths:
    data_dir = Path(data_dir)
    return DataPaths(data_dir=data_dir, db=data_dir / DB_FILENAME, scenarios_dir=data_dir / SCENARIOS_DIRNAME)


def default_data_dir() -> Path:
    """Where jobs on this machine's cluster read the data: ``$DATA_DIR`` (a job has
    it from the launcher), else DATA_DIR from the cluster's dotenv files (so
    staging on a login node writes where the jobs will look), else ``<repo>/data``."""
    value = cluster_setting("DATA_DIR", "--data_dir")
    return Path(value) if value else REPO / "data"


def cluster_setting(name: str, flag: str | None = None) -> str | None:
    """``$name`` from the shell (a job has it from the launcher), else as this cluster's
    dotenv files set it for its jobs: staging on a login node writes where jobs will look.
    ``flag`` is the option that sets it instead, named in the error."""
    value = os.environ.get(name)
    if value:
        return value
    from hpc.launcher.clusters import load_registry
    from hpc.errors import UsageError
    from hpc.launcher.jobspec import dotenv_setting

    try:
        return dotenv_setting(name, load_registry().detect().cluster)
    except UsageError as error:  # e.g. ${SCRATCH} not set in this shell
        raise SourceError(f"cannot work out {name} from the dotenv files: {error}; "
                          f"set {name}" + (f" or pass {flag}" if flag else "")) from None


# ---------------------------------------------------------------------------
# Sources


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
    if source.kind == "saved":
        return _saved_parts(source.path)
    return _file_parts(source.path)


def _hub_parts(source: Source) -> list[Part]:
    datasets = _import_datasets()
    try:
        loaded = datasets.load_dataset(source.text)
    except Exception as error:  # offline, missing, private...: all end in the same advice
        raise SourceError(_hub_failure(source.text, error)) from None
    return [_dataset_part(split, dataset) for split, dataset in loaded.items()]


def _import_datasets() -> Any:
    try:
        import datasets
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
    import pyarrow as pa

    with pa.OSFile(str(files[0])) as handle:
        columns = tuple(pa.ipc.open_stream(handle).schema.names)
    return Part(split, lambda: _arrow_rows(files), columns, None)


def _json_file(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise SourceError(f"source file {path} is unreadable ({error}); save the dataset again") from None


def _arrow_rows(files: list[Path]) -> Iterator[dict[str, Any]]:
    import pyarrow as pa

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
        import pyarrow.parquet as pq

        try:
            meta = pq.ParquetFile(path)
        except Exception as error:
            raise SourceError(f"source {path}: not a readable parquet file ({error})") from None
        return Part(split, lambda: _parquet_rows(path), tuple(meta.schema_arrow.names), meta.metadata.num_rows)
    return Part(split, lambda: _jsonl_rows(path), _jsonl_columns(path), None)


def _parquet_rows(path: Path) -> Iterator[dict[str, Any]]:
    import pyarrow.parquet as pq

    for batch in pq.ParquetFile(path).iter_batches(batch_size=_BATCH_ROWS):
        yield from _table_rows(batch)


def _jsonl_columns(path: Path) -> tuple[str, ...]:
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                try:
                    row = json.loads(line)
                except ValueError as error:
                    raise SourceError(f"source {path}: first line is not JSON ({error})") from None
                return tuple(row) if isinstance(row, dict) else ()
    return ()


def _jsonl_rows(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as error:
                raise SourceError(f"source {path}:{number}: not JSON ({error})") from None
            if not isinstance(row, dict):
                raise SourceError(f"source {path}:{number}: expected a JSON object, got {type(row).__name__}")
            yield row


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
    total = sum(counts) if all(c is not None for c in counts) else None  # type: ignore[misc]

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


# ---------------------------------------------------------------------------
# prepare


@dataclass(frozen=True)
class PrepareReport:
    paths: DataPaths
    database: BuildReport | None  # None: kept
    scenarios: dict[str, int] | None  # per split; None: kept
    unanswerable: dict[str, int]  # scenarios whose answer email is not in the database
    seconds: float


def write_scenarios(path: Path, scenarios: Iterable[Scenario]) -> None:
    """Write a scenario file atomically: a temporary file in the same folder, renamed when complete."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_file(path, ".tmp")  # group-readable, like the database: the data dir is shared
    try:
        with open(tmp, "w", encoding="utf-8") as out:
            for scenario in scenarios:
                out.write(json.dumps(scenario.to_row(), ensure_ascii=False) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def prepare(data_dir: Path, emails: str, questions: str, *, force: bool = False,
            show_progress: bool = True) -> PrepareReport:
    """Stage the email database and the scenario files into ``data_dir``.

    Sources are checked (and the questions read) before the database is built,
    so bad input fails fast; outputs appear only when complete."""
    start = time.perf_counter()
    paths = data_paths(data_dir)
    build_db = force or not paths.db.exists()
    write_files = force or not all(paths.scenarios(split).exists() for split in SPLITS)
    scenarios = question_rows(resolve_source(questions)) if write_files else None
    email_source = resolve_source(emails) if build_db else None
    rows, total = email_rows(email_source) if email_source is not None else ((), None)
    paths.data_dir.mkdir(parents=True, exist_ok=True)
    report = None
    if email_source is not None:
        try:
            report = build_database(rows, paths.db, force=True, show_progress=show_progress, total=total)
        except ValueError as error:  # a malformed row
            raise SourceError(f"emails source {email_source.describe()}: {error}") from None
    if scenarios is not None:
        for split in SPLITS:
            write_scenarios(paths.scenarios(split), scenarios[split])
    return PrepareReport(paths, report, {s: len(v) for s, v in scenarios.items()} if scenarios else None,
                         _unanswerable(paths), time.perf_counter() - start)


def _unanswerable(paths: DataPaths) -> dict[str, int]:
    """Per split, scenarios naming an email the database does not have (filtered out, or another corpus)."""
    from trainer.agent.email_db import EmailDB
    from trainer.agent.scenarios import read_scenario_file

    counts: dict[str, int] = {}
    try:
        with EmailDB(paths.db) as db:
            for split in SPLITS:
                scenarios = read_scenario_file(paths.scenarios(split), split)
                counts[split] = sum(1 for s in scenarios if any(db.read(m) is None for m in s.message_ids))
    except ValueError as error:  # staged by another version, or damaged: the message says to --force
        raise SourceError(str(error)) from None
    return counts


def format_report(report: PrepareReport, emails: str, questions: str) -> list[str]:
    paths, db = report.paths, report.database
    lines = [f"data dir:  {paths.data_dir}"]
    if db is None:
        lines.append(f"database:  {paths.db} exists, kept (--force rebuilds it)")
    else:
        lines.append(f"database:  {paths.db} built from {emails} in {db.seconds:.1f} s: {db.inserted:,} emails; "
                     f"skipped {db.skipped_long:,} with bodies over {MAX_BODY_CHARS} characters, "
                     f"{db.skipped_recipients:,} with over {MAX_RECIPIENTS} recipients, "
                     f"{db.skipped_duplicates:,} duplicates")
    if report.scenarios is None:
        lines.append(f"scenarios: {paths.scenarios_dir} exists, kept (--force rewrites it)")
    else:
        counts = ", ".join(f"{paths.scenarios(s).name} {n:,}" for s, n in report.scenarios.items())
        lines.append(f"scenarios: {paths.scenarios_dir}: {counts} (from {questions})")
    missing = ", ".join(f"{n:,} {s}" for s, n in report.unanswerable.items())
    if any(report.unanswerable.values()):
        lines.append(f"warning:   scenarios whose answer email is not in the database: {missing}")
    lines.append(f"done in {report.seconds:.1f} s")
    return lines


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m trainer.data",
        description="Stage ART-E's data: the Enron email database and the question scenarios. Run it on a "
                    "machine with internet (a login node) before jobs run on offline compute nodes.",
        epilog=f"SRC is {', '.join(SOURCE_FORMS)}. Existing outputs are kept unless --force.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="command")
    prepare_cmd = commands.add_parser(
        "prepare", help="build the email database and write the scenario files into the data dir",
        description="Build <data_dir>/" + DB_FILENAME + " and <data_dir>/scenarios/{train,test}.jsonl.",
        epilog=f"SRC is {', '.join(SOURCE_FORMS)}. Existing outputs are kept unless --force.")
    prepare_cmd.add_argument("--data_dir", type=Path, default=None,
                             help="where to write (default: $DATA_DIR, else <repo>/data)")
    prepare_cmd.add_argument("--emails", default=DEFAULT_EMAILS, metavar="SRC",
                             help=f"the emails (default: {DEFAULT_EMAILS})")
    prepare_cmd.add_argument("--questions", default=DEFAULT_QUESTIONS, metavar="SRC",
                             help=f"the questions, train and test (default: {DEFAULT_QUESTIONS})")
    prepare_cmd.add_argument("--force", action="store_true", help="rebuild the database and rewrite the scenarios")
    prepare_cmd.add_argument("--quiet", action="store_true", help="no progress bars")
    stage_cmd = commands.add_parser(
        "stage-model", help="download every model repository a training job loads into the HF cache",
        description="Download the base model (served by vLLM) and the 4-bit repository Unsloth trains on "
                    "into the Hugging Face cache the cluster's jobs use, for compute nodes without internet.")
    stage_cmd.add_argument("--config", default="agent_008", help="trainer config whose base_model to stage")
    stage_cmd.add_argument("--base_model", default=None, help="stage this model instead of the config's")
    stage_cmd.add_argument("--judge_model", default=None,
                           help="also stage this judge served in the job (default: JUDGE_SERVE_MODEL of this "
                                "cluster's dotenv, if any; see --judge_serve of hpc.launch)")
    stage_cmd.add_argument("--hf_home", type=Path, default=None,
                           help="Hugging Face home (default: $HF_HOME, else HF_HOME of this cluster's dotenv)")
    make_cmd = commands.add_parser(
        "make-model", help="write a random Qwen2-architecture model with a tokenizer trained on the emails",
        description="Write a Hugging Face model folder made here (no download): random Qwen2 weights, a BPE "
                    "tokenizer trained on the staged emails, Qwen2.5's chat template and tool-call tokens. "
                    "Use it as base_model to check a cluster's GPU stack (trainer/staging/model_maker.py; the "
                    "architectures are trainer/staging/model_sizes.yaml).")
    make_cmd.add_argument("out", type=Path, metavar="DIR", help="the model folder to write")
    make_cmd.add_argument("--size", default="small", help="an architecture of trainer/staging/model_sizes.yaml: "
                          "tiny (about 5 MB), small (about 25 MB, default), qwen2.5-14b (agent_008's, 29.5 GB) ...")
    make_cmd.add_argument("--data_dir", type=Path, default=None,
                          help="the staged data whose emails train the tokenizer (default: $DATA_DIR, else <repo>/data)")
    make_cmd.add_argument("--seed", type=int, default=0, help="seed of the random weights (default 0)")
    inbox_cmd = commands.add_parser(
        "make-inboxes", help="write synthetic inboxes and questions (emails.jsonl, questions.jsonl) for prepare",
        description="Write a task a made model can learn: inboxes whose questions are answered by one email each "
                    "(a random 5-digit number), split by inbox into train and test "
                    "(trainer/staging/synthetic_inbox.py). Stage them with prepare --emails DIR/emails.jsonl "
                    "--questions DIR/questions.jsonl.")
    inbox_cmd.add_argument("out", type=Path, metavar="DIR", help="the folder to write emails.jsonl and questions.jsonl in")
    inbox_cmd.add_argument("--seed", type=int, default=0, help="the generator's seed (default 0)")
    inbox_cmd.add_argument("--train_inboxes", type=int, default=600, help="inboxes of the train split (default 600)")
    inbox_cmd.add_argument("--heldout_inboxes", type=int, default=60, help="inboxes of the test split (default 60)")
    return parser


def make_model_folder(args: argparse.Namespace) -> list[str]:
    """``make-model``: the folder, and one line saying what it holds."""
    from trainer.staging.model_maker import corpus, make_model

    data_dir = args.data_dir if args.data_dir is not None else default_data_dir()
    made = make_model(args.out, corpus(data_paths(data_dir).db), args.size, args.seed)
    return [f"model:      {made.path} ({made.size}: {made.parameters / 1e6:.1f}M parameters, vocabulary "
            f"{made.vocab_size}, {made.weight_bytes / 2**20:.1f} MiB of bf16 weights written in {made.weight_seconds:.1f} s "
            f"({made.values_from}); tokenizer of {made.tokenizer_tokens} tokens trained on {made.corpus_texts:,} texts)",
            f"use it:     --train_arg base_model={made.path}"]


def make_inboxes(args: argparse.Namespace) -> list[str]:
    """``make-inboxes``: the generator's files, and what they hold."""
    from trainer.staging.synthetic_inbox import generate, leaks, write

    corpus = generate(args.seed, args.train_inboxes, args.heldout_inboxes)
    emails, questions = write(corpus, args.out)
    counts = {split: len(corpus.split_questions(split)) for split in ("train", "test")}
    return [f"inboxes:    {emails} ({len(corpus.emails):,} emails) and {questions} ({counts['train']:,} train, "
            f"{counts['test']:,} test questions; seed {args.seed})",
            f"split:      {args.train_inboxes} train and {args.heldout_inboxes} held-out inboxes; "
            f"{len(leaks(corpus))} held-out inboxes, questions or answers in the train split",
            f"stage them: python -m trainer.data prepare --emails {emails} --questions {questions}"]


def stage_models(args: argparse.Namespace) -> list[str]:
    """``stage-model``: the repositories of the config's base model, into the jobs' HF cache."""
    from trainer.training.config import load_config
    from trainer.staging.model_cache import Repo, hub_cache, required_repos, stage

    base_model = args.base_model or load_config(args.config).base_model
    hf_home = args.hf_home or cluster_setting("HF_HOME", "--hf_home")
    env = {**os.environ, **({"HF_HOME": str(hf_home)} if hf_home else {})}
    env.pop("HF_HUB_OFFLINE", None)
    hub = hub_cache(env)
    repos = required_repos(base_model)
    judge = args.judge_model or cluster_setting("JUDGE_SERVE_MODEL", "--judge_model")
    if judge and not Path(judge).is_dir():
        repos.append(Repo(judge, "vLLM serves it as the judge inside the job (--judge_serve)"))
    return [f"HF cache:   {hub}", *stage(repos, hub)]


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from trainer.staging.model_maker import ModelMakerError

    from trainer.staging.synthetic_inbox import SyntheticInboxError

    commands = {"stage-model": stage_models, "make-model": make_model_folder, "prepare": prepare_data,
                "make-inboxes": make_inboxes}
    try:
        lines = commands[args.command](args)
    except (SourceError, ConfigError, ModelMakerError, SyntheticInboxError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for line in lines:
        print(line)
    return 0


def prepare_data(args: argparse.Namespace) -> list[str]:
    data_dir = args.data_dir if args.data_dir is not None else default_data_dir()
    report = prepare(data_dir, args.emails, args.questions, force=args.force, show_progress=not args.quiet)
    return format_report(report, args.emails, args.questions)


if __name__ == "__main__":
    sys.exit(main())
