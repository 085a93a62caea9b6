"""GPU memory in the GPU proof: what each process holds and when, what vLLM says it took, and
hpc.launcher.gpu_memory's estimate for the same plan, with the launcher's target (the estimate
within 15% of the measured peak, and never below it).

- ``ProcessMemory`` samples nvidia-smi each second: the GPU's total, and each compute process's
  memory (``--query-compute-apps``), summed by kind (vLLM: its runtime and engine processes;
  training: the trainer and ART's Unsloth service) and by the phase the trainer's log is in
  (loading, rollouts, training, idle). Where nvidia-smi lists no process (some containers), the
  per-kind figures are missing and the proof says so; the GPU's total still counts.
- ``vllm_memory`` reads vLLM's own log lines (the weights it loaded, the KV cache it was left,
  its CUDA graphs, its context), from which the memory one ``max_model_len`` sequence needs is
  measured like the estimate's ``vllm_need``: everything vLLM holds but the KV cache, plus one
  sequence's KV cache.
- ``trainer_torch_peaks`` reads what trainer/proof/card_emulation/sitecustomize.py wrote: each training
  process's own peak of torch's allocator (it misses the CUDA context, nvidia-smi does not).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from trainer.proof.gpus import MemorySampler, gpu_total_gib, nvidia_smi
from trainer.proof.workspace import Work

if TYPE_CHECKING:
    from hpc.launcher.gpu_memory import ModelShape

GIB_MIB = 1024
TARGET_MARGIN = 0.15  # the launcher's estimate is within 15% above the measured peak
PHASE_MARKERS = (  # the trainer's log lines that start a phase, in the order they are tried
    (re.compile(r"\] backend: "), "loading"),
    (re.compile(r"\] registered: "), "idle"),
    (re.compile(r"\] validation at step \d+: \d+ questions"), "rollouts"),
    (re.compile(r"\] step \d+/\d+ \(epoch \d+\): rollouts on"), "rollouts"),
    (re.compile(r"\] step \d+/\d+: training on"), "training"),
    (re.compile(r"\] step \d+/\d+ done in"), "idle"),
)


# -- which process, which phase ------------------------------------------------------------------------


def parse_compute_apps(output: str) -> list[tuple[str, str, str, int]]:
    """``nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv,noheader,nounits``:
    (GPU uuid, pid, process name, MiB) for each line that has them."""
    apps = []
    for line in output.splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) == 4 and parts[1].isdigit() and parts[3].isdigit():
            apps.append((parts[0], parts[1], parts[2], int(parts[3])))
    return apps


def process_kind(pid: str, name: str, proc: Path = Path("/proc")) -> str:
    """vllm (ART's vLLM runtime and its engine: their executable lives in the runtime's venv, whose
    path names vLLM), training (any other Python: the trainer, ART's Unsloth service), or other.
    nvidia-smi's process name is the executable's path; where it has none (a container's other PID
    namespace) the process's command line, if this namespace has that pid."""
    described = name
    if not name or name.startswith("["):
        try:
            described = (proc / pid / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            described = name
    described = described.lower()
    if "vllm" in described or "enginecore" in described:
        return "vllm"
    return "training" if "python" in described else "other"


@dataclass
class LogPhase:
    """The phase a trainer is in, from the last marker line its log has so far (read on from
    where the last call stopped)."""

    log: Path
    phase: str = "start"
    _offset: int = 0

    def __call__(self) -> str:
        try:
            with self.log.open("rb") as handle:
                handle.seek(self._offset)
                added = handle.read()
        except OSError:
            return self.phase
        complete = added[:added.rfind(b"\n") + 1]
        self._offset += len(complete)
        for line in complete.decode(errors="replace").splitlines():
            self.phase = next((phase for marker, phase in PHASE_MARKERS if marker.search(line)), self.phase)
        return self.phase


@dataclass
class ProcessMemory(MemorySampler):
    """MemorySampler's per-GPU peaks, and on ``gpu`` the peak of each kind of process in each
    phase (MiB) and the phases' GPU totals."""

    gpu: str = "0"
    phase: Callable[[], str] = lambda: "-"
    kind_peaks: dict[tuple[str, str], int] = field(default_factory=dict)
    total_peaks: dict[str, int] = field(default_factory=dict)
    at_training_peak: dict[str, int] = field(default_factory=dict)  # every kind's MiB when training peaked
    processes_seen: int = 0
    _uuid: str | None = None

    def sample(self) -> dict[str, int]:
        used = super().sample()
        phase = self.phase()
        self.total_peaks[phase] = max(self.total_peaks.get(phase, 0), used.get(self.gpu, 0))
        apps = [app for app in parse_compute_apps(nvidia_smi("--query-compute-apps=gpu_uuid,pid,process_name,used_memory",
                                                              "--format=csv,noheader,nounits"))
                if app[0] == self.uuid()]
        self.processes_seen = max(self.processes_seen, len(apps))
        sums: dict[str, int] = {}
        for _, pid, name, mib in apps:
            kind = process_kind(pid, name)
            sums[kind] = sums.get(kind, 0) + mib
        for kind, mib in sums.items():
            self.kind_peaks[(kind, phase)] = max(self.kind_peaks.get((kind, phase), 0), mib)
        if phase == "training" and sums.get("training", 0) > self.at_training_peak.get("training", 0):
            self.at_training_peak = sums  # vLLM asleep then (it wakes before the phase ends)
        return used

    def beside_training_peak_gib(self, kind: str) -> float | None:
        """What ``kind`` held when the training processes peaked (None: never seen)."""
        mib = self.at_training_peak.get(kind)
        return None if mib is None else mib / GIB_MIB

    def uuid(self) -> str:
        if self._uuid is None:
            self._uuid = nvidia_smi("--query-gpu=uuid", "--format=csv,noheader", "-i", self.gpu).strip()
        return self._uuid

    def kind_peak_gib(self, kind: str, *phases: str) -> float | None:
        """The peak of ``kind`` over ``phases`` (all when none), None where nvidia-smi listed no process."""
        found = [mib for (k, phase), mib in self.kind_peaks.items() if k == kind and (not phases or phase in phases)]
        return max(found) / GIB_MIB if found else None

    def total_gib(self, *phases: str) -> float:
        found = [mib for phase, mib in self.total_peaks.items() if not phases or phase in phases]
        return max(found, default=0) / GIB_MIB


# -- what vLLM says -------------------------------------------------------------------------------------


_VLLM_LINES = {
    "weights_gib": re.compile(r"Model loading took ([0-9.]+) GiB"),
    "kv_available_gib": re.compile(r"Available KV cache memory: (-?[0-9.]+) GiB"),
    "kv_tokens": re.compile(r"GPU KV cache size: ([0-9,]+) tokens"),
    "cuda_graph_gib": re.compile(r"CUDA graph pool memory: ([0-9.]+) GiB \(actual\)"),
    "max_model_len": re.compile(r"Using max model len (\d+)"),
}
# vLLM's refusals for want of KV cache within its share (what the launcher's plan decides), and for
# want of free memory on the device (another process holds it: not the plan's doing)
_VLLM_REFUSED = re.compile(r"(To serve at least one request with the model's max seq len.*?GiB\)\.|"
                           r"No available memory for the cache blocks\.)")
_VLLM_NOT_FREE = re.compile(r"(Free memory on device .*? is less than desired GPU memory utilization[^.]*\.)")


@dataclass(frozen=True)
class VllmMemory:
    """vLLM's own account of its memory, from its log (None: the line is not there)."""

    weights_gib: float | None = None
    kv_available_gib: float | None = None
    kv_tokens: int | None = None
    cuda_graph_gib: float | None = None
    max_model_len: int | None = None
    refused: str | None = None  # vLLM's words: no KV cache for one max_model_len sequence within its share
    not_free: str | None = None  # vLLM's words: the device had less free memory than its share

    def need_gib(self, requested_gib: float) -> float | None:
        """What one ``max_model_len`` sequence needs of vLLM's share, measured as the estimate's
        ``vllm_need`` is made: all it holds but the KV cache, plus that sequence's KV cache."""
        kv_gib, tokens, length = self.kv_available_gib, self.kv_tokens, self.max_model_len
        if kv_gib is None or length is None or not tokens:
            return None
        return requested_gib - kv_gib + kv_gib * length / tokens

    def describe(self) -> str:
        parts = [f"weights {self.weights_gib} GiB", f"KV cache {self.kv_available_gib} GiB = {self.kv_tokens} tokens",
                 f"CUDA graphs {self.cuda_graph_gib} GiB", f"max_model_len {self.max_model_len}"]
        return ", ".join(parts) + (f"; refused: {self.refused}" if self.refused else "") + (
            f"; the device was not free: {self.not_free}" if self.not_free else "")


def vllm_memory(log: str) -> VllmMemory:
    """The first of each of vLLM's memory lines in ``log`` (an engine logs each once)."""
    found: dict[str, Any] = {}
    for key, pattern in _VLLM_LINES.items():
        match = pattern.search(log)
        if match:
            text = match.group(1).replace(",", "")
            found[key] = int(text) if key in ("kv_tokens", "max_model_len") else float(text)
    refused, not_free = _VLLM_REFUSED.search(log), _VLLM_NOT_FREE.search(log)
    return VllmMemory(**found, refused=" ".join(refused.group(1).split()) if refused else None,
                      not_free=" ".join(not_free.group(1).split()) if not_free else None)


# -- training processes' own peaks (trainer/proof/card_emulation/sitecustomize.py) --------------------------------


def trainer_torch_peaks(folder: Path) -> dict[str, float]:
    """pid: the largest peak of torch's reserved memory (GiB) that process reported, on any GPU."""
    peaks = {}
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        peaks[path.stem] = max(record.get("reserved_peak_gib", {}).values(), default=0.0)
    return peaks


# -- against the estimate -------------------------------------------------------------------------------


@dataclass(frozen=True)
class TargetCheck:
    """One of the estimate's figures against the measured one."""

    what: str
    estimated_gib: float
    measured_gib: float | None

    @property
    def met(self) -> bool | None:
        if self.measured_gib is None:
            return None
        return self.measured_gib <= self.estimated_gib <= self.measured_gib * (1 + TARGET_MARGIN)

    def line(self) -> str:
        if self.measured_gib is None:
            return f"{self.what}: estimated {self.estimated_gib:.1f} GiB, not measured here"
        above = (self.estimated_gib / self.measured_gib - 1) * 100 if self.measured_gib else math.inf
        if self.met:
            verdict = "target met"
        elif self.estimated_gib < self.measured_gib:
            verdict = "target MISSED: the estimate is below the measured peak"
        else:
            verdict = f"target MISSED: the estimate is more than {TARGET_MARGIN:.0%} above"
        return (f"{self.what}: estimated {self.estimated_gib:.1f} GiB, measured {self.measured_gib:.1f} GiB "
                f"({above:+.1f}%): {verdict}")


def made_shape(model: Path) -> "ModelShape":
    """The launcher's ModelShape of a made model, from its config.json and its weights."""
    from hpc.launcher.gpu_memory import ModelShape
    from trainer.staging.random_weights import parameter_count

    config = json.loads((model / "config.json").read_text())
    return ModelShape("made", parameter_count(model) / 1e9, config["num_hidden_layers"], config["num_key_value_heads"],
                      config["head_dim"], config["hidden_size"], config["vocab_size"])


def memory_estimate(work: Work, gpu_mode: str, gpu: str) -> str:
    """hpc.launcher.gpu_memory's estimate for the proof's small run (its model, share and context)."""
    from hpc.launcher.gpu_memory import Plan, estimate
    from trainer.training.config import load_config, vllm_share

    config = load_config("smoke", work.train_args())
    found = estimate(made_shape(work.model), Plan(gpu_total_gib(gpu), gpu_mode, vllm_share(config, gpu_mode),
                                                   config.max_seq_length))
    return (f"hpc.launcher.gpu_memory estimates ({gpu_mode}) vLLM {found.vllm_need:.1f} GiB (of its "
            f"{found.vllm_budget:.1f} GiB share, which vLLM takes whole) and training {found.train_peak:.1f} GiB")
