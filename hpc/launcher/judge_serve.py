"""A judge served inside the job (login side: the launch settings; stdlib only).

On JSC's clusters compute nodes reach no judge API, and the SSH tunnel to the
login node needs a private key JSC allows only by exception. The alternative is
to serve an open model as the judge on the node's spare GPUs: vLLM
(trainer.serving.vllm_server) is started by the job script before training
(sbatch/_judge_server.sh.j2), health-checked, and stopped with the job; every
run of the job (a pack shares one judge) reaches it at JUDGE_API_BASE.

    --judge_serve Qwen/Qwen2.5-32B-Instruct [--judge_gpus 1]

or, once per cluster, ``JUDGE_SERVE_MODEL`` / ``JUDGE_SERVE_GPUS`` in
``dotenv/<cluster>.env`` or ``.env``. ``JUDGE_SERVE_PORT`` (18765),
``JUDGE_SERVE_MAX_MODEL_LEN`` (16384), ``JUDGE_SERVE_MAX_OUTPUT_TOKENS`` (1024: the longest
reply, so that a judge that rambles cannot hold a step) and ``JUDGE_SERVE_TIMEOUT`` (1800 s to
load) tune it. The model is staged on the login node like the base model
(``python -m trainer.data stage-model`` stages it too).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from hpc.errors import UsageError
from hpc.launcher.envfiles import EnvLayer, MergedEnv

MODEL_RE = re.compile(r"[A-Za-z0-9._+-]+(/[A-Za-z0-9._+-]+)*")
DEFAULT_PORT = 18765
DEFAULT_MAX_MODEL_LEN = 16384  # a judge reads one question, two answers and a verdict
DEFAULT_TIMEOUT = 1800  # seconds to load a model from a shared filesystem
# A verdict is a short JSON object. Asked for JSON without a length, a model that never closes it
# writes until its window is full (seen on an H100: a small model wrote whitespace for over 100 s),
# so the served judge caps every reply (the trainer's verdicts set no length of their own).
DEFAULT_MAX_OUTPUT_TOKENS = 1024


@dataclass(frozen=True)
class JudgeServe:
    """The judge a job serves: what, on how many GPUs, where."""

    model: str
    gpus: int
    port: int
    max_model_len: int
    start_timeout: int
    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS
    first_device: int = 0  # index among the job's GPUs: the judge takes those after the runs'

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def env_layer(self) -> EnvLayer:
        """What the workloads get: the judge's address and name (no tunnel is needed for it)."""
        return EnvLayer("--judge_serve", {"JUDGE_API_BASE": self.api_base, "JUDGE_MODEL": self.model})

    def placed(self, first_device: int) -> "JudgeServe":
        return replace(self, first_device=first_device)


def judge_serve(model_flag: str | None, gpus_flag: int | None, env: MergedEnv,
                gpus_per_node: int) -> JudgeServe | None:
    """The flags, else the dotenv's JUDGE_SERVE_* settings; None when no judge is served."""
    model = model_flag if model_flag is not None else (env.get("JUDGE_SERVE_MODEL") or "")
    if not model:
        if gpus_flag is not None:
            raise UsageError("--judge_gpus needs --judge_serve MODEL (or JUDGE_SERVE_MODEL in the dotenv)")
        return None
    if not MODEL_RE.fullmatch(model):
        raise UsageError(f"invalid --judge_serve {model!r}: expected a Hugging Face model id such as "
                         "Qwen/Qwen2.5-32B-Instruct, or a path (letters, digits, . _ + - /)")
    gpus = gpus_flag if gpus_flag is not None else env.int_setting("JUDGE_SERVE_GPUS", 1, 1, 64)
    if not 1 <= gpus < gpus_per_node:
        raise UsageError(f"invalid --judge_gpus {gpus}: accepted 1..{gpus_per_node - 1} (a node has "
                         f"{gpus_per_node} GPUs and the run needs at least one)")
    window = env.int_setting("JUDGE_SERVE_MAX_MODEL_LEN", DEFAULT_MAX_MODEL_LEN, 512, 1_048_576)
    return JudgeServe(model, gpus, env.int_setting("JUDGE_SERVE_PORT", DEFAULT_PORT, 1024, 65535), window,
                      env.int_setting("JUDGE_SERVE_TIMEOUT", DEFAULT_TIMEOUT, 10, 86400),
                      env.int_setting("JUDGE_SERVE_MAX_OUTPUT_TOKENS", min(DEFAULT_MAX_OUTPUT_TOKENS, window - 1), 16,
                                      window - 1))
