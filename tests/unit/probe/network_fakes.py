"""Scripted fake targets for the network probe tests: ``behave(params)`` stands in for the attack
and may really send to loopback sinks the test opened."""

from __future__ import annotations

import json
import secrets
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from contain.probe.canaries import REPORT_MARK
from contain.probe.case import AttackRun


def params_of(code: str) -> dict[str, Any]:
    line = next(ln for ln in code.splitlines() if ln.startswith("P = json.loads("))
    return dict(json.loads(json.loads(line[len("P = json.loads(") : -1])))


def _report(values: dict[str, Any] | None) -> AttackRun:
    out = b"" if values is None else ("\n" + REPORT_MARK + json.dumps(values) + "\n").encode()
    return AttackRun(exit_code=0, signal=None, stdout=out, stderr=b"", timed_out=False, duration_s=0.01)


class Fake:
    """Runs a Python stand-in for the attack: ``behave(params)`` may really send to loopback."""

    name = "fake"

    def __init__(self, behave: Callable[[dict[str, Any]], dict[str, Any] | None], *, hooks: bool = True) -> None:
        self.behave, self.has_contain_hooks = behave, hooks
        self.kind = "process" if hooks else "wrap"

    def run_python(
        self,
        code: str,
        *,
        timeout_s: float = 20.0,
        boundary: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> AttackRun:
        return _report(self.behave(params_of(code)))

    def run_argv(self, argv: Sequence[str], **kw: Any) -> AttackRun:
        raise AssertionError


class Ctx:
    def __init__(self, target: Fake, control: Fake) -> None:
        self.target, self.control, self.run_id = target, control, "unit"

    def canary(self, prefix: str = "canary") -> str:
        return f"{prefix}-unit-{secrets.token_hex(4)}"


def shoot(params: dict[str, Any]) -> dict[str, Any]:
    """A leaky target: every TCP/UDP shot lands."""
    out = {}
    for s in params["shots"]:
        if s["kind"] == "tcp":
            with socket.create_connection((s["host"], s["port"]), timeout=2) as c:
                c.sendall(params["canary"].encode())
        elif s["kind"] == "udp":
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as c:
                c.sendto(params["canary"].encode(), (s["host"], s["port"]))
        out[s["name"]] = {"ok": True, "value": "sent"}
    return out


def blocked(params: dict[str, Any]) -> dict[str, Any]:
    return {s["name"]: {"ok": False, "errno": "ENETUNREACH"} for s in params["shots"]}


def silent_host(params: dict[str, Any]) -> dict[str, Any]:
    return blocked(params)  # a control that reaches nothing
