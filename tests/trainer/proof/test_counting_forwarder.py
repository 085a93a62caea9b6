"""The forwarder that counts what a run asks its judge (trainer/proof/counting_forwarder.py)."""

from __future__ import annotations

import pytest

from trainer.proof.counting_forwarder import CountingForwarder
from trainer.proof.loopback_openai import OpenAIServer, failure, text

# litellm noise (as tests/trainer/training/test_train.py)
pytestmark = pytest.mark.filterwarnings(
    "ignore:Pydantic serializer warnings:UserWarning", "ignore:There is no current event loop:DeprecationWarning")


def test_the_forwarder_passes_every_request_on_unchanged_and_counts_each_status() -> None:
    import litellm

    replies = iter([text('{"accept": true}'), failure(400, "prompt too long")])
    with OpenAIServer(lambda body: next(replies), served=("judge",)) as judge, CountingForwarder(judge.url) as forwarder:
        first = litellm.completion(model="openai/judge", api_base=forwarder.base_url, api_key="x",
                                   messages=[{"role": "user", "content": "q"}], max_retries=0)
        with pytest.raises(litellm.BadRequestError):
            litellm.completion(model="openai/judge", api_base=forwarder.base_url, api_key="x",
                               messages=[{"role": "user", "content": "q"}], max_retries=0, num_retries=0)
        assert first.choices[0].message.content == '{"accept": true}'
        assert forwarder.asked() == {200: 1, 400: 1}
        assert len(judge.requests) == 2 and judge.requests[0].messages == [{"role": "user", "content": "q"}]
    assert forwarder.handlers_alive() == 0  # litellm keeps its connections alive: leaving ends them
