"""The boundary manifest as one typed schema.

Everything a task may touch is named here; everything not named is denied. Models are frozen and
forbid unknown keys, so a typo is an error and not a silently ignored rule. Defaults are the safe
side; the risky direction has the loud name.

This module validates shape and contradictions only. Whether the host can enforce a boundary is
decided by ``contain.runtime`` from ``HostFacts``; tool and record rules are enforced by the gate
and the broker.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from contain.boundary.hostnames import HostnameError, canonical_hostname, canonical_pattern
from contain.boundary.kinds import (
    PROTECTED_PATHS,
    RESERVED_SANDBOX_PATHS,
    Backend,
    CredentialVia,
    FileAccess,
    LayerRequirement,
    ProtectedPath,
    Threat,
    ToolVerdict,
)
from contain.boundary.kubernetes import Kubernetes
from contain.boundary.units import parse_bytes, parse_seconds

__all__ = [
    "PROTECTED_PATHS",
    "RESERVED_SANDBOX_PATHS",
    "ArgConstraint",
    "Backend",
    "Boundary",
    "ContainerRuntime",
    "Credential",
    "CredentialVia",
    "FileAccess",
    "FileRule",
    "Hardening",
    "Kubernetes",
    "LayerRequirement",
    "Network",
    "NetworkRule",
    "ProtectedPath",
    "RecordRule",
    "Resources",
    "Runtime",
    "Threat",
    "ToolRule",
    "ToolVerdict",
]

Bytes = Annotated[int, BeforeValidator(parse_bytes)]
Seconds = Annotated[float, BeforeValidator(parse_seconds)]

_STRICT = ConfigDict(extra="forbid", frozen=True)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DOTTED_NAME = re.compile(r"^[A-Za-z0-9_.*:/-]+$")


def _sandbox_path(value: str, *, what: str) -> str:
    if not value.startswith("/"):
        raise ValueError(f"{what} {value!r} must be an absolute path inside the sandbox, e.g. /work/out")
    if "\x00" in value:
        raise ValueError(f"{what} contains a NUL byte")
    normal = posixpath.normpath(value)
    if normal != value or "/../" in value or value.endswith("/.."):
        raise ValueError(f"{what} {value!r} is not normalised; write {normal!r}")
    for reserved in RESERVED_SANDBOX_PATHS:
        if value == reserved or (reserved != "/" and value.startswith(reserved + "/")):
            raise ValueError(
                f"{what} {value!r} is inside {reserved}, which the runtime owns; use /work, /inputs or /data"
            )
    return value


def _relative_subpath(value: str) -> str:
    normal = posixpath.normpath(value)
    if value.startswith("/") or normal.startswith("..") or normal != value.rstrip("/") or "\x00" in value:
        raise ValueError(f"entry {value!r} must be a normalised path relative to the bind, e.g. .git/hooks")
    return normal


class FileRule(BaseModel):
    """One path the sandbox sees, and what it may do there."""

    model_config = _STRICT
    path: str = Field(description="Absolute path inside the sandbox, e.g. /inputs/data.")
    access: FileAccess = Field(description="read | write | scratch | block.")
    host: str | None = Field(
        default=None,
        description="Host path to bind (read and write only); relative to the manifest, e.g. ./data.",
    )
    protect: tuple[str, ...] = Field(
        default=(),
        description="Write only: extra subpaths kept read-only (the defaults are always protected), e.g. [secrets].",
    )
    export: str | None = Field(
        default=None,
        description="Scratch only: host directory that receives a copy after the sandbox closes, e.g. ./out.",
    )
    required: bool = Field(
        default=True, description="If false, a missing host path is skipped and reported instead of refusing."
    )
    allow_sockets: tuple[str, ...] = Field(
        default=(),
        description=(
            "Read or write binds: Unix sockets in the bound tree that stay connectable (every other socket "
            "found at start is hidden), relative to the bind, e.g. [run/dev-server.sock]."
        ),
    )

    @field_validator("path")
    @classmethod
    def _check_path(cls, value: str) -> str:
        return _sandbox_path(value, what="path")

    @field_validator("protect", "allow_sockets")
    @classmethod
    def _check_protect(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_relative_subpath(item) for item in value)

    @model_validator(mode="after")
    def _check_combination(self) -> FileRule:
        needs_host = self.access in (FileAccess.READ, FileAccess.WRITE)
        if needs_host and not self.host:
            raise ValueError(f"access {self.access.value} needs host: the host path to bind")
        if not needs_host and self.host:
            raise ValueError(f"access {self.access.value} takes no host path; remove host")
        if self.protect and self.access is not FileAccess.WRITE:
            raise ValueError("protect applies only to access: write")
        if self.export and self.access is not FileAccess.SCRATCH:
            raise ValueError("export applies only to access: scratch")
        if self.allow_sockets and not needs_host:
            raise ValueError("allow_sockets applies only to read and write binds")
        return self


class Credential(BaseModel):
    """A secret the task's actions need, and the only way it is allowed to travel."""

    model_config = _STRICT
    name: str = Field(description="Credential name, e.g. BILLING_TOKEN.")
    via: CredentialVia = Field(default=CredentialVia.BROKER, description="broker (never enters a sandbox) or env.")
    source: str | None = Field(
        default=None, description="via env: the host variable to copy it from, e.g. CI_BILLING_TOKEN."
    )

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not _ENV_NAME.match(value):
            raise ValueError(f"credential name {value!r} must look like an environment variable name")
        return value

    @model_validator(mode="after")
    def _check_source(self) -> Credential:
        if self.via is CredentialVia.ENV and not self.source:
            raise ValueError("via env needs source: the host variable that holds the value")
        if self.via is CredentialVia.BROKER and self.source:
            raise ValueError("via broker takes no source; the broker reads its own secrets")
        return self


class NetworkRule(BaseModel):
    """A destination the sandbox may reach through the egress proxy."""

    model_config = _STRICT
    host: str = Field(description="Exact name, *.domain (proper subdomains only), or an IP/CIDR named on purpose.")
    ports: tuple[int, ...] = Field(default=(443,), description="Allowed ports, e.g. [443].")

    @field_validator("host")
    @classmethod
    def _check_host(cls, value: str) -> str:
        try:
            return str(ipaddress.ip_network(value.strip("[]"), strict=True))
        except ValueError:
            pass
        try:
            return canonical_pattern(value)
        except HostnameError as exc:
            raise ValueError(str(exc)) from exc

    @field_validator("ports")
    @classmethod
    def _check_ports(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if not value:
            raise ValueError("ports cannot be empty; list the ports, e.g. [443]")
        for port in value:
            if not 1 <= port <= 65535:
                raise ValueError(f"port {port} is outside 1-65535")
        return tuple(sorted(set(value)))


class Network(BaseModel):
    """Egress: denied unless a rule allows it."""

    model_config = _STRICT
    allow: tuple[NetworkRule, ...] = Field(default=(), description="Destinations allowed; none means no network.")
    hosts: dict[str, str] = Field(
        default_factory=dict,
        description="Resolver override used instead of DNS for these names, e.g. {api.test: 127.0.0.1}.",
    )

    @field_validator("hosts")
    @classmethod
    def _check_hosts(cls, value: dict[str, str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for name, address in value.items():
            try:
                out[canonical_hostname(name)] = str(ipaddress.ip_address(address))
            except (HostnameError, ValueError) as exc:
                raise ValueError(f"hosts entry {name!r}: {exc}") from exc
        return out


class Resources(BaseModel):
    """Budgets. Every field has a finite default; there is no 'unlimited'."""

    model_config = _STRICT
    wall_s: Seconds = Field(default=60.0, gt=0, le=86400, description="Wall-clock limit per run, e.g. 60s.")
    cpu_s: Seconds = Field(default=30.0, gt=0, le=86400, description="CPU-time limit per run, e.g. 30s.")
    memory_bytes: Bytes = Field(
        default=512 * 1024**2, ge=16 * 1024**2, description="Memory (including swap) for the sandbox, e.g. 512MiB."
    )
    pids_max: int = Field(default=128, ge=8, le=65536, description="Processes and threads at once, e.g. 128.")
    disk_bytes: Bytes = Field(
        default=256 * 1024**2,
        ge=1024**2,
        description="One total for /tmp, /dev/shm and scratch (not write binds), e.g. 256MiB.",
    )
    output_bytes: Bytes = Field(
        default=8 * 1024**2, ge=1024, description="Captured stdout and stderr, each, per run, e.g. 8MiB."
    )
    open_files_max: int = Field(default=1024, ge=16, le=1048576, description="Open file descriptors per process.")
    cpu_cores: float = Field(
        default=1.0, gt=0, le=1024, description="CPU bandwidth as a number of cores (cgroup quota), e.g. 1.5."
    )


def _yaml_off(value: object) -> object:
    # YAML 1.1 reads a bare `off` as the boolean false; accept it as the word the user wrote.
    if value is False:
        return LayerRequirement.OFF
    if value is True:
        raise ValueError("write required, auto or off (a bare `on`/`yes` is ambiguous)")
    return value


Requirement = Annotated[LayerRequirement, BeforeValidator(_yaml_off)]


class ContainerRuntime(BaseModel):
    """How the container backend runs: which OCI runtime, and which root file system."""

    model_config = _STRICT
    runtime: Literal["runc", "runsc"] = Field(
        default="runc",
        description="OCI runtime for runtime.backend: container: runc (host kernel) | runsc (gVisor), e.g. runsc.",
    )
    image: str | None = Field(
        default=None,
        description=(
            "A local OCI image layout directory, `docker save` tar or rootfs tar used as the root, e.g. "
            "./images/python.tar; null: the host's /usr read-only, as the process backend."
        ),
    )

    @field_validator("image")
    @classmethod
    def _image_not_empty(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or "\0" in value):
            raise ValueError("image must be a path to an image (or null for the host's /usr)")
        return value


class MicrovmRuntime(BaseModel):
    """How the microvm backend runs its guest (runtime/microvm/). Guest RAM and vCPUs come from
    ``resources`` (memory_bytes, cpu_cores), not from here."""

    model_config = _STRICT
    accel: Literal["auto", "kvm", "tcg"] = Field(
        default="auto",
        description=(
            "auto: KVM only where the guest kernel really boots under it, else TCG software emulation; "
            "kvm: fail closed without a working KVM; tcg: never use KVM. E.g. auto."
        ),
    )


class Runtime(BaseModel):
    """The runtime the boundary is written for."""

    model_config = _STRICT
    backend: Backend = Field(default=Backend.PROCESS, description="process | container | microvm | none.")
    container: ContainerRuntime = Field(
        default_factory=ContainerRuntime,
        description="The container backend's OCI runtime and image, e.g. {runtime: runsc, image: null}.",
    )
    microvm: MicrovmRuntime = Field(
        default_factory=MicrovmRuntime,
        description="The microvm backend's accelerator choice, e.g. {accel: auto}.",
    )


class Hardening(BaseModel):
    """Extra layers whose availability depends on the host."""

    model_config = _STRICT
    landlock: Requirement = Field(
        default=LayerRequirement.AUTO,
        description="Landlock filesystem rules inside the sandbox: required | auto | off.",
    )
    cgroups: Requirement = Field(
        default=LayerRequirement.REQUIRED,
        description="cgroup limits for memory, pids and CPU; off falls back to per-process rlimits only.",
    )


class ArgConstraint(BaseModel):
    """A constraint on one tool argument (JSON-Schema fragment plus practical predicates)."""

    model_config = _STRICT
    type: Literal["string", "integer", "number", "boolean", "array", "object"] | None = None
    minimum: float | None = None
    maximum: float | None = None
    enum: tuple[Any, ...] | None = None
    pattern: str | None = Field(default=None, description="Regular expression the whole string must match.")
    max_length: int | None = Field(default=None, ge=0)
    under: str | None = Field(default=None, description="Path must stay under this root after normalisation.")
    hosts: tuple[str, ...] | None = Field(default=None, description="URL or hostname must be one of these.")

    @field_validator("pattern")
    @classmethod
    def _check_pattern(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except (re.error, OverflowError, RecursionError) as exc:
                # OverflowError: a repeat count past the engine's limit (a{99999999999});
                # RecursionError: groups nested deeper than the compiler recurses.
                raise ValueError(f"pattern {value[:80]!r} is not a usable regular expression: {exc}") from exc
        return value

    @model_validator(mode="after")
    def _check_bounds(self) -> ArgConstraint:
        if self.minimum is not None and self.maximum is not None and self.minimum > self.maximum:
            raise ValueError(f"minimum {self.minimum} is greater than maximum {self.maximum}")
        return self


class ToolRule(BaseModel):
    """A gate rule: tool name pattern, verdict, argument constraints."""

    model_config = _STRICT
    name: str = Field(description="Tool name or glob, e.g. billing.read_* or fs__write_file.")
    verdict: ToolVerdict = Field(description="allow | deny | review.")
    args: dict[str, ArgConstraint] = Field(default_factory=dict, description="Constraints per argument name.")

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not value or not _DOTTED_NAME.match(value):
            raise ValueError(f"tool name {value!r} may use letters, digits, _ . - : / and * only")
        return value


class RecordRule(BaseModel):
    """An external record the task may change, always through the broker."""

    model_config = _STRICT
    name: str = Field(description="Record collection, e.g. invoices.")
    via: Literal["broker"] = Field(default="broker", description="Only the broker writes external records.")
    actions: tuple[str, ...] = Field(description="Broker actions the task may request, e.g. [update_invoice].")

    @field_validator("actions")
    @classmethod
    def _check_actions(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("actions cannot be empty; name the broker actions this task may request")
        return value


class Boundary(BaseModel):
    """What one task may touch, and how. Everything not listed is denied."""

    model_config = _STRICT
    version: Literal[1] = Field(default=1, description="Manifest format version; only 1 exists.")
    task: str = Field(default="task", description="Task name, used in logs, tokens and the ledger.")
    principal: str | None = Field(default=None, description="On whose behalf writes happen, e.g. alice.")
    threats: tuple[Threat, ...] = Field(default=(), description="untrusted_documents, generated_code, trusted_api.")
    files: tuple[FileRule, ...] = Field(default=(), description="Paths the sandbox sees; nothing else is visible.")
    credentials: tuple[Credential, ...] = Field(default=(), description="Secrets and how they may travel.")
    network: Network = Field(default_factory=Network, description="Egress allow list (default: no network).")
    resources: Resources = Field(default_factory=Resources, description="Budgets per run.")
    env: dict[str, str] = Field(
        default_factory=dict, description="The only variables a sandbox gets, beyond PATH/HOME/LANG."
    )
    tools: tuple[ToolRule, ...] = Field(default=(), description="Gate rules for tool calls.")
    records: tuple[RecordRule, ...] = Field(default=(), description="External records, written only via the broker.")
    hardening: Hardening = Field(default_factory=Hardening, description="Host-dependent layers.")
    runtime: Runtime = Field(default_factory=Runtime, description="Where the code runs (default: process).")
    kubernetes: Kubernetes | None = Field(
        default=None, description="How `contain k8s render` renders this boundary (see docs/k8s.md)."
    )

    @field_validator("task")
    @classmethod
    def _check_task(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", value):
            raise ValueError(f"task {value!r} must be 1-64 letters, digits, _ . - and start with a letter or digit")
        return value

    @field_validator("env")
    @classmethod
    def _check_env(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not _ENV_NAME.match(name):
                raise ValueError(f"env name {name!r} is not a valid variable name")
            if "\x00" in text:
                raise ValueError(f"env {name} contains a NUL byte")
        return value

    @model_validator(mode="after")
    def _check_contradictions(self) -> Boundary:
        seen: set[str] = set()
        for rule in self.files:
            if rule.path in seen:
                raise ValueError(f"files: {rule.path} is listed twice; keep one entry per sandbox path")
            seen.add(rule.path)
        binds = [r.path for r in self.files if r.access in (FileAccess.READ, FileAccess.WRITE)]
        for rule in self.files:
            if rule.access is FileAccess.BLOCK and not any(_is_under(rule.path, b) for b in binds):
                raise ValueError(
                    f"files: block {rule.path} is not inside any read or write bind; "
                    "unlisted paths are already invisible, so remove it or bind its parent"
                )
        env_names = set(self.env)
        for cred in self.credentials:
            if cred.name in env_names:
                raise ValueError(
                    f"credential {cred.name} is also set in env; a credential is declared once, under credentials"
                )
        return self

    @property
    def allows_network(self) -> bool:
        """True when any destination is allowed (egress needed)."""
        return bool(self.network.allow)


def _is_under(path: str, root: str) -> bool:
    return path != root and path.startswith(root.rstrip("/") + "/")
