"""Credentials a process started here could read: secret-looking variables and credential files.

Two steps. ``gather_credential_facts`` does the I/O: it looks for the files of the
``CREDENTIAL_FILES`` table under the given home, files named by ``ENV_POINTERS`` variables,
private keys in ``~/.ssh`` (by name or PEM header) and ``.env`` files in the working directory and
every parent. ``classify_credentials`` is pure and turns those facts into items.

Secret values are held in memory only as long as the facts live; an item carries at most a
``redacted_fingerprint``, and ``.env`` files are reported by variable *names*.

Not covered: OS keyrings (Secret Service, KWallet), browser profiles, credentials inside
project files other than ``.env*``, and secrets held by running processes (see ``processes``
for the agent sockets that hand them out).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from contain.inventory.items import Group, InventoryItem, Verdict, redacted_fingerprint
from contain.inventory.secrets import is_secret_name, secret_shape_of

__all__ = [
    "CREDENTIAL_FILES",
    "ENV_POINTERS",
    "CredentialFacts",
    "CredentialFile",
    "Dotenv",
    "EnvPointer",
    "FoundFile",
    "classify_credentials",
    "gather_credential_facts",
    "parse_dotenv",
]

MAX_DOTENV_BYTES = 1024 * 1024
# Values that cannot be secrets however the variable is named (NO_AUTH=1).
_TRIVIAL_VALUES = frozenset({"", "0", "1", "true", "false", "yes", "no", "on", "off", "none"})
_TEMPLATE_DOTENV = re.compile(r"\.env\.(example|sample|template|dist|defaults)$")


@dataclass(frozen=True)
class CredentialFile:
    """A well-known credential location under the home directory."""

    kind: str
    path: str  # relative to the home directory
    opens: str
    why: str


CREDENTIAL_FILES: tuple[CredentialFile, ...] = (
    CredentialFile("ssh-config", ".ssh/config", "SSH hosts", "names hosts and the key that opens each"),
    CredentialFile("aws-credentials", ".aws/credentials", "AWS APIs", "long-lived access keys per profile"),
    CredentialFile("aws-config", ".aws/config", "AWS APIs", "profiles, SSO sessions and role ARNs"),
    CredentialFile("aws-sso-cache", ".aws/sso/cache", "AWS APIs", "cached SSO access tokens"),
    CredentialFile(
        "gcloud", ".config/gcloud", "Google Cloud APIs", "OAuth refresh tokens and application default credentials"
    ),
    CredentialFile("azure", ".azure", "Azure APIs", "MSAL token cache and profiles"),
    CredentialFile(
        "kube-config",
        ".kube/config",
        "Kubernetes clusters",
        "cluster endpoints with client certificates or bearer tokens",
    ),
    CredentialFile(
        "docker-config",
        ".docker/config.json",
        "container registries",
        "registry logins (base64 user:password) and credential helpers",
    ),
    CredentialFile(
        "podman-auth", ".config/containers/auth.json", "container registries", "registry logins for podman and buildah"
    ),
    CredentialFile("netrc", ".netrc", "hosts named in it", "a login and password per machine"),
    CredentialFile("git-credentials", ".git-credentials", "git hosts", "https://user:token@host lines stored in clear"),
    CredentialFile("gh-hosts", ".config/gh/hosts.yml", "GitHub API", "gh CLI OAuth tokens"),
    CredentialFile("hub", ".config/hub", "GitHub API", "hub CLI OAuth tokens"),
    CredentialFile("npmrc", ".npmrc", "npm registries", "_authToken lines can publish packages"),
    CredentialFile("pypirc", ".pypirc", "package indexes", "upload passwords and tokens"),
    CredentialFile("pgpass", ".pgpass", "PostgreSQL databases", "host:port:db:user:password lines"),
    CredentialFile("mysql", ".my.cnf", "MySQL databases", "client passwords"),
    CredentialFile("cargo", ".cargo/credentials.toml", "crates.io", "a token that publishes crates"),
    CredentialFile("gem", ".gem/credentials", "rubygems.org", "an API key that pushes gems"),
    CredentialFile(
        "terraform", ".terraform.d/credentials.tfrc.json", "Terraform Cloud", "API tokens for remote state and runs"
    ),
    CredentialFile("vault-token", ".vault-token", "HashiCorp Vault", "a Vault token"),
    CredentialFile(
        "gnupg", ".gnupg/private-keys-v1.d", "what trusts the GPG key", "private keys for signing and decryption"
    ),
    CredentialFile("password-store", ".password-store", "every password in pass", "the pass password store"),
)


@dataclass(frozen=True)
class EnvPointer:
    """A variable that moves a credential file somewhere else."""

    variable: str
    kind: str
    opens: str
    inside: str | None = None  # the variable names a directory; the file is this inside it
    is_list: bool = False  # colon-separated list of paths (KUBECONFIG)


ENV_POINTERS: tuple[EnvPointer, ...] = (
    EnvPointer("KUBECONFIG", "kube-config", "Kubernetes clusters", is_list=True),
    EnvPointer("AWS_SHARED_CREDENTIALS_FILE", "aws-credentials", "AWS APIs"),
    EnvPointer("AWS_CONFIG_FILE", "aws-config", "AWS APIs"),
    EnvPointer("GOOGLE_APPLICATION_CREDENTIALS", "gcloud-service-account", "Google Cloud APIs"),
    EnvPointer("CLOUDSDK_CONFIG", "gcloud", "Google Cloud APIs"),
    EnvPointer("AZURE_CONFIG_DIR", "azure", "Azure APIs"),
    EnvPointer("DOCKER_CONFIG", "docker-config", "container registries", inside="config.json"),
    EnvPointer("NETRC", "netrc", "hosts named in it"),
    EnvPointer("NPM_CONFIG_USERCONFIG", "npmrc", "npm registries"),
    EnvPointer("PGPASSFILE", "pgpass", "PostgreSQL databases"),
)
_POINTER_VARIABLES = frozenset(p.variable for p in ENV_POINTERS)


@dataclass(frozen=True)
class FoundFile:
    """A credential file or directory that exists on this host."""

    kind: str
    path: Path
    opens: str
    why: str
    world_readable: bool


@dataclass(frozen=True)
class Dotenv:
    """A ``.env`` file and the variables it defines (values stay in memory, never in items)."""

    path: Path
    variables: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class CredentialFacts:
    """Everything ``classify_credentials`` needs; holds secret values, so never print it."""

    environ: tuple[tuple[str, str], ...]
    files: tuple[FoundFile, ...]
    dotenvs: tuple[Dotenv, ...]


def gather_credential_facts(*, home: Path, environ: Mapping[str, str], cwd: Path) -> CredentialFacts:
    """Look for credential files and ``.env`` files (I/O only; no decision).

    Args:
        home: the home directory to search (a fixture home in tests).
        environ: the environment a task started here would inherit.
        cwd: the working directory; it and every parent are searched for ``.env*``.

    Returns:
        The facts, including secret values in memory; pass them to ``classify_credentials``.
    """
    found: dict[Path, FoundFile] = {}
    for row in CREDENTIAL_FILES:
        _add_if_exists(found, home / row.path, row.kind, row.opens, row.why)
    for key in _ssh_private_keys(home / ".ssh"):
        _add_if_exists(
            found, key, "ssh-private-key", "SSH hosts and git remotes", "a private key opens every host that trusts it"
        )
    for pointer in ENV_POINTERS:
        raw = environ.get(pointer.variable, "")
        for part in raw.split(os.pathsep) if pointer.is_list else [raw]:
            if not part:
                continue
            path = cwd / os.path.expanduser(part)
            if pointer.inside:
                path = path / pointer.inside
            _add_if_exists(found, path, pointer.kind, pointer.opens, f"named by ${pointer.variable}")
    return CredentialFacts(
        environ=tuple(sorted(environ.items())),
        files=tuple(found.values()),
        dotenvs=tuple(_find_dotenvs(cwd)),
    )


def classify_credentials(facts: CredentialFacts) -> tuple[InventoryItem, ...]:
    """Turn credential facts into items; pure.

    Returns:
        One item per secret-looking variable, credential file and ``.env`` file.
    """
    items: list[InventoryItem] = []
    for name, value in facts.environ:
        item = _classify_variable(name, value)
        if item is not None:
            items.append(item)
    for found in facts.files:
        reason = (
            f"{found.why}; opens {found.opens}. A sandbox sees no home file unless the "
            "manifest binds it, so keep it out"
        )
        if found.world_readable:
            reason += " (the file is world-readable: every local user can read it too)"
        items.append(InventoryItem(Group.CREDENTIALS, found.kind, str(found.path), Verdict.BLOCK, reason))
    for dotenv in facts.dotenvs:
        items.append(_classify_dotenv(dotenv))
    return tuple(items)


def parse_dotenv(text: str) -> tuple[tuple[str, str], ...]:
    """``NAME=value`` pairs of a ``.env`` file (``export`` prefixes and quotes removed)."""
    pairs: list[tuple[str, str]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        line = line.removeprefix("export ").strip()
        name, sep, value = line.partition("=")
        name = name.strip()
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        pairs.append((name, value))
    return tuple(pairs)


def _is_secret_variable(name: str, value: str) -> bool:
    if value.strip().lower() in _TRIVIAL_VALUES:
        return False
    return secret_shape_of(value) is not None or is_secret_name(name)


def _classify_variable(name: str, value: str) -> InventoryItem | None:
    if not _is_secret_variable(name, value):
        return None
    shape = secret_shape_of(value)
    if shape is None and name in _POINTER_VARIABLES:
        return None  # a path to a credential file; the file itself is an item
    if shape is None and value.startswith("/"):
        return InventoryItem(
            Group.CREDENTIALS,
            "env-path",
            f"${name}",
            Verdict.REVIEW,
            "secret-looking name holding a path; check what the file holds before binding it",
        )
    what = f"value looks like a {shape.title}" if shape else "secret-looking variable name"
    return InventoryItem(
        Group.CREDENTIALS,
        "env-secret",
        f"${name}",
        Verdict.BLOCK,
        f"{what}; a sandbox starts with an empty environment, so declare it "
        "`credentials: [{name: " + name + ", via: broker}]` and let the broker use it",
        fingerprint=redacted_fingerprint(value),
    )


def _classify_dotenv(dotenv: Dotenv) -> InventoryItem:
    secret_names = [n for n, v in dotenv.variables if _is_secret_variable(n, v)]
    shaped = [n for n, v in dotenv.variables if secret_shape_of(v) is not None]
    listed = ", ".join(secret_names[:8]) + (", …" if len(secret_names) > 8 else "")
    summary = f"defines {len(dotenv.variables)} variable(s), {len(secret_names)} secret-looking" + (
        f" ({listed})" if secret_names else ""
    )
    if _TEMPLATE_DOTENV.search(dotenv.path.name) and not shaped:
        return InventoryItem(
            Group.CREDENTIALS,
            "dotenv",
            str(dotenv.path),
            Verdict.REVIEW,
            f"{summary}; named like a template, check it holds no real values",
        )
    return InventoryItem(
        Group.CREDENTIALS,
        "dotenv",
        str(dotenv.path),
        Verdict.BLOCK,
        f"{summary}; tools load it automatically, so block it inside any bind",
    )


def _add_if_exists(found: dict[Path, FoundFile], path: Path, kind: str, opens: str, why: str) -> None:
    try:
        info = path.stat()
    except OSError:
        return
    key = Path(os.path.realpath(path))
    if key in found:
        return
    found[key] = FoundFile(
        kind, path, opens, why, world_readable=bool(info.st_mode & stat.S_IROTH) and stat.S_ISREG(info.st_mode)
    )


def _ssh_private_keys(ssh_dir: Path) -> list[Path]:
    keys: list[Path] = []
    try:
        entries = sorted(ssh_dir.iterdir())
    except OSError:
        return keys
    for entry in entries:
        if entry.name.endswith(".pub") or not entry.is_file():
            continue
        if entry.name.startswith("id_") or _has_private_key_header(entry):
            keys.append(entry)
    return keys


def _has_private_key_header(path: Path) -> bool:
    # Only the first line is read; a PEM header is not secret.
    try:
        with path.open("rb") as handle:
            head = handle.read(100)
    except OSError:
        return False
    return head.startswith(b"-----BEGIN") and b"PRIVATE KEY" in head


def _find_dotenvs(cwd: Path) -> list[Dotenv]:
    found: list[Dotenv] = []
    for directory in (cwd, *cwd.parents):
        try:
            names = sorted(p.name for p in directory.iterdir())
        except OSError:
            continue
        for name in names:
            if name != ".env" and not name.startswith(".env."):
                continue
            path = directory / name
            try:
                if not path.is_file() or path.stat().st_size > MAX_DOTENV_BYTES:
                    continue
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            found.append(Dotenv(path, parse_dotenv(text)))
    return found
