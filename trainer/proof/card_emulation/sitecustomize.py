"""Card emulation for the GPU proof (trainer/proof/cards.py): on PYTHONPATH, Python runs this at
the start of every process of the training side (the trainer, ART's Unsloth service; ART's vLLM
runtime is started without PYTHONPATH and caps itself with gpu_memory_utilization instead).

- ``HPC_PROOF_GPU_FRACTION``: torch's allocator in this process may take at most this share of each
  GPU (``torch.cuda.set_per_process_memory_fraction``), as if the card were that much smaller.
- ``HPC_PROOF_TORCH_PEAKS``: a folder; every 2 s and at exit this process writes ``<pid>.json`` with
  the peak of torch's reserved and allocated memory on each GPU (GiB).

Both take effect when CUDA is initialised, not at import: a process that never touches the GPU
is left alone, and nothing initialises CUDA early in a process that forks later. This folder must
hold this file only (everything in it shadows same-named modules); the interpreter's own
sitecustomize, if it has one further along sys.path, is run after this one.
"""

import importlib.abc
import importlib.util
import os
import sys

from hpc.job.workload_env import HPC_PROOF_GPU_FRACTION, HPC_PROOF_TORCH_PEAKS

FRACTION = os.environ.get(HPC_PROOF_GPU_FRACTION, "")
PEAKS = os.environ.get(HPC_PROOF_TORCH_PEAKS, "")


def _on_cuda_init(cuda):
    """Queued with torch.cuda._lazy_call: runs inside torch's CUDA initialisation, whoever triggers it."""
    if FRACTION:
        for device in range(cuda.device_count()):
            cuda.set_per_process_memory_fraction(float(FRACTION), device)
    if PEAKS:
        import atexit
        import threading

        atexit.register(_write_peaks, cuda)
        threading.Thread(target=_keep_writing, args=(cuda,), daemon=True).start()


def _keep_writing(cuda):
    import time

    while True:
        time.sleep(2.0)
        _write_peaks(cuda)


def _write_peaks(cuda):
    import json

    gib = 2**30
    try:
        devices = range(cuda.device_count())
        record = {"pid": os.getpid(), "fraction": FRACTION or None,
                  "reserved_peak_gib": {str(d): cuda.max_memory_reserved(d) / gib for d in devices},
                  "allocated_peak_gib": {str(d): cuda.max_memory_allocated(d) / gib for d in devices}}
        os.makedirs(PEAKS, exist_ok=True)
        path = os.path.join(PEAKS, f"{os.getpid()}.json")
        with open(path + ".tmp", "w") as out:
            json.dump(record, out)
        os.replace(path + ".tmp", path)
    except Exception:  # noqa: BLE001 - a measurement must never break the process it measures
        pass


class _AfterTorchCuda(importlib.abc.MetaPathFinder):
    """Once torch.cuda is imported, queue ``_on_cuda_init`` for its initialisation."""

    def find_spec(self, name, path, target=None):
        if name != "torch.cuda":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            execute = spec.loader.exec_module

            def exec_module(module):
                execute(module)
                module._lazy_call(lambda: _on_cuda_init(module))

            spec.loader.exec_module = exec_module
        return spec


if FRACTION or PEAKS:
    sys.meta_path.insert(0, _AfterTorchCuda())


def _run_the_next_sitecustomize():
    """The sitecustomize this one shadows (the interpreter's own, if any), run as Python would have."""
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        candidate = os.path.join(os.path.abspath(entry or "."), "sitecustomize.py")
        if os.path.dirname(candidate) != here and os.path.isfile(candidate):
            try:
                with open(candidate) as source:
                    exec(compile(source.read(), candidate, "exec"), {"__name__": "sitecustomize", "__file__": candidate})
            except Exception:  # noqa: BLE001 - as Python itself does, a failing sitecustomize does not stop the process
                pass
            return


_run_the_next_sitecustomize()
