"""The proof's judge: a string match answering on loopback as the judge model would (the GPU
node has no network). It accepts an answer when every word of the reference answer is in it."""

from __future__ import annotations

import json
import re
from typing import Any

from trainer.proof.loopback_openai import Reply, text


def string_match_verdict(body: dict[str, Any]) -> Reply:
    """The judge of this proof: accept when every word of the reference is in the answer."""
    content = body["messages"][-1]["content"]
    reference = re.search(r"Reference answer: (.*)\nAI answer: ", content, re.S)
    answer = content.split("AI answer: ", 1)[-1].lower()
    words = re.findall(r"[a-z0-9]{3,}", (reference.group(1) if reference else "").lower())
    accept = bool(words) and all(word in answer for word in words)
    return text(json.dumps({"thinking": "every reference word is in the answer" if accept else "a word is missing",
                            "accept": accept}))
