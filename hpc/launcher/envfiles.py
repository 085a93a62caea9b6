"""Environment merging: dotenv layers + --env, ${VAR} interpolation, secrets.

Order, later wins: dotenv/common.env, dotenv/<cluster>.env, the user's .env at
the repo root, then each --env KEY=VALUE. Interpolation happens after the merge,
so a value in common.env may refer to one a cluster file sets (``${SCRATCH}/art``)
and the user's .env can redefine the base it builds on. Names not set by any
layer come from the launcher's own environment (SCRATCH on a TACC login node).

Secrets (hpc/secret_names.py: names such as *_KEY, *_TOKEN, *_PAT, *_PASSWD, *_SECRETS or
containing PASSWORD or WEBHOOK, and URLs with a password) never go into a rendered script;
they are written to a 0600 file the job sources at run time. A value that
interpolates a secret is itself treated as a secret, so
``JUDGE_URL=https://u:${API_KEY}@host`` cannot leak the key. A variable whose
value the launcher prints (RUNS_DIR, ART_PATH and the other paths, hosts and
numbers of hpc/launcher/jobspec.py's PRINTED_SETTINGS) may not be built from a
secret: the launch is refused (``MergedEnv.refuse_secret``), since a run directory
named after a key would be printed by every helper. Reference chains deeper than
MAX_REFERENCE_DEPTH are refused, and so are references the launcher would misread (nested
defaults, the shell's other ${...} forms). A value that is printed holds no line break or
control character (a fake managed setting in the dry run's list). No message shows a value.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from dotenv.parser import parse_stream

from hpc.digits import is_count
from hpc.errors import UsageError
from hpc.job.workload_env import HPC_PUBLIC_VARS
from hpc.secret_names import has_credentials, is_secret_name, public_names

NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Only the braced form, as python-dotenv does: a bare "$" (say in a password) stays literal.
_REFERENCE_RE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}")
# A "${NAME" that is not one of those two forms: nested (${A:-${B}}) or shell-only (${A-x}, ${A:=x},
# ${A:?x}, ${#A}) references would be read wrong (a literal "${B}" in a path), so they are refused.
_MISREAD_RE = re.compile(r"\$\{(?![A-Za-z_][A-Za-z0-9_]*(?::-(?:[^}$]|\$(?!\{))*)?\})(?=[A-Za-z_#!])")
# Characters that would make a printed value show something else: line breaks (a fake second line
# in the dry run's list), other control characters (ESC sequences) and bidirectional overrides.
UNPRINTABLE_RE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")
REDACTED = "***"
MAX_REFERENCE_DEPTH = 64  # ${A} -> ${B} -> ...: deeper chains are refused, not followed to a RecursionError


@dataclass(frozen=True)
class EnvLayer:
    """One source of variables, e.g. a dotenv file or the --env flags."""

    source: str
    values: dict[str, str]


@dataclass
class MergedEnv:
    """The merged, interpolated environment of a job."""

    values: dict[str, str] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    secrets: set[str] = field(default_factory=set)
    built_from: dict[str, str] = field(default_factory=dict)  # secret variable -> the secret name it is (built from)

    def public(self) -> dict[str, str]:
        """Variables that may appear in a rendered script."""
        return {k: v for k, v in self.values.items() if k not in self.secrets}

    def refuse_secret(self, names: list[str]) -> None:
        """Refuse (UsageError) when one of ``names``, whose values the launcher prints, is built from a secret."""
        for name in names:
            if name in self.built_from:
                raise secret_built_error(name, self.sources[name], self.built_from[name])

    def secret_values(self) -> dict[str, str]:
        return {k: v for k, v in self.values.items() if k in self.secrets}

    def redacted(self) -> dict[str, str]:
        """Every variable, secrets shown as ***: what a dry run prints."""
        return {k: (REDACTED if k in self.secrets else v) for k, v in self.values.items()}

    def get(self, name: str, default: str | None = None) -> str | None:
        return self.values.get(name, default)

    def int_setting(self, name: str, default: int, low: int, high: int) -> int:
        """An integer setting from the dotenv files (TUNNEL_PORT, HPC_RAY_JOIN_TIMEOUT...):
        unset or empty is ``default``; anything but an integer in low..high is a UsageError."""
        text = (self.values.get(name) or "").strip()
        if not text:
            return default
        if not is_count(text) or not low <= int(text) <= high:
            raise UsageError(f"invalid {name} {text!r}: accepted an integer {low}..{high} (default {default})")
        return int(text)


def read_dotenv(path: Path) -> EnvLayer:
    """A dotenv file's raw values (no interpolation yet); missing file = empty layer. A line
    that is not NAME=VALUE is refused by its number only: it may be a pasted key."""
    if not path.exists():
        return EnvLayer(str(path), {})
    if not path.is_file():
        raise UsageError(f"{path}: expected a dotenv file of KEY=VALUE lines, found something else (a folder, a device)")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text; expected a dotenv file of KEY=VALUE lines") from None
    values: dict[str, str] = {}
    for binding in parse_stream(io.StringIO(text)):
        if binding.error or (binding.key is not None and (binding.value is None or not NAME_RE.fullmatch(binding.key))):
            raise UsageError(f"{path}: line {binding.original.line} is not NAME=VALUE with NAME matching "
                             "[A-Za-z_][A-Za-z0-9_]* (the line is not shown: it may hold a secret)")
        if binding.key is not None:
            values[binding.key] = binding.value or ""
    return EnvLayer(str(path), values)


def parse_env_flags(pairs: list[str]) -> EnvLayer:
    """--env KEY=VALUE flags as a layer; a malformed one is a UsageError that names the
    key only: what follows may be a secret (``--env API_KEY sk-...``, a missing '=')."""
    values: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise UsageError("invalid --env argument without '=' (not shown: it may hold a secret): "
                             "expected KEY=VALUE with KEY matching [A-Za-z_][A-Za-z0-9_]*")
        if not NAME_RE.fullmatch(name):
            raise UsageError(f"invalid --env name {name!r} (value not shown): expected KEY=VALUE with KEY "
                             "matching [A-Za-z_][A-Za-z0-9_]*")
        values[name] = value
    return EnvLayer("--env", values)


def redact_argv(argv: Sequence[str], *envs: MergedEnv) -> list[str]:
    """The launch's arguments as the ledger records them (hpc/launcher/request.py asks, once per
    launch): ``--env NAME=***`` for secret names, and every secret value (and value built from one)
    of any of ``envs`` replaced by ***, wherever it appears (a --train_arg, a path)."""
    values = sorted({v for env in envs for v in env.secret_values().values() if v}, key=len, reverse=True)
    secrets = {name for env in envs for name in env.secrets}
    shown, after_env = [], False
    for arg in argv:
        if after_env or arg.startswith("--env="):
            arg = _redact_pair(arg, secrets)
        for value in values:
            arg = arg.replace(value, REDACTED)
        shown.append(arg)
        after_env = arg == "--env"
    return shown


def _redact_pair(arg: str, secrets: set[str]) -> str:
    prefix = "--env=" if arg.startswith("--env=") else ""
    name, sep, value = arg[len(prefix):].partition("=")
    secret = name in secrets or is_secret_name(name) or has_credentials(value)
    return f"{prefix}{name}={REDACTED}" if sep and secret else arg


def merge_layers(layers: list[EnvLayer], outer: Mapping[str, str]) -> MergedEnv:
    """Merge layers (later wins), then resolve ${VAR} references.

    ``outer`` supplies names no layer defines (the launcher's environment and the
    launcher's own HPC_* values); it is consulted only for references, its other
    variables are not copied into the job.
    """
    raw, sources = _merged_raw(layers)
    resolver = _Resolver(raw, sources, outer)
    merged = MergedEnv(sources=sources)
    for name in raw:
        merged.values[name] = resolver.resolve(name)
    merged.built_from = {name: secret for name, secret in resolver.secret_of.items() if secret}
    merged.secrets = set(merged.built_from)
    for name, value in merged.public().items():
        refuse_unprintable(name, value, sources[name])
    return merged


def refuse_unprintable(name: str, value: str, source: str) -> None:
    """A value the launcher prints (every one that is not a secret) holds no line break, control
    character or direction override: the dry run's list would show what is not there."""
    bad = UNPRINTABLE_RE.search(value)
    if bad:
        raise UsageError(f"{source}: {name}'s value holds the character U+{ord(bad.group()):04X} (a line break, "
                         "control character or direction override): accepted printable text on one line (a secret "
                         "such as a PEM key may span lines: its name must say it is one, e.g. *_KEY)")


def _merged_raw(layers: list[EnvLayer]) -> tuple[dict[str, str], dict[str, str]]:
    raw: dict[str, str] = {}
    sources: dict[str, str] = {}
    for layer in layers:
        raw.update(layer.values)
        sources.update(dict.fromkeys(layer.values, layer.source))
    return raw, sources


class _Resolver:
    """Resolves references with cycle and depth limits, and notes which secret each value is built from."""

    def __init__(self, raw: dict[str, str], sources: dict[str, str], outer: Mapping[str, str]):
        self.raw, self.sources, self.outer = raw, sources, outer
        self.public = public_names(raw.get(HPC_PUBLIC_VARS))  # names declared not secret
        self.done: dict[str, str] = {}
        self.secret_of: dict[str, str | None] = {}  # the secret a value is (built from), if any
        self.depth: dict[str, int] = {}  # the longest chain of references below a name

    def resolve(self, name: str, stack: tuple[str, ...] = ()) -> str:
        if name in self.done:
            return self.done[name]
        if name in stack:
            raise UsageError(f"circular reference in environment: {' -> '.join((*stack, name))}")
        secret = name if is_secret_name(name, self.public) else None
        depth = 0
        if _MISREAD_RE.search(self.raw[name]):
            raise UsageError(f"{self.sources[name]}: {name} holds a ${{...}} reference the launcher does not read "
                             "(value not shown): accepted ${NAME} and ${NAME:-default} with a default that holds no "
                             "${...} (no nesting, no ${NAME-x}, ${NAME:=x}, ${NAME:?x} or ${#NAME})")

        def substitute(match: re.Match[str]) -> str:
            nonlocal secret, depth
            ref, default = match.group("name"), match.group("default")
            # A self-reference (X=${X:-}) means "the value X has outside the dotenv files".
            if ref in self.raw and ref != name:
                value = self.resolve(ref, self._deeper(stack, name))
                secret, depth = secret or self.secret_of[ref], max(depth, self.depth[ref] + 1)
                return value
            if ref in self.outer:
                secret = secret or (ref if is_secret_name(ref, self.public) else None)
                return self.outer[ref]
            if default is not None:
                return default
            raise UsageError(
                f"{self.sources[name]}: {name} refers to ${{{ref}}}, which is not set in any "
                f"dotenv file, --env or the environment (use ${{{ref}:-default}} for a default)"
            )

        value = _REFERENCE_RE.sub(substitute, self.raw[name])
        if secret is None and has_credentials(value):  # a URL's password, whatever the name
            secret = name
        if depth > MAX_REFERENCE_DEPTH:
            self._too_deep((*stack, name))
        self.done[name], self.secret_of[name], self.depth[name] = value, secret, depth
        return value

    def _deeper(self, stack: tuple[str, ...], name: str) -> tuple[str, ...]:
        if len(stack) >= MAX_REFERENCE_DEPTH:
            self._too_deep((*stack, name))
        return (*stack, name)

    def _too_deep(self, chain: tuple[str, ...]) -> None:
        name = chain[0]
        raise UsageError(f"{self.sources[name]}: {name} is built through a chain of more than {MAX_REFERENCE_DEPTH} "
                         f"${{...}} references ({' -> '.join(chain[:3])} -> ...): accepted at most "
                         f"{MAX_REFERENCE_DEPTH}")


def secret_built_error(name: str, source: str, secret: str) -> UsageError:
    """A variable whose value the launcher prints (a path, a host, an #SBATCH value) is built from a secret."""
    built = "is a secret" if secret == name else f"is built from the secret {secret}"
    return UsageError(f"{name} ({source}) {built}, but its value would be printed in paths, #SBATCH lines, "
                      f"the job script and the dry run: set {name} without a secret (a value built from one only "
                      "goes to the run's secrets.env)")


def resolve_one(layers: list[EnvLayer], outer: Mapping[str, str], name: str) -> str | None:
    """Resolve a single variable before the full merge (e.g. RUNS_DIR, which the
    full merge needs to know HPC_RUN_DIR); None when no layer sets it. Its value is
    printed (a path): one built from a secret is refused."""
    raw, sources = _merged_raw(layers)
    if name not in raw:
        return None
    resolver = _Resolver(raw, sources, outer)
    value = resolver.resolve(name)
    secret = resolver.secret_of[name]
    if secret:
        raise secret_built_error(name, sources[name], secret)
    refuse_unprintable(name, value, sources[name])
    return value
