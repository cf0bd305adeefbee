"""The container backend's host-side apply steps (host_setup.py): the bundle is written exactly as
planned, without following links; the sandbox root refuses to be anything but our own directory. The backend
itself runs real runtimes: tests/integration/test_container_backend.py."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from contain.errors import SandboxStartError
from contain.runtime.container import host_setup
from contain.runtime.container.bundle import BundleFile, BundlePlan, RootfsEntry
from contain.runtime.container.host_setup import make_private_dir, write_bundle

PLAN = BundlePlan(
    config={"ociVersion": "1.0.2", "root": {"path": "rootfs", "readonly": True}},
    rootfs=(
        RootfsEntry("/lib", "symlink", "usr/lib"),
        RootfsEntry("/usr", "dir"),
        RootfsEntry("/.contain", "dir"),
        RootfsEntry("/.contain/supervisor", "file"),
    ),
    files=(BundleFile("data/0", b"t0k\n", 0o444), BundleFile("data/1", b"", 0o000)),
)


def test_the_bundle_is_written_as_planned_with_each_files_mode(tmp_path: Path):
    write_bundle(PLAN, tmp_path)
    rootfs = tmp_path / "rootfs"
    assert os.readlink(rootfs / "lib") == "usr/lib"
    assert (rootfs / "usr").is_dir() and (rootfs / ".contain" / "supervisor").is_file()
    assert (tmp_path / "data" / "0").read_bytes() == b"t0k\n"
    assert stat.S_IMODE((tmp_path / "data" / "0").stat().st_mode) == 0o444
    assert stat.S_IMODE((tmp_path / "data" / "1").stat().st_mode) == 0o000
    assert json.loads((tmp_path / "config.json").read_text()) == PLAN.config
    assert stat.S_IMODE((tmp_path / "config.json").stat().st_mode) == 0o600


def test_a_bundle_is_never_written_into_what_already_exists(tmp_path: Path):
    """Every directory and file is created exclusively: a planted rootfs or link is never reused."""
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "bundle").mkdir()
    (tmp_path / "bundle" / "rootfs").symlink_to(tmp_path)
    with pytest.raises(FileExistsError):
        write_bundle(PLAN, tmp_path / "bundle")
    assert victim.read_text() == "keep" and not (tmp_path / "usr").exists()


def test_the_sandbox_root_must_be_a_real_directory_of_ours(tmp_path: Path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "root"
    link.symlink_to(target)
    with pytest.raises(SandboxStartError, match="is not a directory owned by uid"):
        make_private_dir(link, 0o711, os.getuid())
    fresh = tmp_path / "fresh"
    make_private_dir(fresh, 0o711, os.getuid())
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o711


def test_on_an_image_root_links_at_skeleton_paths_are_replaced_never_followed(tmp_path: Path):
    """An image's /tmp -> <victim> and /etc/resolv.conf -> <victim file> must not lead the host there."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("keep")
    bundle = tmp_path / "bundle"
    rootfs = bundle / "rootfs"
    (rootfs / "etc").mkdir(parents=True)
    (rootfs / "tmp").symlink_to(victim)
    (rootfs / "etc" / "resolv.conf").symlink_to(victim / "keep")
    (rootfs / "dev").write_text("a file where a directory goes")
    plan = BundlePlan(
        config={},
        rootfs=(
            RootfsEntry("/dev", "dir"),
            RootfsEntry("/tmp", "dir"),
            RootfsEntry("/dev/shm", "dir"),
            RootfsEntry("/etc/resolv.conf", "file"),
            RootfsEntry("/tmp/inner/leaf", "file"),
        ),
        files=(),
    )
    write_bundle(plan, bundle, rootfs_mounted=True)
    assert sorted(os.listdir(victim)) == ["keep"] and (victim / "keep").read_text() == "keep"
    assert (rootfs / "tmp").is_dir() and not (rootfs / "tmp").is_symlink()
    assert (rootfs / "tmp" / "inner" / "leaf").is_file()
    assert (rootfs / "etc" / "resolv.conf").is_file() and not (rootfs / "etc" / "resolv.conf").is_symlink()
    assert (rootfs / "dev" / "shm").is_dir()


def test_a_non_empty_image_directory_where_a_file_is_mounted_is_refused(tmp_path: Path):
    rootfs = tmp_path / "bundle" / "rootfs"
    (rootfs / "etc" / "passwd").mkdir(parents=True)
    (rootfs / "etc" / "passwd" / "x").write_text("x")
    plan = BundlePlan(config={}, rootfs=(RootfsEntry("/etc/passwd", "file"),), files=())
    with pytest.raises(SandboxStartError, match="non-empty directory at /etc/passwd"):
        write_bundle(plan, tmp_path / "bundle", rootfs_mounted=True)


def test_run_bounded_returns_the_commands_exit_status() -> None:
    assert host_setup.run_bounded(["/bin/sh", "-c", "exit 7"], 30.0) == 7


def test_run_bounded_kills_a_command_that_outlives_its_bound_and_returns_none() -> None:
    assert host_setup.run_bounded(["/bin/sh", "-c", "exec /bin/sleep 30"], 0.2) is None


def test_run_bounded_waits_on_a_pidfd_not_on_subprocess_polling(monkeypatch: pytest.MonkeyPatch) -> None:
    """subprocess.run(timeout=) polls with sleeps growing to 50 ms: half of every `runc delete`."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("subprocess's polling wait was used")

    monkeypatch.setattr(host_setup.subprocess, "run", refuse)
    monkeypatch.setattr(host_setup.subprocess, "Popen", refuse)
    assert host_setup.run_bounded(["/bin/true"], 30.0) == 0


def test_wait_popen_reaps_an_exited_child_and_bounds_a_running_one() -> None:
    import subprocess

    done = subprocess.Popen(["/bin/true"])
    running = subprocess.Popen(["/bin/sh", "-c", "exec /bin/sleep 30"])
    try:
        assert host_setup.wait_popen(done, 30.0) is True and done.returncode == 0
        assert host_setup.wait_popen(running, 0.1) is False and running.returncode is None
    finally:
        running.kill()
        running.wait()


def test_wait_popen_waits_on_a_pidfd_not_on_popens_polling_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Popen.wait(timeout=)`` polls with sleeps growing to 50 ms; only the final reap may call wait()."""
    import subprocess

    proc = subprocess.Popen(["/bin/sh", "-c", "exec /bin/sleep 0.05"])
    real_wait = proc.wait

    def wait_without_timeout(timeout: float | None = None) -> int:
        assert timeout is None, "Popen's polling wait was used"
        return real_wait()

    monkeypatch.setattr(proc, "wait", wait_without_timeout)
    assert host_setup.wait_popen(proc, 30.0) is True


def test_config_json_is_encoded_by_the_c_encoder_not_by_json_dumps_streaming_encoder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``json.dump`` to a file runs the pure-Python iterencode (16 ms for a bundle's config)."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("json.dump's streaming encoder was used")

    monkeypatch.setattr(host_setup.json, "dump", refuse)
    (tmp_path / "b").mkdir()
    write_bundle(PLAN, tmp_path / "b")
    assert json.loads((tmp_path / "b" / "config.json").read_text()) == PLAN.config


def test_disk_budget_mounted_makes_the_root_mounts_the_budget_and_detaches_it_even_after_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str, str]] = []

    def fake_mount(boundary: object, disk_root: str, ids: tuple[int, int]) -> None:
        assert os.path.isdir(disk_root)  # made before the mount, which needs a directory
        calls.append(("mount", f"{disk_root} {ids}"))

    monkeypatch.setattr(host_setup, "mount_disk_budget", fake_mount)
    monkeypatch.setattr(host_setup, "umount", lambda target: calls.append(("umount", target)))
    root = tmp_path / "disk"
    budget = host_setup.disk_budget_mounted(object(), root, (1000, 1001))  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="workload failed"), budget as disk_root:
        assert disk_root == str(root)
        raise RuntimeError("workload failed")
    assert calls == [("mount", f"{root} (1000, 1001)"), ("umount", str(root))]


def test_disk_budget_mounted_never_reuses_an_existing_directory(tmp_path: Path) -> None:
    (tmp_path / "disk").mkdir()
    budget = host_setup.disk_budget_mounted(object(), tmp_path / "disk", (0, 0))  # type: ignore[arg-type]
    with pytest.raises(FileExistsError), budget:
        pass


def test_namespace_work_runs_in_a_thread_of_its_own_and_its_failure_is_a_start_error() -> None:
    import threading

    ran_in: list[int] = []
    host_setup._in_throwaway_thread(lambda: ran_in.append(threading.get_ident()), failing="unused")
    assert ran_in and ran_in[0] != threading.get_ident()

    def refused() -> None:
        raise OSError(1, "unshare(CLONE_NEWNET)")

    with pytest.raises(SandboxStartError) as caught:
        host_setup._in_throwaway_thread(refused, failing="cannot make the container's network namespace")
    assert caught.value.cause == (
        "cannot make the container's network namespace: [Errno 1] unshare(CLONE_NEWNET)"
    )
    assert caught.value.fix == "run contain as root"
