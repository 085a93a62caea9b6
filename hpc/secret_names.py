"""Which variable names hold secrets: the one rule every side applies.

Names ending in _KEY, _TOKEN or _SECRET, or containing PASSWORD or WEBHOOK (a webhook's URL
carries its token). The launcher keeps such values out of every script and preview
(hpc/launcher/envfiles.py); the trainer's preflight checks that none leaks into the job's
output (trainer/training/preflight.py). Stdlib only, so both sides import it without the other.
"""

SECRET_SUFFIXES = ("_KEY", "_TOKEN", "_SECRET")
SECRET_WORDS = ("PASSWORD", "WEBHOOK")  # anywhere in the name (a webhook URL holds its token)


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    return upper.endswith(SECRET_SUFFIXES) or any(word in upper for word in SECRET_WORDS)
