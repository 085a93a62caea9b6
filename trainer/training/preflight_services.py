"""The preflight's checks of the services a run reaches over the network: W&B (its mode on an
offline node, its key) and every judge the config uses (one tiny request, as the job makes it).
trainer/training/preflight.py runs them.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Mapping

from hpc.job.workload_env import HPC_JUDGE_SERVED
from trainer.agent.judge import DEFAULT_JUDGE_MODEL, litellm_route, missing_keys
from trainer.training import judge_ping
from trainer.training.config import TrainerConfig
from trainer.training.judge_ping import JUDGE_PING
from trainer.training.preflight_checks import (
    Check,
    Context,
    module_found,
    passed,
    permanent,
    transient,
)

WANDB_OFF_MODES = ("offline", "disabled", "dryrun")
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")


# -- W&B --------------------------------------------------------------------------------------


def wandb_mode(ctx: Context) -> str:
    """The mode W&B will run in: WANDB_MODE, else offline on a node without internet (the job sets it)."""
    return ctx.env.get("WANDB_MODE") or ("offline" if ctx.no_internet else "online")


def check_wandb(ctx: Context) -> Check:
    """W&B in the mode the network allows."""
    if not ctx.env.get("WANDB_API_KEY"):
        return passed("wandb", "WANDB_API_KEY not set: no W&B logging (ART's history.jsonl only)")
    if not module_found("wandb"):
        return passed("wandb", "wandb is not installed: no W&B logging (ART's history.jsonl only)")
    mode = wandb_mode(ctx)
    if mode in WANDB_OFF_MODES:
        return passed("wandb", f"W&B mode {mode}")
    if ctx.no_internet:
        return permanent("wandb", f"WANDB_MODE={mode} on a node without internet: W&B cannot reach its server",
                         "unset WANDB_MODE (the job then logs offline; `wandb sync` later) or set WANDB_MODE=offline")
    return reach_wandb(ctx)


def reach_wandb(ctx: Context) -> Check:
    """One authenticated request to W&B's API (WANDB_BASE_URL, else api.wandb.ai): 401/403 is a
    key it rejects; no answer within the timeout is transient."""
    import httpx  # only when W&B is asked: the job's preflight runs in seconds, before anything heavy

    base = (ctx.env.get("WANDB_BASE_URL") or "https://api.wandb.ai").rstrip("/")
    try:
        answer = httpx.post(f"{base}/graphql", json={"query": "query { viewer { id } }"},
                            auth=("api", ctx.env["WANDB_API_KEY"]), timeout=ctx.timeout)
    except httpx.HTTPError as error:
        return transient("wandb", ctx.redact(f"W&B at {base} did not answer within {ctx.timeout:g}s "
                                             f"({type(error).__name__}: {error})"),
                         "check the network, or log offline: WANDB_MODE=offline; the run retries")
    if answer.status_code in (401, 403):
        return permanent("wandb", f"W&B at {base} rejects WANDB_API_KEY (HTTP {answer.status_code})",
                         "set a valid WANDB_API_KEY in .env (wandb.ai/authorize)")
    return passed("wandb", f"W&B online at {base}")


# -- the judge --------------------------------------------------------------------------------


@dataclass(frozen=True)
class JudgeTarget:
    """A judge model the run calls, and how (trainer/agent/judge.py's settings)."""

    purpose: str
    model: str
    api_base: str | None
    api_key: str | None


def judge_targets(config: TrainerConfig, env: Mapping[str, str]) -> list[JudgeTarget]:
    """The answer judge (reward=judge, and validation's), RULER's judge (reward=ruler); once each."""
    base = env.get("JUDGE_API_BASE") or None
    key = (env.get("JUDGE_API_KEY") or env.get("OPENAI_API_KEY") or None) if base else None
    answer = env.get("JUDGE_MODEL") or DEFAULT_JUDGE_MODEL
    targets = []
    if config.reward == "judge" or config.val_set_size > 0:
        targets.append(JudgeTarget("answer judge", answer, base, key))
    ruler = config.ruler_judge_model or answer
    if config.reward == "ruler" and not any(t.model == ruler for t in targets):
        targets.append(JudgeTarget("RULER judge", ruler, base, key))
    return targets


def check_judge(ctx: Context) -> Check:
    """Every judge answers one tiny request."""
    if not ctx.config.preflight_judge:
        return passed("judge", "not asked (preflight_judge=false)")
    served = ctx.env.get(HPC_JUDGE_SERVED)
    if ctx.where == "login" and served:
        return passed("judge", f"not asked here: {served} is served inside the job (--judge_serve)")
    targets = judge_targets(ctx.config, ctx.env)
    if not targets:
        return passed("judge", "the config calls no judge")
    results = [ask_judge(ctx, target) for target in targets]
    failed = [result for result in results if not result.ok]
    if failed:
        return max(failed, key=lambda result: result.permanent)
    return passed("judge", "; ".join(result.message for result in results))


def judge_label(ctx: Context, target: JudgeTarget, at: str | None = None) -> str:
    """``the answer judge MODEL at BASE through the tunnel (ALL_PROXY)``: what the failure is about."""
    at = at or target.api_base
    proxy = next((name for name in PROXY_VARIABLES if ctx.env.get(name)), None)
    via = f" through the tunnel ({proxy})" if proxy else ""
    return f"the {target.purpose} {target.model}{f' at {at}' if at else ''}{via}"


def ask_judge(ctx: Context, target: JudgeTarget) -> Check:
    """One request of a few tokens, as trainer.agent.judge makes it; no retries. A provider of
    judge_ping's table (Gemini, OpenAI, Anthropic, an OpenAI-compatible JUDGE_API_BASE) is asked
    with one plain HTTP POST; litellm only for another provider, or where it must route."""
    ping = judge_ping.plan(target.model, target.api_base, target.api_key, ctx.env)
    checked = ask_over_http(ctx, target, ping) if ping is not None else None
    return checked if checked is not None else ask_through_litellm(ctx, target)


def ask_over_http(ctx: Context, target: JudgeTarget, ping: judge_ping.Ping) -> Check | None:
    """The ping's one POST, its answer judged as litellm reports it. None when JUDGE_API_BASE
    refuses a ``prefix/`` name that litellm might route to another protocol: litellm then decides."""
    label = judge_label(ctx, target, ping.base if ping.moved else None)
    if ping.key is None:
        return no_key(label, ping.provider.keys)
    began = time.monotonic()
    try:
        status, text = judge_ping.post_json(ping.url, ping.body(), ping.headers(), ctx.timeout,
                                            proxied=any(ctx.env.get(name) for name in PROXY_VARIABLES))
    except OSError as error:
        return judge_failure(ctx, label, None, str(error))
    body = judge_ping.json_object(text)
    if ping.litellm_may_route(status):
        return None
    if ping.answered(status, body):
        return passed("judge", f"{label} answered in {time.monotonic() - began:.1f}s")
    return judge_failure(ctx, label, ping.status(status, text), judge_ping.http_detail(body, text))


def no_key(label: str, names: list[str] | tuple[str, ...]) -> Check:
    return permanent("judge", f"no key for {label}: {' or '.join(names or ['?'])} is not set",
                     "put the key in .env (see .env.example), or set JUDGE_API_BASE")


def ask_through_litellm(ctx: Context, target: JudgeTarget) -> Check:
    """Another provider's model (not in judge_ping.PROVIDERS) or a name litellm routes: through litellm itself."""
    import litellm  # seconds to import: only when a provider's judge is asked

    litellm.suppress_debug_info = True  # its "Give Feedback" banner is no error line
    # litellm's logging thread serializes the response after the call returns: its pydantic
    # warnings would land in the .err log as the job's last lines, outside the block below.
    warnings.filterwarnings("ignore", message="Pydantic serializer warnings", category=UserWarning)
    label = judge_label(ctx, target)
    missing = missing_keys(target.model, target.api_base)
    if missing:
        return no_key(label, missing)
    model, connection = litellm_route(target.model, target.api_base, target.api_key)
    began = time.monotonic()
    try:
        with warnings.catch_warnings():  # litellm's pydantic chatter is no error line either
            warnings.simplefilter("ignore")
            litellm.completion(model=model, messages=[{"role": "user", "content": JUDGE_PING}],
                               max_tokens=8, temperature=0, drop_params=True, timeout=ctx.timeout,
                               max_retries=0, **connection)
    except Exception as error:  # noqa: BLE001 - litellm maps every provider's and the network's errors to its own
        return judge_failure(ctx, label, getattr(error, "status_code", None), error_detail(error))
    return passed("judge", f"{label} answered in {time.monotonic() - began:.1f}s")


def error_detail(error: Exception) -> str:
    """``NotFoundError: model 'x' is not served``: litellm's message without its repeated prefixes
    (``litellm.NotFoundError: NotFoundError: OpenAIException - ...``)."""
    message = str(error)
    return f"{type(error).__name__}: {message.split(' - ', 1)[1] if ' - ' in message else message}"


def judge_failure(ctx: Context, label: str, status: int | None, detail: str) -> Check:
    """401/403: the key is rejected; 400/404: the model or request is wrong (configuration);
    429: reachable and accepted, only busy (passes); anything else did not answer (transient)."""
    detail = ctx.redact(detail)
    if status in (401, 403):
        return permanent("judge", f"{label} rejects the key (HTTP {status}: {detail})",
                         "set the right key in .env: JUDGE_API_KEY with JUDGE_API_BASE, else the provider's "
                         "(GEMINI_API_KEY...)")
    if status in (400, 404):
        return permanent("judge", f"{label} refuses the model or request (HTTP {status}: {detail})",
                         "check JUDGE_MODEL (and ruler_judge_model) against what the judge serves")
    if status == 429:
        return passed("judge", f"{label} is reachable and accepts the key, but is rate-limited now (HTTP 429)")
    return transient("judge", f"{label} did not answer ({detail}; timeout {ctx.timeout:g}s)",
                     "check the judge server, JUDGE_API_BASE and the tunnel (TUNNEL_HOST); the run retries")
