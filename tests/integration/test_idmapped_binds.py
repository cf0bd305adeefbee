"""Idmapped binds (runtime/idmap.py): as root, a sandbox's leased uid acts as the owner of what it binds.

Before idmapped binds, a root user's private project could not be bound (the leased uid cannot
enter /root), and sandboxes with write binds all ran as the shared uid 65534. Each test below
fails on that behaviour.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from contain.boundary import Boundary
from contain.runtime import Sandbox
from contain.runtime.idmap import IDMAP_DIR, StagedBinds, sweep_stale_staging

pytestmark = [pytest.mark.needs_bwrap, pytest.mark.needs_root]

PY = "/usr/bin/python3"


def _private_project(tmp_path: Path) -> Path:
    """A project as root keeps it: the directory 0700, a data file 0600, all owned by root."""
    project = tmp_path / "proj"
    (project / "data").mkdir(parents=True)
    (project / "repo").mkdir()
    (project / "data" / "a.csv").write_text("a,b\n")
    os.chmod(project, 0o700)
    os.chmod(project / "data" / "a.csv", 0o600)
    return project


def _mounted_under(prefix: str) -> list[str]:
    with open("/proc/self/mountinfo") as info:
        return [line.split()[4] for line in info if line.split()[4].startswith(prefix)]


def test_a_private_root_owned_input_is_readable_without_changing_its_permissions(tmp_path):
    project = _private_project(tmp_path)
    manifest = Boundary.model_validate(
        {"files": [{"host": str(project / "data"), "path": "/inputs/data", "access": "read"}]}
    )
    with Sandbox(manifest) as sb:
        result = sb.run(["cat", "/inputs/data/a.csv"])
        written = sb.run(["sh", "-c", "echo x > /inputs/data/b.csv"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.data == b"a,b\n"
    assert written.exit_code != 0  # a read bind stays read-only
    assert stat.S_IMODE(os.stat(project).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(project / "data" / "a.csv").st_mode) == 0o600
    assert not (project / "data" / "b.csv").exists()


def test_files_written_through_a_write_bind_belong_to_the_binds_owner(tmp_path):
    project = _private_project(tmp_path)
    owner = os.stat(project / "repo")
    manifest = Boundary.model_validate(
        {"files": [{"host": str(project / "repo"), "path": "/work/repo", "access": "write"}]}
    )
    with Sandbox(manifest) as sb:
        result = sb.run(["sh", "-c", "mkdir /work/repo/sub && echo hi > /work/repo/sub/new.txt"])
        layers = sb.layers
    assert result.exit_code == 0, result.stderr
    created = os.stat(project / "repo" / "sub" / "new.txt")
    assert (created.st_uid, created.st_gid) == (owner.st_uid, owner.st_gid)
    assert "idmapped" in layers["host uid"]


def test_sandboxes_with_write_binds_each_run_as_a_host_uid_of_their_own(tmp_path):
    binds = []
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        binds.append({"host": str(tmp_path / name), "path": "/work/ws", "access": "write"})
    with (
        Sandbox(Boundary.model_validate({"files": [binds[0]]})) as first,
        Sandbox(Boundary.model_validate({"files": [binds[1]]})) as second,
    ):
        uids = {_host_uid_of(first.supervisor_pid), _host_uid_of(second.supervisor_pid)}
    assert len(uids) == 2
    assert 65534 not in uids


def _host_uid_of(pid: int | None) -> int:
    assert pid is not None
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("Uid:"):
                return int(line.split()[1])
    raise AssertionError("no Uid line")


def _our_staging() -> list[Path]:
    if not IDMAP_DIR.exists():
        return []
    return [p for p in IDMAP_DIR.iterdir() if p.name.startswith(f"{os.getpid()}-")]


def test_nothing_is_left_mounted_or_staged_after_close(tmp_path):
    project = _private_project(tmp_path)
    manifest = Boundary.model_validate(
        {
            "files": [
                {"host": str(project / "data"), "path": "/inputs/data", "access": "read"},
                {"host": str(project / "repo"), "path": "/work/repo", "access": "write"},
            ]
        }
    )
    before = set(_our_staging())
    with Sandbox(manifest) as sb:
        assert sb.run(["true"]).exit_code == 0
        (staging,) = set(_our_staging()) - before
        assert len(_mounted_under(str(staging))) == 2
    assert not staging.exists()
    assert _mounted_under(str(staging)) == []


def test_another_host_user_cannot_walk_into_a_staged_view(tmp_path):
    project = _private_project(tmp_path)
    manifest = Boundary.model_validate(
        {"files": [{"host": str(project / "data"), "path": "/inputs/data", "access": "read"}]}
    )
    before = set(_our_staging())
    with Sandbox(manifest) as sb:
        assert sb.run(["true"]).exit_code == 0
        (staging,) = set(_our_staging()) - before
        secret = next(staging.iterdir()) / "a.csv"
        owner = os.stat(staging).st_uid  # the sandbox's leased uid
        as_nobody = _cat_as(65534, secret)
        as_sandbox_uid = _cat_as(owner, secret)  # control: the path is right and readable by its owner
    assert as_sandbox_uid.returncode == 0 and as_sandbox_uid.stdout == b"a,b\n"
    assert as_nobody.returncode != 0 and b"Permission denied" in as_nobody.stderr


def _cat_as(uid: int, path: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "cat", str(path)],
        capture_output=True,
        timeout=10,
        check=False,
    )


def test_staging_left_by_a_dead_process_is_swept(tmp_path):
    base = tmp_path / "idmap"
    (tmp_path / "tree").mkdir()
    pid = os.fork()
    if pid == 0:  # a contain process that dies without closing its staging
        staged = StagedBinds.create(leased_uid=0x6000_0000 + 7, leased_gid=0x6000_0000 + 7, base=base)
        staged.stage(str(tmp_path / "tree"), read_only=True)
        os._exit(0)
    os.waitpid(pid, 0)
    (left,) = base.iterdir()
    assert _mounted_under(str(left))
    assert sweep_stale_staging(base) == [str(left)]
    assert list(base.iterdir()) == []
    assert _mounted_under(str(left)) == []


def test_idmapping_namespaces_made_by_several_threads_at_once_do_not_deadlock(monkeypatch):
    """Found under contain fleet (several sandboxes starting in one process): each thread's helper
    child waits for EOF on its own pipe, but a child forked while another thread's pipes were open
    held copies of their write ends, so no child ever saw EOF and every starting thread hung.
    The fork below is held until all threads have made their pipes, the interleaving that hung."""
    import contextlib
    import signal
    import threading
    import time

    from contain.runtime import idmap

    threads_count = 3
    before_fork = threading.Barrier(threads_count)
    children: list[int] = []
    real_fork = os.fork

    def fork_when_all_pipes_exist() -> int:
        with contextlib.suppress(threading.BrokenBarrierError):
            before_fork.wait(timeout=2)  # serialised callers break the barrier and go on alone
        pid = real_fork()
        if pid:
            children.append(pid)
        return pid

    monkeypatch.setattr(idmap.os, "fork", fork_when_all_pipes_exist)
    results: list[int] = []

    def make_one() -> None:
        results.append(idmap._idmapping_userns(0, 0, leased_uid=65534, leased_gid=65534))

    workers = [threading.Thread(target=make_one, daemon=True) for _ in range(threads_count)]
    for worker in workers:
        worker.start()
    deadline = time.monotonic() + 20
    for worker in workers:
        worker.join(max(0.0, deadline - time.monotonic()))
    stuck = [w for w in workers if w.is_alive()]
    for pid in children:  # never leave a hung helper behind, pass or fail
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for fd in results:
        os.close(fd)
    assert not stuck, f"{len(stuck)} of {threads_count} threads hung making their idmapping namespace"
    assert len(results) == threads_count
