"""Evaluating a model on a split: the agent loop on each question, judged, in records.

One engine serves validation during training (``trainer.training.validation``), the
``python -m trainer.eval`` command (a checkpoint, the base model, o3...) and
the report: every model is asked through the same loop, tools, database and
judge, so its accuracy is comparable with the trained agent's and with ART-E's
published figures (96% trained Qwen2.5-14B, o3 90%, on 100 validation
questions).

Questions run concurrently up to a bound; a question whose rollout raises (the
model's server failed) is recorded as failed, with the error, and counts as not
correct: one bad question never ends an evaluation. A stop request cancels the
questions in flight and returns None: a partial evaluation is never recorded.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from trainer.agent.rollout import rollout

if TYPE_CHECKING:
    import art

    from trainer.agent.email_db import EmailDB
    from trainer.agent.judge import Judge
    from trainer.agent.rollout import AgentConfig
    from trainer.agent.scenarios import Scenario

TOOL_ERRORS = ("cant_parse_tool_call", "bad_tool_call_name", "bad_tool_call_args")


@dataclass(frozen=True)
class QuestionResult:
    """One question's record (a line of the per-question file)."""

    id: int
    question: str
    expected: str
    answer: str | None
    correct: bool
    i_dont_know: bool
    sources: list[str]
    found_source: bool
    read_source: bool
    turns: int
    latency_s: float
    prompt_tokens: int
    completion_tokens: int
    reward: float
    tool_error: bool
    judge_failed: bool
    error: str | None = None  # the rollout raised: counted as not correct

    @property
    def wrong(self) -> bool:
        """Answered, and wrong: not the honest "I don't know", not a failure to answer."""
        return self.answer is not None and not self.correct and not self.i_dont_know


def result_of(scenario: "Scenario", trajectory: "art.Trajectory", latency: float) -> QuestionResult:
    m, meta = trajectory.metrics, trajectory.metadata
    return QuestionResult(
        id=scenario.id, question=scenario.question, expected=scenario.answer,
        answer=meta.get("final_answer"), correct=bool(m.get("answer_correct", 0)),
        i_dont_know=bool(m.get("returned_i_dont_know", 0)), sources=json.loads(meta.get("final_sources") or "[]"),
        found_source=bool(m.get("ever_found_right_email", 0)), read_source=bool(m.get("ever_read_right_email", 0)),
        turns=int(m.get("num_turns", 0)), latency_s=round(latency, 3), prompt_tokens=int(m.get("prompt_tokens", 0)),
        completion_tokens=int(m.get("completion_tokens", 0)), reward=float(trajectory.reward),
        tool_error=any(bool(m.get(key, 0)) for key in TOOL_ERRORS), judge_failed=bool(meta.get("judge_failed")),
    )


def failed_result(scenario: "Scenario", error: BaseException, latency: float) -> QuestionResult:
    return QuestionResult(
        id=scenario.id, question=scenario.question, expected=scenario.answer, answer=None, correct=False,
        i_dont_know=False, sources=[], found_source=False, read_source=False, turns=0,
        latency_s=round(latency, 3), prompt_tokens=0, completion_tokens=0, reward=0.0, tool_error=False,
        judge_failed=False, error=f"{type(error).__name__}: {' '.join(str(error).split())}"[:500],
    )


async def ask(policy: Any, scenario: "Scenario", *, db: "EmailDB", judge: "Judge", agent: "AgentConfig",
              slots: asyncio.Semaphore) -> QuestionResult:
    async with slots:
        began = time.monotonic()
        try:
            trajectory = await rollout(policy, scenario, db=db, judge=judge, config=agent)
        except Exception as error:  # noqa: BLE001 - recorded, not fatal: the evaluation goes on
            return failed_result(scenario, error, time.monotonic() - began)
        return result_of(scenario, trajectory, time.monotonic() - began)


async def evaluate(policy: Any, scenarios: list["Scenario"], *, db: "EmailDB", judge: "Judge",
                   agent: "AgentConfig", concurrency: int,
                   stop: "asyncio.Event | None" = None) -> list[QuestionResult] | None:
    """Every scenario's result, in the scenarios' order; None if ``stop`` was set first."""
    slots = asyncio.Semaphore(concurrency)
    tasks = [asyncio.ensure_future(ask(policy, s, db=db, judge=judge, agent=agent, slots=slots))
             for s in scenarios]
    everything = asyncio.ensure_future(asyncio.gather(*tasks))
    stopped = asyncio.ensure_future(stop.wait()) if stop is not None else None
    try:
        await asyncio.wait({everything} | ({stopped} if stopped else set()), return_when=asyncio.FIRST_COMPLETED)
        return everything.result() if everything.done() else None
    finally:
        started: list[asyncio.Future[Any]] = [*tasks, everything, *([stopped] if stopped else [])]
        for task in started:
            task.cancel()
        await asyncio.gather(*tasks, everything, return_exceptions=True)


def split_key(split: str, scenarios: list["Scenario"]) -> str:
    """Names the exact questions: the same key means the same questions in the same order, so
    validations and evaluations with the same key are comparable."""
    ids = hashlib.sha1(",".join(str(s.id) for s in scenarios).encode()).hexdigest()[:8]
    return f"{split}-{len(scenarios)}-{ids}"


def inbox_domain(scenarios: list["Scenario"]) -> str | None:
    """The domain of the inboxes the questions ask about, when they share one (ART-E's are
    enron.com, the synthetic inboxes' mail.synth): a report sets ART-E's published figures only
    beside accuracy on ART-E's own kind of question."""
    domains = {s.inbox_address.rpartition("@")[2] for s in scenarios}
    return domains.pop() if len(domains) == 1 else None


def summarize(results: list[QuestionResult]) -> dict[str, Any]:
    """The figures a validation or an evaluation reports (rates over all questions)."""
    n = len(results)

    def rate(flag: str) -> float:
        return round(sum(bool(getattr(r, flag)) for r in results) / n, 4) if n else 0.0

    def mean(field: str) -> float:
        return round(sum(getattr(r, field) for r in results) / n, 4) if n else 0.0

    return {"questions": n, "accuracy": rate("correct"), "reward_mean": mean("reward"),
            "i_dont_know_rate": rate("i_dont_know"), "wrong_answer_rate": rate("wrong"),
            "mean_turns": mean("turns"), "tool_error_rate": rate("tool_error"),
            "latency_mean_s": mean("latency_s"), "failed": sum(r.error is not None for r in results),
            "judge_failed": sum(r.judge_failed for r in results),
            "completion_tokens_mean": mean("completion_tokens")}


def records(results: list[QuestionResult]) -> list[dict[str, Any]]:
    return [asdict(r) for r in results]
