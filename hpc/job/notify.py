"""In-job side: tell the user's webhook that a run is done, failed, stalled, collapsed or declining.

``HPC_WEBHOOK_URL`` (in ``.env`` or ``--env``; a secret, because such URLs carry
their token: hpc/launcher/envfiles.py keeps names containing WEBHOOK in the run's 0600
``secrets.env`` only) receives one JSON POST per event::

    {"event": "done", "run": "agent_008", "text": "agent_008: done at step 628/628 (job 4242 on jureca)",
     "job_id": "4242", "cluster": "jureca", "step": 628, "total_steps": 628, "detail": "...", "time": "..."}

``text`` is what chat webhooks (Slack's incoming webhooks) show. Callers: the
end hook (hpc/job/end_hook.py: done; hpc/job/run_marks.py: failed) and the run's watcher
(hpc/job/watch.py: stalled, collapsed) and the decline rule (hpc/job/on_decline.py: declined,
its detail the action and why). A notice never fails or delays the job for
long: one attempt, ``HPC_WEBHOOK_TIMEOUT`` seconds (5), every error reported in
one line on stderr and swallowed. The URL never appears in a message (a URL's
token is as good as a key).

On clusters without internet the POST goes through the job's SOCKS tunnel: the
job script passes the workload's proxy as ``HPC_NOTIFY_PROXY`` (only this module
reads it, so the job's other commands stay off the proxy); httpx with socksio
speaks socks5h. Elsewhere httpx follows the usual ``HTTPS_PROXY`` variables.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from hpc.job.workload_env import HPC_CLUSTER, HPC_NOTIFY_PROXY, HPC_WEBHOOK_TIMEOUT, HPC_WEBHOOK_URL
from hpc.run.rundir import RunDir, utc_now

EVENTS = ("done", "failed", "stalled", "collapsed", "declined")
DEFAULT_TIMEOUT = 5.0


@dataclass(frozen=True)
class Notice:
    event: str  # one of EVENTS
    run: str
    text: str  # one line a person reads
    job_id: str | None
    cluster: str | None
    step: int | None
    total_steps: int | None
    detail: str
    time: str


def notice(run: RunDir, event: str, detail: str, env: Mapping[str, str] = os.environ) -> Notice:
    """The notice of ``event`` for ``run``, with its progress and the job it came from."""
    if event not in EVENTS:
        raise ValueError(f"unknown webhook event {event!r}; known: {', '.join(EVENTS)}")
    progress = run.read_progress() or {}
    done = run.read_done() or {}
    step = done.get("final_step", progress.get("step"))
    total = done.get("total_steps") or progress.get("total_steps")
    job, cluster = env.get("SLURM_JOB_ID"), env.get(HPC_CLUSTER)
    where = " ".join(filter(None, [f"job {job}" if job else "", f"on {cluster}" if cluster else ""]))
    at = f" at step {step}/{total if total is not None else '?'}" if step is not None else ""
    text = f"{run.name}: {event}{at}" + (f" ({where})" if where else "") + (f": {detail}" if detail else "")
    return Notice(event, run.name, text, job, cluster, step, total, detail, utc_now())


def tell(run: RunDir, event: str, detail: str = "", env: Mapping[str, str] = os.environ) -> bool:
    """Post the notice when a webhook is configured; True when it answered 2xx. Never raises."""
    url = (env.get(HPC_WEBHOOK_URL) or "").strip()
    if not url:
        return False
    try:
        return send(notice(run, event, detail, env), url, env.get(HPC_NOTIFY_PROXY) or None, timeout_of(env))
    except Exception as err:  # noqa: BLE001 - a notice must never fail the job
        say(f"could not tell the webhook about {event}: {reason(err, url)}")
        return False


def timeout_of(env: Mapping[str, str]) -> float:
    try:
        value = float(env.get(HPC_WEBHOOK_TIMEOUT) or DEFAULT_TIMEOUT)
    except ValueError:
        return DEFAULT_TIMEOUT
    return value if 0 < value <= 120 else DEFAULT_TIMEOUT


def send(item: Notice, url: str, proxy: str | None, timeout: float) -> bool:
    """One POST of the notice as JSON; the outcome in one line without the URL."""
    body = asdict(item)
    try:
        status = post(url, body, proxy, timeout)
    except Exception as err:  # noqa: BLE001 - as above: a notice must never fail the job
        say(f"the webhook was not told that {item.run} {item.event}: {reason(err, url)}")
        return False
    ok = 200 <= status < 300
    say(f"told the webhook that {item.run} {item.event} (HTTP {status})" if ok
        else f"the webhook answered HTTP {status} to {item.run} {item.event}")
    return ok


def post(url: str, body: dict[str, Any], proxy: str | None, timeout: float) -> int:
    """The HTTP status of a JSON POST (httpx: proxies, SOCKS; stdlib without a proxy)."""
    try:
        import httpx
    except ImportError:
        if proxy:
            raise RuntimeError("httpx is not installed, and the webhook is reached through a proxy") from None
        return post_stdlib(url, body, timeout)
    for name in ("httpx", "httpcore"):  # their INFO lines name the URL, and the hooks log at INFO
        logging.getLogger(name).setLevel(logging.WARNING)
    with httpx.Client(proxy=proxy, trust_env=proxy is None, timeout=timeout) as client:
        return client.post(url, json=body, headers={"User-Agent": "hpc-art-launcher"}).status_code


def post_stdlib(url: str, body: dict[str, Any], timeout: float) -> int:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "User-Agent": "hpc-art-launcher"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def reason(err: Exception, url: str) -> str:
    """The error's class and message, with the URL (and its token) cut out."""
    text = str(err).replace(url, "<webhook>")
    for part in (url.split("?", 1)[0], url.split("://", 1)[-1]):
        text = text.replace(part, "<webhook>")
    return f"{type(err).__name__}: {text.splitlines()[0] if text.strip() else 'no message'}"


def say(message: str) -> None:
    print(f"[notify] {message}", file=sys.stderr, flush=True)
