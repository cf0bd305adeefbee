"""The container backend under real runc and runsc: the same manifest gives the same RunResult
fields and exit codes as the process backend, and nothing is left after close or cancel.

No mock stands in for a runtime. Each behaviour runs on ``process`` too (the reference) and the
test compares. runsc cases are skipped only when runsc is not installed (``RUNSC_MISSING``);
runc cases only when runc is not installed. Judging is from outside: processes, mounts, cgroup
directories and the backend's directories are listed on the host after close.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
from pathlib import Path

import pytest

from contain.boundary import Boundary
from contain.errors import SandboxStartError, UnsupportedHost
from contain.runtime import Sandbox
from contain.runtime.container.backend import CONTAINER_ROOT

pytestmark = [pytest.mark.needs_bwrap, pytest.mark.needs_root]

RUNC_MISSING = shutil.which("runc") is None and not os.path.exists("/usr/sbin/runc")
RUNSC_MISSING = shutil.which("runsc") is None
CONTAINERS = [
    pytest.param("container:runc", marks=pytest.mark.skipif(RUNC_MISSING, reason="runc is not installed")),
    pytest.param("container:runsc", marks=pytest.mark.skipif(RUNSC_MISSING, reason="runsc is not installed")),
]
PY = "/usr/bin/python3"


def boundary(**sections: object) -> Boundary:
    return Boundary.model_validate(sections)


def run_on(backend: str, manifest: Boundary, argv: list[str], **kwargs: object):
    with Sandbox(manifest, backend=backend) as sb:
        return sb.run(argv, **kwargs)  # type: ignore[arg-type]


def shape(result) -> tuple[object, ...]:
    """The RunResult fields that must not depend on the backend."""
    return (
        result.exit_code,
        result.signal,
        result.status,
        result.timed_out,
        result.oom_killed,
        result.stdout.data,
        result.stdout.truncated,
        result.stderr.truncated,
        sorted(v.kind for v in result.violations),
        result.usage.source,
    )


# -- what is left ----------------------------------------------------------------------------------


def leaf_of(pid: int) -> str:
    """The sandbox's cgroup leaf (also its container id and directory name), read from the host."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return path.rstrip("/").rsplit("/", 1)[-1]
    raise AssertionError(f"pid {pid} has no memory cgroup")


def leftovers(name: str) -> list[str]:
    """Everything of sandbox ``name`` still on the host: processes, mounts, cgroups, directories."""
    found = []
    for proc in glob.glob("/proc/[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if name.encode() in Path(proc).read_bytes():
                found.append(f"process {proc}")
    found += [f"mount {line}" for line in Path("/proc/self/mountinfo").read_text().splitlines() if name in line]
    found += [f"cgroup {path}" for path in glob.glob(f"/sys/fs/cgroup/**/{name}", recursive=True)]
    if (CONTAINER_ROOT / name).exists():
        found.append(f"directory {CONTAINER_ROOT / name}")
    for parent in own_container_parents():
        if os.path.isdir(parent) and not any(os.path.isdir(os.path.join(parent, c)) for c in os.listdir(parent)):
            found.append(f"empty cgroup parent {parent}")  # runc leaves these; close must remove them
    return found


def own_container_parents() -> list[str]:
    """``contain-container`` in this process's own cgroup of every v1 hierarchy (where runc puts it)."""
    parents = []
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, own = line.split(":", 2)
        if controllers:
            mount = "/sys/fs/cgroup/" + controllers.replace("name=", "")
            parents.append(os.path.join(mount + own.rstrip("/"), "contain-container"))
    return parents


@pytest.mark.parametrize("backend", CONTAINERS)
def test_echo_has_the_process_backends_result_shape_and_close_leaves_nothing(backend: str) -> None:
    manifest = boundary()
    reference = run_on("process", manifest, ["/bin/echo", "hi"])
    with Sandbox(manifest, backend=backend) as sb:
        result = sb.run(["/bin/echo", "hi"])
        assert sb.supervisor_pid is not None
        name = leaf_of(sb.supervisor_pid)
        assert (CONTAINER_ROOT / name).is_dir()  # positive control: the listing sees a live sandbox
        assert leftovers(name), "the leftovers listing must see the running sandbox"
    assert shape(result) == shape(reference)
    assert result.backend == backend and reference.backend == "process"
    assert set(reference.layers) <= set(result.layers)
    assert leftovers(name) == []


@pytest.mark.parametrize("backend", CONTAINERS)
def test_a_cancelled_run_is_killed_and_close_leaves_nothing(backend: str) -> None:
    with Sandbox(boundary(), backend=backend) as sb:
        assert sb.supervisor_pid is not None
        name = leaf_of(sb.supervisor_pid)
        proc = sb.spawn([PY, "-c", "import os, time\nos.fork(); os.fork()\ntime.sleep(60)"])
        proc.kill()
        proc.wait()
    assert leftovers(name) == []


@pytest.mark.parametrize("backend", CONTAINERS)
@pytest.mark.parametrize(
    ("argv", "kwargs", "manifest"),
    [
        (["/bin/sh", "-c", "exit 3"], {}, {}),
        (["/bin/sh", "-c", "kill -9 $$"], {}, {}),
        (["/bin/sleep", "30"], {"timeout": 1}, {}),
        ([PY, "-c", "b = bytearray(300 << 20); print(len(b))"], {}, {"resources": {"memory_bytes": "64MiB"}}),
        (["/bin/sh", "-c", "head -c 100000 /dev/zero | tr '\\0' x; exit 0"], {}, {"resources": {"output_bytes": 2048}}),
    ],
    ids=["exit-3", "killed-by-signal", "timeout-124", "oom", "output-cap"],
)
def test_exit_codes_and_violations_match_the_process_backend(
    backend: str, argv: list[str], kwargs: dict[str, object], manifest: dict[str, object]
) -> None:
    reference = run_on("process", boundary(**manifest), argv, **kwargs)
    result = run_on(backend, boundary(**manifest), argv, **kwargs)
    assert shape(result) == shape(reference), (result.stderr.data[-500:], reference.stderr.data[-500:])


def test_the_reference_results_are_the_ones_we_expect() -> None:
    """Positive control for the comparisons above: the process backend really gives 3, 137, 124, OOM."""
    assert run_on("process", boundary(), ["/bin/sh", "-c", "exit 3"]).status == 3
    assert run_on("process", boundary(), ["/bin/sh", "-c", "kill -9 $$"]).signal == signal.SIGKILL
    assert run_on("process", boundary(), ["/bin/sleep", "30"], timeout=1).status == 124
    oom = run_on("process", boundary(resources={"memory_bytes": "64MiB"}), [PY, "-c", "b = bytearray(300 << 20)"])
    assert oom.oom_killed


@pytest.mark.parametrize("backend", CONTAINERS)
def test_put_get_export_and_a_session_of_several_runs(backend: str, host_tmp: Path) -> None:
    out = host_tmp / "out"
    manifest = boundary(files=[{"path": "/work", "access": "scratch", "export": str(out)}])
    with Sandbox(manifest, backend=backend) as sb:
        sb.put_file("/work/in.txt", b"from host\n")
        first = sb.run(["/bin/sh", "-c", "cat /work/in.txt; echo made > /work/made.txt; echo $$ > /tmp/pid"])
        second = sb.run(["/bin/cat", "/work/made.txt", "/tmp/pid"])
        third = sb.run(["/bin/sh", "-c", "exit 5"])
        assert sb.get_file("/work/made.txt") == b"made\n"
    assert first.stdout.data == b"from host\n"
    assert second.stdout.data.startswith(b"made\n") and second.exit_code == 0  # /tmp survived between runs
    assert third.status == 5
    assert (out / "made.txt").read_bytes() == b"made\n"
    assert (out / "in.txt").read_bytes() == b"from host\n"


@pytest.mark.parametrize("backend", ["process", *CONTAINERS])
def test_egress_allows_the_named_host_through_the_proxy_and_denies_another(backend: str, host_server) -> None:
    port, seen = host_server
    manifest = boundary(
        network={
            "allow": [{"host": "api.test", "ports": [port]}],
            "hosts": {"api.test": "127.0.0.1", "other.test": "127.0.0.1"},
        }
    )
    code = (
        "import urllib.request, urllib.error\n"
        f"print(urllib.request.urlopen('http://api.test:{port}/allowed', timeout=5).read().decode().strip())\n"
        "try:\n"
        f"    urllib.request.urlopen('http://other.test:{port}/denied', timeout=5)\n"
        "    print('REACHED')\n"
        "except urllib.error.HTTPError as e:\n"
        "    print('denied', e.code)\n"
    )
    result = run_on(backend, manifest, [PY, "-c", code])
    assert result.stdout.data.decode().splitlines() == ["hello from host", "denied 403"], result.stderr.data[-800:]
    assert seen == ["/allowed"]  # the denied request never reached the server
    assert [(e["host"], e["verdict"]) for e in result.egress] == [("api.test", "allow"), ("other.test", "deny")]
    assert [v.kind for v in result.violations] == ["egress"]


@pytest.mark.parametrize("backend", CONTAINERS)
def test_a_read_bind_and_its_block_hold_as_on_the_process_backend(backend: str, host_tmp: Path) -> None:
    data = host_tmp / "data"
    data.mkdir()
    (data / "ok.txt").write_text("visible\n")
    (data / "secret.txt").write_text("hidden\n")
    manifest = boundary(
        files=[
            {"path": "/inputs", "access": "read", "host": str(data)},
            {"path": "/inputs/secret.txt", "access": "block"},
        ]
    )
    argv = ["/bin/sh", "-c", "cat /inputs/ok.txt; cat /inputs/secret.txt; echo x > /inputs/new"]
    reference = run_on("process", manifest, argv)
    result = run_on(backend, manifest, argv)
    assert result.stdout.data == reference.stdout.data == b"visible\n"  # positive control: the bind works
    assert result.status == reference.status != 0
    assert not (data / "new").exists()


@pytest.mark.parametrize("backend", CONTAINERS)
def test_write_bind_files_belong_to_the_binds_owner_and_protected_names_stay_closed(
    backend: str, host_tmp: Path
) -> None:
    proj = host_tmp / "proj"
    proj.mkdir()
    os.chown(proj, 65534, 65534)
    manifest = boundary(files=[{"path": "/proj", "access": "write", "host": str(proj)}])
    with Sandbox(manifest, backend=backend) as sb:
        made = sb.run(["/bin/sh", "-c", "echo made > /proj/out"])
        protected = sb.run(["/bin/sh", "-c", "echo x > /proj/.envrc"])
    assert made.status == 0, made.stderr.data
    assert (proj / "out").read_text() == "made\n"
    assert (proj / "out").stat().st_uid == 65534
    assert protected.status != 0 and not (proj / ".envrc").exists()  # the placeholder held and is gone


@pytest.mark.parametrize("backend", CONTAINERS)
def test_a_fork_bomb_is_refused_inside_at_pids_max_and_the_sandbox_lives_on(backend: str) -> None:
    """runc: the cgroup's pids.max refuses the fork, and RunResult names it. runsc: the host cgroup
    counts gVisor's own tasks, never the workload's, so the sentry's RLIMIT_NPROC (pids_max there,
    bundle.RUNTIME_DIFFERENCES) refuses it; nothing the host can read counts that refusal, so no
    ``pids`` violation is reported there. Memory is generous: a python3 child costs ~6 MiB in gVisor."""
    code = (
        "import os, time\nn = 0\ntry:\n    for i in range(400):\n        if os.fork() == 0:\n"
        "            time.sleep(5); os._exit(0)\n        n += 1\nexcept OSError as e:\n    print(e.errno)\nprint(n)"
    )
    with Sandbox(boundary(resources={"pids_max": 64, "memory_bytes": "1GiB"}), backend=backend) as sb:
        result = sb.run([PY, "-c", code], timeout=30)
        errno_line, forked = result.stdout.data.split()
        assert (result.status, int(errno_line)) == (0, 11)  # EAGAIN, and the bomb itself finished
        assert int(forked) <= 62  # the supervisor and the bomb's parent count too
        assert sb.run(["/bin/true"]).status == 0
        if backend == "container:runc":
            assert "pids" in [v.kind for v in result.violations]


def test_a_runtime_that_fails_to_start_leaves_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real start failure (the runtime exits non-zero) goes through the same teardown."""
    from contain.runtime.backend_names import RuntimeFacts
    from contain.runtime.container import backend as container_backend

    seen: list[str] = []
    real_init = container_backend.ContainerSandbox.__init__

    def remember(self, runtime, plan, name, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(name)
        real_init(self, RuntimeFacts("runc", "/bin/false", "false"), plan, name, **kwargs)

    monkeypatch.setattr(container_backend.ContainerSandbox, "__init__", remember)
    with pytest.raises(SandboxStartError, match="runc run failed"):
        Sandbox(boundary(), backend="container:runc").start()
    assert seen and leftovers(seen[0]) == []


@pytest.mark.skipif(RUNSC_MISSING, reason="runsc is not installed")
def test_runsc_checks_that_the_seccomp_profile_took_and_refuses_when_it_did_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without --oci-seccomp runsc ignores linux.seccomp silently; the start-up probe must notice."""
    from contain.runtime.container import oci_runtime

    rows = tuple(r for r in oci_runtime.GLOBAL_FLAGS if r.flag != "--oci-seccomp")
    monkeypatch.setattr(oci_runtime, "GLOBAL_FLAGS", rows)
    with pytest.raises(UnsupportedHost, match="did not apply the bundle's seccomp profile"):
        Sandbox(boundary(), backend="container:runsc").start()


# -- images ------------------------------------------------------------------------------------------

BUSYBOX = "/bin/busybox"


def _tar_member(tar, name: str, *, data: bytes | None = None, link: str | None = None, mode: int = 0o755) -> None:
    import io
    import tarfile

    info = tarfile.TarInfo(name)
    if link is not None:
        info.type, info.linkname = tarfile.SYMTYPE, link
    elif data is None:
        info.type, info.mode = tarfile.DIRTYPE, mode
    else:
        info.size, info.mode = len(data), mode
    tar.addfile(info, io.BytesIO(data) if data is not None else None)


@pytest.fixture
def busybox_image(host_tmp: Path) -> Path:
    """A rootfs tar: static busybox, an /etc of its own, and two links a careless host would follow."""
    import tarfile

    if not os.path.exists(BUSYBOX):
        pytest.skip("busybox-static is not installed")
    path = host_tmp / "busybox.tar"
    with tarfile.open(path, "w") as tar:
        for directory in ("bin", "etc"):
            _tar_member(tar, directory)
        _tar_member(tar, "bin/busybox", data=Path(BUSYBOX).read_bytes())
        for command in ("sh", "echo", "cat", "id", "ls"):
            _tar_member(tar, f"bin/{command}", link="busybox")
        _tar_member(tar, "etc/image-release", data=b"busybox image\n", mode=0o644)
        _tar_member(tar, "etc/resolv.conf", link="/run/systemd/resolve/stub-resolv.conf")
        _tar_member(tar, "tmp", link="/etc")  # a mount point that is a link to the host's /etc
        _tar_member(tar, "work", link="../../../../../etc")
    return path


@pytest.mark.parametrize("backend", CONTAINERS)
def test_an_image_is_the_root_and_its_links_at_mount_points_are_replaced_not_followed(
    backend: str, busybox_image: Path
) -> None:
    manifest = boundary(runtime={"container": {"image": str(busybox_image)}})
    etc_before = sorted(os.listdir("/etc"))
    with Sandbox(manifest, backend=backend) as sb:
        result = sb.run(
            ["/bin/sh", "-c", "cat /etc/image-release /etc/resolv.conf; echo hi > /tmp/x; cat /tmp/x; echo no > /etc/x"]
        )
        assert sb.supervisor_pid is not None
        sb.put_file("/work/in", b"put\n")
        assert sb.run(["/bin/cat", "/work/in"]).stdout.data == b"put\n"
        name = leaf_of(sb.supervisor_pid)
    out = result.stdout.data.decode()
    assert out.startswith("busybox image\nnameserver ")  # the image's /etc, contain's resolv.conf
    assert out.endswith("hi\n") and result.status != 0  # /tmp is the budget; the root is read-only
    assert sorted(os.listdir("/etc")) == etc_before and not os.path.exists("/etc/x")
    assert leftovers(name) == []


def test_an_image_that_would_escape_is_refused_with_exit_125(host_tmp: Path) -> None:
    import subprocess
    import sys
    import tarfile

    evil = host_tmp / "evil.tar"
    with tarfile.open(evil, "w") as tar:
        _tar_member(tar, "../escape", data=b"x")
    manifest = host_tmp / "contain.yaml"
    manifest.write_text(f"runtime:\n  backend: container\n  container:\n    image: {evil.name}\n")
    done = subprocess.run(
        [str(Path(sys.executable).with_name("contain")), "run", "-m", str(manifest), "--", "/bin/true"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "CONTAIN_NO_BOUNDARY_CACHE": "1"},
    )
    assert done.returncode == 125, done.stderr
    assert "../escape" in done.stderr and "fix:" in done.stderr
    assert not (host_tmp.parent / "escape").exists()


@pytest.mark.parametrize("backend", CONTAINERS)
def test_a_sandbox_whose_owner_was_killed_is_swept_by_the_next_start(backend: str) -> None:
    import subprocess
    import sys

    from contain.host.facts import detect_host
    from contain.runtime.container.sweep import sweep_stale

    owner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom contain.runtime import Sandbox\n"
            f"sb = Sandbox(backend={backend!r}); sb.start(); print(sb.supervisor_pid, flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
    )
    assert owner.stdout is not None
    pid = int(owner.stdout.readline())
    name = leaf_of(pid)
    owner.kill()
    owner.wait(timeout=30)
    assert leftovers(name), "positive control: a killed owner leaves its sandbox behind"
    assert name in sweep_stale(CONTAINER_ROOT, detect_host())
    assert leftovers(name) == []


def _userns_owner(pid: int) -> int:
    import fcntl
    import struct

    ns_get_owner_uid = 0xB704  # <linux/nsfs.h> _IO(0xb7, 0x4)
    fd = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY)
    try:
        buf = fcntl.ioctl(fd, ns_get_owner_uid, struct.pack("I", 0))
    finally:
        os.close(fd)
    return int(struct.unpack("I", buf)[0])


def test_runc_user_namespace_is_owned_by_the_sandboxs_uid_so_per_user_counts_are_its_own() -> None:
    """RE-09 under runc: a user namespace runc makes is owned by host root, and the kernel charges
    inotify instances made inside to root, shared with contain and every other such sandbox."""
    import ctypes

    code = (
        "import ctypes, sys, time\nlibc = ctypes.CDLL(None, use_errno=True)\nn = 0\n"
        "while n < 100000 and libc.inotify_init() >= 0:\n    n += 1\nprint(n, flush=True)\ntime.sleep(20)"
    )
    with Sandbox(boundary(), backend="container:runc") as sb:
        pid = sb.supervisor_pid
        assert pid is not None
        uid = int(Path(f"/proc/{pid}/status").read_text().split("Uid:")[1].split()[0])
        assert uid != 0 and _userns_owner(pid) == uid
        proc = sb.spawn([PY, "-c", code])
        made = int(proc.stdout.readline())
        try:
            assert made < 100000  # positive control: the workload did reach its per-user limit
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init()
            assert fd >= 0, f"the host could not create an inotify instance: errno {ctypes.get_errno()}"
            os.close(fd)
        finally:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("backend", ["process", "container:runc"])
def test_the_seccomp_self_check_program_sees_the_tables_rows_on_the_host_kernel_backends(backend: str) -> None:
    """The program runsc's start relies on, judged where the table is BPF or rendered for runc:
    clone3 answers ENOSYS and ptrace EPERM, so it exits with EPERM (1)."""
    import platform

    from contain.runtime.container.seccomp_probe import probe_program

    if platform.machine() != "x86_64":
        pytest.skip("the probe is built for x86_64 only")
    with Sandbox(boundary(), backend=backend) as sb:
        sb.put_file("/work/probe", probe_program("x86_64"), mode=0o755)
        assert sb.run(["/work/probe"]).status == 1


@pytest.mark.skipif(RUNSC_MISSING, reason="runsc is not installed")
def test_threads_start_under_runsc_and_clone3_still_answers_enosys() -> None:
    code = (
        "import ctypes, threading\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.syscall(435, 0, 0), ctypes.get_errno())\n"
        "t = threading.Thread(target=print, args=('thread',)); t.start(); t.join()"
    )
    result = run_on("container:runsc", boundary(), [PY, "-c", code])
    assert result.stdout.data == b"-1 38\nthread\n", result.stderr.data[-500:]


@pytest.mark.parametrize("runtime", [pytest.param(p.values[0].split(":")[1], marks=p.marks) for p in CONTAINERS])
def test_a_bare_container_spec_takes_the_manifests_runtime_and_reports_the_full_spec(runtime: str) -> None:
    manifest = boundary(runtime={"backend": "container", "container": {"runtime": runtime}})
    assert run_on("container", manifest, ["/bin/true"]).backend == f"container:{runtime}"
    with Sandbox(manifest) as sb:  # no spec at all: the manifest's backend and runtime
        assert sb.run(["/bin/true"]).backend == f"container:{runtime}"


@pytest.fixture
def runtime_verbs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The verb (``delete``, ``kill``, ...) of every runtime process the container backend starts
    through ``run_bounded``, in order; each still runs."""
    from contain.runtime.container import backend as container_backend

    real_run_bounded = container_backend.run_bounded
    verbs: list[str] = []

    def record_then_run(argv: list[str], timeout_s: float) -> int | None:
        verbs.append(next(a for a in argv[1:] if not a.startswith("-")))
        return real_run_bounded(argv, timeout_s)

    monkeypatch.setattr(container_backend, "run_bounded", record_then_run)
    return verbs


@pytest.mark.skipif(RUNC_MISSING, reason="runc is not installed")
def test_runc_delete_is_asked_only_once_the_supervisor_has_exited(monkeypatch: pytest.MonkeyPatch) -> None:
    """``runc delete --force`` of a running container kills it and then polls in 100 ms sleeps
    (runc 1.1 ``killContainer``); close must let the supervisor exit first, then delete. (The
    state is made not understood, so close falls back to runc's delete.)"""
    from contain.runtime.container import backend as container_backend

    monkeypatch.setattr(container_backend, "plan_stopped_removal", lambda state, *, name: None)

    real_run_bounded = container_backend.run_bounded
    seen: list[tuple[str, str]] = []
    pid = 0

    def state_of(pid: int) -> str:  # the kernel's view, read in microseconds: no race is hidden
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return "gone"

    def record_then_run(argv: list[str], timeout_s: float) -> int | None:
        seen.append((next(a for a in argv[1:] if not a.startswith("-")), state_of(pid)))
        return real_run_bounded(argv, timeout_s)

    monkeypatch.setattr(container_backend, "run_bounded", record_then_run)
    with Sandbox(boundary(), backend="container:runc") as sb:
        assert sb.supervisor_pid is not None
        pid = sb.supervisor_pid
        name = leaf_of(pid)
        assert state_of(pid) in {"R", "S"}  # positive control: a live supervisor reads as running
        assert sb.run(["/bin/true"]).exit_code == 0
    assert seen in ([("delete", "gone")], [("delete", "Z")])
    assert leftovers(name) == []


@pytest.mark.skipif(RUNSC_MISSING, reason="runsc is not installed")
def test_runsc_close_skips_delete_when_its_foreground_run_removed_the_container(runtime_verbs: list[str]) -> None:
    """``runsc run`` deletes its container when the sandbox ends; a second runsc process to
    ``delete`` it again costs a runsc start per close. Judged from outside: nothing is left."""
    with Sandbox(boundary(), backend="container:runsc") as sb:
        assert sb.supervisor_pid is not None
        name = leaf_of(sb.supervisor_pid)
        state = CONTAINER_ROOT / name / "state"
        assert any(name in entry for entry in os.listdir(state))  # positive control: runsc's state is there
        assert sb.run(["/bin/true"]).exit_code == 0
    assert runtime_verbs == []
    assert leftovers(name) == []


@pytest.mark.skipif(RUNC_MISSING, reason="runc is not installed")
def test_runc_namespace_helper_starts_before_the_bundle_is_written_and_is_pinned_before_runc_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The helper's three execs overlap the bundle's planning and writing; nothing is mapped or
    pinned until the bundle exists, and runc starts only once both namespaces are pinned."""
    from contain.runtime.container import backend as container_backend

    events: list[str] = []
    helper_class = container_backend.NamespaceHelper

    class RecordingHelper(helper_class):  # type: ignore[misc,valid-type]
        def __init__(self, **kwargs: object) -> None:
            events.append("helper started")
            super().__init__(**kwargs)

        def pin(self, **kwargs: object) -> None:
            events.append("helper pinned")
            super().pin(**kwargs)

    def recorded(name: str, real):  # type: ignore[no-untyped-def]
        def call(*args: object, **kwargs: object) -> object:
            events.append(name)
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(container_backend, "NamespaceHelper", RecordingHelper)
    monkeypatch.setattr(container_backend, "write_bundle", recorded("bundle written", container_backend.write_bundle))
    monkeypatch.setattr(
        container_backend.ContainerSandbox,
        "_start_runtime",
        recorded("runc started", container_backend.ContainerSandbox._start_runtime),
    )
    with Sandbox(boundary(), backend="container:runc") as sb:
        assert sb.run(["/bin/true"]).exit_code == 0
        assert sb.supervisor_pid is not None
        name = leaf_of(sb.supervisor_pid)
    assert events == ["helper started", "bundle written", "helper pinned", "runc started"]
    assert leftovers(name) == []


@pytest.mark.skipif(RUNC_MISSING, reason="runc is not installed")
def test_runc_close_removes_a_stopped_container_without_starting_runc_again(runtime_verbs: list[str]) -> None:
    """Once the supervisor is gone, close does runc delete's work (runc_state.py) and no runtime
    process starts; judged from outside: every cgroup directory of the name (in every hierarchy,
    also those ``Sandbox`` never made), the state, the processes and mounts are gone."""
    with Sandbox(boundary(), backend="container:runc") as sb:
        assert sb.supervisor_pid is not None
        name = leaf_of(sb.supervisor_pid)
        runc_dirs = glob.glob(f"/sys/fs/cgroup/*/**/{name}", recursive=True)
        assert len(runc_dirs) > 1  # positive control: runc made the leaf in several hierarchies
        assert sb.run(["/bin/true"]).exit_code == 0
    assert runtime_verbs == []
    assert [d for d in runc_dirs if os.path.exists(d)] == []
    assert leftovers(name) == []


@pytest.mark.parametrize("backend", CONTAINERS)
def test_the_public_runtime_view_names_the_real_binary_state_and_container_while_it_runs(backend: str) -> None:
    """What OC-01, OC-05 and OC-06 read instead of the handle's private attributes."""
    runtime = backend.split(":")[1]
    sb = Sandbox(boundary(), backend=backend)
    assert sb.oci_runtime is None  # not started yet
    with sb:
        view = sb.oci_runtime
        assert view is not None and view.runtime == runtime
        assert os.path.basename(os.path.realpath(view.binary)) == runtime and os.access(view.binary, os.X_OK)
        assert view.argv_prefix[0] == view.binary and f"--root={view.state_dir}" in view.argv_prefix
        assert os.path.isdir(view.state_dir) and os.path.isdir(view.rootfs)
        assert view.container_name == os.path.basename(os.path.dirname(view.state_dir))
    assert sb.oci_runtime is None  # closed
    with Sandbox(boundary(), backend="process") as process:
        assert process.oci_runtime is None
