"""How the agent loop reaches a model: a run's checkpoint, the base model, any
OpenAI-compatible server, or any litellm model.

The agent loop (``trainer.agent.rollout``) asks its model for two things,
``openai_client()`` and ``get_inference_name()``, as ART's models provide them.
Evaluation and serving need other models behind the same loop, so that a
baseline (o3, Gemini) and a checkpoint are asked the same way and judged by
the same judge. A model is named by one string:

    openai/o3, gemini/gemini-2.5-pro   a litellm model (its key from the environment)
    url:http://host:8000/v1#name       an OpenAI-compatible server, and the model name it serves
    run:agent_008                      that run's latest complete checkpoint
    run:agent_008@30, run:agent_008@all one step, or every complete checkpoint
    run:agent_008@best                 its best validated step (hpc/run/best.py)
    base:Qwen/Qwen2.5-14B-Instruct     the untrained base model (base: alone = the config's)

A litellm model is wrapped so that its replies come back as the OpenAI SDK's
``ChatCompletion`` (what ART's trajectories hold). Checkpoints and base models
need vLLM on a GPU (``trainer.serving.vllm_server``); ``PolicySpec`` only names them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hpc.run.checkpoints import trained_base_model
from hpc.run.rundir import RUN_NAME_RE, is_run_name

if TYPE_CHECKING:
    from pathlib import Path

    from openai.types.chat import ChatCompletion

KINDS = ("litellm", "url", "checkpoint", "base")
_LITELLM = re.compile(r"[A-Za-z0-9_.-]+/\S+")
_RUN = re.compile(rf"run:(?P<run>{RUN_NAME_RE.pattern})(?:@(?P<step>[0-9]+|all|latest|best))?")
ACCEPTED = ("a litellm model (openai/o3), url:BASE_URL#MODEL, run:NAME[@STEP|@all|@latest|@best], "
            "or base[:HF_ID]")


class PolicyError(ValueError):
    """A model name the loop cannot reach (one line naming the value and what is accepted)."""


@dataclass(frozen=True)
class PolicySpec:
    """A model to ask, as named on a command line."""

    kind: str
    name: str  # the litellm model, the served model name, the run name, or the base model id
    base_url: str | None = None
    step: str | None = None  # checkpoints: a step number, "latest", "best" or "all"

    @property
    def label(self) -> str:
        """How reports and result files name it."""
        if self.kind == "checkpoint":
            return f"{self.name}@{self.step}"
        return self.name if self.kind != "base" else f"base:{self.name}"


def parse_policy(text: str, base_model: str | None = None) -> PolicySpec:
    text = text.strip()
    if (run := _RUN.fullmatch(text)) is not None and is_run_name(run["run"]):
        return PolicySpec("checkpoint", run["run"], step=run["step"] or "latest")
    if text == "base" or text.startswith("base:"):
        name = text.partition(":")[2] or base_model
        if not name:
            raise PolicyError(f"invalid model {text!r}: no base model given (base:HF_ID)")
        return PolicySpec("base", name)
    if text.startswith("url:"):
        url, _, served = text[4:].partition("#")
        if not url.startswith(("http://", "https://")) or not served:
            raise PolicyError(f"invalid model {text!r}: expected url:http(s)://HOST[:PORT]/v1#MODEL")
        return PolicySpec("url", served, base_url=url)
    if _LITELLM.fullmatch(text):
        return PolicySpec("litellm", text)
    raise PolicyError(f"invalid model {text!r}: expected {ACCEPTED}")


# -- the objects the agent loop asks -------------------------------------------------------


@dataclass
class EndpointPolicy:
    """An OpenAI-compatible server (vLLM serving a checkpoint, a test double, a proxy)."""

    base_url: str
    model: str
    api_key: str = "EMPTY"
    timeout: float = 600.0

    def __post_init__(self) -> None:
        import httpx  # the HTTP stack only once a policy is opened
        from openai import AsyncOpenAI

        # Few idle connections: httpcore checks every idle connection's socket each time it
        # assigns a request; with dozens kept, that dominated the loop's CPU at 32 questions in
        # flight (bench/eval_throughput.py).
        http = httpx.AsyncClient(timeout=self.timeout, limits=httpx.Limits(max_keepalive_connections=16))
        self._client = AsyncOpenAI(base_url=self.base_url, api_key=self.api_key, timeout=self.timeout,
                                   http_client=http)

    def openai_client(self) -> Any:
        return _DirectClient(self._client)

    def get_inference_name(self) -> str:
        return self.model


class _DirectClient:
    """``chat.completions.create(**request)`` posting the request as it is: the agent loop's
    requests are already the API's JSON, and the SDK's parameter transform cost more CPU per
    call than everything else the loop does (bench/eval_throughput.py)."""

    def __init__(self, client: Any) -> None:
        self.chat = self
        self.completions = self
        self._client = client

    async def create(self, **request: Any) -> "ChatCompletion":
        from openai.types.chat import ChatCompletion  # openai only once a model is asked

        return await self._client.post("/chat/completions", body=request, cast_to=ChatCompletion)


@dataclass
class LiteLLMPolicy:
    """A litellm model, answering through an object shaped like the OpenAI SDK's client."""

    model: str
    timeout: float = 600.0

    def openai_client(self) -> Any:
        return _LiteLLMClient(self.model, self.timeout)

    def get_inference_name(self) -> str:
        return self.model


class _LiteLLMClient:
    """``client.chat.completions.create(**request)`` through ``litellm.acompletion``."""

    def __init__(self, model: str, timeout: float) -> None:
        self.chat = self
        self.completions = self
        self._model, self._timeout = model, timeout

    async def create(self, **request: Any) -> "ChatCompletion":
        import litellm  # seconds to import: only once an API model is asked
        from openai.types.chat import ChatCompletion  # openai only once a model is asked

        request = {**request, "model": self._model}
        if "max_completion_tokens" in request:  # the loop's OpenAI name; litellm maps max_tokens per provider
            request["max_tokens"] = request.pop("max_completion_tokens")
        response = await litellm.acompletion(**request, timeout=self._timeout, drop_params=True)
        return ChatCompletion.model_validate(completion_dict(response.model_dump()))


def completion_dict(raw: dict[str, Any]) -> dict[str, Any]:
    """litellm's response as the OpenAI schema has it: the fields ChatCompletion requires."""
    raw.setdefault("object", "chat.completion")
    raw.setdefault("created", 0)
    for index, choice in enumerate(raw.get("choices") or []):
        choice.setdefault("index", index)
        choice["finish_reason"] = choice.get("finish_reason") or "stop"
        choice.setdefault("logprobs", None)
    return raw


def open_policy(spec: PolicySpec, base_url: str | None = None, api_key: str = "EMPTY") -> EndpointPolicy | LiteLLMPolicy:
    """The object the agent loop asks. Checkpoints and base models need the URL of the vLLM
    server that serves them (``trainer.serving.vllm_server``), under ``spec.label``'s served name."""
    if spec.kind == "litellm":
        return LiteLLMPolicy(spec.name)
    url = spec.base_url or base_url
    if url is None:
        raise PolicyError(f"{spec.label}: a {spec.kind} model needs vLLM serving it (a GPU job); "
                          "give its server as url:BASE_URL#MODEL")
    return EndpointPolicy(url, spec.name if spec.kind == "url" else served_name(spec), api_key)


def base_model_for(config_base: str, adapters: list["Path"]) -> str:
    """The base model vLLM must serve checkpoint adapters on: the one their run trained on
    (ART's model.json beside the checkpoints), which differs from the config's when the run
    was launched with ``--train_arg base_model=...``; the config's where no run says."""
    trained = {base for base in (trained_base_model(path.parent.parent) for path in adapters) if base}
    if len(trained) > 1:
        raise PolicyError(f"the checkpoints were trained on different base models ({', '.join(sorted(trained))}): "
                          "evaluate each run's checkpoints on their own")
    return trained.pop() if trained else config_base


def served_name(spec: PolicySpec) -> str:
    """The model name a vLLM server serves a checkpoint or the base model under."""
    return "base" if spec.kind == "base" else f"{spec.name}@{spec.step}"
