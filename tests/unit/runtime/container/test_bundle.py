"""plan_oci_bundle: the bwrap plan's mounts, in OCI words, plus what OCI needs; whole plans as literals."""

from __future__ import annotations

import pytest

from contain.boundary import Boundary
from contain.boundary.kinds import FileAccess
from contain.boundary.plain import PlainFileRule, plain_boundary
from contain.errors import SandboxStartError, UnsupportedHost
from contain.host.facts import CgroupMount, HostFacts
from contain.runtime.attachments import Attachment
from contain.runtime.backend import BackendPlan
from contain.runtime.container.bundle import (
    PROC_PATH_RULES,
    RUNSC_HOST_TASKS,
    RUNSC_HOST_TASKS_PER_MOUNT,
    RUNSC_HOST_TASKS_PER_TASK,
    RUNTIME_DIFFERENCES,
    BundleFile,
    BundleInputs,
    RootfsEntry,
    plan_oci_bundle,
    plan_runsc_ids,
    plan_runtime_rlimits,
)
from contain.runtime.container.oci_seccomp import render_oci_seccomp
from contain.runtime.paths import BindFacts, Mask, PathFacts
from contain.runtime.plan import LayerPlan
from contain.runtime.supervisor_channel import Rlimit

RO = ["rbind", "ro", "nosuid", "nodev"]
RW = ["rbind", "nosuid", "nodev"]
HARD = {"CPU": -1, "NPROC": 1_000_000, "FSIZE": -1, "NOFILE": 1_048_576, "CORE": -1, "DATA": -1}
V2 = (CgroupMount(2, "/sys/fs/cgroup", ("cpu", "memory", "pids"), "/user.slice/session-1.scope"),)
V1 = tuple(CgroupMount(1, f"/sys/fs/cgroup/{c}", (c,), "/job") for c in ("memory", "pids", "cpu", "cpuacct", "freezer"))


def facts(*, cgroups: tuple[CgroupMount, ...] = V2, cgroup_root: str | None = None) -> HostFacts:
    return HostFacts(
        arch="x86_64", is_root=True, uid=0, gid=0, bwrap_path=None, user_namespaces=True, seccomp=True,
        landlock_abi=0, cgroups=cgroups, cgroup_root=cgroup_root,
    )  # fmt: skip


def backend_plan(
    boundary: Boundary | None = None,
    *,
    paths: PathFacts | None = None,
    seccomp: bool = True,
    cgroups: bool = True,
    host_facts: HostFacts | None = None,
    attachments: tuple[Attachment, ...] = (),
    bind_sources: dict[str, str] | None = None,
    host_ids: tuple[int, int] = (0x6000_0001, 0x6000_0001),
) -> BackendPlan:
    return BackendPlan(
        boundary=plain_boundary(boundary or Boundary()),
        facts=host_facts or facts(),
        layers=LayerPlan(seccomp=seccomp, landlock=None, cgroups=cgroups, egress=False, report={}),
        host_ids=host_ids,
        paths=paths or PathFacts(binds=(), skipped=()),
        bind_sources=bind_sources or {},
        attachments=attachments,
        resolv_conf="",
        cgroup=None,
    )


def inputs(**changes: object) -> BundleInputs:
    values: dict[str, object] = {
        "bundle_dir": "/run/contain/b1",
        "name": "c1",
        "loader_links": {"/bin": "usr/bin", "/lib": "usr/lib", "/lib64": "usr/lib64", "/sbin": "usr/sbin"},
        "loader_dirs": (),
        "etc_tree": "/cache/etc-abc",
        "supervisor_host_path": "/cache/contain-supervisor",
        "supervisor_args": ("--control-fd", "3"),
        "disk_root": "/run/contain/b1/disk",
        "root_host_ids": (0x6000_0002, 0x6000_0002),
        "host_hard_limits": HARD,
    }
    values.update(changes)
    return BundleInputs(**values)  # type: ignore[arg-type]


def test_a_default_boundary_gives_this_whole_config_and_skeleton():
    plan = plan_oci_bundle(backend_plan(), inputs())
    config = dict(plan.config)
    linux = dict(config.pop("linux"))
    assert linux.pop("seccomp") == render_oci_seccomp(arch="x86_64")
    assert config == {
        "ociVersion": "1.0.2",
        "root": {"path": "rootfs", "readonly": True},
        "hostname": "sandbox",
        "process": {
            "terminal": False,
            "user": {"uid": 1000, "gid": 1000, "additionalGids": []},
            "args": ["/.contain/supervisor", "--control-fd", "3"],
            "env": ["PATH=/usr/bin:/bin"],
            "cwd": "/",
            "capabilities": {"bounding": [], "effective": [], "inheritable": [], "permitted": [], "ambient": []},
            "noNewPrivileges": True,
            "rlimits": [
                {"type": "RLIMIT_CPU", "hard": 31, "soft": 30},
                {"type": "RLIMIT_NPROC", "hard": 144, "soft": 144},
                {"type": "RLIMIT_FSIZE", "hard": 268435456, "soft": 268435456},
                {"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024},
                {"type": "RLIMIT_CORE", "hard": 0, "soft": 0},
            ],
        },
        "mounts": [
            {"destination": "/usr", "type": "bind", "source": "/usr", "options": RO},
            {"destination": "/etc", "type": "bind", "source": "/cache/etc-abc", "options": RO},
            {"destination": "/proc", "type": "proc", "source": "proc", "options": []},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "strictatime", "mode=755", "size=65536k", "ro"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
             "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
            {"destination": "/tmp", "type": "bind", "source": "/run/contain/b1/disk/tmp", "options": RW},
            {"destination": "/dev/shm", "type": "bind", "source": "/run/contain/b1/disk/shm", "options": RW},
            {"destination": "/work", "type": "bind", "source": "/run/contain/b1/disk/scratch-0", "options": RW},
            {"destination": "/.contain/supervisor", "type": "bind", "source": "/cache/contain-supervisor",
             "options": RO},
        ],
    }  # fmt: skip
    assert linux == {
        "namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount", "user", "network", "cgroup")],
        "uidMappings": [
            {"containerID": 0, "hostID": 0x6000_0002, "size": 1},
            {"containerID": 1000, "hostID": 0x6000_0001, "size": 1},
        ],
        "gidMappings": [
            {"containerID": 0, "hostID": 0x6000_0002, "size": 1},
            {"containerID": 1000, "hostID": 0x6000_0001, "size": 1},
        ],
        "cgroupsPath": "/user.slice/contain-container/c1",
        "resources": {
            "devices": [{"allow": False, "access": "rwm"}],
            "memory": {"limit": 536870912, "swap": 536870912},
            "pids": {"limit": 128},
            "cpu": {"quota": 100000, "period": 100000},
        },
        "maskedPaths": [
            "/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
            "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap",
        ],
        "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"],
        "rootfsPropagation": "rprivate",
    }  # fmt: skip
    assert plan.rootfs == (
        RootfsEntry("/.contain", "dir"),
        RootfsEntry("/bin", "symlink", "usr/bin"),
        RootfsEntry("/dev", "dir"),
        RootfsEntry("/etc", "dir"),
        RootfsEntry("/lib", "symlink", "usr/lib"),
        RootfsEntry("/lib64", "symlink", "usr/lib64"),
        RootfsEntry("/proc", "dir"),
        RootfsEntry("/sbin", "symlink", "usr/sbin"),
        RootfsEntry("/tmp", "dir"),
        RootfsEntry("/usr", "dir"),
        RootfsEntry("/work", "dir"),
        RootfsEntry("/.contain/supervisor", "file"),
    )
    assert plan.files == ()


def _rule(path: str, access: FileAccess) -> PlainFileRule:
    return PlainFileRule(path=path, access=access, host=path)


def test_binds_masks_sockets_and_blocks_follow_the_bwrap_order_with_bundle_files_for_data():
    write = BindFacts(
        rule=_rule("/home/u/proj", FileAccess.WRITE),
        host_realpath="/srv/proj",
        is_dir=True,
        masks=(
            Mask("/home/u/proj/.git", "/srv/proj/.git", "dir", exists=True, immovable=True),
            Mask("/home/u/proj/.git/hooks", "/srv/proj/.git/hooks", "dir", exists=True),
            Mask("/home/u/proj/.envrc", "/srv/proj/.envrc", "file", exists=False),
            Mask("/home/u/proj/.vscode", "/srv/proj/.vscode", "dir", exists=False),
        ),
    )
    read = BindFacts(rule=_rule("/data", FileAccess.READ), host_realpath="/data", is_dir=True)
    key = BindFacts(rule=_rule("/etc/app.conf", FileAccess.READ), host_realpath="/opt/app.conf", is_dir=False)
    paths = PathFacts(
        binds=(write, read, key),
        skipped=(),
        blocks={"/data/secret": "file", "/home/u/proj/private": "missing", "/data/gone": "missing"},
        hidden_sockets=("/data/agent.sock",),
    )
    attachments = (
        Attachment("/.contain/token", data=b"t0k"),
        Attachment("/.contain/broker.sock", host_path="/run/broker.sock"),
    )
    plan = plan_oci_bundle(
        backend_plan(paths=paths, attachments=attachments, bind_sources={"/srv/proj": "/run/idmap/proj"}), inputs()
    )
    mounts = plan.config["mounts"]
    assert mounts[2] == {"destination": "/.contain/token", "type": "bind", "source": "/run/contain/b1/data/0",
                         "options": RO}  # fmt: skip
    assert mounts[10:] == [
        {"destination": "/.contain/broker.sock", "type": "bind", "source": "/run/broker.sock", "options": RW},
        {"destination": "/data", "type": "bind", "source": "/data", "options": RO},
        {"destination": "/etc/app.conf", "type": "bind", "source": "/opt/app.conf", "options": RO},
        {"destination": "/home/u/proj", "type": "bind", "source": "/run/idmap/proj", "options": RW},
        {"destination": "/home/u/proj/.git", "type": "bind", "source": "/run/idmap/proj/.git", "options": RW},
        {"destination": "/home/u/proj/.git/hooks", "type": "bind", "source": "/run/idmap/proj/.git/hooks",
         "options": RO},
        {"destination": "/home/u/proj/.envrc", "type": "bind", "source": "/run/contain/b1/data/1", "options": RO},
        {"destination": "/home/u/proj/.vscode", "type": "tmpfs", "source": "tmpfs",
         "options": ["ro", "nosuid", "nodev", "noexec", "mode=555"]},
        {"destination": "/data/agent.sock", "type": "bind", "source": "/run/contain/b1/data/2", "options": RO},
        {"destination": "/data/secret", "type": "bind", "source": "/run/contain/b1/data/3", "options": RO},
        {"destination": "/home/u/proj/private", "type": "tmpfs", "source": "tmpfs",
         "options": ["ro", "nosuid", "nodev", "noexec", "mode=000"]},
    ]  # fmt: skip
    assert plan.files == (
        BundleFile("data/0", b"t0k", 0o444),
        BundleFile("data/1", b"", 0o444),
        BundleFile("data/2", b"", 0o000),
        BundleFile("data/3", b"", 0o000),
    )
    # mount points inside /etc, /data and the write bind are not in the rootfs: they are on the host
    assert [e.path for e in plan.rootfs if e.kind != "symlink"] == [
        "/.contain", "/data", "/dev", "/etc", "/home", "/proc", "/tmp", "/usr", "/work",
        "/.contain/broker.sock", "/.contain/supervisor", "/.contain/token", "/home/u", "/home/u/proj",
    ]  # fmt: skip


def test_loader_directories_are_bound_read_only_instead_of_linked():
    plan = plan_oci_bundle(backend_plan(), inputs(loader_links={}, loader_dirs=("/lib", "/bin")))
    assert plan.config["mounts"][:3] == [
        {"destination": "/usr", "type": "bind", "source": "/usr", "options": RO},
        {"destination": "/bin", "type": "bind", "source": "/bin", "options": RO},
        {"destination": "/lib", "type": "bind", "source": "/lib", "options": RO},
    ]
    assert not [e for e in plan.rootfs if e.kind == "symlink"]


@pytest.mark.parametrize(
    ("sandbox_ids", "root_ids"),
    [((0x6000_0001, 0x6000_0001), (0x6000_0001, 0x6000_0002)), ((5, 5), (0, 0)), ((0, 0), (7, 7))],
)
def test_container_root_never_shares_a_host_id_with_the_sandbox_nor_is_host_root(sandbox_ids, root_ids):
    with pytest.raises(SandboxStartError):
        plan_oci_bundle(backend_plan(host_ids=sandbox_ids), inputs(root_host_ids=root_ids))


def test_rlimits_are_clamped_to_the_hosts_hard_limits():
    hard = {**HARD, "NOFILE": 512, "NPROC": 100}
    rlimits = plan_oci_bundle(backend_plan(), inputs(host_hard_limits=hard)).config["process"]["rlimits"]
    assert rlimits[1] == {"type": "RLIMIT_NPROC", "hard": 100, "soft": 100}
    assert rlimits[3] == {"type": "RLIMIT_NOFILE", "hard": 512, "soft": 512}


def test_a_missing_host_hard_limit_is_refused_not_guessed():
    with pytest.raises(SandboxStartError):
        plan_oci_bundle(backend_plan(), inputs(host_hard_limits={"CPU": -1}))


def test_the_cgroup_parent_is_the_container_backends_own_on_v1_v2_and_a_delegated_root():
    def path(host: HostFacts) -> str:
        return str(plan_oci_bundle(backend_plan(host_facts=host), inputs()).config["linux"]["cgroupsPath"])

    assert path(facts()) == "/user.slice/contain-container/c1"
    assert path(facts(cgroups=V1)) == "contain-container/c1"  # runc joins it to its own v1 cgroups
    assert path(facts(cgroup_root="/delegated/me")) == "/delegated/me/contain-container/c1"
    root_v2 = (CgroupMount(2, "/sys/fs/cgroup", ("cpu", "memory", "pids"), "/"),)
    assert path(facts(cgroups=root_v2)) == "/contain-container/c1"


def test_a_host_without_usable_cgroups_is_refused():
    with pytest.raises(UnsupportedHost):
        plan_oci_bundle(backend_plan(host_facts=facts(cgroups=())), inputs())


def test_without_the_cgroup_layer_only_the_device_rule_remains_and_without_seccomp_no_profile():
    linux = plan_oci_bundle(backend_plan(cgroups=False, seccomp=False), inputs()).config["linux"]
    assert linux["resources"] == {"devices": [{"allow": False, "access": "rwm"}]}
    assert "seccomp" not in linux
    rlimits = plan_oci_bundle(backend_plan(cgroups=False), inputs()).config["process"]["rlimits"]
    assert {"type": "RLIMIT_DATA", "hard": 536870912, "soft": 536870912} in rlimits


def test_every_proc_path_rule_has_a_reason_and_a_known_kind():
    for rule in PROC_PATH_RULES:
        assert rule.how in ("masked", "readonly") and rule.why and rule.path.startswith(("/proc/", "/sys/"))


def test_the_backends_own_network_namespace_is_named_and_every_other_one_is_new():
    namespaces = plan_oci_bundle(backend_plan(), inputs(netns_path="/run/contain/b1/netns")).config["linux"][
        "namespaces"
    ]
    assert namespaces == [
        {"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}, {"type": "user"},
        {"type": "network", "path": "/run/contain/b1/netns"}, {"type": "cgroup"},
    ]  # fmt: skip


def test_for_runsc_there_is_no_user_namespace_and_the_workload_runs_as_its_leased_host_ids():
    runc = plan_oci_bundle(backend_plan(), inputs())
    runsc = plan_oci_bundle(backend_plan(), inputs(runtime="runsc"))
    assert {"type": "user"} in runc.config["linux"]["namespaces"]  # positive control: runc keeps it
    assert {"type": "user"} not in runsc.config["linux"]["namespaces"]
    assert "uidMappings" not in runsc.config["linux"] and "gidMappings" not in runsc.config["linux"]
    assert runsc.config["process"]["user"] == {"uid": 0x6000_0001, "gid": 0x6000_0001, "additionalGids": []}
    assert runsc.config["process"]["capabilities"] == runc.config["process"]["capabilities"]
    assert runsc.config["process"]["noNewPrivileges"] is True


def test_for_runsc_host_ids_of_root_are_refused_without_a_user_namespace():
    with pytest.raises(SandboxStartError, match="would run as host root"):
        plan_oci_bundle(backend_plan(host_ids=(0, 0)), inputs(runtime="runsc"))


def test_for_runsc_the_mount_points_under_dev_are_in_the_skeleton():
    runc = {e.path for e in plan_oci_bundle(backend_plan(), inputs()).rootfs}
    runsc = {e.path: e.kind for e in plan_oci_bundle(backend_plan(), inputs(runtime="runsc")).rootfs}
    assert "/dev/shm" not in runc and "/dev/pts" not in runc
    assert runsc["/dev/shm"] == "dir" and runsc["/dev/pts"] == "dir"
    assert set(runsc) - runc == {"/dev/shm", "/dev/pts"}


def test_every_runtime_difference_has_a_reason_and_names_a_known_runtime():
    for row in RUNTIME_DIFFERENCES:
        assert row.runtime in ("runc", "runsc") and len(row.why) > 40


def test_under_runsc_the_workload_runs_as_the_one_owner_of_its_write_binds():
    assert plan_runsc_ids(set(), default=(7, 7)) == (7, 7)
    assert plan_runsc_ids({(1000, 1000)}, default=(7, 7)) == (1000, 1000)
    with pytest.raises(UnsupportedHost, match="several"):
        plan_runsc_ids({(1000, 1000), (1001, 1001)}, default=(7, 7))
    with pytest.raises(UnsupportedHost, match="owner, root"):
        plan_runsc_ids({(0, 0)}, default=(7, 7))


def test_runsc_pids_max_adds_the_sentrys_tasks_and_a_few_per_bind_and_runc_does_not():
    runc = plan_oci_bundle(backend_plan(), inputs())
    runsc = plan_oci_bundle(backend_plan(), inputs(runtime="runsc"))
    binds = sum(m["type"] == "bind" for m in runsc.config["mounts"])
    base = runc.config["linux"]["resources"]["pids"]["limit"]
    assert base == 128  # positive control: runc's is the boundary's pids_max
    assert runsc.config["linux"]["resources"]["pids"]["limit"] == (
        base + RUNSC_HOST_TASKS + RUNSC_HOST_TASKS_PER_MOUNT * binds + RUNSC_HOST_TASKS_PER_TASK * base
    )


def test_runsc_host_pids_max_leaves_room_for_every_workload_task_so_the_sentrys_nproc_refuses_first():
    """RE-01 under runsc: the host cgroup counts 5 to 11 host tasks per gVisor process (measured);
    with room for only one per workload task the host pids.max ended the whole sandbox before the
    sentry's RLIMIT_NPROC could refuse the fork the workload sees."""
    for pids_max in (32, 1024):
        plan = plan_oci_bundle(backend_plan(Boundary(resources={"pids_max": pids_max})), inputs(runtime="runsc"))
        idle_sentry = 81  # measured: sentry, gofer and supervisor with eight binds, no workload
        assert plan.config["linux"]["resources"]["pids"]["limit"] >= idle_sentry + 11.2 * pids_max


def test_under_runsc_nproc_is_pids_max_itself_in_the_bundle_and_for_every_command():
    boundary = Boundary(resources={"pids_max": 32})
    runc = plan_oci_bundle(backend_plan(boundary), inputs()).config["process"]["rlimits"]
    runsc = plan_oci_bundle(backend_plan(boundary), inputs(runtime="runsc")).config["process"]["rlimits"]
    assert {"type": "RLIMIT_NPROC", "hard": 48, "soft": 48} in runc  # control: slack above a counting cgroup
    assert {"type": "RLIMIT_NPROC", "hard": 32, "soft": 32} in runsc
    assert [r for r in runsc if r["type"] != "RLIMIT_NPROC"] == [r for r in runc if r["type"] != "RLIMIT_NPROC"]
    limits = (Rlimit("CPU", 20, 21), Rlimit("NPROC", 48, 48), Rlimit("NOFILE", 256, 256))
    assert plan_runtime_rlimits(limits, runtime="runc", pids_max=32) == limits
    assert plan_runtime_rlimits(limits, runtime="runsc", pids_max=32) == (
        Rlimit("CPU", 20, 21),
        Rlimit("NPROC", 32, 32),
        Rlimit("NOFILE", 256, 256),
    )


def test_a_user_namespace_the_backend_made_is_joined_and_rlimits_are_left_to_the_supervisor():
    plan = plan_oci_bundle(backend_plan(), inputs(userns_path="/run/contain/b1/userns"))
    assert {"type": "user", "path": "/run/contain/b1/userns"} in plan.config["linux"]["namespaces"]
    assert plan.config["linux"]["uidMappings"][1] == {"containerID": 1000, "hostID": 0x6000_0001, "size": 1}
    assert plan.config["process"]["rlimits"] == []  # runc cannot prlimit its init there (EPERM)
    assert plan_oci_bundle(backend_plan(), inputs()).config["process"]["rlimits"]  # control: a new one keeps them


def test_for_runsc_hidden_sockets_get_no_mask_because_no_host_socket_is_connectable_there():
    read = BindFacts(rule=_rule("/data", FileAccess.READ), host_realpath="/data", is_dir=True)
    paths = PathFacts(binds=(read,), skipped=(), hidden_sockets=("/data/agent.sock",))
    runc = [m["destination"] for m in plan_oci_bundle(backend_plan(paths=paths), inputs()).config["mounts"]]
    runsc = [
        m["destination"] for m in plan_oci_bundle(backend_plan(paths=paths), inputs(runtime="runsc")).config["mounts"]
    ]
    assert "/data/agent.sock" in runc  # positive control: runc hides it with an empty file
    assert "/data/agent.sock" not in runsc
