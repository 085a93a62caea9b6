"""The launcher's one seam into the trainer: the trainer's configuration.

The launcher checks ``--config`` and ``--train_arg`` against the trainer's own config
records, sizes GPU memory with the trainer's vLLM share and names a run's ART project from
its config; every such read goes through this module, so that hpc/ meets trainer/ in one
named place (tests/hpc/launcher/test_trainer_config.py keeps it so). trainer/training/config.py
is stdlib + PyYAML: importing it keeps the launcher light (bench/launch_latency.py). A job of
``--entrypoint trainer.serve`` has its ``--train_arg`` pairs checked by the service's own
settings reader (trainer/serving/settings.py, as light).
"""

from trainer.serving.settings import ServeError, check_settings
from trainer.training.config import VLLM_SHARE, ConfigError, TrainerConfig, known_configs, load_config, vllm_share

SERVE_ENTRYPOINTS = ("trainer.serve", "trainer.serving.serve")  # the command, and the module it runs

__all__ = ["SERVE_ENTRYPOINTS", "VLLM_SHARE", "ConfigError", "ServeError", "TrainerConfig", "check_settings",
           "known_configs", "load_config", "vllm_share"]
