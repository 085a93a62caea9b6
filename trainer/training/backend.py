"""The training backend and the model: ART's LocalBackend (or a class the config names), the LoRA
model with its GPU placement, and its registration, where the backend starts vLLM.

The seconds from the backend's construction to the model registered go to ``startups.jsonl``
(the stop-at-boundary rule predicts the next start-ups from them).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from hpc.job.gpu_modes import AUTO, GpuMode
from hpc.job.workload_env import HPC_VLLM_PORT
from trainer.staging.model_cache import offline_cache_problem
from trainer.training import startup_phases
from trainer.training.config import TrainerConfig, one_line, vllm_engine_args
from trainer.training.environment import Paths, metrics_reporters
from trainer.training.exits import BackendDidNotStart, SetupError

if TYPE_CHECKING:
    import art

log = logging.getLogger("trainer")


def build_model(config: TrainerConfig, run_name: str, report_metrics: list[str]) -> art.TrainableModel:
    """The LoRA model, with the config's GPU memory settings in ART's InternalModelConfig.

    ``run_name`` (the job name) names the checkpoint folder and the W&B run;
    ``config.model_name`` is only the alias vLLM serves the adapter under."""
    import art  # art only once the preflight passed and the environment is set (trainer.training.train)

    gpu_mode = GpuMode.SHARED if config.gpu_mode == AUTO else config.gpu_mode  # auto outside a launched job
    internal = art.dev.InternalModelConfig(
        init_args=art.dev.InitArgs(max_seq_length=config.max_seq_length, load_in_4bit=config.load_in_4bit),
        engine_args=art.dev.EngineArgs(**cast("art.dev.EngineArgs", vllm_engine_args(config, gpu_mode))),
        **gpu_placement(gpu_mode),
    )
    return art.TrainableModel(
        name=config.model_name,
        run_name=run_name,
        project=config.project,
        base_model=config.base_model,
        report_metrics=report_metrics,
        _internal_config=internal,
    )


def gpu_placement(gpu_mode: str, env: Mapping[str, str] = os.environ) -> art.dev.InternalModelConfig:
    """ART's dedicated mode for ``gpu_mode: dedicated``: Unsloth trains on the run's first
    GPU, vLLM serves from its second, so neither waits for the other to sleep. Shared: ART's
    default. ART writes these ids into CUDA_VISIBLE_DEVICES as they are (its trainer's and
    vLLM's), so they are the run's own device ids, not positions in its list: a pack's
    second run sees CUDA_VISIBLE_DEVICES=2,3, where [0] and [1] are the first run's GPUs."""
    if gpu_mode != GpuMode.DEDICATED:
        return {}
    devices = dedicated_devices(env.get("CUDA_VISIBLE_DEVICES", ""))
    return {"trainer_gpu_ids": [devices[0]], "inference_gpu_ids": [devices[1]]}


def dedicated_devices(visible: str) -> list[int]:
    """The run's GPUs as device ids, from CUDA_VISIBLE_DEVICES (unset: the node's first two)."""
    ids = [item.strip() for item in visible.split(",") if item.strip()]
    if not ids:
        return [0, 1]
    if len(ids) < 2 or not all(item.isdigit() for item in ids):
        raise SetupError(f"gpu_mode dedicated needs two GPUs named by index in CUDA_VISIBLE_DEVICES, got {visible!r}: "
                         "run it with 2 GPUs (hpc.launch asks for them), or set gpu_mode=shared")
    return [int(item) for item in ids]


def backend_class(spec: str) -> type:
    """The backend the config names (key ``backend``).

    ``local`` is ART's LocalBackend (vLLM + Unsloth on this node's GPUs; needs the
    GPU extras). Any other value is an import path ``package.module:ClassName`` of
    a class implementing ``art.Backend`` and taking ``path=``: a site can plug in
    its own backend without touching this loop (the tests use one that trains
    nothing, ``tests.doubles.art_backend:FakeBackend``)."""
    if spec == "local":
        try:
            from art.local import LocalBackend  # the GPU packages: only where the config asks for them
        except ImportError as error:
            raise SetupError(
                f"backend 'local' (ART's LocalBackend) cannot be imported ({error}); it needs the GPU "
                "packages: run `bash setup.sh` on a GPU node (pip install '.[backend]')"
            ) from None
        return LocalBackend
    module_name, _, class_name = spec.partition(":")
    try:
        return getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as error:
        raise SetupError(f"config key 'backend': cannot load {spec!r} ({error}); "
                         "accepted: 'local' or an import path 'package.module:ClassName'") from None


async def start_backend(config: TrainerConfig, paths: Paths,
                        resources: contextlib.AsyncExitStack) -> tuple[Any, art.TrainableModel]:
    """Construct the backend (closed with ``resources``) and register the model with it, where
    LocalBackend loads the model and starts vLLM; the seconds from construction to registered
    go to startups.jsonl, from which the next jobs predict their start-up."""
    began = time.monotonic()
    backend = backend_class(config.backend)(path=str(paths.art_path))
    resources.push_async_callback(backend.close)
    constructed = time.monotonic()
    log.info("backend: %s.%s at %s", type(backend).__module__, type(backend).__name__, paths.art_path)
    model = build_model(config, paths.run_name, metrics_reporters(os.environ))
    log.info("model built: %s (run %s, base %s, gpu_mode %s); registering with the backend",
             model.name, model.run_name, model.base_model, config.gpu_mode)
    registering, vllm_log = time.monotonic(), vllm_log_path(model, paths)
    watch = startup_phases.LogWatch(vllm_log, time.time()).start() if vllm_log else None
    try:
        await register(model, backend)
    finally:
        if watch is not None:
            watch.stop()
    registered = time.monotonic()
    seen = vllm_log is not None and watch is not None and watch.seen is not None
    phases = startup_phases.phases(began, constructed, registering, registered, watch,
                                   startup_phases.read_log(vllm_log) if seen and vllm_log else None)
    paths.run_dir.append_startup(registered - began, phases)
    log.info("registered: inference at %s as %s (start-up %.1fs: %s)", model.inference_base_url,
             model.inference_model_name, registered - began,
             ", ".join(f"{k} {v:.1f}s" for k, v in phases.items() if isinstance(v, float)))
    return backend, model


def vllm_log_path(model: art.TrainableModel, paths: Paths) -> Path | None:
    """The log ART's vLLM writes under the model's folder (art.utils.output_dirs names it), or None
    where this ART names no such folder: the start-up is then timed without vLLM's split."""
    try:
        from art.utils.output_dirs import get_model_dir

        return Path(get_model_dir(model=model, art_path=str(paths.art_path))) / startup_phases.VLLM_LOG
    except (ImportError, AttributeError, TypeError) as error:
        log.info("start-up phases: no vLLM log to watch (%s)", one_line(error))
        return None


async def register(model: art.TrainableModel, backend: Any) -> None:
    """``model.register``, where ART's LocalBackend starts its model service (Unsloth, then
    vLLM) in a child process that prints its own error; a failure there is one line here."""
    try:
        await model.register(backend, _openai_client_config=server_config(os.environ))
    except RuntimeError as error:
        raise BackendDidNotStart(f"the training backend did not start: {one_line(error)} "
                                 "(its own error is above)") from error


def server_config(env: dict[str, str] | os._Environ) -> art.dev.OpenAIServerConfig | None:
    """The vLLM port a pack job gave this run (HPC_VLLM_PORT: each run of a pack has its own,
    hpc/job/pack.py); None lets ART pick a free one."""
    port = env.get(HPC_VLLM_PORT, "")
    return {"server_args": {"port": int(port)}} if port.isdigit() else None


def check_models_cached(config: TrainerConfig, env: dict[str, str] | os._Environ) -> None:
    """Offline (HF_HUB_OFFLINE=1), ART's LocalBackend can load only what the HF cache holds:
    fail now, naming the missing repositories, not after minutes of start-up."""
    if config.backend != "local" or env.get("HF_HUB_OFFLINE") != "1":
        return
    problem = offline_cache_problem(config.base_model, env)
    if problem:
        raise SetupError(problem)
