"""Test double of the trainer: takes a "training step" every few seconds and
saves a LoRA checkpoint per step in ART's LocalBackend layout.

    python -m tests.doubles.step_trainer --config X [steps=N] [step_seconds=2] [crash=always]
        [crash_at=K] [save_sleep=S] [save_sleep_at=K] [startup_seconds=S] [hang_at=K]
        [preflight=CONFIG] [preflight_overrides=KEY=VALUE,KEY=VALUE]

Same argv shape and contract as the real trainer (docs/design.md):

- resumes from ``hpc.checkpoints.latest_complete($HPC_MODEL_DIR)`` (moving a
  newer half-written folder aside first, as the real trainer does);
- logs every trained step to ``$HPC_RUN_DIR/steps.log``, one line each:
  ``step=K job=ID restart=R start=<epoch> end=<epoch>``, so tests can check
  that each step was trained exactly once;
- saves ``checkpoints/<KKKK>/`` with adapter_config.json and a small valid
  adapter_model.safetensors written *non-atomically* (a kill mid-save leaves an
  incomplete folder); ``save_sleep=S`` sleeps S seconds half-way through the
  safetensors file (only at step ``save_sleep_at`` if given, and once per run);
- writes progress.json after every step, done.json after the last one (exit 0);
- on SIGUSR1/SIGTERM finishes the step in flight, saves it, and exits 75;
- ``crash=always`` exits 1 before training anything; ``crash_at=K`` exits 3
  instead of training step K (once per run);
- ``startup_seconds=S`` takes S seconds before the first step (model load, vLLM);
  ``hang_at=K`` makes no step K and no progress until a stop signal (once per
  run: a stalled trainer, for the health checks).

- ``preflight=CONFIG`` first runs the trainer's own preflight (trainer/preflight.py)
  for that trainer config (with ``preflight_overrides``) and the job's environment,
  and exits as the trainer would (78 permanent, 69 transient): real-Slurm tests
  fail a job with the real checks.

Its pid goes to ``$HPC_RUN_DIR/trainer.pid`` and, while it sleeps mid-save,
``$HPC_RUN_DIR/saving`` names the step, so a test can ``kill -9`` it there.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from hpc.checkpoints import ADAPTER_CONFIG, ADAPTER_WEIGHTS, latest_complete, quarantine_incomplete, step_dir
from hpc.rundir import EXIT_STOPPED_FOR_TIME, RunDir

STOP: list[str] = []  # the signal that asked us to stop, if any
STEPS_LOG = "steps.log"


@dataclass(frozen=True)
class Options:
    steps: int = 10
    step_seconds: float = 2.0
    crash: str = "never"
    crash_at: int = 0
    startup_seconds: float = 0.0  # before the first step, as a model load
    hang_at: int = 0  # stall before this step until a stop signal
    save_sleep: float = 0.0
    save_sleep_at: int = 0
    preflight: str = ""  # a trainer config: run trainer/preflight.py's checks for it first
    preflight_overrides: str = ""  # its key=value overrides, comma-separated


def parse_args(argv: list[str]) -> Options:
    """``--config NAME key=value ...``; unknown keys are an error (typos must not pass silently)."""
    values: dict[str, str] = {}
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg == "--config":
            args.pop(0)
            continue
        key, sep, value = arg.partition("=")
        if not sep or key not in Options.__dataclass_fields__:
            raise SystemExit(f"step_trainer: unknown argument {arg!r}")
        values[key] = value
    types = {"steps": int, "step_seconds": float, "crash": str, "crash_at": int, "startup_seconds": float, "hang_at": int, "save_sleep": float,
             "save_sleep_at": int, "preflight": str, "preflight_overrides": str}
    return Options(**{k: types[k](v) for k, v in values.items()})


def on_signal(signum: int, _frame: object) -> None:
    name = signal.Signals(signum).name
    if not STOP:
        STOP.append(name)
    print(f"step_trainer: got {name}: stopping after the step in flight", flush=True)


def safetensors_bytes(step: int) -> bytes:
    """A valid safetensors file: one float32 tensor of 4 values, with the step in its metadata."""
    data = struct.pack("<4f", float(step), 1.0, 2.0, 3.0)
    header = {"__metadata__": {"format": "pt", "step": str(step)},
              "lora_A.weight": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, len(data)]}}
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + data


def save_checkpoint(model_dir: Path, run: RunDir, step: int, opts: Options) -> None:
    """Write the step's folder in place, like PEFT's save_pretrained (no rename)."""
    folder = step_dir(model_dir, step)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ADAPTER_CONFIG).write_text(json.dumps({"peft_type": "LORA", "r": 8, "step": step}))
    blob = safetensors_bytes(step)
    with open(folder / ADAPTER_WEIGHTS, "wb") as handle:
        handle.write(blob[: len(blob) // 2])
        handle.flush()
        if should_sleep_mid_save(run, step, opts):
            (run.path / "saving").write_text(str(step))
            print(f"step_trainer: sleeping {opts.save_sleep}s half-way through saving step {step}", flush=True)
            time.sleep(opts.save_sleep)
        handle.write(blob[len(blob) // 2:])
    (run.path / "saving").unlink(missing_ok=True)


def should_sleep_mid_save(run: RunDir, step: int, opts: Options) -> bool:
    if opts.save_sleep <= 0 or (opts.save_sleep_at and step != opts.save_sleep_at):
        return False
    return once(run, f"save_sleep_{step}")


def once(run: RunDir, name: str) -> bool:
    """True the first time ``name`` is asked for in this run (a marker file)."""
    try:
        (run.path / f".{name}").touch(exist_ok=False)
        return True
    except FileExistsError:
        return False


@dataclass(frozen=True)
class TrainedStep:
    """One line of steps.log: a step trained (and logged before its checkpoint is saved)."""

    step: int
    job: str
    restart: int
    start: float
    end: float


def read_steps(run: RunDir) -> list[TrainedStep]:
    """Every step the double trained in this run, in order (tests and the bench read this)."""
    path = run.path / STEPS_LOG
    if not path.exists():
        return []
    steps = []
    for line in path.read_text().splitlines():
        f = dict(part.split("=", 1) for part in line.split())
        steps.append(TrainedStep(int(f["step"]), f["job"], int(f["restart"]), float(f["start"]), float(f["end"])))
    return steps


def log_step(run: RunDir, step: int, start: float, end: float) -> None:
    line = (f"step={step} job={os.environ.get('SLURM_JOB_ID', 'local')} "
            f"restart={os.environ.get('SLURM_RESTART_COUNT', '0')} start={start:.3f} end={end:.3f}\n")
    fd = os.open(run.path / STEPS_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def train(run: RunDir, model_dir: Path, opts: Options) -> int:
    quarantine_incomplete(model_dir)
    latest = latest_complete(model_dir)
    if latest is None:  # ART saves the untrained adapter as step 0 when a model is registered
        save_checkpoint(model_dir, run, 0, opts)
    start_step = latest.step if latest else 0
    print(f"step_trainer: resuming from step {start_step} of {opts.steps}", flush=True)
    if wait_for_stop(opts.startup_seconds):  # a stop during the start-up: nothing trained
        return EXIT_STOPPED_FOR_TIME
    step = start_step
    for step in range(start_step + 1, opts.steps + 1):
        if STOP:
            print(f"step_trainer: stopped ({STOP[0]}) at step {step - 1}", flush=True)
            return EXIT_STOPPED_FOR_TIME
        if opts.hang_at == step and once(run, f"hang_at_{step}"):
            print(f"step_trainer: hanging before step {step} (hang_at) until a stop signal", flush=True)
            wait_for_stop(float("inf"))
            return EXIT_STOPPED_FOR_TIME
        if opts.crash_at == step and once(run, f"crash_at_{step}"):
            print(f"step_trainer: crashing at step {step} (crash_at)", file=sys.stderr, flush=True)
            return 3
        began = time.time()
        time.sleep(opts.step_seconds)  # PEP 475: a signal does not cut the step short
        log_step(run, step, began, time.time())
        save_checkpoint(model_dir, run, step, opts)
        run.write_progress({"step": step, "total_steps": opts.steps, "seconds_per_step": opts.step_seconds,
                            "eta_seconds": (opts.steps - step) * opts.step_seconds})
        print(f"step_trainer: step {step} done", flush=True)
    run.mark_done(step, opts.steps)
    print(f"step_trainer: finished at step {step}", flush=True)
    return 0


def wait_for_stop(seconds: float) -> bool:
    """Sleep up to ``seconds``; True as soon as a stop signal came."""
    end = time.time() + seconds
    while not STOP and time.time() < end:
        time.sleep(min(0.1, max(0.0, end - time.time())))
    return bool(STOP)


def preflight(opts: Options) -> int:
    """The trainer's preflight for config ``opts.preflight``: 0, or its exit code (78, 69)."""
    import logging

    from trainer.config import ConfigError, load_config
    from trainer.preflight import EXIT_CONFIG_ERROR, run_job, targets_from_env

    handler = logging.StreamHandler(sys.stdout)  # its "ok" lines to the .out log, as the trainer's
    handler.setFormatter(logging.Formatter("step_trainer: %(message)s"))
    logging.getLogger("trainer.preflight").addHandler(handler)
    logging.getLogger("trainer.preflight").setLevel(logging.INFO)
    try:
        config = load_config(opts.preflight, [pair for pair in opts.preflight_overrides.split(",") if pair])
    except ConfigError as error:
        print(f"step_trainer: error: {error}", file=sys.stderr, flush=True)
        return EXIT_CONFIG_ERROR
    return run_job(config, targets_from_env(opts.preflight, config, os.environ), os.environ)


def main(argv: list[str] | None = None) -> int:
    for sig in (signal.SIGUSR1, signal.SIGTERM):  # first thing: a stop request must never kill us
        signal.signal(sig, on_signal)
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    run = RunDir(Path(os.environ["HPC_RUN_DIR"]))
    model_dir = Path(os.environ["HPC_MODEL_DIR"])
    (run.path / "trainer.pid").write_text(str(os.getpid()))
    failed = preflight(opts) if opts.preflight else 0
    if failed:
        return failed
    if opts.crash == "always":
        print("step_trainer: crashing before any step (crash=always)", file=sys.stderr, flush=True)
        return 1
    return train(run, model_dir, opts)


if __name__ == "__main__":
    sys.exit(main())
