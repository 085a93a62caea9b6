"""Ask the agent one question from the terminal: ``python -m trainer.ask``.

    python -m trainer.ask "When is Ana's second interview?" --inbox vince.kaminski@enron.com --date 2000-06-16
        --run agent_008_serve          # a running service: its address and token from the run directory
                                       # (it serves what its --model named: run:agent_008@best, say)
        --url http://localhost:8080    # a service (through an ssh -L tunnel, say); --token or $SERVE_TOKEN
        --model openai/o3              # no service: the agent loop once, here, with that model

Prints the answer, the ids of the emails it cites, the turns and the latency
(``--transcript`` adds the conversation). Exit 2 on bad input (a date not exactly
YYYY-MM-DD is refused before anything is asked), 1 when the service or the model
answers with an error, or the model's key is not set (its one-line reason is printed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from hpc.job.exit_codes import EXIT_BAD_INPUT, EXIT_FAILED
from hpc.run.rundir import RunDir
from hpc.run.serving import address_of
from hpc.secret_names import has_credentials
from trainer.agent.email_db import EmailDB
from trainer.agent.judge import missing_keys, use_bundled_price_table
from trainer.agent.scenarios import date_problem
from trainer.evaluation.eval import default_runs_dir
from trainer.serving.policy import PolicyError, open_policy, parse_policy
from trainer.serving.serve import Agent, answer_of, request_problem
from trainer.staging.data import default_data_dir
from trainer.training.config import ConfigError, load_config


class AskError(Exception):
    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


def service_of(run: str) -> tuple[str, str | None]:
    """The URL and token of a serve job's run directory (serve/address.json, serve/token)."""
    if run in ("", ".", ".."):
        raise AskError(f"bad --run {run!r} (accepted: a serve job's run name or directory)", EXIT_BAD_INPUT)
    served = RunDir(Path(run) if "/" in run else default_runs_dir() / run)
    folder, address = served.serve_dir, address_of(served)
    if address is None:
        why = f" ({served.unreadable_line()})" if served.unreadable else ": is the serve job running?"
        raise AskError(f"{folder} has no readable address.json{why}", EXIT_BAD_INPUT)
    host = "127.0.0.1" if address["host"] in ("0.0.0.0", "::") else address["host"]
    token = served.read_text(folder / "token") if address.get("token_required") else None
    return f"http://{host}:{address['port']}", token.strip() if token else None


def checked_url(url: str) -> str:
    """--url as a service's address: http(s)://HOST[:PORT][/PATH], a port 1..65535, no spaces or
    control characters (``http://[::1`` and ``http://x:99999`` are refused here, not in httpx)."""
    bad = AskError(f"bad --url {shown(url)!r} (accepted: http://HOST:PORT or https://..., e.g. http://localhost:8080)",
                   EXIT_BAD_INPUT)
    if not url.isascii() or not url.isprintable() or " " in url:
        raise bad
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # an unclosed [, a port that is no number or out of range
        raise bad from None
    if parts.scheme not in ("http", "https") or not parts.hostname or port == 0:
        raise bad
    return url


def shown(url: str) -> str:
    """The URL for a message; one with a password in it is not shown."""
    return "<a URL with a password, not shown>" if has_credentials(url) else url


def checked_token(token: str | None) -> str | None:
    """A token goes into a header: printable ASCII only (never shown: it is a secret)."""
    if token is not None and not (token.isascii() and token.isprintable() and token.strip()):
        raise AskError("bad --token or $SERVE_TOKEN (not shown): accepted the printable ASCII of serve/token",
                       EXIT_BAD_INPUT)
    return token


def ask_service(url: str, token: str | None, body: dict[str, Any]) -> dict[str, Any]:
    import httpx  # only when a service is asked

    headers = {"Authorization": f"Bearer {checked_token(token)}"} if token else {}
    try:
        response = httpx.post(f"{checked_url(url).rstrip('/')}/invoke", json=body, headers=headers, timeout=600)
        data = response.json()
    except (httpx.HTTPError, httpx.InvalidURL) as error:
        raise AskError(f"cannot reach {shown(url)}: {str(error).replace(url, shown(url))}") from None
    except ValueError:  # not JSON: a proxy's page, say
        data = None
    if response.status_code != 200:
        said = data.get("error") if isinstance(data, dict) else None
        raise AskError(f"{response.status_code}: {' '.join(str(said or response.text[:300]).split())}",
                       EXIT_BAD_INPUT if 400 <= response.status_code < 500 else EXIT_FAILED)
    if not isinstance(data, dict) or not {"answer", "source_ids", "turns", "latency_s"} <= set(data):
        raise AskError(f"{shown(url)} answered 200 with no answer in it: is it trainer.serve?")
    return data


def ask_model(model: str, config_name: str, body: dict[str, Any]) -> dict[str, Any]:
    """No service: the serving agent's loop once, in this process."""
    try:
        config = load_config(config_name)
        spec = parse_policy(model, config.base_model)
        policy = open_policy(spec)  # a checkpoint or base model needs a server: refused here
    except (ConfigError, PolicyError) as error:
        raise AskError(str(error), EXIT_BAD_INPUT) from None
    missing = missing_keys(spec.name) if spec.kind == "litellm" else []
    if missing:
        raise AskError(f"no key for {model}: {' or '.join(missing)} is not set (put it in .env or the environment)")
    with EmailDB(default_data_dir() / "enron_emails.db") as db:
        problem = request_problem(body["inbox"], body["query_date"], db)
        if problem is not None:
            raise AskError(problem[1], EXIT_BAD_INPUT)
        agent = Agent(policy, db, config, 0.0)
        began = time.monotonic()
        try:
            trajectory = asyncio.run(agent.answer(body["question"], body["inbox"], body["query_date"]))
        except Exception as error:  # noqa: BLE001 - the model failed mid-answer: its reason, in one line
            raise AskError(f"the model failed: {type(error).__name__}: {' '.join(str(error).split())[:300]}") from None
        return answer_of(trajectory, time.monotonic() - began, body["transcript"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.ask", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("question")
    parser.add_argument("--inbox", required=True)
    parser.add_argument("--date", required=True, help="the question's date, YYYY-MM-DD")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--run", help="a serve job's run name or directory")
    where.add_argument("--url", help="a running service")
    where.add_argument("--model", help="ask this model directly (trainer.serving.policy names)")
    parser.add_argument("--token", default=os.environ.get("SERVE_TOKEN"), help="with --url (default: $SERVE_TOKEN)")
    parser.add_argument("--config", default="agent_008", help="with --model: the agent's config")
    parser.add_argument("--transcript", action="store_true")
    args = parser.parse_args(argv)
    use_bundled_price_table()  # before anything imports litellm: no price table fetched from the network
    body = {"question": args.question, "inbox": args.inbox, "query_date": args.date, "transcript": args.transcript}
    try:
        if date_problem(args.date) is not None:  # before any service or model is asked
            raise AskError(f"bad --date {args.date!r} (accepted: a date YYYY-MM-DD)", EXIT_BAD_INPUT)
        if args.model:
            reply = ask_model(args.model, args.config, body)
        else:
            url, token = service_of(args.run) if args.run else (args.url, args.token)
            reply = ask_service(url, token, body)
    except AskError as error:
        print(f"trainer.ask: error: {error}", file=sys.stderr)
        return error.code
    print(f"answer:  {reply['answer']}")
    print(f"sources: {', '.join(reply['source_ids']) or '-'}")
    print(f"turns:   {reply['turns']}, {reply['latency_s']:.2f} s")
    if args.transcript:
        print(json.dumps(reply.get("transcript"), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
