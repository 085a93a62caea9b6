"""Forwarding: trainer.vllm_server moved to trainer.serving.vllm_server (trainer/serving/vllm_server.py).

Job scripts rendered before issue 18 run ``python -m trainer.vllm_server``; a run launched then is
continued with that same script, so this path must keep working until no such run is
continued any more. Then delete this file (scripts rendered now call trainer.serving.vllm_server).
"""
from hpc.forwarding import forward

forward(__name__, "trainer.serving.vllm_server")
