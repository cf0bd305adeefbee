"""What a broker action is: arguments, authorization, business rule, verdict, executor, check.

An ``Action`` is plain data plus four callables, registered from Python (``module:function`` in
broker.yaml; the function receives the action's ``options`` and returns an ``Action``):

  * ``arguments``: a pydantic model; anything it rejects is a 400 before any decision;
  * ``authorize(principal, args)``: resource constraints tied to the principal (for example "the
    invoice belongs to the principal"), so a prompt-injected model cannot aim the write at someone
    else's record; returns a ``contain.decision.Decision`` (allow/deny);
  * ``validate(principal, args)``: the business rule; may return allow, deny, or review (for
    example "the amount may change by at most 10% unless reviewed");
  * ``execute(args, context)``: performs the write with credentials from ``context.secret(name)``,
    restricted to the names the action declares in ``secrets``;
  * ``check(intent, context)`` (optional): after a crash, tells whether an intent's write happened;
  * ``quick_rules`` (default False): ``authorize`` and ``validate`` only look at the principal and
    the arguments (no I/O), so the broker may run them on its server loop. Otherwise they run on an
    executor thread like ``execute``, so that a rule which reads a database or calls a service
    delays only its own request.

What is enforced here: secrets are only handed to the action that declared them, and a ``Secret``
never prints its value (repr/str are masked). What is not: an executor can still leak what it was
given; executors are trusted code, reviewed like the broker itself.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from contain.decision import Decision
from contain.gate.digests import tool_digest

__all__ = [
    "Action",
    "ActionFailed",
    "CheckResult",
    "ExecContext",
    "Intent",
    "Principal",
    "Secret",
    "SecretStore",
    "action_tool_digest",
]

@dataclass(frozen=True)
class Principal:
    """On whose behalf a request runs, as the capability token says (never as the body says)."""

    name: str
    task: str


class ActionFailed(Exception):
    """Raised by an executor for a failure whose ``reason`` is safe to show the caller and the ledger.

    Any other exception is recorded only by its type name, so a message that happens to contain a
    credential never leaves the broker.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Secret:
    """A credential value that does not print itself."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret(<hidden>)"

    __str__ = __repr__


class SecretStore:
    """The broker's own secrets: a 0600 JSON object file, plus ``CONTAIN_BROKER_SECRET_<NAME>``.

    Raises (``load``):
        PermissionError: the file is readable by group or others.
        ValueError: the file is not a JSON object of strings.
    """

    ENV_PREFIX = "CONTAIN_BROKER_SECRET_"

    def __init__(self, values: Mapping[str, str]) -> None:
        self._values = dict(values)

    def __repr__(self) -> str:
        return f"SecretStore(names={sorted(self._values)})"

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None, environ: Mapping[str, str] | None = None) -> SecretStore:
        values: dict[str, str] = {}
        env = os.environ if environ is None else environ
        for name, value in env.items():
            if name.startswith(cls.ENV_PREFIX):
                values[name[len(cls.ENV_PREFIX) :].lower()] = value
        if path is not None and Path(path).exists():
            file = Path(path)
            if file.stat().st_mode & 0o077:
                raise PermissionError(f"secrets file {file} is readable by group or others; chmod 600 it")
            data = json.loads(file.read_text())
            if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
                raise ValueError(f"secrets file {file} must be a JSON object of strings")
            values.update(data)
        return cls(values)

    def get(self, name: str) -> Secret | None:
        value = self._values.get(name)
        return None if value is None else Secret(value)


@dataclass(frozen=True)
class Intent:
    """A write the broker decided to perform, recorded durably before the executor runs."""

    action: str
    principal: str
    task: str
    idempotency_key: str
    argument_digest: str
    arguments: Mapping[str, Any]

    @property
    def scoped_key(self) -> str:
        """``<principal>/<task>/<key>`` (``idempotency_key`` is the broker's record key ``<task>/<key>``;
        a bare key for intents a v1 broker recorded): use this as the idempotency key at the external system."""
        return f"{self.principal}/{self.idempotency_key}"


@dataclass(frozen=True)
class ExecContext:
    """What an executor or check hook may use: the intent and its declared secrets."""

    intent: Intent
    _secrets: Mapping[str, Secret] = field(repr=False)

    def secret(self, name: str) -> str:
        """Return the secret ``name``; KeyError when the action did not declare it or it is unset."""
        value = self._secrets.get(name)
        if value is None:
            raise KeyError(f"secret {name!r} is not available to this action (declare it in Action.secrets)")
        return value.reveal()


@dataclass(frozen=True)
class CheckResult:
    """What the check hook found: ``applied`` (with the result), ``not_applied``, or ``unknown``."""

    state: Literal["applied", "not_applied", "unknown"]
    result: Mapping[str, Any] | None = None
    reason: str = ""


Authorize = Callable[[Principal, Any], Decision]
Validate = Callable[[Principal, Any], Decision]
Execute = Callable[[Any, ExecContext], Mapping[str, Any]]
Check = Callable[[Intent, ExecContext], CheckResult]


@dataclass(frozen=True)
class Action:
    """One registered broker action (see the module docstring for each part)."""

    name: str
    description: str
    arguments: type[BaseModel]
    authorize: Authorize
    validate: Validate | None  # None: no business rule; `contain check --broker-config` flags it
    execute: Execute
    verdict: Literal["allow", "review"] = "allow"
    check: Check | None = None
    secrets: tuple[str, ...] = ()
    quick_rules: bool = False

    def input_schema(self) -> dict[str, Any]:
        return self.arguments.model_json_schema()

    def context(self, intent: Intent, store: SecretStore) -> ExecContext:
        """Build the executor context holding only the secrets this action declared."""
        found = {name: store.get(name) for name in self.secrets}
        return ExecContext(intent, {name: value for name, value in found.items() if value is not None})


def action_tool_digest(action: Action) -> str:
    """The tool digest grants for this action are bound to (name, description, input schema)."""
    return tool_digest(name=action.name, description=action.description, input_schema=action.input_schema())
