"""Which variables hold secrets: the one rule every side applies.

A name is a secret's when one of its words (split at '_') says so (KEY, TOKEN, SECRETS,
PASSWD, PAT, CREDENTIALS...: ``GITHUB_PAT``, ``CLIENT_SECRETS``), or it contains PASSWORD,
PASSWD, WEBHOOK (a webhook's URL carries its token), API_KEY (``OPENAI_API_KEYS``) or another
key or token's name, run together or not (ACCESSKEY, AUTH_TOKEN...). A value is a secret whatever its name when it
is a URL with a password in it (``postgres://u:pw@h/db``). Wrongly calling a name secret only
keeps it out of scripts and previews, so the rule leans that way; a name it catches that holds
nothing secret (``SSH_KEY_PATH``) is declared public in ``HPC_PUBLIC_VARS`` (names separated by
commas or spaces). A URL's password stays secret even then. The launcher keeps secrets out of
every script and preview (hpc/launcher/envfiles.py); the trainer's preflight checks that none
leaks into the job's output (trainer/training/preflight.py). Stdlib only, so both sides import
it without the other.
"""

from __future__ import annotations

import re

# TOKENS and KEYS alone are counts and lists (MAX_NEW_TOKENS, JUDGE_SERVE_MAX_OUTPUT_TOKENS), not secrets.
SECRET_WORDS = frozenset({
    "KEY", "APIKEY", "APIKEYS", "TOKEN", "SECRET", "SECRETS", "PASSWORD", "PASSWORDS", "PASSWD", "PASS",
    "PASSPHRASE", "PAT", "CREDENTIAL", "CREDENTIALS", "CREDS", "COOKIE", "COOKIES", "DSN", "WEBHOOK"})
SECRET_PARTS = ("PASSWORD", "PASSWD", "WEBHOOK", "APIKEY", "API_KEY", "ACCESSKEY", "ACCESS_KEY", "SECRETKEY",
                "SECRET_KEY", "PRIVATEKEY", "PRIVATE_KEY", "AUTHTOKEN", "AUTH_TOKEN", "ACCESS_TOKEN")
# scheme://[user]:password@ : the credentials of a database, proxy or git URL
_URL_CREDENTIALS = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s/@:]*:[^\s@]+@")
_WORD_SPLIT = re.compile(r"[_\W]+")


def is_secret_name(name: str, public: frozenset[str] = frozenset()) -> bool:
    """Whether ``name`` names a secret (``public``: the names declared not secret)."""
    if name in public:
        return False
    upper = name.upper()
    return any(word in SECRET_WORDS for word in _WORD_SPLIT.split(upper)) or any(part in upper for part in SECRET_PARTS)


def has_credentials(value: str) -> bool:
    """Whether ``value`` holds a URL with a password (``https://user:pw@host``)."""
    return _URL_CREDENTIALS.search(value) is not None


def is_secret(name: str, value: str, public: frozenset[str] = frozenset()) -> bool:
    """The whole rule: a secret's name (unless declared public) or a value with a URL's password."""
    return is_secret_name(name, public) or has_credentials(value)


def public_names(text: str | None) -> frozenset[str]:
    """``HPC_PUBLIC_VARS``'s names (commas or spaces between them)."""
    return frozenset(part for part in re.split(r"[\s,]+", text or "") if part)
