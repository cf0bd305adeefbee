"""The runc and runsc argv are planned from the flag table; the binary probe refuses what is missing."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from contain.errors import UnsupportedHost
from contain.runtime.backend_names import RuntimeFacts
from contain.runtime.container import oci_runtime
from contain.runtime.container.oci_runtime import (
    GLOBAL_FLAGS,
    OciRuntimeView,
    plan_delete_argv,
    plan_kill_argv,
    plan_runtime_view,
    plan_start_argv,
    probe_runtime,
)

RUNC = RuntimeFacts("runc", "/usr/sbin/runc", "runc version 1.1.5")
RUNSC = RuntimeFacts("runsc", "/usr/bin/runsc", "runsc version 0.0~20221219.0", ("kvm", "ptrace"))
PATHS = dict(state_dir="/r/s", bundle_dir="/r", name="contain-1-ab", pid_file="/r/pid", log_file="/r/log")


def test_runc_runs_detached_with_the_control_socket_preserved_and_state_under_our_root():
    assert plan_start_argv(RUNC, **PATHS) == [
        "/usr/sbin/runc", "--root=/r/s", "--log=/r/log",
        "run", "--detach", "--preserve-fds", "1", "--pid-file", "/r/pid", "--bundle", "/r", "contain-1-ab",
    ]  # fmt: skip


def test_runsc_runs_in_the_foreground_with_oci_seccomp_host_network_and_the_binarys_platform():
    assert plan_start_argv(RUNSC, **PATHS) == [
        "/usr/bin/runsc", "--root=/r/s", "--platform=ptrace", "--network=host", "--oci-seccomp",
        "--host-uds=none", "--log=/r/log",
        "run", "--pid-file", "/r/pid", "--bundle", "/r", "contain-1-ab",
    ]  # fmt: skip
    systrap = RuntimeFacts("runsc", "/usr/bin/runsc", "v", ("ptrace", "systrap"))
    assert "--platform=systrap" in plan_start_argv(systrap, **PATHS)


def test_the_runtime_view_for_outside_judges_is_the_start_argvs_own_prefix_and_state_root():
    view = plan_runtime_view(RUNSC, state_dir="/r/s", log_file="/r/log", name="contain-1-ab", rootfs="/r/rootfs")
    assert view == OciRuntimeView(
        runtime="runsc",
        binary="/usr/bin/runsc",
        state_dir="/r/s",
        container_name="contain-1-ab",
        argv_prefix=(
            "/usr/bin/runsc", "--root=/r/s", "--platform=ptrace", "--network=host", "--oci-seccomp",
            "--host-uds=none", "--log=/r/log",
        ),
        rootfs="/r/rootfs",
    )  # fmt: skip
    start = plan_start_argv(RUNSC, **PATHS)
    assert tuple(start[: len(view.argv_prefix)]) == view.argv_prefix  # the same runtime, flags and state
    runc = plan_runtime_view(RUNC, state_dir="/r/s", log_file="/r/log", name="c", rootfs="/r/rootfs")
    assert runc.argv_prefix == ("/usr/sbin/runc", "--root=/r/s", "--log=/r/log")


def test_kill_and_delete_name_the_same_state_root_and_delete_is_forced():
    kw = dict(state_dir="/r/s", log_file="/r/log", name="c")
    assert plan_kill_argv(RUNC, **kw) == ["/usr/sbin/runc", "--root=/r/s", "--log=/r/log", "kill", "--all", "c", "KILL"]
    assert plan_delete_argv(RUNC, **kw) == ["/usr/sbin/runc", "--root=/r/s", "--log=/r/log", "delete", "--force", "c"]
    assert plan_kill_argv(RUNSC, **kw)[-3:] == ["kill", "c", "KILL"]
    assert "--oci-seccomp" in plan_delete_argv(RUNSC, **kw)


def test_every_flag_row_has_a_reason_and_every_runtime_gets_its_own_state_root():
    assert all(row.why for row in GLOBAL_FLAGS)
    for runtime in ("runc", "runsc"):
        assert any(row.flag == "--root={state}" for row in GLOBAL_FLAGS if row.runtime == runtime)


@pytest.fixture
def fresh_probe() -> Iterator[None]:
    """``probe_runtime`` caches per process: asked afresh in the test, and nothing kept after it."""
    probe_runtime.cache_clear()
    yield
    probe_runtime.cache_clear()


@pytest.mark.usefixtures("fresh_probe")
def test_a_missing_runtime_is_refused_with_an_install_fix(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(oci_runtime.shutil, "which", lambda *a, **k: None)
    with pytest.raises(UnsupportedHost) as caught:
        probe_runtime("runsc")
    assert "'runsc' is not installed" in caught.value.cause
    assert "apt-get install runsc" in caught.value.fix


def test_an_unknown_runtime_name_is_refused():
    with pytest.raises(UnsupportedHost, match="'crun' is unknown"):
        probe_runtime("crun")


def fake_binary(path: Path, body: str) -> str:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.mark.usefixtures("fresh_probe")
def test_the_probe_reads_version_and_platforms_from_the_binary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    binary = fake_binary(
        tmp_path / "runsc",
        'if [ "$1" = --version ]; then echo "runsc version 9"; echo "spec: 1"; else printf "kvm\\nptrace\\n"; fi',
    )
    monkeypatch.setattr(oci_runtime.shutil, "which", lambda name, **k: binary if name == "runsc" else None)
    facts = probe_runtime("runsc")
    assert facts == RuntimeFacts("runsc", binary, "runsc version 9", ("kvm", "ptrace"))


@pytest.mark.usefixtures("fresh_probe")
def test_the_probe_sorts_platforms_because_runsc_lists_them_in_go_map_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    binary = fake_binary(
        tmp_path / "runsc",
        'if [ "$1" = --version ]; then echo "runsc version 9"; else printf "ptrace\\nkvm\\nptrace\\n"; fi',
    )
    monkeypatch.setattr(oci_runtime.shutil, "which", lambda name, **k: binary if name == "runsc" else None)
    facts = probe_runtime("runsc")
    assert facts.platforms == ("kvm", "ptrace")


@pytest.mark.usefixtures("fresh_probe")
def test_a_runtime_that_fails_its_version_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    binary = fake_binary(tmp_path / "runc", "echo broken >&2; exit 2")
    monkeypatch.setattr(oci_runtime.shutil, "which", lambda name, **k: binary)
    with pytest.raises(UnsupportedHost, match="failed with status 2: broken"):
        probe_runtime("runc")
    assert os.path.exists(binary)
