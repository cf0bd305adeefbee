"""broker.yaml: the broker's own configuration (never seen by a sandbox).

Strict like the boundary manifest: unknown keys are errors, relative paths are resolved against
the config file's directory, and every error names the file and key path. Example::

    storage: {sqlite: ./broker.db}            # or {postgres: "host=/run/pg dbname=broker"}
    socket_path: ./broker.sock
    tcp_port: null                            # optional, loopback only
    allowed_peer_uids: []                     # uids admitted besides root, yours and sandboxes'
    max_connections_per_peer: 128
    request_timeout_s: 10
    refusal_window_s: 5
    token_key_file: ./token.key               # capability-token root key (0600, created)
    grant_key_file: ./grant.key               # the gate's grant key (0600)
    checkpoint_key_file: ./checkpoint.key     # Ed25519 ledger checkpoint key (0600, created)
    ledger_checkpoints: ./ledger.checkpoints  # signed heads, outside the database
    checkpoint_anchor:                        # optional: each checkpoint also goes outside the state dir
      file: /mnt/ledger-anchors/broker.anchors  # or command: [logger, -t, contain-ledger]
    secrets_file: ./broker.secrets.json       # {"invoices_api_key": "..."} (0600)
    import_paths: [.]
    actions:
      - {ref: "invoice_actions:update_invoice", options: {database: ./invoices.db}}

What is not checked here: that the key files are private (checked when they are loaded).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from contain.boundary.documents import read_config_document
from contain.broker.actions import Action
from contain.errors import BoundaryInvalid

__all__ = ["ActionRef", "BrokerConfig", "CheckpointAnchorConfig", "load_actions", "load_config"]

_STRICT = ConfigDict(extra="forbid", frozen=True)


class ActionRef(BaseModel):
    """A factory ``module:function`` that returns an ``Action``, and the options it receives."""

    model_config = _STRICT
    ref: str = Field(description="Factory reference, e.g. invoice_actions:update_invoice.")
    options: dict[str, Any] = Field(default_factory=dict, description="Passed to the factory, e.g. {database: x.db}.")

    @field_validator("ref")
    @classmethod
    def _check_ref(cls, value: str) -> str:
        module, _, function = value.partition(":")
        if not module or not function:
            raise ValueError(f"action ref {value!r} must be module:function")
        return value


class CheckpointAnchorConfig(BaseModel):
    """Where each checkpoint line also goes, outside the broker's state directory (``anchors``)."""

    model_config = _STRICT
    file: str | None = Field(default=None, description="Append each line here, e.g. /mnt/anchors/broker.anchors.")
    command: tuple[str, ...] | None = Field(
        default=None, description="Run this argv (no shell), line on stdin, e.g. [logger, -t, contain-ledger]."
    )
    required: bool = Field(default=True, description="Refuse to start when the first line cannot be anchored.")
    timeout_s: float = Field(default=10.0, gt=0, le=300, description="Longest one delivery may take, e.g. 10.")

    @model_validator(mode="after")
    def _check_one_target(self) -> CheckpointAnchorConfig:
        if (self.file is None) == (self.command is None):
            raise ValueError("checkpoint_anchor needs exactly one of file: PATH or command: [ARGV...]")
        if self.command is not None and not self.command:
            raise ValueError("checkpoint_anchor.command cannot be empty; name a program")
        return self


class BrokerConfig(BaseModel):
    """Everything the broker process needs; paths are absolute after ``load_config``."""

    model_config = _STRICT
    storage: dict[str, str] = Field(description="{sqlite: path} or {postgres: dsn}.")
    socket_path: str = Field(description="Unix socket the broker listens on, e.g. ./broker.sock.")
    tcp_port: int | None = Field(default=None, description="Also listen on 127.0.0.1:PORT, e.g. 8787.")
    token_key_file: str = Field(description="Capability-token root key, e.g. ./token.key.")
    grant_key_file: str = Field(description="The gate's grant key, e.g. ./grant.key.")
    checkpoint_key_file: str = Field(description="Ed25519 checkpoint key, e.g. ./checkpoint.key.")
    ledger_checkpoints: str = Field(description="Signed checkpoint file, e.g. ./ledger.checkpoints.")
    secrets_file: str | None = Field(default=None, description="0600 JSON object of executor secrets.")
    import_paths: tuple[str, ...] = Field(default=(), description="Added to sys.path to import actions, e.g. [.].")
    actions: tuple[ActionRef, ...] = Field(description="Registered actions, e.g. [{ref: mod:fn}].")
    checkpoint_every_entries: int = Field(default=256, ge=1, description="Sign the head after N entries, e.g. 256.")
    checkpoint_anchor: CheckpointAnchorConfig | None = Field(
        default=None, description="Also send each checkpoint outside the state dir, e.g. {file: /mnt/a/anchors}."
    )
    socket_mode: int = Field(
        default=0o600, description="Socket file mode; sandboxes reach it through an idmapped view, e.g. 0o600."
    )
    allowed_peer_uids: tuple[int, ...] = Field(
        default=(), description="Uids admitted besides root, the broker's, sandboxes' (peers.PEER_RULES), e.g. [1000]."
    )
    max_connections_per_peer: int = Field(default=128, ge=1, description="Connections one uid may hold, e.g. 128.")
    request_timeout_s: float = Field(
        default=10.0, gt=0, description="First byte to whole request, and reply queued to taken, e.g. 10."
    )
    refusal_window_s: float = Field(
        default=5.0, gt=0, description="Refusals without a valid token: one entry, then a summary per window, e.g. 5."
    )

    @field_validator("storage")
    @classmethod
    def _check_storage(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) != 1 or next(iter(value)) not in ("sqlite", "postgres"):
            raise ValueError("storage must be exactly one of {sqlite: path} or {postgres: dsn}")
        return value

    @field_validator("tcp_port")
    @classmethod
    def _check_port(cls, value: int | None) -> int | None:
        if value is not None and not 0 <= value <= 65535:
            raise ValueError("tcp_port must be 0..65535 (0 picks a free port)")
        return value

    @model_validator(mode="after")
    def _check_actions(self) -> BrokerConfig:
        if not self.actions:
            raise ValueError("actions cannot be empty; register at least one module:function")
        return self

    def resolved(self, base: Path) -> BrokerConfig:
        """Return a copy with every relative path made absolute against ``base``."""

        def path(value: str) -> str:
            return str((base / value).resolve()) if not Path(value).is_absolute() else value

        storage = dict(self.storage)
        if "sqlite" in storage:
            storage["sqlite"] = path(storage["sqlite"])
        actions = tuple(
            ActionRef(
                ref=a.ref,
                options={
                    k: path(v) if k.endswith(("database", "path", "file")) and isinstance(v, str) else v
                    for k, v in a.options.items()
                },
            )
            for a in self.actions
        )
        anchor = self.checkpoint_anchor
        if anchor is not None and anchor.file is not None:
            anchor = anchor.model_copy(update={"file": path(anchor.file)})
        return self.model_copy(
            update={
                "checkpoint_anchor": anchor,
                "storage": storage,
                "socket_path": path(self.socket_path),
                "token_key_file": path(self.token_key_file),
                "grant_key_file": path(self.grant_key_file),
                "checkpoint_key_file": path(self.checkpoint_key_file),
                "ledger_checkpoints": path(self.ledger_checkpoints),
                "secrets_file": path(self.secrets_file) if self.secrets_file else None,
                "import_paths": tuple(path(p) for p in self.import_paths),
                "actions": actions,
            }
        )


def load_config(path: str | Path) -> BrokerConfig:
    """Read and validate broker.yaml; relative paths are resolved against its directory.

    Raises:
        BoundaryInvalid: unreadable file, bad YAML or a validation error (file + key path).
    """
    file = Path(path)
    try:
        data = read_config_document(file, what="broker config").data
    except (OSError, yaml.YAMLError) as exc:
        raise BoundaryInvalid(f"cannot read broker config {file}: {exc}", "check the path and the YAML syntax") from exc
    try:
        config = BrokerConfig.model_validate(data)
    except ValidationError as exc:
        problems = [f"{file}: {'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()]
        raise BoundaryInvalid(
            f"broker config {file} is invalid: {problems[0]}", "fix the named key", problems=problems
        ) from exc
    resolved = config.resolved(file.resolve().parent)
    problem = _anchor_in_state_directory(resolved)
    if problem is not None:
        raise BoundaryInvalid(f"broker config {file}: checkpoint_anchor.file: {problem}",
                              "put the anchor file on storage the broker's state directory is not on")
    return resolved


def _anchor_in_state_directory(config: BrokerConfig) -> str | None:
    """Why the anchor file is useless where it is (beside what it should vouch for), or None."""
    anchor = config.checkpoint_anchor
    if anchor is None or anchor.file is None:
        return None
    state = [config.ledger_checkpoints, config.checkpoint_key_file, config.storage.get("sqlite")]
    state_dirs = {Path(p).parent for p in state if p}
    if any(Path(anchor.file).parent.is_relative_to(d) for d in state_dirs):
        return (f"{anchor.file} is inside the directory of the checkpoints, key or database; "
                "whoever can rewrite those could rewrite it too")
    return None


def load_actions(config: BrokerConfig) -> Mapping[str, Action]:
    """Import every action factory and call it with its options.

    Raises:
        BoundaryInvalid: a module or function cannot be imported, or it does not return an Action,
            or two actions share a name.
    """
    for extra in config.import_paths:
        if extra not in sys.path:
            sys.path.insert(0, extra)
    out: dict[str, Action] = {}
    for ref in config.actions:
        module_name, _, function_name = ref.ref.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), function_name)
            action = factory(ref.options)
        except (ImportError, AttributeError, TypeError, ValueError) as exc:
            raise BoundaryInvalid(
                f"cannot load action {ref.ref}: {exc}", "check the module path, import_paths and the options"
            ) from exc
        if not isinstance(action, Action):
            raise BoundaryInvalid(f"{ref.ref} returned {type(action).__name__}, not an Action", "return an Action")
        if action.name in out:
            raise BoundaryInvalid(f"two actions are named {action.name}", "give each action a unique name")
        out[action.name] = action
    return out
