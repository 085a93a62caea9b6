"""The answer judge: does the agent's answer carry the reference answer's facts?

One LLM call per answered rollout, through litellm, so the judge can be Gemini
(the default, ``JUDGE_MODEL=gemini/gemini-2.0-flash``) or an OpenAI-compatible
server inside the cluster (``JUDGE_API_BASE``), which matters on clusters whose
compute nodes have no internet.

A training step runs dozens of rollouts at once, so the judge must not be the
thing that kills a multi-day run: calls are limited by a semaphore, retried
with exponential backoff, cached on disk (a resumed job does not pay twice for
answers it already judged), and a judge that still fails returns a verdict
marked ``failed`` instead of raising into ``gather_trajectory_groups``.

Also here: RULER (``reward=ruler``), the other way to score with an LLM.

litellm (and art) are imported inside functions: importing this module stays
cheap, and litellm is only loaded where a judge actually runs.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from hpc.run.safe_io import write_json_atomic

if TYPE_CHECKING:
    import art

log = logging.getLogger(__name__)

DEFAULT_JUDGE_MODEL = "gemini/gemini-2.0-flash"

JUDGE_SYSTEM_PROMPT = """\
You grade answers to questions about a person's email. You get the question, a \
reference answer known to be correct, and an answer written by an AI assistant.

Decide as follows:
1. Work out what the question asks for (a name, a date, an amount, a place, a reason...).
2. Keep only the facts of the reference answer that are needed to answer exactly that; \
everything else in it is context.
3. Accept the AI answer if it states every one of those needed facts with the same \
meaning. Other wording, another order, or extra details that do not conflict are fine.
4. Reject it if a needed fact is missing or contradicted.

Do not reject the AI answer for leaving out context that the question did not ask for.

Reply with a single JSON object and nothing else:
{"thinking": "<one or two sentences of reasoning>", "accept": true or false}"""


class _RedactSecrets(logging.Filter):
    """Replaces known keys with *** in log records.

    litellm's debug log prints every call's kwargs, api_key included, when
    logging runs at DEBUG (LITELLM_LOG=DEBUG or a DEBUG root logger); the job's
    .err log must never hold a key, whatever the log level.
    """

    def __init__(self) -> None:
        super().__init__()
        self.secrets: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if self.secrets:
            message = record.getMessage()
            redacted = message
            for secret in self.secrets:
                redacted = redacted.replace(secret, "***")
            if redacted != message:
                record.msg, record.args = redacted, None
        return True


_REDACT = _RedactSecrets()
_LITELLM_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy")


def hide_secret_from_logs(secret: str | None) -> None:
    """Register a key to be redacted from litellm's and this module's log records.

    Short placeholders ("EMPTY", "test") are left alone: redacting them would
    mangle ordinary words and they protect nothing.
    """
    if not secret or len(secret) < 8:
        return
    _REDACT.secrets.add(secret)
    for name in (*_LITELLM_LOGGERS, __name__):
        logger = logging.getLogger(name)
        if _REDACT not in logger.filters:
            logger.addFilter(_REDACT)


@dataclass(frozen=True)
class Verdict:
    """The judge's decision on one answer.

    ``failed`` means no decision could be had (after all retries); ``accept``
    is then False and ``error`` says why, with any secret removed.
    """

    accept: bool
    thinking: str = ""
    failed: bool = False
    cached: bool = False
    error: str | None = None


class VerdictParseError(ValueError):
    """The judge replied, but not with a usable {"thinking", "accept"} object."""


def parse_verdict(text: str | None) -> Verdict:
    """Read a verdict from the judge's reply, tolerating fences and chatter around the JSON.

    Models that ignore ``response_format`` often wrap JSON in ```json fences or
    add a sentence before it; only the first JSON object is used.
    """
    if not text or not text.strip():
        raise VerdictParseError("empty reply")
    data = _first_json_object(text)
    accept = data.get("accept")
    if isinstance(accept, str) and accept.strip().lower() in ("true", "false"):
        accept = accept.strip().lower() == "true"
    if not isinstance(accept, bool):
        raise VerdictParseError(f"'accept' is not a boolean: {accept!r}")
    thinking = data.get("thinking", "")
    return Verdict(accept=accept, thinking=thinking if isinstance(thinking, str) else json.dumps(thinking))


def _first_json_object(text: str) -> dict[str, Any]:
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    raise VerdictParseError(f"no JSON object in reply: {text[:200]!r}")


def use_bundled_price_table() -> None:
    """litellm fetches its model price table from the network when it is imported, unless
    LITELLM_LOCAL_MODEL_COST_MAP says to use the copy it ships: a command that may import litellm
    calls this first (compute nodes have no internet, and a command must not wait for it)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def missing_keys(model: str, api_base: str | None = None) -> list[str]:
    """The environment variables, any one of which litellm needs to call ``model``, when none is set;
    [] when one is, or the model needs none (a server at ``api_base``, a provider litellm cannot tell)."""
    if api_base:
        return []
    import litellm

    litellm.suppress_debug_info = True  # its "Provider List" banner for a name it does not know
    keys = litellm.validate_environment(model=model)
    return [] if keys.get("keys_in_environment") else [str(k) for k in keys.get("missing_keys") or ["?"]]


def litellm_route(model: str, api_base: str | None, api_key: str | None) -> tuple[str, dict[str, Any]]:
    """The litellm model name and connection kwargs for a judge model.

    With an ``api_base`` the judge is an OpenAI-compatible server: a name
    without a litellm provider (``Qwen/Qwen2.5-72B-Instruct``) gets the
    ``openai/`` prefix so litellm speaks the OpenAI protocol to that base.
    Without one, litellm finds the provider and its key (GEMINI_API_KEY...).
    """
    if not api_base:
        return model, ({"api_key": api_key} if api_key else {})
    import litellm  # seconds to import: only once a judge is asked

    provider = model.split("/", 1)[0] if "/" in model else ""
    if provider not in litellm.provider_list:
        model = f"openai/{model}"
    # An in-cluster vLLM judge needs no key, but the OpenAI client insists on one.
    return model, {"api_base": api_base, "api_key": api_key or "EMPTY"}


@dataclass
class Judge:
    """Checks answers against reference answers; safe to share across concurrent rollouts.

    ``retries`` is the number of extra attempts after the first one; attempt
    ``n`` (from 0) waits ``min(base_delay * 2**n, max_delay)`` before the next.
    """

    model: str = DEFAULT_JUDGE_MODEL
    cache_dir: Path | None = None
    concurrency: int = 8
    retries: int = 3
    base_delay: float = 1.0
    max_delay: float = 30.0
    timeout: float = 120.0
    api_base: str | None = None
    api_key: str | None = field(default=None, repr=False)
    _semaphore: asyncio.Semaphore = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"judge concurrency must be at least 1, got {self.concurrency}")
        if self.retries < 0:
            raise ValueError(f"judge retries must be 0 or more, got {self.retries}")
        if self.cache_dir is not None:
            self.cache_dir = Path(self.cache_dir)
        hide_secret_from_logs(self.api_key)
        self._semaphore = asyncio.Semaphore(self.concurrency)

    @classmethod
    def from_env(
        cls,
        cache_dir: Path | None,
        concurrency: int,
        retries: int,
        model: str | None = None,
        *,
        base_delay: float = 1.0,
        env: Mapping[str, str] | None = None,
    ) -> "Judge":
        """A judge configured like the job's environment (docs/design.md).

        The model is ``model`` (the trainer config's), else JUDGE_MODEL, else
        Gemini 2.0 Flash. JUDGE_API_BASE points at an OpenAI-compatible judge;
        its key (if it wants one) is JUDGE_API_KEY (docs/multinode.md), else
        OPENAI_API_KEY (.env.example). Without a base, litellm reads the
        provider's own key variable (GEMINI_API_KEY...).
        """
        env = os.environ if env is None else env
        api_base = env.get("JUDGE_API_BASE") or None
        api_key = (env.get("JUDGE_API_KEY") or env.get("OPENAI_API_KEY") or None) if api_base else None
        return cls(
            model=model or env.get("JUDGE_MODEL") or DEFAULT_JUDGE_MODEL,
            cache_dir=cache_dir,
            concurrency=concurrency,
            retries=retries,
            base_delay=base_delay,
            api_base=api_base,
            api_key=api_key,
        )

    async def judge(self, *, question: str, reference: str, answer: str) -> Verdict:
        """The verdict on ``answer``; never raises for judge trouble (see ``Verdict.failed``)."""
        key = self.cache_key(question, reference, answer)
        cached = self._read_cache(key)
        if cached is not None:
            return cached
        messages = [
            {"role": "system", "content": JUDGE_SYSTEM_PROMPT},
            {"role": "user", "content": f"Question: {question}\nReference answer: {reference}\nAI answer: {answer}"},
        ]
        last_error = "no attempt made"
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(min(self.base_delay * 2 ** (attempt - 1), self.max_delay))
            try:
                verdict = await self._ask(messages)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 - any API, network or parse failure is retried
                last_error = self._redact(f"{type(error).__name__}: {error}")
                log.warning("judge attempt %d/%d failed: %s", attempt + 1, self.retries + 1, last_error[:500])
                continue
            self._write_cache(key, verdict)
            return verdict
        log.error("judge gave up after %d attempts: %s", self.retries + 1, last_error[:500])
        return Verdict(accept=False, failed=True, error=last_error)

    async def _ask(self, messages: list[dict[str, str]]) -> Verdict:
        """One judge call, holding a concurrency slot only while the request is in flight."""
        from litellm import acompletion  # seconds to import: only once a judge is asked

        model, connection = litellm_route(self.model, self.api_base, self.api_key)
        async with self._semaphore:
            response = await acompletion(
                model=model,
                messages=messages,
                response_format={"type": "json_object"},
                drop_params=True,  # providers without response_format get the prompt's instructions only
                temperature=0,
                timeout=self.timeout,
                max_retries=0,  # our backoff is the only retry layer
                **connection,
            )
        if not response.choices:
            raise VerdictParseError("reply without choices")
        return parse_verdict(response.choices[0].message.content)

    def cache_key(self, question: str, reference: str, answer: str) -> str:
        """Same model and texts, same verdict: the key hashes all four."""
        payload = json.dumps([self.model, question, reference, answer], ensure_ascii=False)
        return hashlib.sha256(payload.encode()).hexdigest()

    def _cache_path(self, key: str) -> Path | None:
        return None if self.cache_dir is None else self.cache_dir / f"{key}.json"

    def _read_cache(self, key: str) -> Verdict | None:
        path = self._cache_path(key)
        if path is None or not path.exists():
            return None
        try:
            data = json.loads(path.read_text())
            return Verdict(accept=bool(data["accept"]), thinking=str(data.get("thinking", "")), cached=True)
        except (OSError, ValueError, KeyError, TypeError):
            return None  # a damaged entry is a miss; the fresh verdict overwrites it

    def _write_cache(self, key: str, verdict: Verdict) -> None:
        """Atomic (temp file + rename): concurrent jobs and a kill mid-write never leave half an entry."""
        path = self._cache_path(key)
        if path is None:
            return
        try:
            write_json_atomic(path, {"accept": verdict.accept, "thinking": verdict.thinking, "model": self.model})
        except OSError as error:  # a full disk must not fail the step: the verdict is still good
            log.warning("judge cache write failed: %s", error)

    def _redact(self, text: str) -> str:
        """Exception texts can quote the key (authentication errors do): keep it out of verdicts too."""
        if self.api_key and len(self.api_key) >= 8:
            text = text.replace(self.api_key, "***")
        return text


async def score_group_with_ruler(
    group: "art.TrajectoryGroup",
    judge_model: str,
    *,
    api_base: str | None = None,
    api_key: str | None = None,
) -> "art.TrajectoryGroup | None":
    """Score a group with RULER (``reward=ruler``): rewards become relative 0..1 scores.

    Use as ``after_each`` of ``art.gather_trajectory_groups``. Each trajectory
    keeps its provisional reward (``reward.reward_before_ruler``) in
    metrics["independent_reward"] and its rubric metrics. If RULER fails, the
    group is dropped (None) rather than trained on unscored. ``api_base``
    defaults to JUDGE_API_BASE, so RULER can use the in-cluster judge too.
    """
    from art.rewards import ruler_score_group  # art only in the trainer, once it runs

    api_base = api_base or os.environ.get("JUDGE_API_BASE") or None
    if api_base and api_key is None:
        api_key = os.environ.get("JUDGE_API_KEY") or os.environ.get("OPENAI_API_KEY")
    hide_secret_from_logs(api_key)
    model, connection = litellm_route(judge_model, api_base, api_key)
    return await ruler_score_group(
        group,
        model,
        extra_litellm_params=connection or None,
        swallow_exceptions=True,
    )
