"""SY judges: strict errno reading, host-state backing, and controls that must differ."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from contain.probe import cases_kernel
from contain.probe.canaries import REPORT_MARK
from contain.probe.case import AttackRun, Verdict
from contain.probe.cases_kernel import CASES, KERNEL_PROBES, judge_kernel

Answer = Callable[[dict[str, Any]], dict[str, Any] | None]


def params_of(code: str) -> dict[str, Any]:
    line = next(ln for ln in code.splitlines() if ln.startswith("P = json.loads("))
    return dict(json.loads(json.loads(line[len("P = json.loads(") : -1])))


class Scripted:
    """A target that runs nothing: it answers each attack with a scripted report."""

    name = "scripted"

    def __init__(self, answer: Answer, *, hooks: bool = True) -> None:
        self.answer = answer
        self.has_contain_hooks = hooks
        self.kind = "process" if hooks else "wrap"
        self.calls: list[tuple[dict[str, Any], Mapping[str, Any] | None]] = []

    def run_python(
        self,
        code: str,
        *,
        timeout_s: float = 20.0,
        boundary: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> AttackRun:
        params = params_of(code)
        self.calls.append((params, boundary))
        report = self.answer(params)
        out = b"" if report is None else ("\n" + REPORT_MARK + json.dumps(report) + "\n").encode()
        return AttackRun(exit_code=0, signal=None, stdout=out, stderr=b"", timed_out=False, duration_s=0.01)

    def run_argv(self, argv: Sequence[str], **kw: Any) -> AttackRun:
        raise AssertionError("cases here only run python")


class Ctx:
    def __init__(self, target: Scripted, control: Scripted) -> None:
        self.target, self.control, self.run_id = target, control, "unit"

    def canary(self, prefix: str = "canary") -> str:
        return f"{prefix}-unit-{secrets.token_hex(4)}"


def refused(params: dict[str, Any]) -> dict[str, Any]:
    by_name = {p.name: p for probes in KERNEL_PROBES.values() for p in probes}
    out: dict[str, Any] = {}
    for name in params["probes"]:
        if name in by_name:
            first = by_name[name].refused[0]
            out[name] = {"ok": False, "signal": first} if first == "SIGSYS" else {"ok": False, "errno": first}
        else:
            out[name] = {"ok": True, "value": "recorded"}
    return out


def succeeded(params: dict[str, Any]) -> dict[str, Any]:
    return {name: {"ok": True, "value": 3} for name in params["probes"]}


KERNEL_CASES = [c for c in CASES if c.id in KERNEL_PROBES]


@pytest.fixture(autouse=True)
def quiet_host(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """No host reads and no compiler: the scripted targets never run the helpers anyway."""
    import contextlib

    @contextlib.contextmanager
    def fake_helpers():
        yield tmp_path

    monkeypatch.setattr(cases_kernel, "_key_users", lambda: {"0": "1/1"})
    monkeypatch.setattr(cases_kernel, "_host_has_route", lambda prefix: False)
    monkeypatch.setattr(cases_kernel, "probe_helpers", fake_helpers)


@pytest.mark.parametrize("case", KERNEL_CASES, ids=lambda c: c.id)
def test_refusals_inside_and_successes_on_the_host_are_contained(case) -> None:
    result = case.check(Ctx(Scripted(refused), Scripted(succeeded)))
    assert result.verdict is Verdict.CONTAINED, result.summary


@pytest.mark.parametrize("case", KERNEL_CASES, ids=lambda c: c.id)
def test_a_syscall_that_succeeds_inside_is_escaped(case) -> None:
    result = case.check(Ctx(Scripted(succeeded), Scripted(succeeded)))
    assert result.verdict is Verdict.ESCAPED


@pytest.mark.parametrize("case", KERNEL_CASES, ids=lambda c: c.id)
def test_a_control_refused_the_same_way_is_inconclusive(case) -> None:
    result = case.check(Ctx(Scripted(refused), Scripted(refused)))
    assert result.verdict is Verdict.INCONCLUSIVE
    assert "control" in result.summary


@pytest.mark.parametrize("case", KERNEL_CASES, ids=lambda c: c.id)
def test_an_attack_that_never_reports_is_inconclusive(case) -> None:
    result = case.check(Ctx(Scripted(lambda p: None), Scripted(succeeded)))
    assert result.verdict is Verdict.INCONCLUSIVE


def test_io_uring_ebadf_means_the_call_reached_the_kernel() -> None:
    probes = KERNEL_PROBES["SY-03"]
    attack = {p.name: {"ok": False, "errno": "EBADF"} for p in probes}
    control = {p.name: {"ok": False, "errno": "EBADF"} for p in probes}
    assert judge_kernel("SY-03", probes, attack=attack, control=control).verdict is Verdict.ESCAPED


def test_keyring_change_on_the_host_is_escaped_even_when_errno_says_refused(monkeypatch) -> None:
    readings = iter([{"65534": "1/1"}, {"65534": "2/2"}])
    monkeypatch.setattr(cases_kernel, "_key_users", lambda: next(readings))
    case = next(c for c in CASES if c.id == "SY-05")
    result = case.check(Ctx(Scripted(refused), Scripted(succeeded)))
    assert result.verdict is Verdict.ESCAPED
    assert "key-users" in result.summary


def test_route_added_on_the_host_is_escaped_and_removed(monkeypatch) -> None:
    monkeypatch.setattr(cases_kernel, "_host_has_route", lambda prefix: True)
    removed: list[list[str]] = []
    monkeypatch.setattr(cases_kernel.subprocess, "run", lambda argv, **kw: removed.append(argv))
    monkeypatch.setattr(cases_kernel, "probe_helpers", _no_helpers)
    case = next(c for c in CASES if c.id == "SY-07")
    target = Scripted(refused)
    result = case.check(Ctx(target, Scripted(succeeded)))
    assert result.verdict is Verdict.ESCAPED
    prefix = target.calls[0][0]["prefix"]
    assert removed == [["ip", "route", "del", "blackhole", prefix]]


def test_i386_entry_must_die_by_sigsys_not_fail_with_an_errno(monkeypatch) -> None:
    probes = tuple(p for p in KERNEL_PROBES["SY-07"] if p.name == "helper_socketcall")
    result = judge_kernel(
        "SY-07",
        probes,
        attack={"helper_socketcall": {"ok": False, "errno": "EAFNOSUPPORT"}},
        control={"helper_socketcall": {"ok": True, "value": 3}},
    )
    assert result.verdict is Verdict.ESCAPED


def _no_helpers():
    import contextlib

    @contextlib.contextmanager
    def none():
        yield None

    return none()


def test_missing_helper_probes_make_the_case_inconclusive_not_contained(monkeypatch) -> None:
    monkeypatch.setattr(cases_kernel, "probe_helpers", _no_helpers)
    case = next(c for c in CASES if c.id == "SY-10")
    result = case.check(Ctx(Scripted(refused), Scripted(succeeded)))
    assert result.verdict is Verdict.INCONCLUSIVE
    assert "helper" in result.summary


def test_helper_directory_is_bound_read_only_for_contain_targets() -> None:
    case = next(c for c in CASES if c.id == "SY-10")
    target = Scripted(refused)
    case.check(Ctx(target, Scripted(succeeded)))
    boundary = target.calls[0][1]
    assert boundary is not None
    assert boundary["files"][0]["path"] == "/inputs/probe-bin"
    assert boundary["files"][0]["access"] == "read"
    assert target.calls[0][0]["bin"] == "/inputs/probe-bin"


def test_every_kernel_case_has_probes_and_sy12_is_not_applicable_to_wrap() -> None:
    ids = [c.id for c in CASES]
    assert ids == ["SY-01", "SY-02", "SY-03", "SY-04", "SY-05", "SY-06", "SY-07", "SY-09", "SY-10", "SY-11", "SY-12"]
    sy12 = next(c for c in CASES if c.id == "SY-12")
    assert "wrap" in sy12.not_applicable


def test_a_missing_unshare_binary_is_no_route_for_sy_01():
    # the microVM userland has no unshare(1): ENOENT was judged a breach ("refused means EPERM")
    from contain.probe.cases_kernel import KERNEL_PROBES

    row = next(p for p in KERNEL_PROBES["SY-01"] if p.name == "unshare_cmd")
    assert set(row.refused) == {"EPERM", "ENOENT"}


def _sy07(answers: dict[str, dict[str, Any]], kind: str):
    probes = KERNEL_PROBES["SY-07"]
    attack = {p.name: {"ok": False, "errno": "EPERM"} for p in probes} | answers
    control = {p.name: {"ok": True, "value": 3} for p in probes}
    return judge_kernel("SY-07", probes, attack=attack, control=control, kind=kind)


def test_gvisors_own_refusals_count_only_on_runsc_and_each_row_says_why() -> None:
    gvisor = {
        "raw_icmp": {"ok": False, "errno": "EAFNOSUPPORT"},
        "helper_socketcall": {"ok": False, "errno": "ENOTSOCK"},
    }
    assert _sy07(gvisor, "container:runsc").verdict is Verdict.CONTAINED
    for kind in ("process", "container:runc", "wrap"):
        result = _sy07(gvisor, kind)
        assert result.verdict is Verdict.ESCAPED, kind
        assert "ENOTSOCK (refused means SIGSYS)" in result.summary
    assert all(row.why and row.kind == "container:runsc" for row in cases_kernel.BACKEND_REFUSALS)


def test_an_i386_socketcall_that_made_a_socket_escapes_on_runsc_too() -> None:
    result = _sy07({"helper_socketcall": {"ok": True, "value": 3}}, "container:runsc")
    assert result.verdict is Verdict.ESCAPED
    assert "i386 int 0x80 socketcall(SOCKET, AF_NETLINK): succeeded" in result.summary
