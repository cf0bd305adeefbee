"""FS judges for protected names (FS-08, FS-09): damage on the host is ESCAPED, a clean workspace
with a writable sibling and a control that shows the damage is CONTAINED, anything less is
INCONCLUSIVE. Targets are fakes: ``Unconfined`` runs the attack as a plain host process (no
layer at all), ``SiblingOnly`` stands for a sandbox that lets the attack write ``sibling.txt``
and nothing else. Workspaces are real directories under a temporary run root."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from contain.probe import context as probe_context
from contain.probe.case import AttackRun, Verdict
from contain.probe.cases_fs import CASES, PROTECTED_NAMES_CASES
from contain.probe.context import REPORT_MARK, RunContext


def params_of(code: str) -> dict[str, Any]:
    line = next(ln for ln in code.splitlines() if ln.startswith("P = json.loads("))
    return dict(json.loads(json.loads(line[len("P = json.loads(") : -1])))


class Unconfined:
    """No sandbox: the attack runs as a host process and does whatever the host allows."""

    name = "unconfined"
    kind = "fake"
    has_contain_hooks = False

    def run_python(
        self,
        code: str,
        *,
        timeout_s: float = 20.0,
        boundary: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> AttackRun:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=timeout_s, check=False)
        return AttackRun(proc.returncode, None, proc.stdout, proc.stderr, False, 0.0)

    def run_argv(self, argv: Sequence[str], **kw: Any) -> AttackRun:  # pragma: no cover - unused
        raise AssertionError


class SiblingOnly(Unconfined):
    """A sandbox that refuses every write but ``sibling.txt`` (which gets the canary, or "ok")."""

    name = "sibling-only"

    def run_python(self, code: str, **kw: Any) -> AttackRun:
        params = params_of(code)
        Path(params["ws"], "sibling.txt").write_text(params.get("canary", "ok"))
        report = {"every protected write": {"ok": False, "errno": "EPERM"}}
        return AttackRun(0, None, f"\n{REPORT_MARK}{json.dumps(report)}\n".encode(), b"", False, 0.0)


class Silent(Unconfined):
    """A target (or a blind control) that does nothing at all."""

    name = "silent"

    def run_python(self, code: str, **kw: Any) -> AttackRun:
        return AttackRun(0, None, b"", b"", False, 0.0)


@pytest.fixture
def run_context(monkeypatch):
    """Plants owned by the test's own uid (no chown to the sandbox user, no host detection)."""
    monkeypatch.setattr(probe_context, "sandbox_host_uid", os.geteuid)
    contexts: list[RunContext] = []

    def make(target: Unconfined, control: Unconfined) -> RunContext:
        ctx = RunContext(target, control=control, sandboxed_control=control, run_id="unitfs")
        contexts.append(ctx)
        return ctx

    yield make
    for ctx in contexts:
        assert ctx.close() == []


def _case(case_id: str):
    return next(c for c in CASES if c.id == case_id)


FS08_BREACHES = [
    ".git/config was modified on the host",
    ".git/hooks/pre-commit was modified on the host",
    ".bashrc was modified on the host",
    ".vscode/settings.json was modified on the host",
    ".gitconfig was modified on the host",
]


def test_fs08_an_unconfined_target_overwrites_every_protected_file(run_context):
    result = _case("FS-08").check(run_context(Unconfined(), Unconfined()))
    assert (result.verdict, result.summary) == (Verdict.ESCAPED, "; ".join(FS08_BREACHES))
    assert result.control == "on the bare host the protected files were overwritten"


def test_fs08_a_sandbox_that_only_lets_the_sibling_be_written_is_contained(run_context):
    result = _case("FS-08").check(run_context(SiblingOnly(), Unconfined()))
    assert (result.verdict, result.summary, result.control) == (
        Verdict.CONTAINED,
        "every protected file stayed byte-identical; the sibling file was writable",
        "on the bare host the protected files were overwritten",
    )
    assert set(result.evidence) == {"attack", "run"}


def test_fs08_a_blind_control_is_inconclusive_never_contained(run_context):
    result = _case("FS-08").check(run_context(SiblingOnly(), Silent()))
    assert result.verdict is Verdict.INCONCLUSIVE
    assert result.control == "on the bare host the protected files were NOT overwritten"


def test_fs09_an_unconfined_target_creates_the_protected_names(run_context):
    result = _case("FS-09").check(run_context(Unconfined(), Unconfined()))
    assert result.verdict is Verdict.ESCAPED
    assert ".git/hooks/post-checkout was created on the host" in result.summary
    assert result.control == "on the bare host the protected names were created"


def test_fs09_a_sandbox_that_only_lets_the_sibling_be_written_is_contained(run_context):
    result = _case("FS-09").check(run_context(SiblingOnly(), Unconfined()))
    assert (result.verdict, result.summary, result.control) == (
        Verdict.CONTAINED,
        "no protected name could be created; a sibling file could",
        "on the bare host the protected names were created",
    )


def test_fs09_a_sandbox_that_refuses_the_sibling_too_is_inconclusive(run_context):
    result = _case("FS-09").check(run_context(Silent(), Unconfined()))
    assert (result.verdict, result.summary) == (
        Verdict.INCONCLUSIVE,
        "the sibling file was not writable (in-sandbox control failed)",
    )


@pytest.mark.parametrize("row", PROTECTED_NAMES_CASES, ids=lambda row: row.id)
def test_each_protected_names_row_is_a_case_not_applicable_to_wrapped_sandboxes(row):
    case = _case(row.id)
    assert (case.title, case.expected, case.check) == (row.title, row.expected, row.check)
    assert "protected paths inside a writable root" in case.not_applicable["wrap"]


def test_the_fs_cases_keep_catalogue_order():
    ids = [c.id for c in CASES]
    assert ids == sorted(ids)
    assert {"FS-08", "FS-09"} <= set(ids)


class SentryView(Unconfined):
    """A gVisor-like target: special files made inside stay inside (the host sees only the plain
    file); ``mknod_ok`` says whether the kernel inside let the device nodes be made."""

    name = "sentry-view"

    def __init__(self, *, mknod_ok: bool) -> None:
        self.mknod_ok = mknod_ok

    def run_python(self, code: str, **kw: Any) -> AttackRun:
        Path(params_of(code)["ws"], "plain").write_text("plain")
        node = {"ok": True, "value": None} if self.mknod_ok else {"ok": False, "errno": "EPERM"}
        report = {
            "mknod c 1 3": node,
            "mknod b 8 0": node,
            "mkfifo": {"ok": True, "value": None},
            "write a plain file": {"ok": True, "value": None},
        }
        return AttackRun(0, None, f"\n{REPORT_MARK}{json.dumps(report)}\n".encode(), b"", False, 0.0)


class DevicesOnHost(Unconfined):
    """The control: both device nodes appear in its workspace on the host."""

    name = "devices-on-host"

    def run_python(self, code: str, **kw: Any) -> AttackRun:
        ws = Path(params_of(code)["ws"])
        (ws / "c13").write_text("")  # stands for the node; the judge is given the kind below
        (ws / "b80").write_text("")
        return AttackRun(0, None, b"", b"", False, 0.0)


def test_fs07_a_device_node_made_inside_a_sentry_is_escaped_though_the_host_sees_none(run_context, monkeypatch):
    monkeypatch.setattr(
        "contain.probe.cases_fs._device_nodes", lambda d: [f"{d.name}/c13"] if (d / "c13").exists() else []
    )
    escaped = _case("FS-07").check(run_context(SentryView(mknod_ok=True), DevicesOnHost()))
    assert escaped.verdict is Verdict.ESCAPED
    assert escaped.summary == "mknod c 1 3 succeeded inside; mknod b 8 0 succeeded inside"


def test_fs07_a_fifo_that_stays_inside_still_shows_a_writable_workspace(run_context, monkeypatch):
    monkeypatch.setattr(
        "contain.probe.cases_fs._device_nodes",
        lambda d: [f"{d.name}/{n}" for n in ("c13", "b80") if (d / n).exists()],
    )
    result = _case("FS-07").check(run_context(SentryView(mknod_ok=False), DevicesOnHost()))
    assert result.verdict is Verdict.CONTAINED, result.summary
    assert result.evidence["fifo_on_host"] is False and result.evidence["plain_file_on_host"] is True
