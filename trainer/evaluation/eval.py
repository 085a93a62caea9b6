"""Evaluate any model on a split: ``python -m trainer.eval``.

    python -m trainer.eval --model openai/o3 --model gemini/gemini-2.5-pro --run agent_008
    python -m trainer.eval --model run:agent_008@all            # on a GPU node (a job, see below)
    python -m trainer.eval --config agent_008 models=run:agent_008@all split=test   # as a job's workload

Each model answers the split's questions (default: the ``val_set_size`` validation
questions training validates on) through the training agent, tools, database and
judge (``trainer.evaluation.engine``), so baselines and checkpoints are comparable. A
model is any name ``trainer.serving.policy`` reads: a litellm model (from a login node: it
needs no GPU), ``url:BASE#MODEL``, ``base[:HF_ID]``, or ``run:NAME[@STEP|@all]``
(served by vLLM on this node's GPU: ``trainer.serving.vllm_server``). As a job:

    python -m hpc.launch --job_name agent_008_eval --time_limit 2:00:00 \
        --entrypoint trainer.eval --train_arg models=run:agent_008@all

Results: ``<run>/evaluations/<split key>/<model>/records.jsonl`` (per question:
question, expected and given answer, correct, sources found/read, turns,
latency, tokens) and ``summary.json``, in the evaluated run's directory (a
checkpoint), or ``--run``'s (baselines to compare a run with), else
``<runs dir>/evaluations``. A model already evaluated on the same questions
with the same judge is not run again unless ``--force``; a question that failed
(the model or the judge did not answer) is never a result kept: the next run asks
it again, and only it. A key that a model or the judge needs and that is not set
is one line (exit 2) before any question is asked.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from hpc.job.exit_codes import EXIT_BAD_INPUT
from hpc.job.workload_env import HPC_RUN_DIR
from hpc.run import fields as kinds
from hpc.run.best import NoBest, best_checkpoint
from hpc.run.checkpoints import is_complete, latest_complete, list_checkpoints
from hpc.run.records import read_json, read_jsonl
from hpc.run.rundir import RUN_NAME_ACCEPTED, RunDir, is_run_name, utc_now
from hpc.run.safe_io import OutsideRun, write_json_atomic, write_jsonl_atomic
from trainer.agent.email_db import EmailDB
from trainer.agent.judge import Judge, missing_keys, use_bundled_price_table
from trainer.agent.rollout import AgentConfig
from trainer.agent.scenarios import SPLITS, load_scenarios
from trainer.evaluation.engine import QuestionResult, evaluate, inbox_domain, records, split_key, summarize
from trainer.serving.policy import PolicyError, PolicySpec, base_model_for, open_policy, parse_policy, served_name
from trainer.serving.vllm_server import ServerError, ServerSpec, VLLMServer, free_port
from trainer.staging.data import cluster_runs_dir, default_data_dir
from trainer.staging.sources import SourceError
from trainer.training.config import ConfigError, TrainerConfig, load_config

if TYPE_CHECKING:
    from trainer.agent.scenarios import Scenario

log = logging.getLogger("trainer.eval")
EVAL_KEYS = ("models", "split", "limit", "concurrency", "run", "force")


class EvalError(Exception):
    """Something to tell the user in one line (exit 2)."""


@dataclass
class EvalPlan:
    """What to evaluate, on what, and where the results go."""

    config_name: str
    config: TrainerConfig
    models: list[PolicySpec]
    split: str = "test"
    limit: int | None = None
    concurrency: int | None = None
    run: str | None = None
    force: bool = False
    runs_dir: Path = field(default_factory=Path)
    data_dir: Path = field(default_factory=Path)


# -- where things are --------------------------------------------------------------------


def slug(label: str) -> str:
    """A model's label as one folder name (never '.' or '..')."""
    name = re.sub(r"[^A-Za-z0-9._@-]+", "_", label)
    return name.replace(".", "_") if set(name) <= {"."} else name


@dataclass(frozen=True)
class Results:
    """Where a model's results on a split go: ``folder``, inside ``root`` (the owning run's directory,
    or the runs directory's ``evaluations``), reached without following a link below it."""

    root: Path
    folder: Path

    def read_summary(self) -> dict[str, Any] | None:
        return read_json(self.folder / "summary.json", self.root, kinds.EVALUATION)

    def kept(self, judge_model: str) -> dict[int, QuestionResult]:
        """The questions answered and judged last time by this judge (a failed one is asked again)."""
        summary = self.read_summary()
        if summary is None or summary.get("judge_model") != judge_model:
            return {}
        found = (answered(record) for record in read_jsonl(self.folder / "records.jsonl", self.root))
        return {result.id: result for result in found if result is not None}

    def write(self, records: list[dict[str, Any]], summary: dict[str, Any]) -> None:
        write_jsonl_atomic(self.folder / "records.jsonl", records, self.root)
        write_json_atomic(self.folder / "summary.json", summary, root=self.root)


def answered(record: dict[str, Any]) -> QuestionResult | None:
    """A record of records.jsonl as a result, if it is one of a question answered and judged."""
    try:
        result = QuestionResult(**record)
    except TypeError:  # another version's fields
        return None
    ok = isinstance(result.id, int) and result.error is None and result.judge_failed is False
    return result if ok and isinstance(result.correct, bool) else None


def results_dir(plan: EvalPlan, spec: PolicySpec, key: str) -> Results:
    """A checkpoint's results live in its run; others in --run's, else the runs dir's."""
    owner = spec.name if spec.kind == "checkpoint" else plan.run
    root = RunDir(plan.runs_dir / owner).path if owner else plan.runs_dir / "evaluations"
    base = RunDir(root).evaluations_dir if owner else root
    return Results(root, base / key / slug(spec.label))


def already_done(results: Results, judge_model: str, force: bool) -> dict[str, Any] | None:
    """The summary of an evaluation by this judge in which every question was answered and judged."""
    summary = results.read_summary()
    if force or summary is None or summary.get("judge_model") != judge_model:
        return None
    return summary if not summary.get("failed") and not summary.get("judge_failed") else None


# -- checkpoints ---------------------------------------------------------------------------


def checkpoint_steps(plan: EvalPlan, spec: PolicySpec) -> list[tuple[int, Path]]:
    """(step, adapter folder) for ``run:NAME@STEP|latest|best|all``: complete checkpoints only."""
    run = RunDir(plan.runs_dir / spec.name)
    record = run.read_model_record()
    if record is None:
        raise EvalError(f"run {spec.name} has no model.json under {plan.runs_dir}: not a launched run")
    model_dir = Path(record["model_dir"])
    if spec.step == "best":
        try:
            best = best_checkpoint(run, model_dir)
        except NoBest as error:
            raise EvalError(str(error)) from None
        return [(best.step, best.path)]
    complete = [c for c in list_checkpoints(model_dir) if is_complete(c.path)]
    if spec.step == "all":
        chosen = complete
    elif spec.step == "latest":
        chosen = [c for c in [latest_complete(model_dir)] if c is not None]
    else:
        chosen = [c for c in complete if c.step == int(cast(str, spec.step))]  # a checkpoint spec has its step
    if not chosen:
        have = ", ".join(str(c.step) for c in complete) or "none"
        raise EvalError(f"run {spec.name} has no complete checkpoint for @{spec.step} (complete: {have})")
    return [(c.step, c.path) for c in chosen]


def expand(plan: EvalPlan) -> list[tuple[PolicySpec, Path | None]]:
    """Every model to ask, with the adapter folder vLLM must load (checkpoints), in order."""
    expanded: list[tuple[PolicySpec, Path | None]] = []
    for spec in plan.models:
        if spec.kind == "checkpoint":
            expanded += [(PolicySpec("checkpoint", spec.name, step=str(step)), path)
                         for step, path in checkpoint_steps(plan, spec)]
        else:
            expanded.append((spec, None))
    return expanded


# -- running ---------------------------------------------------------------------------------


async def evaluate_one(plan: EvalPlan, spec: PolicySpec, scenarios: list["Scenario"], key: str,
                       policy: Any, judge: Any) -> dict[str, Any]:
    config = plan.config
    agent = AgentConfig(max_turns=config.max_turns, max_tokens=config.max_tokens,
                        tool_calling=config.tool_calling, temperature=config.temperature)
    where = results_dir(plan, spec, key)
    kept = {} if plan.force else where.kept(judge.model)
    asked = [s for s in scenarios if s.id not in kept]
    if kept:
        log.info("%s: %d question(s) kept from the last run, asking the %d that failed", spec.label, len(kept), len(asked))
    with EmailDB(plan.data_dir / "enron_emails.db") as db:
        fresh = await evaluate(policy, asked, db=db, judge=judge, agent=agent,
                               concurrency=plan.concurrency or config.eval_concurrency)
    assert fresh is not None  # no stop event: the evaluation always completes
    by_id = {**kept, **{r.id: r for r in fresh}}
    results = [by_id[s.id] for s in scenarios]
    summary = {"model": spec.label, "kind": spec.kind, "split": plan.split, "split_key": key,
               "inbox_domain": inbox_domain(scenarios), "judge_model": judge.model, **summarize(results), "time": utc_now()}
    where.write(records(results), summary)
    log.info("%s: accuracy %.3f on %d questions (%s)", spec.label, summary["accuracy"], len(results), where.folder)
    return summary


async def run_plan(plan: EvalPlan) -> list[dict[str, Any]]:
    scenarios = load_scenarios(plan.data_dir, plan.split, limit=plan.limit or plan.config.val_set_size,
                               max_messages=plan.config.max_messages, shuffle=False)
    if not scenarios:
        raise EvalError(f"no {plan.split} scenarios in {plan.data_dir}: stage them with python -m trainer.data prepare")
    key = split_key(plan.split, scenarios)
    judge = Judge.from_env(plan.runs_dir / "evaluations" / "judge_cache", plan.config.judge_concurrency,
                           plan.config.judge_retries)
    todo, summaries = [], []
    for spec, adapter in expand(plan):
        done = already_done(results_dir(plan, spec, key), judge.model, plan.force)
        if done is not None:
            log.info("%s: already evaluated on %s with %s (--force runs it again)", spec.label, key, judge.model)
            summaries.append(done)
        else:
            todo.append((spec, adapter))
    check_keys([spec for spec, _ in todo], judge)
    for spec, _ in [t for t in todo if t[1] is None and t[0].kind != "base"]:
        summaries.append(await evaluate_one(plan, spec, scenarios, key, open_policy(spec), judge))
    served = [t for t in todo if t[1] is not None or t[0].kind == "base"]
    if served:
        summaries += await evaluate_served(plan, served, scenarios, key, judge)
    return summaries


def check_keys(specs: list[PolicySpec], judge: Any) -> None:
    """Every key the models to ask and their judge need, before any question (EvalError: one line)."""
    if not specs:
        return
    needs = [(f"the judge {judge.model}", missing_keys(judge.model, judge.api_base), "or set JUDGE_API_BASE")]
    needs += [(spec.label, missing_keys(spec.name), "") for spec in specs if spec.kind == "litellm"]
    for who, missing, other in needs:
        if missing:
            raise EvalError(f"no key for {who}: {' or '.join(missing)} is not set (put it in .env{', ' + other if other else ''}); "
                            "nothing was asked")


async def evaluate_served(plan: EvalPlan, served: list[tuple[PolicySpec, Path | None]],
                          scenarios: list["Scenario"], key: str, judge: Any) -> list[dict[str, Any]]:
    """Checkpoints and the base model: one vLLM server on this node with every adapter."""
    adapters = {served_name(spec): path for spec, path in served if path is not None}
    spec = ServerSpec(base_model_for(plan.config.base_model, list(adapters.values())), adapters, port=free_port(),
                      max_model_len=plan.config.max_seq_length, fast_start=plan.config.vllm_fast_start)
    log_path = plan.runs_dir / "evaluations" / "vllm" / f"vllm-{os.getpid()}.log"
    summaries = []
    with VLLMServer(spec, log_path) as server:
        for model, _ in served:
            policy = open_policy(model, base_url=server.base_url)
            summaries.append(await evaluate_one(plan, model, scenarios, key, policy, judge))
    return summaries


# -- command line ----------------------------------------------------------------------------


def parse_args(argv: list[str]) -> EvalPlan:
    parser = argparse.ArgumentParser(prog="python -m trainer.eval", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="agent_008", help="trainer config: agent settings, judge, base model")
    parser.add_argument("--model", action="append", default=[], help="a model to evaluate (repeatable)")
    parser.add_argument("--split", default=None, help="train or test (default: test)")
    parser.add_argument("--limit", type=int, default=None, help="questions (default: the config's val_set_size)")
    parser.add_argument("--concurrency", type=int, default=None, help="questions in flight (default: eval_concurrency)")
    parser.add_argument("--run", default=None, help="store results of non-checkpoint models in this run's directory")
    parser.add_argument("--force", action="store_true", help="evaluate again what was already evaluated")
    parser.add_argument("settings", nargs="*", metavar="key=value",
                        help=f"{', '.join(EVAL_KEYS)} (models comma-separated), or a trainer config key")
    args = parser.parse_args(argv)
    settings, overrides = split_settings(args.settings)
    try:
        config = load_config(args.config, overrides)
    except ConfigError as error:
        raise EvalError(str(error)) from None
    names = args.model + [m for m in settings.get("models", "").split(",") if m]
    if not names:
        raise EvalError("no model to evaluate: give --model NAME (or models=NAME,...)")
    return EvalPlan(
        config_name=args.config, config=config,
        models=[parse_policy(name, config.base_model) for name in names],
        split=split_of(args.split if args.split is not None else settings.get("split", "test")),
        limit=at_least_one("limit", args.limit, settings), concurrency=at_least_one("concurrency", args.concurrency, settings),
        run=run_of(args.run if args.run is not None else settings.get("run")),
        force=args.force or settings.get("force", "").lower() in ("1", "true", "yes"),
        runs_dir=default_runs_dir(), data_dir=data_dir(),
    )


def split_of(split: str) -> str:
    if split not in SPLITS:
        raise EvalError(f"invalid split {split!r}: accepted {' or '.join(SPLITS)}")
    return split


def at_least_one(key: str, flag: int | None, settings: dict[str, str]) -> int | None:
    """--KEY N or KEY=N: a whole number >= 1, or None (the config's)."""
    if flag is not None and flag < 1:
        raise EvalError(f"invalid --{key} {flag}: expected an integer >= 1")
    return flag if flag is not None else int_setting(settings, key)


def run_of(run: str | None) -> str | None:
    """--run: the name of a run directory under the runs directory, where results go."""
    if run is not None and not is_run_name(run):
        raise EvalError(f"invalid --run {run!r}: a run's name, {RUN_NAME_ACCEPTED}")
    return run


def split_settings(pairs: list[str]) -> tuple[dict[str, str], list[str]]:
    settings, overrides = {}, []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise EvalError(f"invalid argument {pair!r}: expected key=value")
        if key in EVAL_KEYS:
            settings[key] = value
        else:
            overrides.append(pair)
    return settings, overrides


def int_setting(settings: dict[str, str], key: str) -> int | None:
    if key not in settings:
        return None
    value = settings[key]
    if not (value.isascii() and value.isdigit()) or int(value) < 1:
        raise EvalError(f"invalid {key}={value!r}: expected an integer >= 1")
    return int(value)


def default_runs_dir() -> Path:
    """In a job, the runs directory its run lives in; else RUNS_DIR as the launcher finds it."""
    if os.environ.get(HPC_RUN_DIR):
        return Path(os.environ[HPC_RUN_DIR]).parent

    return cluster_runs_dir()


def data_dir() -> Path:
    return default_data_dir()


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s [%(name)s] %(message)s", datefmt="%H:%M:%S")
    for noisy in ("httpx", "LiteLLM", "litellm", "openai"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    use_bundled_price_table()
    try:
        plan = parse_args(sys.argv[1:] if argv is None else argv)
        summaries = asyncio.run(run_plan(plan))
    except (EvalError, PolicyError) as error:
        print(f"trainer.eval: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OutsideRun as error:  # a link where results go: a run's files stay inside it
        print(f"trainer.eval: error: {error.filename}: {error.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as error:  # e.g. the data or vLLM: one line, the log has the rest
        if not isinstance(error, (SourceError, ServerError, OSError)):
            raise
        print(f"trainer.eval: error: {error}", file=sys.stderr)
        return 1
    print(format_table(summaries))
    return failures_said(summaries)


def failures_said(summaries: list[dict[str, Any]]) -> int:
    """One line when questions failed (kept as no result: the same command asks them again);
    exit 1 when every question of a model failed, else 0."""
    failed = sum(s.get("failed", 0) + s.get("judge_failed", 0) for s in summaries)
    if failed:
        print(f"trainer.eval: {failed} question(s) failed (the model or the judge did not answer; their errors are "
              "in records.jsonl): not kept as results, the same command asks them again", file=sys.stderr)
    return 1 if any(s.get("failed", 0) + s.get("judge_failed", 0) >= s.get("questions", 0) > 0 for s in summaries) else 0


def format_table(summaries: list[dict[str, Any]]) -> str:
    rows = [f"{'model':40} {'accuracy':>8} {'idk':>6} {'wrong':>6} {'turns':>6} {'failed':>6}"]
    for s in summaries:
        rows.append(f"{s['model'][:40]:40} {s['accuracy']:8.3f} {s.get('i_dont_know_rate', 0):6.3f} "
                    f"{s.get('wrong_answer_rate', 0):6.3f} {s.get('mean_turns', 0):6.2f} {s.get('failed', 0):6d}")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
