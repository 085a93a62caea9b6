"""The OpenAI-compatible chat server double the tests script: the package's loopback endpoint
(``trainer/proof/loopback_openai.py``, which the GPU proof runs its judge on), one copy for both."""

from trainer.proof.loopback_openai import (
    DoubleServer,
    OpenAIServer,
    RecordedRequest,
    Reply,
    ToolCall,
    failure,
    send_json,
    text,
    tool_call,
    tool_calls,
)

__all__ = ["DoubleServer", "OpenAIServer", "RecordedRequest", "Reply", "ToolCall", "failure", "send_json", "text",
           "tool_call", "tool_calls"]
