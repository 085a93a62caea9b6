"""How a run places vLLM and training on its GPUs: the GPU modes, defined once.

A cluster names its default (hpc/launcher/clusters.yaml ``gpu_mode``), a trainer config names one
or ``auto`` (the cluster's, which the launcher passes on as ``gpu_mode=...``), the launcher sizes
the GPU request and the memory estimate to it, and the trainer places ART's vLLM and its training
by it (trainer/training/backend.py). Stdlib only: the dry run imports it.
"""

from __future__ import annotations

from enum import StrEnum


class GpuMode(StrEnum):
    SHARED = "shared"  # vLLM and training take turns on one GPU (vLLM sleeps while a step trains)
    DEDICATED = "dedicated"  # training on the run's first GPU, vLLM on its second


AUTO = "auto"  # a trainer config's: the cluster's default, which the launcher passes on
CLUSTER_CHOICES = tuple(mode.value for mode in GpuMode)  # clusters.yaml's gpu_mode, as plain words
CONFIG_CHOICES = (AUTO, *CLUSTER_CHOICES)  # a trainer config's gpu_mode
