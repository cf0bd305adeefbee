"""OC cases: where each applies, how reports become verdicts, and what the image judge sees.

Targets here are fakes that answer with a scripted attack report (what the kernel said inside),
so the judges are tested without a sandbox; the cases against live sandboxes and runtimes are in
``integration/test_probe_oci.py`` and ``escape/test_battery_container_*.py``."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from contain.probe.case import AttackRun, Category, Verdict
from contain.probe.cases_oci import (
    CASES,
    RUNTIME_BINARIES,
    _knob_breaches,
    _privilege_breaches,
    _state_breaches,
    _tree_findings,
    _Witness,
    _write_opens,
    oc_02,
    oc_03,
    runtime_state_dir,
)
from contain.probe.context import REPORT_MARK, RunContext
from contain.probe.runner import run_case

BY_ID = {c.id: c for c in CASES}


class Scripted:
    """A target whose every run prints ``report`` as the attack's record (and ``extra`` on stdout)."""

    has_contain_hooks = False

    def __init__(self, kind: str, report: Mapping[str, Any], *, extra: bytes = b"") -> None:
        self.kind = kind
        self.name = f"scripted-{kind}"
        self.report = dict(report)
        self.extra = extra
        self.codes: list[str] = []

    def run_argv(self, argv: Sequence[str], **kw: Any) -> AttackRun:
        self.codes.append(argv[-1])
        out = self.extra + f"\n{REPORT_MARK}{json.dumps(self.report)}\n".encode()
        return AttackRun(0, None, out, b"", False, 0.01)

    def run_python(self, code: str, **kw: Any) -> AttackRun:
        return self.run_argv(["python3", "-c", code], **kw)


def _ctx(target: Any, control: Any) -> RunContext:
    return RunContext(target, control=control, sandboxed_control=control, run_id="unitoc")


def test_the_cases_are_oc_01_to_06_in_the_oc_category():
    assert [c.id for c in CASES] == [f"OC-0{n}" for n in range(1, 7)]
    assert {c.category for c in CASES} == {Category.OC}


@pytest.mark.parametrize("case_id", ["OC-01", "OC-02", "OC-03", "OC-04"])
def test_attacks_on_any_sandbox_are_never_excused(case_id):
    assert BY_ID[case_id].not_applicable == {}


@pytest.mark.parametrize("case_id", ["OC-05", "OC-06"])
@pytest.mark.parametrize("kind", ["process", "host"])
def test_image_and_state_cases_are_not_applicable_by_construction_without_an_oci_runtime(case_id, kind, tmp_path):
    result = run_case(BY_ID[case_id], _ctx(Scripted(kind, {}), Scripted(kind, {})))
    assert result.verdict is Verdict.NOT_APPLICABLE
    assert result.summary.startswith(f"not applicable by construction: the {kind} target")


@pytest.mark.parametrize("case_id", ["OC-05", "OC-06"])
def test_a_wrapped_sandbox_is_not_applicable_and_points_at_the_container_backends(case_id):
    result = run_case(BY_ID[case_id], _ctx(Scripted("wrap", {}), Scripted("wrap", {})))
    assert result.verdict is Verdict.NOT_APPLICABLE
    assert "--backend container:runc or container:runsc" in result.summary


@pytest.mark.parametrize("spec", ["container", "container:runc", "container:runsc"])
def test_every_oc_case_runs_on_every_container_backend(spec):
    for case in CASES:
        assert not any(key in case.not_applicable for key in (spec, spec.split(":")[0])), case.id


def test_each_backend_kind_names_its_runtime_binary():
    assert dict(RUNTIME_BINARIES) == {
        "process": "bwrap",
        "container": "runc",
        "container:runc": "runc",
        "container:runsc": "runsc",
    }


def test_the_state_directory_comes_from_the_sandboxs_public_runtime_view_or_is_unknown():
    from contain.runtime.container.oci_runtime import OciRuntimeView

    view = OciRuntimeView("runc", "/usr/sbin/runc", "/run/contain/c1/state", "c1", ("/usr/sbin/runc",), "/r")

    class Box:
        oci_runtime = view

    class PrivateOnly:  # the judges no longer reach into a handle's private attributes
        class _handle:
            state_dir = "/run/contain/c1/state"

    assert runtime_state_dir(Box()) == "/run/contain/c1/state"
    assert runtime_state_dir(PrivateOnly()) is None
    assert runtime_state_dir(object()) is None


def test_no_oc_judge_reads_a_private_attribute_of_the_running_handle():
    import inspect

    from contain.probe import cases_oci

    source = inspect.getsource(cases_oci)
    for private in ("_handle", '"_rt"', "._rt"):
        assert private not in source, private


# -- judges over attack records ------------------------------------------------------------------


def test_only_write_opens_that_the_kernel_allowed_count_for_oc_01():
    report = {
        "open /proc/1/exe (/.contain/supervisor) for writing": {"ok": False, "errno": "EROFS"},
        "reopen exe of 7 (/usr/sbin/runc) via O_PATH fd for writing": {"ok": True, "value": None},
        "visible": {"ok": True, "value": {"1": "/.contain/supervisor"}},
    }
    assert _write_opens(report) == ["reopen exe of 7 (/usr/sbin/runc) via O_PATH fd for writing"]


def test_a_knob_opened_or_a_masked_path_with_content_is_a_breach_and_empty_reads_are_not():
    report = {
        "open /proc/sysrq-trigger for writing": {"ok": False, "errno": "EROFS"},
        "open /proc/sys/kernel/core_pattern for writing": {"ok": True, "value": None},
        "read /proc/keys": {"ok": True, "value": 0},
        "read /proc/kcore": {"ok": True, "value": 4096},
        "list /sys/firmware": {"ok": True, "value": []},
    }
    assert _knob_breaches(report) == [
        "open /proc/sys/kernel/core_pattern for writing succeeded",
        "read /proc/kcore returned 4096 bytes",
    ]
    assert _knob_breaches({"list /sys/firmware": {"ok": True, "value": ["acpi", "dmi"]}}) == [
        "list /sys/firmware shows 2 entries"
    ]


def test_a_capability_or_any_namespace_operation_that_worked_is_a_breach():
    report = {
        "CapEff is not empty": {"ok": True, "value": "0000000000200000"},
        "caps": {"ok": True, "value": {}},
        "mkdir": {"ok": True, "value": None},
        "mount -t proc": {"ok": False, "errno": "EPERM"},
        "unshare -U -m then mount -t tmpfs": {"ok": True, "value": "ok"},
        "setns /proc/1/ns/mnt": {"ok": True, "value": "ok"},
    }
    assert _privilege_breaches(report) == [
        "CapEff is not empty",
        "unshare -U -m then mount -t tmpfs succeeded",
        "setns /proc/1/ns/mnt succeeded",
    ]


def test_a_state_file_opened_or_a_file_created_beside_it_is_a_breach():
    report = {
        "walked": {"ok": True, "value": 10},
        "open /run/runc/x/state.json for writing": {"ok": False, "errno": "EACCES"},
        "open /run/runc/x/exec.fifo for writing": {"ok": True, "value": "ENXIO: a FIFO without a reader (writable)"},
        "create a file beside /run/runc/x/state.json": {"ok": True, "value": None},
    }
    assert _state_breaches(report) == [
        "open /run/runc/x/exec.fifo for writing succeeded",
        "create a file beside /run/runc/x/state.json succeeded",
    ]


# -- whole cases with scripted targets ----------------------------------------------------------

_KNOBS_REFUSED = {"open /proc/sys/kernel/core_pattern for writing": {"ok": False, "errno": "EROFS"}}
_KNOBS_OPEN = {"open /proc/sys/kernel/core_pattern for writing": {"ok": True, "value": None}}


def test_oc_03_is_contained_only_when_the_control_opened_what_the_target_refused():
    assert oc_03(_ctx(Scripted("process", _KNOBS_REFUSED), Scripted("host", _KNOBS_OPEN))).verdict is Verdict.CONTAINED
    assert oc_03(_ctx(Scripted("process", _KNOBS_OPEN), Scripted("host", _KNOBS_OPEN))).verdict is Verdict.ESCAPED
    inconclusive = oc_03(_ctx(Scripted("process", _KNOBS_REFUSED), Scripted("host", _KNOBS_REFUSED)))
    assert inconclusive.verdict is Verdict.INCONCLUSIVE


def test_oc_02_judges_by_the_canary_reaching_a_sink_not_by_what_the_attack_claims():
    class Leaky(Scripted):
        def run_argv(self, argv: Sequence[str], **kw: Any) -> AttackRun:
            code = argv[-1]
            line = next(ln for ln in code.splitlines() if ln.startswith("P = json.loads("))
            path = json.loads(json.loads(line[len("P = json.loads(") : -1]))["path"]
            self.extra = Path(path).read_bytes()  # what a leaked fd of / would let the attack read
            return super().run_argv(argv, **kw)

    claims = {"openat('..' x64) from /proc/self/fd/7": {"ok": True, "value": "secret"}}
    contained = oc_02(_ctx(Scripted("process", claims), Leaky("host", {})))
    assert contained.verdict is Verdict.CONTAINED  # a claim without the canary proves nothing
    escaped = oc_02(_ctx(Leaky("process", {}), Leaky("host", {})))
    assert escaped.verdict is Verdict.ESCAPED
    assert "reached stdout" in escaped.summary


# -- the image judge's helpers -------------------------------------------------------------------


def test_the_tree_judge_finds_set_id_bits_and_fifos_without_following_symlinks(tmp_path: Path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "ok").write_text("x")
    (tmp_path / "bin" / "su").write_text("x")
    os.chmod(tmp_path / "bin" / "su", 0o4755)
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "out").symlink_to("/usr/bin")  # a link to a host directory full of set-id files
    fifo_mode = oct(os.lstat(tmp_path / "fifo").st_mode)
    assert sorted(_tree_findings(tmp_path)) == [
        f"{tmp_path}/bin/su keeps a set-id bit (0o104755)",
        f"{tmp_path}/fifo is a special file ({fifo_mode})",
    ]


def test_the_witness_sees_a_new_entry_a_changed_file_and_a_new_hard_link(tmp_path: Path):
    witness = _Witness(tmp_path)
    assert witness.changes() == []
    os.link(tmp_path / "keep", tmp_path / "linked")
    changes = witness.changes()
    assert any(c.startswith("entries:") for c in changes)
    assert any(c.startswith("keep_links: 1 -> 2") for c in changes)


def test_a_watched_binary_is_hashed_through_its_descriptor_after_its_path_is_gone(tmp_path: Path):
    """OC-01 on runsc read a runtime process's binary again through /proc/<pid>/exe after the
    process had exited, got nothing, and called the binary changed."""
    from contain.probe.cases_oci import _Binaries

    binary = tmp_path / "runtime"
    binary.write_bytes(b"\x7fELF original")
    watched = _Binaries()
    try:
        watched.add("runtime", str(binary))
        watched.add("same file, another name", str(binary))  # one inode is watched once
        assert list(watched.fds) == ["runtime"]
        before = watched.before["runtime"]
        binary.unlink()  # the path (like /proc/<pid>/exe of an exited process) opens nothing now
        assert watched.digest("runtime") == before
    finally:
        watched.close()


def test_a_write_into_a_watched_binary_changes_its_hash(tmp_path: Path):
    from contain.probe.cases_oci import _Binaries

    binary = tmp_path / "runtime"
    binary.write_bytes(b"\x7fELF original")
    watched = _Binaries()
    try:
        watched.add("runtime", str(binary))
        with open(binary, "r+b") as handle:
            handle.write(b"#!/bin/sh")
        assert watched.digest("runtime") != watched.before["runtime"]
    finally:
        watched.close()


def test_the_host_pid_namespace_is_never_taken_for_the_sandboxs():
    from contain.probe.cases_oci import _Binaries

    watched = _Binaries()
    try:
        watched.add_pid_namespace(os.getpid())  # a pid in the host's own pid namespace
        assert list(watched.fds) == [f"{os.readlink('/proc/self/exe')} (pid {os.getpid()})"]
    finally:
        watched.close()


def test_oc_06_is_not_applicable_on_microvm_where_no_oci_runtime_keeps_state():
    # it ran there and came back INCONCLUSIVE ("the backend did not say where its runtime keeps
    # this container's state"): a VMM has no such state, by construction
    result = run_case(BY_ID["OC-06"], _ctx(Scripted("microvm", {}), Scripted("microvm", {})))
    assert result.verdict is Verdict.NOT_APPLICABLE
    assert result.summary.startswith("not applicable by construction: the microvm target runs no OCI runtime")
