"""The launcher's one seam into the trainer: the trainer's configuration.

The launcher checks ``--config`` and ``--train_arg`` against the trainer's own config
records, sizes GPU memory with the trainer's vLLM share and names a run's ART project from
its config; every such read goes through this module, so that hpc/ meets trainer/ in one
named place (tests/hpc/launcher/test_trainer_config.py keeps it so). trainer/training/config.py
is stdlib + PyYAML: importing it keeps the launcher light (bench/launch_latency.py).
"""

from trainer.training.config import VLLM_SHARE, ConfigError, TrainerConfig, known_configs, load_config, vllm_share

__all__ = ["VLLM_SHARE", "ConfigError", "TrainerConfig", "known_configs", "load_config", "vllm_share"]
