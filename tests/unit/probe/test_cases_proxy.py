"""PX judges: a blocked canary that hears anything, or an allow in the decision log for anything
but allowed.test, is ESCAPED; a control that cannot reach allowed.test is INCONCLUSIVE. The
"proxy" here is a scripted stand-in that forwards to the real loopback canaries."""

from __future__ import annotations

import json
import secrets
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from contain.probe.canaries import REPORT_MARK
from contain.probe.case import AttackRun, Verdict
from contain.probe.cases_proxy import CASES


def params_of(code: str) -> dict[str, Any]:
    line = next(ln for ln in code.splitlines() if ln.startswith("P = json.loads("))
    return dict(json.loads(json.loads(line[len("P = json.loads(") : -1])))


def authority(raw: str) -> tuple[str, int | None]:
    target = raw.split("\r\n", 1)[0].split(" ")[1] if " " in raw else ""
    if "//" in target:
        target = target.split("//", 1)[1].split("/", 1)[0]
    host, _, port = target.rpartition(":")
    return host, int(port) if port.isdigit() else None


Policy = Callable[[str, int | None, int], bool]  # (host, port, allowed port) -> forward?


def strict(host: str, port: int | None, allowed: int) -> bool:
    return host == "allowed.test" and port == allowed


def leaky(host: str, port: int | None, allowed: int) -> bool:
    return port is not None


def nothing(host: str, port: int | None, allowed: int) -> bool:
    return False


class FakeProxyTarget:
    name = "fake-proxy"
    kind = "process"

    def __init__(self, policy: Policy, *, hooks: bool = True) -> None:
        self.policy, self.has_contain_hooks = policy, hooks

    def run_python(
        self,
        code: str,
        *,
        timeout_s: float = 20.0,
        boundary: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> AttackRun:
        params = params_of(code)
        allowed = next(r["ports"][0] for r in (boundary or {})["network"]["allow"] if r["host"] == "allowed.test")
        report, events = {}, []
        for req in params["requests"]:
            host, port = authority(req["raw"])
            if self.policy(host, port, allowed):
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=2) as c:
                        c.sendall((req["raw"] + req.get("then", "")).encode("latin-1"))
                        c.settimeout(0.3)
                        c.recv(100)
                except OSError:
                    pass  # nothing listens there (port 22, 25...): a real proxy would get a refusal
                events.append({"host": host, "port": port, "verdict": "allow", "via": "http"})
                report[req["name"]] = {"ok": True, "value": "HTTP/1.1 200 OK"}
            else:
                events.append({"host": host, "port": port or 0, "verdict": "deny", "via": "http"})
                report[req["name"]] = {"ok": True, "value": "HTTP/1.1 403 Forbidden"}
        out = ("\n" + REPORT_MARK + json.dumps(report) + "\n").encode()
        return AttackRun(0, None, out, b"", False, 0.01, egress_events=tuple(events))

    def run_argv(self, argv: Sequence[str], **kw: Any) -> AttackRun:
        raise AssertionError


class Ctx:
    def __init__(self, target: Any) -> None:
        self.target = self.control = target
        self.run_id = "unit"

    def canary(self, prefix: str = "canary") -> str:
        return f"{prefix}-unit-{secrets.token_hex(4)}"


TABLE_CASES = [c for c in CASES if c.id != "PX-13"]
DENY_CASES = [c for c in TABLE_CASES if c.id not in ("PX-08", "PX-14", "PX-15")]


@pytest.mark.parametrize("case", TABLE_CASES, ids=lambda c: c.id)
def test_a_proxy_that_forwards_only_allowed_test_is_contained(case) -> None:
    result = case.check(Ctx(FakeProxyTarget(strict)))
    assert result.verdict is Verdict.CONTAINED, result.summary


@pytest.mark.parametrize("case", DENY_CASES, ids=lambda c: c.id)
def test_a_proxy_that_forwards_everything_is_escaped(case) -> None:
    result = case.check(Ctx(FakeProxyTarget(leaky)))
    assert result.verdict is Verdict.ESCAPED, result.summary


@pytest.mark.parametrize("case", TABLE_CASES, ids=lambda c: c.id)
def test_a_proxy_that_cannot_reach_the_allowed_server_is_inconclusive(case) -> None:
    result = case.check(Ctx(FakeProxyTarget(nothing)))
    assert result.verdict is Verdict.INCONCLUSIVE
    assert "allowed.test" in result.summary


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_every_px_case_is_not_applicable_without_contain_hooks(case) -> None:
    assert "wrap" in case.not_applicable
    assert case.check(Ctx(FakeProxyTarget(strict, hooks=False))).verdict is Verdict.NOT_APPLICABLE


def test_px14_data_to_the_allowed_host_without_a_log_entry_is_escaped() -> None:
    class Unlogged(FakeProxyTarget):
        def run_python(self, code: str, **kw: Any) -> AttackRun:
            run = super().run_python(code, **kw)
            return AttackRun(0, None, run.stdout, b"", False, 0.01, egress_events=())

    case = next(c for c in CASES if c.id == "PX-14")
    result = case.check(Ctx(Unlogged(strict)))
    assert result.verdict is Verdict.ESCAPED
    assert "without an entry in the proxy log" in result.summary


def test_px15_a_proxy_that_follows_the_redirect_is_escaped() -> None:
    class Follows(FakeProxyTarget):
        def run_python(self, code: str, **kw: Any) -> AttackRun:
            run = super().run_python(code, **kw)
            port = next(r["ports"][0] for r in kw["boundary"]["network"]["allow"] if r["host"] == "allowed.test")
            with socket.create_connection(("127.0.0.1", port), timeout=2) as c:
                c.sendall(b"GET /redirect HTTP/1.1\r\nHost: a\r\n\r\n")
                location = c.recv(4096).split(b"Location: ")[1].split(b"\r\n")[0].decode()
            _host, bport = authority(f"GET {location} HTTP/1.1")
            with socket.create_connection(("127.0.0.1", bport), timeout=2) as c:
                c.sendall(b"GET / HTTP/1.1\r\n\r\n")
            return run

    case = next(c for c in CASES if c.id == "PX-15")
    assert case.check(Ctx(Follows(strict))).verdict is Verdict.ESCAPED


def test_case_ids_are_the_present_catalogue_ids() -> None:
    assert [c.id for c in CASES] == [
        "PX-01",
        "PX-02",
        "PX-03",
        "PX-04",
        "PX-05",
        "PX-07",
        "PX-08",
        "PX-11",
        "PX-12",
        "PX-13",
        "PX-14",
        "PX-15",
    ]


class _AnswersAt:
    """PX-13's target (answers, if at all, only at ``answering``) and its host control (really
    sends the control request to the canary port the case gives it)."""

    name, kind, has_contain_hooks = "fake", "process", True

    def __init__(self, answering: tuple[str, int] | None) -> None:
        self.answering = answering
        self.asked: list[tuple[str, int]] = []

    def run_python(self, code: str, **kw: Any) -> AttackRun:
        params = params_of(code)
        report = {}
        if "proxy_port" in params:  # the host control: straight to the canary
            for req in params["requests"]:
                with socket.create_connection(("127.0.0.1", params["proxy_port"]), timeout=2) as c:
                    c.sendall(req["raw"].encode("latin-1"))
                    c.settimeout(2)
                    c.recv(100)
                report[req["name"]] = {"ok": True, "value": "HTTP/1.1 200 OK"}
        else:
            for req in params["requests"]:
                via = tuple(req["via"])
                self.asked.append(via)
                hit = via == self.answering
                report[req["name"]] = {"ok": True, "value": "HTTP/1.1 200 OK"} if hit else {"ok": False, "errno": "E"}
        out = ("\n" + REPORT_MARK + json.dumps(report) + "\n").encode()
        return AttackRun(0, None, out, b"", False, 0.01)

    def run_argv(self, argv: Sequence[str], **kw: Any) -> AttackRun:
        raise AssertionError


def test_px13_asks_every_address_a_backend_puts_the_proxy_at() -> None:
    from contain.probe.cases_proxy import PROXY_PLACES

    case = next(c for c in CASES if c.id == "PX-13")
    target = _AnswersAt(None)
    ctx = Ctx(target)
    ctx.control = _AnswersAt(None)
    result = case.check(ctx)
    assert result.verdict is Verdict.CONTAINED, result.summary
    assert target.asked == [place for place, _why in PROXY_PLACES]
    assert ("127.0.0.1", 3128) in target.asked and ("10.0.2.100", 3128) in target.asked


@pytest.mark.parametrize("answering", [("127.0.0.1", 3128), ("10.0.2.100", 3128)])
def test_px13_an_answer_at_any_proxy_place_without_an_allow_list_is_escaped(answering) -> None:
    case = next(c for c in CASES if c.id == "PX-13")
    ctx = Ctx(_AnswersAt(answering))
    ctx.control = _AnswersAt(None)
    result = case.check(ctx)
    assert result.verdict is Verdict.ESCAPED
    assert f"{answering[0]}:{answering[1]}" in result.summary
