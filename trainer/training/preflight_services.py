"""The preflight's checks of the services a run reaches over the network: W&B (its mode on an
offline node, its key) and every judge the config uses (one tiny request, as the job makes it).
trainer/training/preflight.py runs them.
"""

from __future__ import annotations

import json
import time
import warnings
from dataclasses import dataclass
from typing import Mapping

from trainer.agent.judge import DEFAULT_JUDGE_MODEL, litellm_route
from trainer.training.config import TrainerConfig
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
JUDGE_PING = "Reply with the word OK."  # the judge check's one tiny request (test doubles recognise it)


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
    served = ctx.env.get("HPC_JUDGE_SERVED")
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


def judge_label(ctx: Context, target: JudgeTarget) -> str:
    at = f" at {target.api_base}" if target.api_base else ""
    proxy = next((name for name in PROXY_VARIABLES if ctx.env.get(name)), None)
    via = f" through the tunnel ({proxy})" if proxy else ""
    return f"the {target.purpose} {target.model}{at}{via}"


def ask_judge(ctx: Context, target: JudgeTarget) -> Check:
    """One request of a few tokens, as trainer.agent.judge makes it; no retries. An OpenAI-compatible
    server (JUDGE_API_BASE) is asked with a plain HTTP POST; litellm only where it must route."""
    if target.api_base is not None:
        checked = ask_openai_compatible(ctx, target)
        if checked is not None:
            return checked
    return ask_through_litellm(ctx, target)


def ask_openai_compatible(ctx: Context, target: JudgeTarget) -> Check | None:
    """POST {JUDGE_API_BASE}/chat/completions as litellm's OpenAI route sends it. None when the
    server refuses a model name with a ``prefix/``, which litellm might route to another
    provider's protocol: litellm then decides."""
    label = judge_label(ctx, target)
    model = target.model.removeprefix("openai/")
    request = {"model": model, "messages": [{"role": "user", "content": JUDGE_PING}], "max_tokens": 8,
               "temperature": 0}
    began = time.monotonic()
    try:
        status, text = post_json(ctx, f"{target.api_base.rstrip('/')}/chat/completions", request,
                                 {"Authorization": f"Bearer {target.api_key or 'EMPTY'}"})
    except OSError as error:
        return judge_failure(ctx, label, None, str(error))
    body = json_object(text)
    if status in (400, 404) and "/" in model:
        return None
    if 200 <= status < 300 and "choices" in body:
        return passed("judge", f"{label} answered in {time.monotonic() - began:.1f}s")
    return judge_failure(ctx, label, status, http_detail(body, text))


def post_json(ctx: Context, url: str, body: dict, headers: dict[str, str]) -> tuple[int, str]:
    """One POST: its status and text (OSError when nothing answered). Through a proxy variable (the
    tunnel's socks5h://) with httpx, which speaks SOCKS as the judge's own client does; else with
    urllib, which costs no import (httpx's takes a noticeable part of a second)."""
    if any(ctx.env.get(name) for name in PROXY_VARIABLES):
        import httpx  # only through a proxy: urllib below costs no import

        try:
            answer = httpx.post(url, json=body, headers=headers, timeout=ctx.timeout)
        except httpx.HTTPError as error:
            raise OSError(f"{type(error).__name__}: {error}") from None
        return answer.status_code, answer.text
    import urllib.error  # stdlib, but only a judge at JUDGE_API_BASE needs it
    import urllib.request

    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={**headers, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=ctx.timeout) as answer:
            return answer.status, answer.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")
    except (OSError, ValueError) as error:  # URLError, timeouts, a malformed URL
        raise OSError(f"{type(error).__name__}: {getattr(error, 'reason', error)}") from None


def json_object(text: str) -> dict:
    try:
        body = json.loads(text)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def http_detail(body: dict, text: str) -> str:
    """The server's own error message (OpenAI's ``{"error": {"message": ...}}``), else its text."""
    error = body.get("error")
    message = error.get("message") if isinstance(error, dict) else error
    return str(message or text.strip()[:300] or "no message")


def ask_through_litellm(ctx: Context, target: JudgeTarget) -> Check:
    """A provider's model (GEMINI_API_KEY...) or a name litellm routes: through litellm itself."""
    import litellm  # seconds to import: only when a provider's judge is asked

    litellm.suppress_debug_info = True  # its "Give Feedback" banner is no error line
    # litellm's logging thread serializes the response after the call returns: its pydantic
    # warnings would land in the .err log as the job's last lines, outside the block below.
    warnings.filterwarnings("ignore", message="Pydantic serializer warnings", category=UserWarning)
    label = judge_label(ctx, target)
    if target.api_base is None:
        keys = litellm.validate_environment(model=target.model)
        if not keys.get("keys_in_environment"):
            return permanent("judge", f"no key for {label}: {' or '.join(keys.get('missing_keys') or ['?'])} "
                             "is not set", "put the key in .env (see .env.example), or set JUDGE_API_BASE")
    model, connection = litellm_route(target.model, target.api_base, target.api_key)
    began = time.monotonic()
    try:
        with warnings.catch_warnings():  # litellm's pydantic chatter is no error line either
            warnings.simplefilter("ignore")
            litellm.completion(model=model, messages=[{"role": "user", "content": JUDGE_PING}],
                               max_tokens=8, temperature=0, drop_params=True, timeout=ctx.timeout,
                               max_retries=0, **connection)
    except Exception as error:  # litellm maps every provider's and the network's errors to its own
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
