"""The OC cases against live targets: contained on contain's process backend, ESCAPED against
targets weakened in exactly the way each case attacks, and OC-05 through the real image unpacker.

The weak targets (all bounded, all on this host only):
- OC-01: a fresh pid namespace as host root where a writable host binary runs as a helper and
  exits (the CVE-2019-5736 shape without a runtime that protects its binary);
- OC-02: a host process holding a directory descriptor of the host's / (a leaked fd);
- OC-03: the bare host as root (knobs are opened for writing, never written);
- OC-04: root of a fresh user+mount namespace (every capability there);
- OC-06: a process sandbox with a runtime-shaped state directory bound in writable, treated as
  a container target.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from contain.probe.case import CaseResult, Verdict
from contain.probe.cases_oci import CASES, helper_launch, oc_05, oc_06
from contain.probe.context import RunContext
from contain.probe.runner import run_case
from contain.probe.targets import ContainTarget, HostControlTarget, WrapTarget

pytestmark = [pytest.mark.needs_bwrap, pytest.mark.needs_root]

BY_ID = {c.id: c for c in CASES}


def _run(case_id: str, target: Any) -> CaseResult:
    ctx = RunContext(target)
    try:
        return run_case(BY_ID[case_id], ctx)
    finally:
        ctx.close()


@pytest.fixture(scope="module")
def on_process() -> dict[str, CaseResult]:
    ctx = RunContext(ContainTarget("process"))
    try:
        return {case.id: run_case(case, ctx) for case in CASES}
    finally:
        ctx.close()


@pytest.mark.parametrize("case_id", ["OC-01", "OC-02", "OC-03", "OC-04"])
def test_the_process_backend_contains_the_attacks_that_apply_to_any_sandbox(on_process, case_id):
    result = on_process[case_id]
    assert result.verdict is Verdict.CONTAINED, (result.summary, result.evidence)
    assert result.control and "NOT" not in result.control


def test_the_process_backend_hashes_bwrap_and_the_supervisor_it_runs(on_process):
    hashed = on_process["OC-01"].evidence["hashed"]
    assert os.path.realpath(shutil.which("bwrap") or "") in hashed
    assert any(label.startswith("/.contain/supervisor (pid ") for label in hashed)
    assert all(v["before"] and v["before"] == v["after"] for v in hashed.values())


@pytest.mark.parametrize("case_id", ["OC-05", "OC-06"])
def test_image_and_state_cases_are_not_applicable_on_the_process_backend(on_process, case_id):
    assert on_process[case_id].verdict is Verdict.NOT_APPLICABLE


def test_oc_01_sees_a_writable_binary_reopened_after_its_process_exited(tmp_path: Path):
    helper = tmp_path / "helper"
    shutil.copy2("/usr/bin/sleep", helper)
    weak = WrapTarget(["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", helper_launch(str(helper)), "sh"])
    result = _run("OC-01", weak)
    assert result.verdict is Verdict.ESCAPED, result.summary
    assert f"({helper}) via O_PATH fd for writing succeeded" in result.summary


def test_oc_02_sees_a_canary_read_through_a_leaked_descriptor_of_the_host_root():
    result = _run("OC-02", WrapTarget(["sh", "-c", 'exec 7</ "$@"', "sh"]))
    assert result.verdict is Verdict.ESCAPED, result.summary
    assert "reached stdout" in result.summary


def test_oc_03_sees_the_host_knobs_open_for_writing_as_root():
    result = _run("OC-03", HostControlTarget())
    assert result.verdict is Verdict.ESCAPED
    assert "open /proc/sys/kernel/core_pattern for writing succeeded" in result.summary


def test_oc_04_sees_capabilities_and_mounts_in_a_user_namespace():
    result = _run("OC-04", WrapTarget(["unshare", "-r", "-m"]))
    assert result.verdict is Verdict.ESCAPED
    assert "CapEff is not empty" in result.summary
    assert "unshare -U -m then mount -t tmpfs succeeded" in result.summary


class _StateBoundIn(ContainTarget):
    """A process sandbox with a runtime-shaped state directory bound writable, judged as if it
    were a container whose runtime keeps its state there."""

    def __init__(self, state: Path) -> None:
        files = [{"host": str(state), "path": "/data/runc", "access": "write"}]
        super().__init__("process", base_boundary={"files": files}, label="state bound in")
        self.kind = "container:weak"
        self.state = state


def test_oc_06_sees_a_bound_state_directory_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    state = tmp_path / "state"
    box = state / "contain-weak"
    box.mkdir(parents=True)
    (box / "state.json").write_text("{}\n")
    os.mkfifo(box / "exec.fifo", 0o600)
    for path in (state, box, box / "state.json", box / "exec.fifo"):
        os.chown(path, *_sandbox_ids())
    target = _StateBoundIn(state)
    monkeypatch.setattr("contain.probe.cases_oci.runtime_state_dir", lambda sandbox: str(box))
    ctx = RunContext(target)
    try:
        result = oc_06(ctx)
    finally:
        ctx.close()
    assert result.verdict is Verdict.ESCAPED, (result.summary, result.evidence.get("attack"))
    assert "open /data/runc/contain-weak/state.json for writing succeeded" in result.summary
    assert "open /data/runc/contain-weak/exec.fifo for writing succeeded" in result.summary


def _sandbox_ids() -> tuple[int, int]:
    from contain.probe.context import sandbox_host_uid

    uid = sandbox_host_uid()
    return uid, uid


def test_oc_05_refuses_every_hostile_image_and_names_each_member():
    if shutil.which("runc", path="/usr/sbin:/usr/bin") is None:
        pytest.skip("runc is not installed: OC-05 also starts the container backend with each image")
    ctx = RunContext(ContainTarget("container:runc"))  # the unpacker on the host, then the backend
    try:
        result = oc_05(ctx)
    finally:
        ctx.close()
    assert result.verdict is Verdict.CONTAINED, (result.summary, result.evidence)
    refused = result.evidence["refused"]
    assert sorted(refused) == sorted(
        [
            "absolute name",
            "../ name",
            "file through a symlink member",
            "hard link to /etc/shadow",
            "device node",
            "1 TiB sparse member",
            "every member in one OCI layout",
        ]
    )
    rules = {line.rsplit("[", 1)[1].rstrip("]") for line in refused["every member in one OCI layout"]}
    assert rules == {
        "absolute-name",
        "dotdot-component",
        "through-symlink",
        "hardlink-outside-root",
        "device-node",
        "byte-budget",
    }
    assert result.evidence["naive_control"]["missed"] == []
    through = result.evidence["through_the_backend"]
    assert sorted(through) == ["1 TiB sparse member", "every member in one OCI layout", "setuid binary"]
    assert through["every member in one OCI layout"].startswith("refused before any container existed")
    assert through["setuid binary"].endswith("has mode 0o100555")
