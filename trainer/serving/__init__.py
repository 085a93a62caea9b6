"""Serving: the agent over HTTP, asking it, the policies it runs, the vLLM server."""
