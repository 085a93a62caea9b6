"""Test double of the trainer: takes a "training step" every few seconds and
saves a LoRA checkpoint per step in ART's LocalBackend layout.

    python -m tests.doubles.step_trainer --config X [steps=N] [step_seconds=2|LOW-HIGH] [crash=always]
        [crash_at=K] [save_sleep=S] [save_sleep_at=K] [rollout_share=F] [seed=N]
        [stop_at_boundary=false|true] [boundary_recent_steps=5] [boundary_safety_factor=1.2]
        [boundary_margin_seconds=30] [startup_seconds=S] [hang_at=K]
        [preflight=CONFIG] [preflight_overrides=KEY=VALUE,KEY=VALUE]
        [validate_every=K curve=VALIDATION_JSONL] [learning_rate=X] [on_decline=continue|stop|rollback]
        [decline_points=5] [decline_validations=2] [rollback_lr_scale=0.5] [max_rollbacks=2]

Same argv shape and contract as the real trainer (docs/design.md):

- resumes from ``hpc.run.checkpoints.latest_complete($HPC_MODEL_DIR)`` (moving a
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
- ``step_seconds=LOW-HIGH`` draws each step's length from a RNG seeded with
  ``seed`` and the step number, so every run (and every redo of a step) is the
  same; ``rollout_share=F`` spends that share of a step in a rollout phase, which
  a stop signal abandons (the step is not trained and the next job redoes it; its
  seconds are recorded as lost), the rest in training and the save, which a signal
  lets finish. 0 (the default) is all training, as before;
- ``stop_at_boundary=true`` applies the trainer's stop-at-boundary rule
  (hpc/job/deadline.py, same settings and defaults): a step predicted not to end
  before the job's stop signal is not started, and the double exits 75; so is the
  start-up, as the trainer's backend start, when it and the first step after it
  (``startups.jsonl``, ``steps.jsonl``) would not end before the signal;
- appends ``steps.jsonl`` records (``seconds``, ``rollout_seconds``: what the
  rule predicts from) and ``stops.jsonl`` records (boundary, signal, finished),
  as the trainer does;
- ``crash=always`` exits 1 before training anything; ``crash_at=K`` exits 3
  instead of training step K (once per run);
- ``startup_seconds=S`` takes S seconds before the first step (model load, vLLM),
  recorded in ``startups.jsonl`` as the trainer records its backend's start-up;
  ``hang_at=K`` makes no step K and no progress until a stop signal (once per
  run: a stalled trainer, for the health checks).

- ``preflight=CONFIG`` first runs the trainer's own preflight (trainer/training/preflight.py)
  for that trainer config (with ``preflight_overrides``) and the job's environment,
  and exits as the trainer would (78 permanent, 69 transient): real-Slurm tests
  fail a job with the real checks.

- ``validate_every=K curve=PATH`` validates every K steps (and the run's step 0) as the trainer
  does, with the accuracy a recorded ``validation.jsonl`` (PATH: docs/results' records) gives at the
  checkpoint's *progress*: each step adds the step's learning rate over ``learning_rate`` (1 before
  any rollback), and a checkpoint copied forward keeps its source's (adapter_config.json
  ``progress``), so a rolled-back run climbs the recorded curve again from its best, more slowly;
  then the trainer's decline rule (hpc/job/on_decline.py, the ``on_decline`` ... keys) acts on it as
  in the trainer, and ``settle`` runs at the start; steps.jsonl records each step's ``learning_rate``.

Optimizer state: like a trainer's AdamW moments, the double keeps two numbers (m, v), updated
by every step from a made-up gradient (``optimizer_update``), resumed from the latest
checkpoint's ``optimizer.safetensors`` (zeros where there is none, as a fresh optimizer) and
saved beside each step's adapter; ``expected_optimizer(N)`` is what N steps in one go give, so a
test checks by value that a resumed or moved run lost none of it.

Its pid goes to ``$HPC_RUN_DIR/trainer.pid`` and, while it sleeps mid-save,
``$HPC_RUN_DIR/saving`` names the step, so a test can ``kill -9`` it there.
"""

from __future__ import annotations

import json
import os
import random
import signal
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from hpc.job.deadline import (
    BoundaryRule,
    BoundarySettings,
    EndTimeError,
    StopReason,
    StopRecord,
    record_stop,
    startup_durations,
    step_durations,
)
from hpc.job.exit_codes import EXIT_STOPPED_FOR_TIME
from hpc.job.on_decline import after_validation, settle
from hpc.run.checkpoints import ADAPTER_CONFIG, ADAPTER_WEIGHTS, latest_complete, quarantine_incomplete, step_dir
from hpc.run.decline import Decisions, DeclineSettings
from hpc.run.ledger import DeclineAction
from hpc.run.rundir import RunDir, utc_now

STOP: list[str] = []  # the signal that asked us to stop, if any
STEPS_LOG = "steps.log"
OPTIMIZER_FILE = "optimizer.safetensors"  # the double's optimizer state, beside each step's adapter
OPTIMIZER: list[float] = [0.0, 0.0]  # (m, v) as this process holds them


@dataclass(frozen=True)
class Options:
    steps: int = 10
    step_seconds: tuple[float, float] = (2.0, 2.0)  # a step's length: fixed, or drawn from [low, high]
    crash: str = "never"
    crash_at: int = 0
    startup_seconds: float = 0.0  # before the first step, as a model load
    hang_at: int = 0  # stall before this step until a stop signal
    save_sleep: float = 0.0
    save_sleep_at: int = 0
    rollout_share: float = 0.0  # share of a step a stop signal abandons (rollouts), the rest trains and saves
    seed: int = 0
    stop_at_boundary: bool = False  # off: the stop signal alone ends the work (fixed-signal mode)
    boundary_recent_steps: int = BoundarySettings.recent_steps
    boundary_safety_factor: float = BoundarySettings.safety_factor
    boundary_margin_seconds: float = BoundarySettings.margin_seconds
    preflight: str = ""  # a trainer config: run trainer/training/preflight.py's checks for it first
    preflight_overrides: str = ""  # its key=value overrides, comma-separated
    validate_every: int = 0  # 0: no validation
    curve: str = ""  # a validation.jsonl whose accuracies the checkpoints score, by their progress
    learning_rate: float = 1e-5
    on_decline: str = "continue"
    decline_points: float = DeclineSettings.points
    decline_validations: int = DeclineSettings.validations
    rollback_lr_scale: float = DeclineSettings.lr_scale
    max_rollbacks: int = DeclineSettings.max_rollbacks

    def step_length(self, step: int) -> float:
        """This step's seconds: the same for a step every time it is drawn (redone, or in another run)."""
        low, high = self.step_seconds
        return random.Random(f"{self.seed}:{step}").uniform(low, high) if high > low else low

    @property
    def boundary(self) -> BoundarySettings:
        return BoundarySettings(self.boundary_recent_steps, self.boundary_safety_factor, self.boundary_margin_seconds)

    @property
    def decline(self) -> DeclineSettings:
        return DeclineSettings(DeclineAction(self.on_decline), self.decline_points, self.decline_validations, False,
                               self.rollback_lr_scale, self.max_rollbacks)


def seconds_range(text: str) -> tuple[float, float]:
    """``2`` -> (2, 2); ``20-40`` -> (20, 40)."""
    low, _, high = text.partition("-")
    bounds = (float(low), float(high or low))
    if not 0 <= bounds[0] <= bounds[1]:
        raise ValueError(text)
    return bounds


def on_off(text: str) -> bool:
    if text.lower() in ("true", "on", "1", "yes"):
        return True
    if text.lower() in ("false", "off", "0", "no"):
        return False
    raise ValueError(text)


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
    types = {"steps": int, "step_seconds": seconds_range, "crash": str, "crash_at": int, "startup_seconds": float, "hang_at": int, "save_sleep": float,
             "save_sleep_at": int, "rollout_share": float, "seed": int, "stop_at_boundary": on_off,
             "boundary_recent_steps": int, "boundary_safety_factor": float, "boundary_margin_seconds": float,
             "preflight": str, "preflight_overrides": str, "validate_every": int, "curve": str,
             "learning_rate": float, "on_decline": str, "decline_points": float, "decline_validations": int,
             "rollback_lr_scale": float, "max_rollbacks": int}
    try:
        return Options(**{k: types[k](v) for k, v in values.items()})
    except ValueError as error:
        raise SystemExit(f"step_trainer: bad value in {' '.join(argv)!r}: {error}") from None


def on_signal(signum: int, _frame: object) -> None:
    name = signal.Signals(signum).name
    if not STOP:
        STOP.append(name)
    print(f"step_trainer: got {name}: stopping after the step in flight", flush=True)


def safetensors_bytes(step: int) -> bytes:
    """A valid safetensors file: one float32 tensor of 4 values, with the step in its metadata."""
    return safetensors_of({"lora_A.weight": ("F32", [2, 2], [float(step), 1.0, 2.0, 3.0])},
                          {"format": "pt", "step": str(step)})


SAFETENSORS_FORMATS = {"F32": "f", "F16": "e"}


def safetensors_of(tensors: dict[str, tuple[str, list[int], list[float]]], metadata: dict | None = None) -> bytes:
    """A safetensors file of ``tensors`` (name -> dtype F32 or F16, shape, values), in their order."""
    header: dict = {} if metadata is None else {"__metadata__": metadata}
    data = b""
    for name, (dtype, shape, values) in tensors.items():
        raw = struct.pack(f"<{len(values)}{SAFETENSORS_FORMATS[dtype]}", *values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    return struct.pack("<Q", len(encoded)) + encoded + data


def save_checkpoint(model_dir: Path, run: RunDir, step: int, opts: Options, progress: float | None = None) -> None:
    """Write the step's folder in place, like PEFT's save_pretrained (no rename)."""
    folder = step_dir(model_dir, step)
    folder.mkdir(parents=True, exist_ok=True)
    progress = float(step) if progress is None else progress
    (folder / ADAPTER_CONFIG).write_text(json.dumps({"peft_type": "LORA", "r": 8, "step": step, "progress": progress}))
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


def as_f32(values: list[float]) -> list[float]:
    return list(struct.unpack(f"<{len(values)}f", struct.pack(f"<{len(values)}f", *values)))


def optimizer_update(state: list[float], step: int) -> list[float]:
    """One Adam-like update of the moments (m, v) with step ``step``'s made-up gradient, kept in float32
    (as saved: a resumed state is the one held)."""
    grad = ((step * 7919) % 13) / 13 - 0.5
    m, v = state
    return as_f32([0.9 * m + 0.1 * grad, 0.999 * v + 0.001 * grad * grad])


def expected_optimizer(steps: int, start: int = 1) -> list[float]:
    """The moments after steps ``start``..``steps`` from a fresh (zero) state."""
    state = [0.0, 0.0]
    for step in range(start, steps + 1):
        state = optimizer_update(state, step)
    return state


def read_optimizer(folder: Path) -> list[float] | None:
    """The moments saved in a checkpoint folder, None where there are none."""
    try:
        data = (folder / OPTIMIZER_FILE).read_bytes()
    except FileNotFoundError:
        return None
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    begin, end = header["moments"]["data_offsets"]
    raw = data[8 + length + begin:8 + length + end]
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def save_optimizer(folder: Path, state: list[float]) -> None:
    (folder / OPTIMIZER_FILE).write_bytes(safetensors_of({"moments": ("F32", [len(state)], state)}))


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


def train(run: RunDir, model_dir: Path, opts: Options, rule: BoundaryRule) -> int:
    quarantine_incomplete(model_dir)
    if settle(run, model_dir, say) is not None:  # as the trainer: a run the decline rule stopped
        return 0
    latest = latest_complete(model_dir)
    start_step = latest.step if latest else 0
    OPTIMIZER[:] = (read_optimizer(latest.path) if latest else None) or [0.0, 0.0]
    print(f"step_trainer: resuming from step {start_step} of {opts.steps} (optimizer moments {OPTIMIZER})",
          flush=True)
    say(rule.describe())
    decision = rule.check_start(startup_durations(run), step_durations(run))
    if not decision.fits:  # as the trainer before its backend starts
        say(f"{decision.describe(f'step {start_step + 1}')}: not starting up; stopping with {start_step} steps done")
        record_stop(run, StopRecord.boundary(start_step, decision))
        return EXIT_STOPPED_FOR_TIME
    if not start_up(run, model_dir, opts, latest is None):  # a stop during the start-up: nothing trained
        record_stop(run, StopRecord(start_step, StopReason.SIGNAL))
        return EXIT_STOPPED_FOR_TIME
    if latest is None and opts.validate_every:
        validate(run, model_dir, opts, 0)
    done, scale = start_step, Decisions.read(run).lr_scale
    for step in range(start_step + 1, opts.steps + 1):
        if STOP:
            print(f"step_trainer: stopped ({STOP[0]}) at step {done}", flush=True)
            record_stop(run, StopRecord(done, StopReason.SIGNAL))
            return EXIT_STOPPED_FOR_TIME
        if opts.hang_at == step and once(run, f"hang_at_{step}"):
            say(f"hanging before step {step} (hang_at) until a stop signal")
            wait_for_stop(float("inf"))
            record_stop(run, StopRecord(done, StopReason.SIGNAL))
            return EXIT_STOPPED_FOR_TIME
        if opts.crash_at == step and once(run, f"crash_at_{step}"):
            print(f"step_trainer: crashing at step {step} (crash_at)", file=sys.stderr, flush=True)
            return 3
        decision = rule.check(step_durations(run))
        if not decision.fits:
            say(f"{decision.describe(f'step {step}')}: not starting it; stopping with {done} steps done")
            record_stop(run, StopRecord.boundary(done, decision))
            return EXIT_STOPPED_FOR_TIME
        if not train_step(run, model_dir, opts, step, scale):
            return EXIT_STOPPED_FOR_TIME
        done = step
        if opts.validate_every and step % opts.validate_every == 0 and step < opts.steps:
            exit_code = validate_and_judge(run, model_dir, opts, step)
            if exit_code is not None:
                return exit_code
    run.mark_done(done, opts.steps)
    record_stop(run, StopRecord(done, StopReason.FINISHED))
    print(f"step_trainer: finished at step {done}", flush=True)
    return 0


def start_up(run: RunDir, model_dir: Path, opts: Options, new_run: bool) -> bool:
    """The trainer's backend start: step 0 saved for a new run (ART saves the untrained adapter
    when a model is registered), then ``startup_seconds``, recorded in startups.jsonl; False
    when a stop signal came first (nothing recorded: the start-up did not complete)."""
    began = time.time()
    if new_run:
        save_checkpoint(model_dir, run, 0, opts)
    if wait_for_stop(opts.startup_seconds):
        return False
    run.append_startup(time.time() - began)
    return True


def progress_of(model_dir: Path, step: int) -> float:
    """How far up the recorded curve a checkpoint is (its adapter_config.json; else its step)."""
    try:
        return float(json.loads((step_dir(model_dir, step) / ADAPTER_CONFIG).read_text()).get("progress", step))
    except (OSError, ValueError):
        return float(step)


def curve_accuracy(path: str, progress: float) -> float:
    """The recorded validations' accuracy at ``progress``, linear between their steps."""
    records = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    points = sorted((int(r["step"]), float(r["accuracy"])) for r in records)
    if progress <= points[0][0]:
        return points[0][1]
    for (s0, a0), (s1, a1) in zip(points, points[1:]):
        if progress <= s1:
            return round(a0 + (a1 - a0) * (progress - s0) / (s1 - s0), 4)
    return points[-1][1]


def validate(run: RunDir, model_dir: Path, opts: Options, step: int) -> None:
    accuracy = curve_accuracy(opts.curve, progress_of(model_dir, step))
    run.record_validation({"step": step, "accuracy": accuracy, "questions": 300, "seconds": 0.0}, [])
    say(f"validation at step {step}: accuracy {accuracy:.3f}")


def validate_and_judge(run: RunDir, model_dir: Path, opts: Options, step: int) -> int | None:
    """The validation at ``step`` and the trainer's decline rule on it: the exit code when it ends
    the job (0: stopped, 75: rolled back), else None."""
    validate(run, model_dir, opts, step)
    acted = after_validation(run, model_dir, opts.decline, opts.steps, say)
    if acted is None or acted.action is DeclineAction.CONTINUE:
        return None
    rollback = acted.action is DeclineAction.ROLLBACK
    record_stop(run, StopRecord(acted.record.to_step or step, StopReason.ROLLBACK) if rollback else StopRecord(step, StopReason.DECLINED))
    return EXIT_STOPPED_FOR_TIME if rollback else 0


def train_step(run: RunDir, model_dir: Path, opts: Options, step: int, scale: float = 1.0) -> bool:
    """Rollouts (abandoned on a stop signal: False), then training and the save (never cut short)."""
    seconds = opts.step_length(step)
    began, started_at = time.time(), utc_now()
    lost = rollout_phase(seconds * opts.rollout_share)
    if lost is not None:
        say(f"got {STOP[0]} during step {step}'s rollouts: abandoning them ({lost:.1f} rollout-seconds lost)")
        record_stop(run, StopRecord(step - 1, StopReason.SIGNAL, lost))
        return False
    rolled = time.time()
    time.sleep(seconds * (1 - opts.rollout_share))  # PEP 475: a signal does not cut training short
    log_step(run, step, began, time.time())
    OPTIMIZER[:] = optimizer_update(OPTIMIZER, step)
    save_checkpoint(model_dir, run, step, opts, progress_of(model_dir, step - 1) + scale)
    save_optimizer(step_dir(model_dir, step), OPTIMIZER)
    mean = sum(opts.step_seconds) / 2
    run.write_progress({"step": step, "total_steps": opts.steps, "seconds_per_step": mean,
                        "eta_seconds": (opts.steps - step) * mean})
    run.append_step({"step": step, "started": started_at, "seconds": round(time.time() - began, 3),
                     "rollout_seconds": round(rolled - began, 3), "learning_rate": opts.learning_rate * scale})
    print(f"step_trainer: step {step} done", flush=True)
    return True


def rollout_phase(seconds: float) -> float | None:
    """Sleep through a step's rollouts; the seconds they had run if a stop signal came first."""
    began = time.time()
    while (left := began + seconds - time.time()) > 0:
        if STOP:
            return time.time() - began
        time.sleep(min(left, 0.05))
    return None


def wait_for_stop(seconds: float) -> bool:
    """Sleep up to ``seconds``; True as soon as a stop signal came."""
    end = time.time() + seconds
    while not STOP and time.time() < end:
        time.sleep(min(0.1, max(0.0, end - time.time())))
    return bool(STOP)


def say(message: str) -> None:
    print(f"step_trainer: {message}", flush=True)


def preflight(opts: Options) -> int:
    """The trainer's preflight for config ``opts.preflight``: 0, or its exit code (78, 69)."""
    import logging

    from hpc.job.exit_codes import EXIT_CONFIG_ERROR
    from trainer.training.config import ConfigError, load_config
    from trainer.training.preflight import run_job, targets_from_env

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
    print(f"step_trainer: GPUs {os.environ.get('CUDA_VISIBLE_DEVICES', '')!r} (CUDA_VISIBLE_DEVICES)", flush=True)
    if opts.crash == "always":
        print("step_trainer: crashing before any step (crash=always)", file=sys.stderr, flush=True)
        return 1
    try:
        rule = BoundaryRule.from_env(os.environ, opts.boundary, enabled=opts.stop_at_boundary, say=say)
    except EndTimeError as error:
        print(f"step_trainer: {error}", file=sys.stderr, flush=True)
        return 2
    return train(run, model_dir, opts, rule)


if __name__ == "__main__":
    sys.exit(main())
