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
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from hpc.job.exit_codes import EXIT_BAD_INPUT
from hpc.job.workload_env import REPO_DIR
from trainer.agent.email_db import DB_FILENAME, MAX_BODY_CHARS, MAX_RECIPIENTS, EmailDB
from trainer.agent.email_db_build import BuildReport, build_database, temporary_file
from trainer.agent.scenarios import SCENARIOS_DIRNAME, SPLITS, Scenario, read_scenario_file, scenario_file
from trainer.staging.model_cache import Repo, hub_cache, required_repos, stage
from trainer.staging.sources import SOURCE_FORMS, SourceError, email_rows, question_rows, resolve_source
from trainer.training.config import ConfigError, load_config

DEFAULT_EMAILS = "corbt/enron-emails"
DEFAULT_QUESTIONS = "corbt/enron_emails_sample_questions"


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
    return Path(value) if value else REPO_DIR / "data"


def cluster_setting(name: str, flag: str | None = None) -> str | None:
    """``$name`` from the shell (a job has it from the launcher), else as this cluster's
    dotenv files set it for its jobs: staging on a login node writes where jobs will look.
    ``flag`` is the option that sets it instead, named in the error."""
    value = os.environ.get(name)
    if value:
        return value
    # The launcher's cluster table, only outside a job and only here: the trainer never imports the launcher
    from hpc.errors import UsageError
    from hpc.launcher.clusters import load_registry
    from hpc.launcher.jobspec import dotenv_setting

    try:
        return dotenv_setting(name, load_registry().detect().cluster)
    except UsageError as error:  # e.g. ${SCRATCH} not set in this shell
        raise SourceError(f"cannot work out {name} from the dotenv files: {error}; "
                          f"set {name}" + (f" or pass {flag}" if flag else "")) from None


def cluster_runs_dir() -> Path:
    """``$RUNS_DIR`` from the shell, else the runs directory hpc.launch uses on this cluster (its own
    lookup: hpc.launcher.jobspec.runs_dir_here), for the trainer's tools run outside a job."""
    value = os.environ.get("RUNS_DIR")
    if value:
        return Path(value)
    from hpc.errors import UsageError
    from hpc.launcher.jobspec import runs_dir_here

    try:
        return runs_dir_here()
    except UsageError as error:
        raise SourceError(f"cannot work out RUNS_DIR from the dotenv files: {error}; set RUNS_DIR") from None


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
    prepare_cmd.add_argument("--data_dir", default=None,
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
    make_cmd.add_argument("--data_dir", default=None,
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
    inbox_cmd.add_argument("--warmup_inboxes", type=int, default=0,
                           help="inboxes for the warm-up alone, made before the train split's, written to "
                                "DIR/warmup/questions.jsonl to stage into a data dir of their own (default 0)")
    return parser


def make_model_folder(args: argparse.Namespace) -> list[str]:
    """``make-model``: the folder, and one line saying what it holds."""
    from trainer.staging.model_maker import corpus, make_model  # numpy and tokenizers: make-model's alone

    data_dir = chosen_data_dir(args.data_dir)
    made = make_model(args.out, corpus(data_paths(data_dir).db), args.size, args.seed)
    return [f"model:      {made.path} ({made.size}: {made.parameters / 1e6:.1f}M parameters, vocabulary "
            f"{made.vocab_size}, {made.weight_bytes / 2**20:.1f} MiB of bf16 weights written in {made.weight_seconds:.1f} s "
            f"({made.values_from}); tokenizer of {made.tokenizer_tokens} tokens trained on {made.corpus_texts:,} texts)",
            f"use it:     --train_arg base_model={made.path}"]


def make_inboxes(args: argparse.Namespace) -> list[str]:
    """``make-inboxes``: the generator's files, and what they hold."""
    from trainer.staging.synthetic_inbox import WARMUP, generate, leaks, warmup_questions, write

    corpus = generate(args.seed, args.train_inboxes, args.heldout_inboxes, args.warmup_inboxes)
    emails, questions = write(corpus, args.out)
    counts = {split: len(corpus.split_questions(split)) for split in ("train", "test", WARMUP)}
    lines = [f"inboxes:    {emails} ({len(corpus.emails):,} emails) and {questions} ({counts['train']:,} train, "
             f"{counts['test']:,} test questions; seed {args.seed})",
             f"split:      {args.train_inboxes} train and {args.heldout_inboxes} held-out inboxes"
             + (f", {args.warmup_inboxes} the warm-up's" if args.warmup_inboxes else "")
             + f"; {len(leaks(corpus))} held-out inboxes, questions or answers in the train split"
             + (" or the warm-up's, or inboxes in both" if args.warmup_inboxes else ""),
             f"stage them: python -m trainer.data prepare --emails {emails} --questions {questions}"]
    if args.warmup_inboxes:
        warmup = warmup_questions(args.out)
        lines += [f"warm-up:    {warmup} ({counts[WARMUP]:,} questions as its train split, the test split's as its "
                  f"test); stage them: python -m trainer.data prepare --data_dir WARMUP_DIR --emails {emails} "
                  f"--questions {warmup}"]
    return lines


def stage_models(args: argparse.Namespace) -> list[str]:
    """``stage-model``: the repositories of the config's base model, into the jobs' HF cache."""
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


def chosen_data_dir(given: str | None) -> Path:
    """--data_dir (a folder, or one to be made), else the default. An empty one is refused: Path('')
    is the current folder, where the database would land unasked."""
    if given is None:
        return default_data_dir()
    if not given.strip() or any(not c.isprintable() for c in given):
        raise SourceError(f"bad --data_dir {given!r} (accepted: a folder path, made if missing)")
    path = Path(given)
    existing = next(p for p in (path, *path.absolute().parents) if p.exists())
    if not existing.is_dir():
        where = "is not a folder" if existing == path else f"is under {existing}, which is not a folder"
        raise SourceError(f"bad --data_dir {given!r}: it {where} (accepted: a folder path, made if missing)")
    return path


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from trainer.staging.model_maker import ModelMakerError  # numpy and tokenizers: make-model's alone
    from trainer.staging.synthetic_inbox import SyntheticInboxError

    commands = {"stage-model": stage_models, "make-model": make_model_folder, "prepare": prepare_data,
                "make-inboxes": make_inboxes}
    try:
        lines = commands[args.command](args)
    except (SourceError, ConfigError, ModelMakerError, SyntheticInboxError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as error:  # a folder not writable, a disk full: one line, not a traceback
        print(f"error: {error.filename or ''}: {error.strerror or error}", file=sys.stderr)
        return 1
    for line in lines:
        print(line)
    return 0


def prepare_data(args: argparse.Namespace) -> list[str]:
    data_dir = chosen_data_dir(args.data_dir)
    report = prepare(data_dir, args.emails, args.questions, force=args.force, show_progress=not args.quiet)
    return format_report(report, args.emails, args.questions)


if __name__ == "__main__":
    sys.exit(main())
