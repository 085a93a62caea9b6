"""In the job: what the job script runs on the compute node (continuation, successor, watch, pack,
Ray), and the environment it runs in (ART's vLLM runtime, offline wheelhouses: setup.sh)."""
