"""The GPU proof's memory readings (trainer/proof/memory.py): nvidia-smi's processes by kind and
phase, vLLM's own log lines, the training processes' torch peaks, and the estimate's target."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from trainer.proof.memory import (
    LogPhase,
    ProcessMemory,
    TargetCheck,
    VllmMemory,
    parse_compute_apps,
    process_kind,
    trainer_torch_peaks,
    vllm_memory,
)

# vLLM 0.25.1's own lines (vllm/v1/worker/gpu_model_runner.py, gpu_worker.py, vllm/v1/core/kv_cache_utils.py,
# vllm/config/model.py), as it logs them
VLLM_LOG = """INFO 11-27 10:00:01 [model.py:1776] Using max model len 32768
INFO 11-27 10:00:40 [gpu_model_runner.py:5307] Model loading took 27.51 GiB memory and 31.200000 seconds
INFO 11-27 10:01:30 [gpu_worker.py:539] Available KV cache memory: 41.62 GiB
INFO 11-27 10:01:30 [kv_cache_utils.py:2146] GPU KV cache size: 227,301 tokens
INFO 11-27 10:01:30 [kv_cache_utils.py:2148] Maximum concurrency for 32,768 tokens per request: 6.94x
INFO 11-27 10:02:10 [gpu_worker.py:771] CUDA graph pool memory: 0.84 GiB (actual), 0.9 GiB (estimated), difference: 0.06 GiB (7.1%).
"""
REFUSED = ("ValueError: To serve at least one request with the model's max seq len (32768), (6.0 GiB KV cache is "
           "needed, which is larger than the available KV cache memory (5.12 GiB). Based on the available memory, the "
           "estimated maximum model length is 27962. Try increasing `gpu_memory_utilization` ...")


def test_vllms_memory_lines_are_read_and_one_sequences_need_measured_as_the_estimate_is_made() -> None:
    found = vllm_memory(VLLM_LOG)
    assert found == VllmMemory(27.51, 41.62, 227301, 0.84, 32768, None)
    requested = 72.0  # 0.75 of a 96 GiB card
    one_sequence = 41.62 * 32768 / 227301
    assert found.need_gib(requested) == pytest.approx(requested - 41.62 + one_sequence)
    assert VllmMemory().need_gib(requested) is None


def test_a_vllm_that_refused_is_read_with_its_reason() -> None:
    found = vllm_memory("INFO Using max model len 32768\n" + REFUSED)
    assert found.refused.startswith("To serve at least one request with the model's max seq len (32768), (6.0 GiB")
    assert found.refused.endswith("(5.12 GiB).") and "refused:" in found.describe() and found.not_free is None
    busy = vllm_memory("ValueError: Free memory on device cuda:0 (20.1/140.4 GiB) on startup is less than desired GPU "
                       "memory utilization (0.5128, 72.0 GiB). Decrease GPU memory utilization or reduce ...")
    assert busy.refused is None and busy.not_free.startswith("Free memory on device cuda:0 (20.1/140.4 GiB)")


@pytest.mark.parametrize("estimated, measured, met, words", [
    (35.5, 33.0, True, "target met"),
    (35.5, 36.0, False, "the estimate is below the measured peak"),
    (35.5, 30.0, False, "more than 15% above"),
    (35.5, None, None, "not measured here"),
])
def test_the_estimates_target_is_within_15_percent_above_and_never_below(
        estimated: float, measured: float | None, met: bool | None, words: str) -> None:
    check = TargetCheck("training peak", estimated, measured)
    assert check.met is met and words in check.line()


def test_compute_processes_are_read_and_told_apart_by_their_command_line(tmp_path: Path) -> None:
    apps = parse_compute_apps("GPU-0, 101, /root/.cache/art/vllm_runtime/pypi-x86_64/.venv/bin/python3, 74000\n"
                              "GPU-0, 102, /work/.venv/bin/python, 9000\n"
                              "GPU-0, 103, [Not Found], 500\nNo running processes found\n")
    assert apps == [("GPU-0", "101", "/root/.cache/art/vllm_runtime/pypi-x86_64/.venv/bin/python3", 74000),
                    ("GPU-0", "102", "/work/.venv/bin/python", 9000), ("GPU-0", "103", "[Not Found]", 500)]
    proc = tmp_path / "proc"
    (proc / "104").mkdir(parents=True)
    (proc / "104" / "cmdline").write_bytes(b"VLLM::EngineCore\0")
    assert [process_kind(pid, name, proc) for _, pid, name, _ in apps] == ["vllm", "training", "other"]
    assert process_kind("104", "[Not Found]", proc) == "vllm", "no name: the command line where this namespace has the pid"


def test_the_phase_is_the_last_marker_the_trainers_log_has_so_far(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    phase = LogPhase(log)
    assert phase() == "start"
    log.write_text("2026-11-27T10:00:00 [trainer] backend: art.local.backend.LocalBackend at /x\n")
    assert phase() == "loading"
    with log.open("a") as out:
        out.write("2026-11-27T10:03:00 [trainer] registered: inference at http://h/v1 as m@0\n"
                  "2026-11-27T10:03:01 [trainer] validation at step 0: 7 questions, 32 at a time\n")
    assert phase() == "rollouts"
    with log.open("a") as out:
        out.write("2026-11-27T10:04:00 [trainer] step 1/3 (epoch 0): rollouts on 11 scenarios\n"
                  "2026-11-27T10:06:00 [trainer] step 1/3: training on 11 groups (44 trajectories, 0 rollout exceptions)\n"
                  "2026-11-27T10:07:00 [trainer] step 1/3 done in 18")  # a line not yet complete
    assert phase() == "training"
    with log.open("a") as out:
        out.write("0s: reward 0.5, accuracy None, judge failures 0\n")
    assert phase() == "idle"


def test_memory_is_sampled_per_kind_of_process_and_phase(fake_gpu, tmp_path: Path) -> None:
    phases = iter(["rollouts", "training", "training"])
    memory = ProcessMemory(gpu="0", phase=lambda: next(phases))
    fake_gpu.set(80000, [("1", "/c/vllm_runtime/.venv/bin/python3", 74000), ("2", "/w/.venv/bin/python", 1000)])
    memory.sample()
    fake_gpu.set(30000, [("1", "/c/vllm_runtime/.venv/bin/python3", 2000), ("2", "/w/.venv/bin/python", 20000),
                         ("3", "/w/.venv/bin/python", 500)])
    memory.sample()
    fake_gpu.set(25000, [])
    memory.sample()
    assert memory.kind_peak_gib("vllm", "rollouts") == pytest.approx(74000 / 1024)
    assert memory.kind_peak_gib("vllm", "training") == pytest.approx(2000 / 1024)
    assert memory.kind_peak_gib("training", "training") == pytest.approx(20500 / 1024), "the kind's processes summed"
    assert memory.kind_peak_gib("training") == pytest.approx(20500 / 1024) and memory.kind_peak_gib("other") is None
    assert memory.total_gib("training") == pytest.approx(30000 / 1024) and memory.total_gib() == pytest.approx(80000 / 1024)
    assert memory.processes_seen == 3
    assert memory.beside_training_peak_gib("vllm") == pytest.approx(2000 / 1024), "vLLM asleep when training peaked"


def test_the_training_processes_torch_peaks_are_the_largest_each_reported(tmp_path: Path) -> None:
    (tmp_path / "11.json").write_text(json.dumps({"reserved_peak_gib": {"0": 12.5, "1": 3.0}}))
    (tmp_path / "12.json").write_text("{torn")
    assert trainer_torch_peaks(tmp_path) == {"11": 12.5}
    assert trainer_torch_peaks(tmp_path / "none") == {}


# -- trainer/proof/card_emulation/sitecustomize.py -------------------------------------------------------------------


class FakeCuda:
    """What _on_cuda_init uses of torch.cuda."""

    def __init__(self) -> None:
        self.fractions: dict[int, float] = {}

    def device_count(self) -> int:
        return 2

    def set_per_process_memory_fraction(self, fraction: float, device: int) -> None:
        self.fractions[device] = fraction

    def max_memory_reserved(self, device: int) -> int:
        return (device + 1) * 2**30

    def max_memory_allocated(self, device: int) -> int:
        return 2**29


def load_sitecustomize(monkeypatch: pytest.MonkeyPatch, **env: str):
    import importlib.util

    from trainer.proof.cards import EMULATION_PATH

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    spec = importlib.util.spec_from_file_location("proof_sitecustomize", EMULATION_PATH / "sitecustomize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_emulation_caps_every_gpu_of_a_training_process_and_reports_its_torch_peaks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    before = list(sys.meta_path)
    module = load_sitecustomize(monkeypatch, HPC_PROOF_GPU_FRACTION="0.6838", HPC_PROOF_TORCH_PEAKS=str(tmp_path))
    try:
        assert type(sys.meta_path[0]).__name__ == "_AfterTorchCuda", "it waits for torch.cuda's import"
        cuda = FakeCuda()
        module._on_cuda_init(cuda)
        assert cuda.fractions == {0: 0.6838, 1: 0.6838}
        deadline = time.monotonic() + 10
        while not list(tmp_path.glob("*.json")) and time.monotonic() < deadline:
            time.sleep(0.2)
        record = json.loads(next(tmp_path.glob("*.json")).read_text())
        assert record["reserved_peak_gib"] == {"0": 1.0, "1": 2.0} and record["fraction"] == "0.6838"
    finally:
        sys.meta_path[:] = before


def test_without_its_variables_the_sitecustomize_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.delenv("HPC_PROOF_GPU_FRACTION", raising=False)
    monkeypatch.delenv("HPC_PROOF_TORCH_PEAKS", raising=False)
    before = list(sys.meta_path)
    load_sitecustomize(monkeypatch)
    assert sys.meta_path == before


def test_the_interpreters_own_sitecustomize_still_runs_after_this_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    own = tmp_path / "site"
    own.mkdir()
    (own / "sitecustomize.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').write(__name__)\n")
    monkeypatch.setattr(sys, "path", [*sys.path, str(own)])
    load_sitecustomize(monkeypatch)
    assert (tmp_path / "ran").read_text() == "sitecustomize"


def test_a_training_process_started_with_the_emulations_environment_runs_the_sitecustomize(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from trainer.proof.cards import Card, Emulation

    env = {**os.environ, **Emulation(Card.of("lonestar6"), 80.0).env(tmp_path)}
    probe = "import sys; print(type(sys.meta_path[0]).__name__, sys.modules['sitecustomize'].FRACTION)"
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["_AfterTorchCuda", "0.5000"]
