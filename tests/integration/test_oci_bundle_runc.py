"""The planned OCI bundle under a real runc: the supervisor is pid 1 and answers as in bubblewrap.

The bundle is written from ``plan_oci_bundle`` for a default boundary by the container backend's
own apply step (``host_setup.write_bundle``), started with ``runc run --detach --preserve-fds 1``
so the supervisor's control socket is fd 3, and driven with ``SupervisorChannel`` as the process
backend does. The disk budget is mounted on the host with the backend's ``mount_disk_budget``
(through ``host_setup.disk_budget_mounted``), as the backend must do before ``runc create``
(bundle.py says why).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import select
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from contain.boundary import Boundary, FileRule
from contain.boundary.plain import plain_boundary
from contain.host.facts import detect_host
from contain.runtime.attachments import Attachment
from contain.runtime.backend import BackendPlan
from contain.runtime.bwrap import ETC_PASSTHROUGH, default_scratch_paths, generated_etc_files
from contain.runtime.container.bundle import BundleInputs, BundlePlan, plan_oci_bundle
from contain.runtime.container.host_setup import disk_budget_mounted, write_bundle
from contain.runtime.etc_tree import ensure_etc_tree
from contain.runtime.host_ids import lease_host_ids
from contain.runtime.paths import gather_path_facts
from contain.runtime.plan import plan_layers, plan_rlimits
from contain.runtime.supervisor_build import ensure_supervisor_binary
from contain.runtime.supervisor_channel import Exited, Started, SupervisorChannel

pytestmark = [pytest.mark.needs_root]

RUNC = "/usr/sbin/runc"
RLIMIT_NAMES = ("CPU", "NPROC", "FSIZE", "NOFILE", "CORE", "DATA")


@dataclass
class Bundle:
    plan: BackendPlan
    inputs: BundleInputs
    bundle_plan: BundlePlan
    state: Path


@pytest.fixture
def bundle(host_tmp: Path) -> Iterator[Bundle]:
    with open_bundle(host_tmp, Boundary()) as opened:
        yield opened


@contextlib.contextmanager
def open_bundle(
    host_tmp: Path, manifest: Boundary, attachments: tuple[Attachment, ...] = (), *, host_ids_for_write: bool = False
) -> Iterator[Bundle]:
    """Plan the bundle for ``manifest`` and write it; on exit delete the container and the budget.

    ``host_ids_for_write``: run as nobody, as the runtime does for write binds without idmapping.
    """
    if not os.access(RUNC, os.X_OK):
        pytest.skip(f"{RUNC} is not installed")
    facts = detect_host()
    boundary = plain_boundary(manifest)
    sandbox_ids, root_ids = lease_host_ids(lock_dir=host_tmp / "ids"), lease_host_ids(lock_dir=host_tmp / "ids")
    ids = (65534, 65534) if host_ids_for_write else (sandbox_ids.uid, sandbox_ids.uid)
    plan = BackendPlan(
        boundary=boundary,
        facts=facts,
        layers=plan_layers(boundary, facts, egress_available=False, backend="process"),
        host_ids=ids,
        paths=gather_path_facts(boundary, sandbox_host_uid=ids[0], sandbox_host_gid=ids[1]),
        bind_sources={},
        attachments=attachments,
        resolv_conf="",
        cgroup=None,
    )
    supervisor = ensure_supervisor_binary()
    etc = generated_etc_files(home=default_scratch_paths(boundary)[0], resolv_conf=plan.resolv_conf)
    bundle_dir = host_tmp / "bundle"
    bundle_dir.mkdir(mode=0o755)
    host_tmp.chmod(0o755)
    args = ["--control-fd", "3"]
    if plan.layers.landlock is not None:
        args += plan.layers.landlock.supervisor_args()
    with disk_budget_mounted(plan.boundary, host_tmp / "disk", plan.host_ids) as disk_root:
        inputs = BundleInputs(
            bundle_dir=str(bundle_dir),
            name=f"contain-test-{os.getpid()}-{ids[0]}",
            loader_links={p: os.readlink(p) for p in ("/bin", "/sbin", "/lib", "/lib64") if os.path.islink(p)},
            loader_dirs=(),
            etc_tree=ensure_etc_tree(supervisor.parent, etc, (e.path for e in ETC_PASSTHROUGH)),
            supervisor_host_path=str(supervisor),
            supervisor_args=tuple(args),
            disk_root=disk_root,
            root_host_ids=(root_ids.uid, root_ids.uid),
            host_hard_limits={n: resource.getrlimit(getattr(resource, f"RLIMIT_{n}"))[1] for n in RLIMIT_NAMES},
        )
        bundle_plan = plan_oci_bundle(plan, inputs)
        write_bundle(bundle_plan, bundle_dir)  # the backend's own apply step
        try:
            yield Bundle(plan, inputs, bundle_plan, host_tmp / "state")
        finally:
            subprocess.run([RUNC, "--root", str(host_tmp / "state"), "delete", "-f", inputs.name], capture_output=True)
            sandbox_ids.release()
            root_ids.release()


def start_container(b: Bundle) -> tuple[SupervisorChannel, int]:
    """``runc run --detach`` with the supervisor's end of a socketpair as the container's fd 3."""
    host, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with peer, open(b.state.parent / "runc.log", "wb") as log:
        done = subprocess.run(
            ["bash", "-c", f'exec "$@" 3<&{peer.fileno()}', "bash", RUNC, "--root", str(b.state), "run", "--detach",
             "--preserve-fds", "1", "--bundle", b.inputs.bundle_dir, b.inputs.name],
            pass_fds=(peer.fileno(),), stdin=subprocess.DEVNULL, stdout=log, stderr=log, timeout=30,
        )  # fmt: skip
    assert done.returncode == 0, (b.state.parent / "runc.log").read_text()
    channel = SupervisorChannel(host)
    channel.read_ready(10.0)
    state = json.loads(subprocess.run([RUNC, "--root", str(b.state), "state", b.inputs.name], capture_output=True,
                                      check=True).stdout)  # fmt: skip
    return channel, int(state["pid"])


def run(channel: SupervisorChannel, b: Bundle, argv: list[str]) -> tuple[Exited, str, str]:
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    null = os.open("/dev/null", os.O_RDONLY)
    rlimits = plan_rlimits(b.plan.boundary.resources, cgroups=b.plan.layers.cgroups)
    try:
        started = channel.start(argv, {"PATH": "/usr/bin:/bin"}, "/tmp", rlimits, (null, out_w, err_w))
    finally:
        for fd in (null, out_w, err_w):
            os.close(fd)
    assert isinstance(started, Started), started
    exited = channel.wait_exited(10.0)
    assert isinstance(exited, Exited)
    with open(out_r, "rb") as out, open(err_r, "rb") as err:
        return exited, out.read().decode(), err.read().decode()


def _cgroup_dirs(b: Bundle) -> list[Path]:
    """The container's cgroup directory in every hierarchy it could be in."""
    path = b.bundle_plan.config["linux"]["cgroupsPath"]
    found = []
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, own = line.split(":", 2)
        mount = "/sys/fs/cgroup/" + (controllers.replace("name=", "") if controllers else "unified")
        found.append(Path(mount + (path if path.startswith("/") else f"{own.rstrip('/')}/{path}")))
    return found


def test_the_supervisor_is_pid_1_runs_commands_as_1000_and_delete_leaves_nothing(bundle: Bundle):
    channel, pid = start_container(bundle)
    try:
        exited, out, _err = run(channel, bundle, ["/bin/echo", "hi"])
        assert (exited.exit_code, out) == (0, "hi\n")
        exited, out, _err = run(channel, bundle, ["id", "-u"])
        assert (exited.exit_code, out) == (0, "1000\n")
        assert Path(f"/proc/{pid}").exists()
        assert os.readlink(f"/proc/{pid}/exe").endswith("supervisor")
        assert Path(f"/proc/{pid}/status").read_text().count(f"\t{bundle.plan.host_ids[0]}\t") >= 1
        cgroups = [d for d in _cgroup_dirs(bundle) if d.is_dir()]
        assert cgroups, "runc made no cgroup where the plan put it"
    finally:
        channel.close()
    pidfd = os.pidfd_open(pid)
    try:
        subprocess.run([RUNC, "--root", str(bundle.state), "delete", "-f", bundle.inputs.name], check=True)
        # runc has sent SIGKILL; the host's init reaps the orphan: wait for that, bounded
        assert select.select([pidfd], [], [], 5.0)[0] == [pidfd]
    finally:
        os.close(pidfd)
    # dead: gone, or a zombie waiting for the host's init (runc is not its parent after --detach)
    with contextlib.suppress(FileNotFoundError):
        assert "State:\tZ" in Path(f"/proc/{pid}/status").read_text()
    assert not any(d.exists() for d in _cgroup_dirs(bundle))
    assert not (bundle.state / bundle.inputs.name).exists()


def test_usr_is_read_only_and_a_seccomp_row_holds_in_the_container(bundle: Bundle):
    channel, _pid = start_container(bundle)
    try:
        exited, _out, err = run(channel, bundle, ["/bin/sh", "-c", "echo x > /usr/contain-probe"])
        assert exited.exit_code != 0 and "Read-only file system" in err
        exited, _out, err = run(channel, bundle, ["/bin/sh", "-c", "echo x > /dev/contain-probe"])
        assert exited.exit_code != 0 and "Read-only file system" in err
        exited, out, _err = run(
            channel,
            bundle,
            ["/bin/sh", "-c", "echo x > /tmp/f && echo x > /work/f && echo x > /dev/null && df -k /tmp"],
        )
        assert exited.exit_code == 0 and out.splitlines()[1].split()[1] == str(
            bundle.plan.boundary.resources.disk_bytes // 1024
        )
        ptrace = "import ctypes; print(ctypes.CDLL(None, use_errno=True).ptrace(0, 0, 0, 0), ctypes.get_errno())"
        exited, out, _err = run(channel, bundle, ["python3", "-c", ptrace])
        assert out == "-1 1\n"  # PTRACE_TRACEME -> EPERM from the table's row
    finally:
        channel.close()


def test_without_the_profile_ptrace_succeeds_in_the_same_container(bundle: Bundle):
    """Positive control for the seccomp assertion above: the row, not something else, refuses."""
    config = dict(bundle.bundle_plan.config)
    config["linux"] = {k: v for k, v in config["linux"].items() if k != "seccomp"}
    Path(bundle.inputs.bundle_dir, "config.json").write_text(json.dumps(config))
    channel, _pid = start_container(bundle)
    try:
        ptrace = "import ctypes; print(ctypes.CDLL(None, use_errno=True).ptrace(0, 0, 0, 0), ctypes.get_errno())"
        _exited, out, _err = run(channel, bundle, ["python3", "-c", ptrace])
        assert out.startswith("0 ")
    finally:
        channel.close()


def test_runc_refuses_a_user_namespace_that_does_not_map_container_root(bundle: Bundle):
    config = dict(bundle.bundle_plan.config)
    config["linux"] = {
        **config["linux"],
        "uidMappings": [m for m in config["linux"]["uidMappings"] if m["containerID"] != 0],
        "gidMappings": [m for m in config["linux"]["gidMappings"] if m["containerID"] != 0],
    }
    Path(bundle.inputs.bundle_dir, "config.json").write_text(json.dumps(config))
    done = subprocess.run(
        [RUNC, "--root", str(bundle.state), "run", "--bundle", bundle.inputs.bundle_dir, bundle.inputs.name],
        stdin=subprocess.DEVNULL, capture_output=True, timeout=30,
    )  # fmt: skip
    assert done.returncode != 0
    # runc 1.1 looks up the host id of container root (HostRootUID) before it starts anything
    assert b"User namespaces enabled, but no user mapping found" in done.stderr, done.stderr


def test_blocks_hidden_sockets_and_attachments_hold_inside_a_read_bind(host_tmp: Path):
    data = host_tmp / "data"
    (data / "private").mkdir(parents=True)
    for name in ("ok.txt", "secret.txt", "private/key"):
        (data / name).write_text("content\n")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(data / "agent.sock"))
    listener.listen(1)
    manifest = Boundary(
        files=[
            FileRule(path="/inputs", access="read", host=str(data)),
            FileRule(path="/inputs/secret.txt", access="block"),
            FileRule(path="/inputs/private", access="block"),
        ]
    )
    connect = "import socket; s = socket.socket(socket.AF_UNIX); s.connect('/inputs/agent.sock')"
    probe = socket.socket(socket.AF_UNIX)
    probe.connect(str(data / "agent.sock"))  # positive control: on the host the socket answers
    probe.close()
    with listener, open_bundle(host_tmp, manifest, (Attachment("/.contain/token", data=b"t0k\n"),)) as b:
        channel, _pid = start_container(b)
        try:
            exited, out, _err = run(channel, b, ["cat", "/inputs/ok.txt", "/.contain/token"])
            assert (exited.exit_code, out) == (0, "content\nt0k\n")  # positive control: the bind itself works
            for path in ("/inputs/secret.txt", "/inputs/private/key"):
                exited, out, err = run(channel, b, ["cat", path])
                assert exited.exit_code != 0 and out == "", (path, err)
            exited, _out, err = run(channel, b, ["python3", "-c", connect])
            assert exited.exit_code != 0 and "PermissionError" in err, err  # an empty mode-0000 file, not the socket
        finally:
            channel.close()


def test_a_write_bind_is_writable_and_its_protected_placeholders_are_not(host_tmp: Path):
    proj = host_tmp / "proj"
    proj.mkdir()
    os.chown(proj, 65534, 65534)
    manifest = Boundary(files=[FileRule(path="/proj", access="write", host=str(proj))])
    with open_bundle(host_tmp, manifest, host_ids_for_write=True) as b:
        placeholders = b.plan.paths.created_placeholders()
        assert placeholders, "a default write bind protects missing names (.envrc, ...) with placeholders"
        for mask in placeholders:  # the backend's job: runc would create them as container root's host id
            target = Path(mask.host_path)
            target.mkdir() if mask.kind == "dir" else target.touch()
            os.chown(target, *b.plan.host_ids)
        channel, _pid = start_container(b)
        try:
            exited, _out, err = run(channel, b, ["/bin/sh", "-c", "echo made > /proj/out"])
            assert exited.exit_code == 0, err
            for mask in placeholders:
                name = mask.sandbox_path + ("/x" if mask.kind == "dir" else "")
                exited, _out, err = run(channel, b, ["/bin/sh", "-c", f"echo x > {name}"])
                assert exited.exit_code != 0 and "Read-only file system" in err, (name, err)
        finally:
            channel.close()
    assert (proj / "out").read_text() == "made\n"
    owners = {entry.name: entry.stat(follow_symlinks=False).st_uid for entry in os.scandir(proj)}
    assert owners == dict.fromkeys(owners, b.plan.host_ids[0])  # nothing in the user's tree is container root's
