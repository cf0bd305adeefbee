"""What a secret looks like: by variable name and by value shape, as table rows with reasons.

Shared by the inventory (environment, ``.env`` files) and by ``contain check`` (a boundary's
``env`` is copied into the sandbox, so a secret there is visible to the task).

Detection is heuristic on purpose and errs towards flagging: a false positive costs a line in a
report, a false negative leaks a token into a sandbox. Known non-secret names that contain a
marker word (``PWD``, ``XDG_SESSION_ID``, ``SSH_AUTH_SOCK``…) are rows of ``NOT_SECRET_NAMES``
with the reason. Values are only ever matched here; callers report a ``redacted_fingerprint``.

Does not verify a token (no network) and does not catch secrets split across variables or
encoded in ways the shapes below do not name.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "NOT_SECRET_NAMES",
    "SECRET_NAME_WORDS",
    "SECRET_SHAPES",
    "NotSecretName",
    "SecretShape",
    "is_secret_name",
    "secret_shape_of",
    "shannon_entropy",
]


@dataclass(frozen=True)
class SecretShape:
    """One recognisable kind of secret value and what it would open."""

    id: str
    title: str
    opens: str  # the external system the value authenticates to, for the records group
    matches: Callable[[str], bool]
    why: str


def _regex(pattern: str) -> Callable[[str], bool]:
    compiled = re.compile(pattern)
    return lambda value: compiled.search(value) is not None


# High-entropy fallback: a single "word" of at least 32 token characters whose per-character
# Shannon entropy is at least 4.0 bits. A 40-hex-digit commit id scores below 4.0 (hex tops out
# at 4 bits), random base64 of that length scores about 4.5-5.
_TOKEN_WORD = re.compile(r"^[A-Za-z0-9+/=_.-]{32,}$")
_MIN_ENTROPY_BITS = 4.0


def shannon_entropy(value: str) -> float:
    """Bits per character of ``value``'s empirical character distribution."""
    if not value:
        return 0.0
    counts = Counter(value)
    total = len(value)
    return -sum(n / total * math.log2(n / total) for n in counts.values())


def _is_high_entropy(value: str) -> bool:
    if value.startswith(("/", "./", "~")):  # a path, however long
        return False
    return bool(_TOKEN_WORD.match(value)) and shannon_entropy(value) >= _MIN_ENTROPY_BITS


# Order matters: the first matching row names the value (sk-ant- before the generic sk-).
SECRET_SHAPES: tuple[SecretShape, ...] = (
    SecretShape(
        "private-key",
        "PEM private key",
        "whatever trusts the key (SSH hosts, TLS peers)",
        _regex(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----"),
        "a private key in a variable is as good as the key file",
    ),
    SecretShape(
        "aws-access-key",
        "AWS access key id",
        "AWS APIs",
        _regex(r"\b(AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b"),
        "AKIA/ASIA prefixes are AWS long-lived and session key ids",
    ),
    SecretShape(
        "github-token",
        "GitHub token",
        "GitHub API and git over HTTPS",
        _regex(r"\b(gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})"),
        "ghp_/gho_/ghs_/github_pat_ are GitHub's documented token prefixes",
    ),
    SecretShape(
        "gitlab-token",
        "GitLab token",
        "GitLab API and git over HTTPS",
        _regex(r"\bglpat-[A-Za-z0-9_-]{20,}"),
        "glpat- is GitLab's personal token prefix",
    ),
    SecretShape(
        "slack-token",
        "Slack token",
        "Slack API",
        _regex(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
        "xoxb-/xoxp- are Slack bot and user tokens",
    ),
    SecretShape(
        "anthropic-key",
        "Anthropic API key",
        "Anthropic API",
        _regex(r"\bsk-ant-[A-Za-z0-9_-]{20,}"),
        "sk-ant- is Anthropic's key prefix",
    ),
    SecretShape(
        "openai-key",
        "OpenAI-style API key",
        "OpenAI (or compatible) API",
        _regex(r"\bsk-(proj-)?[A-Za-z0-9_-]{20,}"),
        "sk- is OpenAI's key prefix",
    ),
    SecretShape(
        "stripe-key",
        "Stripe key",
        "Stripe API",
        _regex(r"\b[rs]k_(live|test)_[A-Za-z0-9]{16,}"),
        "sk_live_/rk_live_ are Stripe keys",
    ),
    SecretShape(
        "google-api-key",
        "Google API key",
        "Google Cloud APIs",
        _regex(r"\bAIza[0-9A-Za-z_-]{35}"),
        "AIza is the Google API key prefix",
    ),
    SecretShape(
        "npm-token",
        "npm token",
        "npm registry (publish)",
        _regex(r"\bnpm_[A-Za-z0-9]{36}"),
        "npm_ is npm's granular token prefix",
    ),
    SecretShape(
        "pypi-token",
        "PyPI token",
        "PyPI (upload)",
        _regex(r"\bpypi-[A-Za-z0-9_-]{50,}"),
        "pypi- macaroons upload packages",
    ),
    SecretShape(
        "jwt",
        "JSON Web Token",
        "the service that issued it",
        _regex(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
        "a bearer token: whoever holds it is the subject until it expires",
    ),
    SecretShape(
        "url-password",
        "URL with an embedded password",
        "the service in the URL",
        _regex(r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@"),
        "user:password@host carries the password in clear",
    ),
    SecretShape(
        "high-entropy",
        "long high-entropy value",
        "unknown",
        _is_high_entropy,
        "random-looking strings of 32+ characters are usually keys",
    ),
)

# Words that make a variable name secret-looking. Names are split on "_"; a word matches when
# it equals one of these or ends with one of the compound suffixes (GITHUBTOKEN, DBPASSWORD).
SECRET_NAME_WORDS: frozenset[str] = frozenset(
    {
        "TOKEN",
        "TOKENS",
        "SECRET",
        "SECRETS",
        "PASSWORD",
        "PASSWD",
        "PASSPHRASE",
        "PASS",
        "PWD",
        "KEY",
        "KEYS",
        "APIKEY",
        "ACCESSKEY",
        "PRIVATEKEY",
        "CREDENTIAL",
        "CREDENTIALS",
        "CREDS",
        "AUTH",
        "SESSION",
        "COOKIE",
        "PAT",
        "DSN",
        "SIGNATURE",
    }
)
_SECRET_NAME_SUFFIXES = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "APIKEY", "ACCESSKEY")


@dataclass(frozen=True)
class NotSecretName:
    """A variable name that contains a marker word but holds no secret, with the reason."""

    pattern: str  # full-match regular expression over the name
    why: str


NOT_SECRET_NAMES: tuple[NotSecretName, ...] = (
    NotSecretName(r"PWD|OLDPWD", "the shell's working directory"),
    NotSecretName(r"SSH_AUTH_SOCK", "path of the ssh-agent socket; listed under processes"),
    NotSecretName(r"SSH_AGENT_PID", "process id of ssh-agent"),
    NotSecretName(r"XDG_SESSION_[A-Z_]+", "systemd-logind session id, class and type"),
    NotSecretName(r"DESKTOP_SESSION|SESSION_MANAGER|TERM_SESSION_ID", "desktop session names"),
    NotSecretName(r"DBUS_SESSION_BUS_ADDRESS", "D-Bus socket address; listed under processes"),
    NotSecretName(r"GPG_AGENT_INFO", "path of the gpg-agent socket"),
    NotSecretName(r"[A-Z_]*_KEYMAP|KEYMAP", "keyboard layout"),
    NotSecretName(r"GIT_ASKPASS|SSH_ASKPASS|SUDO_ASKPASS", "path of a password prompt program"),
)
_NOT_SECRET = tuple(re.compile(row.pattern) for row in NOT_SECRET_NAMES)


def is_secret_name(name: str) -> bool:
    """True when ``name`` looks like it holds a secret (and is not a known exception)."""
    upper = name.upper()
    if any(rx.fullmatch(upper) for rx in _NOT_SECRET):
        return False
    for word in upper.split("_"):
        if word in SECRET_NAME_WORDS or (len(word) > 6 and word.endswith(_SECRET_NAME_SUFFIXES)):
            return True
    return False


def secret_shape_of(value: str) -> SecretShape | None:
    """The first ``SECRET_SHAPES`` row whose shape ``value`` has, or None."""
    for shape in SECRET_SHAPES:
        if shape.matches(value):
            return shape
    return None
