"""The guard's token check on what a client may send: any bytes, read as latin-1."""

from __future__ import annotations

import pytest

from trainer.serving.guard import token_ok

TOKEN = "tok-3n_abcdef0123456789"


@pytest.mark.parametrize("header", ["Bearer \xe9", "Bearer \xc3\xa9", f"Bearer {TOKEN}\xe9", "Bearer \xff\xfe",
                                    "bearer \u00e9t\u00e9", "\xe9 \xe9", "Bearer \x00", f"Bearer {TOKEN[:-1]}\xb9"])
def test_a_non_ascii_token_is_simply_wrong(header: str) -> None:
    assert token_ok(header, TOKEN) is False


def test_the_right_token_in_any_case_of_the_scheme_passes() -> None:
    assert token_ok(f"Bearer {TOKEN}", TOKEN) and token_ok(f"bearer  {TOKEN} ", TOKEN)
    assert not token_ok(TOKEN, TOKEN) and not token_ok(None, TOKEN)
