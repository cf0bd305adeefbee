"""External records the discovered credentials would open: clouds, clusters, databases, registries.

Input is the credential facts (environment, credential files, ``.env`` files). For the file kinds
in ``_PARSERS`` the file is read and only non-secret fields are kept: cluster URLs, registry
names, hosts, profile names. Database URLs are printed without their password, query or
fragment; ``.pgpass`` lines without the password field. ``classify_records`` is pure over the
texts; ``gather_record_facts`` only reads them.

Every record is proposed as ``review``: a task that must change an external record does it
through broker actions declared under ``records``, never with the credential itself.

Not covered: what a credential is actually allowed to do (no API is called), SSO sessions that
would be refreshed on use, and records reachable through a daemon socket (see ``processes``).
"""

from __future__ import annotations

import configparser
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml

from contain.inventory.credentials import CredentialFacts
from contain.inventory.items import Group, InventoryItem, Verdict
from contain.inventory.network import redact_url
from contain.inventory.secrets import secret_shape_of

__all__ = ["DATABASE_SCHEMES", "RecordFacts", "classify_records", "gather_record_facts"]

MAX_CREDENTIAL_FILE_BYTES = 1024 * 1024
DATABASE_SCHEMES: frozenset[str] = frozenset(
    {
        "postgres",
        "postgresql",
        "mysql",
        "mariadb",
        "redis",
        "rediss",
        "mongodb",
        "mongodb+srv",
        "amqp",
        "amqps",
        "mssql",
        "sqlserver",
        "clickhouse",
        "cockroachdb",
    }
)
# Shapes whose "opens" is too vague to be a record of its own.
_VAGUE_SHAPES = frozenset({"high-entropy", "url-password", "jwt", "private-key"})


@dataclass(frozen=True)
class RecordFacts:
    """Variables and credential file texts; holds secrets, so never print it."""

    variables: tuple[tuple[str, str, str], ...]  # (where, name, value)
    texts: tuple[tuple[str, Path, str], ...]  # (kind, path, text)


Record = tuple[str, str, str]  # (kind, location, reason)


def gather_record_facts(credentials: CredentialFacts) -> RecordFacts:
    """Read the credential files whose kinds can be parsed for destinations (I/O only)."""
    texts: list[tuple[str, Path, str]] = []
    for found in credentials.files:
        if found.kind not in _PARSERS:
            continue
        try:
            if found.path.stat().st_size > MAX_CREDENTIAL_FILE_BYTES:
                continue
            texts.append((found.kind, found.path, found.path.read_text(encoding="utf-8", errors="replace")))
        except OSError:
            continue
    variables = [("environment", n, v) for n, v in credentials.environ]
    for dotenv in credentials.dotenvs:
        variables.extend((str(dotenv.path), n, v) for n, v in dotenv.variables)
    return RecordFacts(tuple(variables), tuple(texts))


def classify_records(facts: RecordFacts) -> tuple[InventoryItem, ...]:
    """Map credentials to the external systems they open; pure."""
    seen: dict[tuple[str, str], InventoryItem] = {}

    def add(kind: str, location: str, reason: str) -> None:
        key = (kind, location)
        if key not in seen:
            seen[key] = InventoryItem(
                Group.RECORDS,
                kind,
                location,
                Verdict.REVIEW,
                f"{reason}; change it only through broker actions declared under records",
            )

    for record in _from_variables(facts.variables):
        add(*record)
    for kind, path, text in facts.texts:
        try:
            records = list(_PARSERS[kind](text))
        except (ValueError, yaml.YAMLError, configparser.Error, TypeError, AttributeError):
            records = [(kind, str(path), "could not be parsed; assume it opens what its kind does")]
        for record_kind, location, why in records:
            add(record_kind, location, f"{why} (credentials in {path})")
    return tuple(seen.values())


def _from_variables(variables: Iterable[tuple[str, str, str]]) -> Iterable[Record]:
    by_where: dict[str, dict[str, str]] = {}
    for where, name, value in variables:
        by_where.setdefault(where, {})[name] = value
        scheme = value.split("://", 1)[0].lower() if "://" in value else ""
        if scheme in DATABASE_SCHEMES:
            yield ("database", redact_url(value), f"${name} in {where} names a {scheme} database")
            continue
        shape = secret_shape_of(value)
        if shape is not None and shape.id not in _VAGUE_SHAPES:
            yield (f"api:{shape.id}", shape.opens, f"${name} in {where} holds a {shape.title}")
    for where, env in by_where.items():
        if "AWS_ACCESS_KEY_ID" in env or "AWS_SESSION_TOKEN" in env:
            region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "default region"
            yield ("api:aws", f"AWS APIs ({region})", f"AWS keys in {where}")
        if "PGHOST" in env or "PGPASSWORD" in env:
            user = env.get("PGUSER", "")
            host = env.get("PGHOST", "localhost")
            location = (
                f"postgres://{user + '@' if user else ''}{host}:{env.get('PGPORT', '5432')}/{env.get('PGDATABASE', '')}"
            )
            yield ("database", location, f"PG* variables in {where}")


def _kube(text: str) -> Iterable[Record]:
    data = yaml.safe_load(text) or {}
    contexts: dict[str, list[str]] = {}
    for ctx in data.get("contexts") or []:
        cluster = (ctx.get("context") or {}).get("cluster")
        contexts.setdefault(str(cluster), []).append(str(ctx.get("name")))
    for cluster in data.get("clusters") or []:
        server = str((cluster.get("cluster") or {}).get("server", ""))
        names = ", ".join(contexts.get(str(cluster.get("name")), [])) or "none"
        yield ("kubernetes-cluster", redact_url(server), f"cluster {cluster.get('name')} (contexts: {names})")


def _docker(text: str) -> Iterable[Record]:
    data = json.loads(text)
    for registry in sorted(set(data.get("auths") or {}) | set(data.get("credHelpers") or {})):
        yield ("container-registry", str(registry), "push and pull images")
    if data.get("credsStore"):
        yield (
            "container-registry",
            f"every registry in credsStore {data['credsStore']}",
            "a credential helper answers for any registry",
        )


def _netrc(text: str) -> Iterable[Record]:
    tokens = text.split()
    for index, token in enumerate(tokens[:-1]):
        if token == "machine":
            yield ("netrc-host", tokens[index + 1], "a login for this machine")
        elif token == "default":
            yield ("netrc-host", "every other host", "a default login")


def _git_credentials(text: str) -> Iterable[Record]:
    for line in text.splitlines():
        if "://" in line:
            yield ("git-host", redact_url(line.strip()), "a stored git login")


def _gh_hosts(text: str) -> Iterable[Record]:
    for host, entry in (yaml.safe_load(text) or {}).items():
        user = entry.get("user") if isinstance(entry, dict) else None
        yield ("github-host", str(host), f"gh CLI login{f' as {user}' if user else ''}")


def _npmrc(text: str) -> Iterable[Record]:
    for match in re.finditer(r"^\s*//([^/:\s]+)[^\s]*:_(authToken|auth|password)\s*=", text, re.MULTILINE):
        yield ("package-registry", match.group(1), "an npm registry token")


def _ini_sections(text: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(text)
    return parser


def _pypirc(text: str) -> Iterable[Record]:
    parser = _ini_sections(text)
    for section in parser.sections():
        if section == "distutils":
            continue
        url = parser.get(section, "repository", fallback="https://upload.pypi.org/legacy/")
        yield ("package-registry", redact_url(url), f"upload as [{section}]")


def _pgpass(text: str) -> Iterable[Record]:
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        fields = re.split(r"(?<!\\):", line)
        if len(fields) >= 4:
            host, port, db, user = fields[:4]
            yield ("database", f"postgres://{user}@{host}:{port}/{db}", "a .pgpass entry")


def _aws(text: str) -> Iterable[Record]:
    profiles = [s.removeprefix("profile ") for s in _ini_sections(text).sections()]
    yield ("api:aws", "AWS APIs", f"profiles: {', '.join(profiles) or 'none'}")


_PARSERS: dict[str, Callable[[str], Iterable[Record]]] = {
    "kube-config": _kube,
    "docker-config": _docker,
    "podman-auth": _docker,
    "netrc": _netrc,
    "git-credentials": _git_credentials,
    "gh-hosts": _gh_hosts,
    "npmrc": _npmrc,
    "pypirc": _pypirc,
    "pgpass": _pgpass,
    "aws-credentials": _aws,
    "aws-config": _aws,
}
