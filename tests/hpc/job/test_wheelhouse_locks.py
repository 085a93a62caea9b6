"""hpc/job/wheelhouse_locks.py: pins read from a lock or a freeze, and which of them a target lacks."""

from __future__ import annotations

from hpc.job.wheelhouse_locks import Pin, installed, needed, read_pins


def test_a_lock_and_a_freeze_read_as_pins_with_canonical_names() -> None:
    text = "# comment\n-e file:///repo\nTyping_Extensions==4.16.0 ; python_version >= '3.12'\nart-vllm-runtime @ file:///x.whl\ntorch==2.11.0+cu130\n"
    assert read_pins(text) == [Pin("typing-extensions", "4.16.0"), Pin("torch", "2.11.0+cu130")]


def test_a_target_with_torch_keeps_its_torch_stack_and_what_it_has_at_the_locked_version() -> None:
    lock = [Pin("torch", "2.11.0"), Pin("nvidia-cublas", "13.1.0.3"), Pin("triton", "3.6.0"), Pin("numpy", "2.3.5"),
            Pin("transformers", "5.2.0"), Pin("safetensors", "0.8.0"), Pin("tilelang", "0.1.9"),
            Pin("flashinfer-cubin", "0.6.13")]
    have = installed("torch==2.11.0+cu130\nnumpy==2.5.2\ntransformers==5.17.0\nsafetensors==0.8.0\n")
    assert needed(lock, have) == [Pin("numpy", "2.3.5"), Pin("transformers", "5.2.0"), Pin("tilelang", "0.1.9")]


def test_a_target_without_torch_needs_the_whole_stack() -> None:
    lock = [Pin("torch", "2.11.0"), Pin("nvidia-cublas", "13.1.0.3")]
    assert needed(lock, {}) == lock
