"""trainer.serve's settings: read and checked here, by the service and by the launcher.

``python -m hpc.launch --entrypoint trainer.serve --train_arg port=8081`` passes its
``--train_arg`` pairs to the service as ``key=value`` arguments; the launcher checks them
with ``check_settings`` before it writes or submits anything (a ``port=99999`` or a
``model=run:../x`` fails in one line at launch, not hours later in the queue). Stdlib and
the policy's name parser only: the launcher stays light.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hpc.digits import is_count
from hpc.run.serving import LOCALHOSTS
from trainer.serving.policy import PolicyError, parse_policy

SERVE_KEYS = ("model", "host", "port", "max_in_flight", "max_queue", "temperature", "body_timeout", "head_timeout")
DEFAULT_PORT = 8080


class ServeError(Exception):
    """A setting the service cannot start with (one line, exit 2)."""


@dataclass
class ServeSettings:
    """How the service runs."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    max_in_flight: int = 8
    max_queue: int = 64
    temperature: float = 0.0
    body_timeout: int = 10  # seconds a request's body may take to arrive (a slow client is cut off)
    head_timeout: int = 10  # seconds a request's head may take (trainer/serving/http_limits.py)
    token: str | None = None  # required in requests when set

    @property
    def public(self) -> bool:
        return self.host not in LOCALHOSTS


def setting_pairs(pairs: list[str]) -> dict[str, str]:
    """``key=value`` arguments as a dict; an unknown key or one given twice is a ServeError."""
    values: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in SERVE_KEYS:
            raise ServeError(f"unknown setting {key!r}: accepted key=value with key one of {', '.join(SERVE_KEYS)}")
        if key in values:
            raise ServeError(f"setting {key!r} given twice: give it once")
        values[key] = value
    return values


def settings_from(values: dict[str, str], host: str | None = None, port: str | None = None) -> ServeSettings:
    """The settings, ``--host``/``--port`` before the pairs' host= and port=; each value checked."""
    return ServeSettings(host=host_value(host if host is not None else values.get("host", "127.0.0.1")),
                         port=port_value(port if port is not None else values.get("port", str(DEFAULT_PORT))),
                         max_in_flight=int_value(values, "max_in_flight", 8),
                         max_queue=int_value(values, "max_queue", 64),
                         body_timeout=int_value(values, "body_timeout", 10),
                         head_timeout=int_value(values, "head_timeout", 10),
                         temperature=temperature_value(values))


def port_value(text: str) -> int:
    """A TCP port 1..65535 in digits 0-9 (0 would be a random port nobody is told of)."""
    if not is_count(text) or not 1 <= int(text) <= 65535:
        raise ServeError(f"invalid port {text!r}: expected a whole number from 1 to 65535")
    return int(text)


def host_value(text: str) -> str:
    """An address to bind: a name or an IP, no spaces or control characters (whether it binds is
    found when the service binds it, before the model starts)."""
    if not text or not text.isprintable() or any(c.isspace() for c in text) or text.startswith("-"):
        raise ServeError(f"invalid host {text!r}: expected an address of this node, e.g. 127.0.0.1 or 0.0.0.0")
    return text


def int_value(values: dict[str, str], key: str, default: int) -> int:
    text = values.get(key)
    if text is None:
        return default
    if not is_count(text) or not 1 <= int(text) <= 1_000_000:
        raise ServeError(f"invalid {key}={text!r}: expected a whole number from 1 to 1000000")
    return int(text)


def temperature_value(values: dict[str, str]) -> float:
    text = values.get("temperature", "0")
    try:
        value = float(text) if text.isascii() else math.nan
    except ValueError:
        value = math.nan
    if not 0.0 <= value <= 2.0:  # NaN too
        raise ServeError(f"invalid temperature={text!r}: expected a number from 0 to 2")
    return value


def check_settings(pairs: list[str], base_model: str | None) -> None:
    """What the launcher asks of ``--entrypoint trainer.serve``'s ``--train_arg`` pairs (ServeError):
    the service's keys only, each value as the service reads it, and a model to serve."""
    values = setting_pairs(pairs)
    settings_from(values)
    if "model" not in values:
        raise ServeError("no model to serve: give model=run:NAME[@STEP], base[:HF_ID], url:... or a litellm model")
    try:
        parse_policy(values["model"], base_model)
    except PolicyError as error:
        raise ServeError(str(error)) from None
