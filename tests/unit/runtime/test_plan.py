"""Layer decisions are pure functions of the boundary and host facts; every gap refuses."""

import pytest

from contain.boundary import Boundary
from contain.errors import UnsupportedHost
from contain.host.facts import CgroupMount, HostFacts
from contain.runtime.backend_names import RuntimeFacts
from contain.runtime.plan import plan_base_env, plan_layers, plan_rlimits, sandbox_host_ids
from contain.runtime.supervisor_channel import Rlimit

V1 = tuple(
    CgroupMount(1, f"/sys/fs/cgroup/{c}", (c,), "/") for c in ("memory", "pids", "cpu", "cpuacct", "freezer")
)


def facts(**overrides) -> HostFacts:
    base = dict(
        arch="x86_64", is_root=True, uid=0, gid=0, bwrap_path="/usr/bin/bwrap",
        user_namespaces=True, seccomp=True, landlock_abi=7, cgroups=V1,
        libseccomp_path="/usr/lib/x86_64-linux-gnu/libseccomp.so.2",
    )
    base.update(overrides)
    return HostFacts(**base)


def boundary(**sections) -> Boundary:
    return Boundary.model_validate(sections)


def test_a_capable_host_gets_every_layer():
    plan = plan_layers(Boundary(), facts(), egress_available=False)
    assert plan.seccomp and plan.cgroups and plan.landlock is not None and not plan.egress
    assert plan.report == {
        "namespaces": "user, mount, pid, ipc, uts, net, cgroup",
        "seccomp": "applied",
        "landlock": "applied (ABI 7)",
        "cgroups": "memory, pids, cpu (cgroup v1)",
        "network": "none (loopback only)",
    }


@pytest.mark.parametrize(
    ("host", "cause", "fix"),
    [
        (dict(bwrap_path=None), "bubblewrap (bwrap) is not installed", "apt-get install bubblewrap"),
        (dict(user_namespaces=False), "user namespaces are disabled", "max_user_namespaces"),
        (dict(seccomp=False), "no seccomp filter support", "CONFIG_SECCOMP_FILTER"),
        (dict(libseccomp_path=None), "libseccomp is not installed", "libseccomp2"),
        (dict(cgroups=()), "cgroup limits are required", "hardening.cgroups: off"),
        (dict(is_root=False, uid=1000, gid=1000), "not running as root", "CONTAIN_CGROUP_ROOT"),
    ],
)
def test_a_missing_layer_refuses_with_its_cause_and_fix(host, cause, fix):
    with pytest.raises(UnsupportedHost) as info:
        plan_layers(Boundary(), facts(**host), egress_available=False)
    assert cause in info.value.cause and fix in info.value.fix


def test_required_landlock_on_a_kernel_without_it_refuses():
    with pytest.raises(UnsupportedHost, match="Landlock"):
        plan_layers(boundary(hardening={"landlock": "required"}), facts(landlock_abi=0), egress_available=False)


def test_auto_and_off_layers_are_reported_never_silent():
    plan = plan_layers(
        boundary(hardening={"landlock": "auto", "cgroups": "auto"}),
        facts(landlock_abi=0, cgroups=()),
        egress_available=False,
    )
    assert plan.landlock is None and not plan.cgroups
    assert plan.report["landlock"] == "unavailable on this kernel (auto)"
    assert plan.report["cgroups"].startswith("unavailable (") and "rlimits only (auto)" in plan.report["cgroups"]
    off = plan_layers(boundary(hardening={"landlock": "off", "cgroups": "off"}), facts(), egress_available=False)
    assert off.report["landlock"] == "off by manifest" and off.report["cgroups"].startswith("off by manifest")


def test_a_network_allow_list_without_egress_refuses():
    with pytest.raises(UnsupportedHost, match="egress proxy is not available"):
        plan_layers(boundary(network={"allow": [{"host": "pypi.org"}]}), facts(), egress_available=False)
    plan = plan_layers(boundary(network={"allow": [{"host": "pypi.org"}]}), facts(), egress_available=True)
    assert plan.egress and plan.report["network"] == "egress proxy (allow list)"


def test_root_leases_a_uid_per_sandbox_even_with_write_binds():
    from contain.runtime.plan import has_write_binds, should_lease_host_ids

    assert should_lease_host_ids(facts())
    assert not should_lease_host_ids(facts(is_root=False, uid=1000, gid=1000))
    assert has_write_binds(boundary(files=[{"host": "/r", "path": "/work/r", "access": "write"}]))
    assert not has_write_binds(boundary(files=[{"host": "/r", "path": "/work/r", "access": "read"}]))


def test_the_sandbox_never_runs_as_host_root():
    assert sandbox_host_ids(facts()) == (65534, 65534)
    assert sandbox_host_ids(facts(is_root=False, uid=1000, gid=1001)) == (1000, 1001)


def test_rlimits_bound_cpu_processes_files_and_cores_and_data_only_without_cgroups():
    resources = boundary(resources={"cpu_s": "2.5s", "pids_max": 64, "disk_bytes": "1MiB"}).resources
    assert plan_rlimits(resources, cgroups=True) == (
        Rlimit("CPU", 3, 4),
        Rlimit("NPROC", 80, 80),
        Rlimit("FSIZE", 1 << 20, 1 << 20),
        Rlimit("NOFILE", 1024, 1024),
        Rlimit("CORE", 0, 0),
    )
    without = plan_rlimits(resources, cgroups=False)
    assert without[1] == Rlimit("NPROC", 64, 64)
    assert without[-1] == Rlimit("DATA", resources.memory_bytes, resources.memory_bytes)


def test_the_environment_is_built_from_nothing():
    b = boundary(env={"MODE": "x"}, credentials=[{"name": "TOKEN", "via": "env", "source": "HOST_TOKEN"}])
    env = plan_base_env(b, host_environ={"HOST_TOKEN": "t", "AWS_SECRET_ACCESS_KEY": "leak"}, egress_env={"HTTP_PROXY": "p"})
    assert env == {
        "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/work", "LANG": "C.UTF-8", "TMPDIR": "/tmp",
        "USER": "sandbox", "HTTP_PROXY": "p", "MODE": "x", "TOKEN": "t",
    }
    with pytest.raises(UnsupportedHost, match="HOST_TOKEN"):
        plan_base_env(b, host_environ={}, egress_env={})


@pytest.mark.parametrize("backend", ["container", "container:crun", "microvm:firecracker", "none", ""])
def test_layers_are_planned_only_for_a_backend_that_has_a_layer_plan(backend):
    with pytest.raises(UnsupportedHost) as caught:
        plan_layers(Boundary(), facts(), egress_available=False, backend=backend)
    assert caught.value.cause == f"no layer plan exists for backend {backend!r} in this version"
    assert caught.value.fix == "use one of: process, container:runc, container:runsc, microvm"
    assert plan_layers(Boundary(), facts(), egress_available=False, backend="process").seccomp


# -- container backends ------------------------------------------------------------------------------

RUNC = RuntimeFacts("runc", "/usr/sbin/runc", "runc version 1.1.5+ds1")
RUNSC_PTRACE = RuntimeFacts("runsc", "/usr/bin/runsc", "runsc version 0.0~20221219.0", ("kvm", "ptrace"))
RUNSC_SYSTRAP = RuntimeFacts("runsc", "/usr/bin/runsc", "runsc version 20240101", ("kvm", "ptrace", "systrap"))


def test_runc_plans_every_layer_and_reports_its_runtime_without_needing_bwrap():
    plan = plan_layers(Boundary(), facts(bwrap_path=None), egress_available=False, backend="container:runc", runtime=RUNC)
    assert plan.seccomp and plan.cgroups and plan.landlock is not None
    assert plan.report == {
        "runtime": "runc (runc version 1.1.5+ds1): host kernel",
        "platform": "native (host kernel)",
        "namespaces": "user, mount, pid, ipc, uts, net, cgroup",
        "seccomp": "applied",
        "landlock": "applied (ABI 7)",
        "cgroups": "memory, pids, cpu (cgroup v1)",
        "network": "none (loopback only)",
    }


@pytest.mark.parametrize(("runtime", "platform"), [(RUNSC_PTRACE, "ptrace"), (RUNSC_SYSTRAP, "systrap")])
def test_runsc_reports_the_platform_chosen_from_the_binary_and_landlock_off_with_the_reason(runtime, platform):
    plan = plan_layers(Boundary(), facts(), egress_available=False, backend="container:runsc", runtime=runtime)
    assert plan.landlock is None and plan.seccomp and plan.cgroups
    assert plan.report["platform"].startswith(f"{platform} (")
    assert plan.report["runtime"] == f"runsc ({runtime.version}): gVisor user-space kernel"
    assert plan.report["landlock"] == "unavailable under gVisor (runsc implements no Landlock) (auto)"
    assert plan.report["seccomp"].startswith("applied by the sentry (--oci-seccomp)")
    assert plan.report["securebits"] == "not implemented by gVisor; accepted (kernel difference no-securebits)"
    assert "no user namespace of ours" in plan.report["namespaces"]


def test_runsc_refuses_a_plan_that_requires_landlock_and_runc_keeps_it():
    manifest = boundary(hardening={"landlock": "required"})
    with pytest.raises(UnsupportedHost) as caught:
        plan_layers(manifest, facts(), egress_available=False, backend="container:runsc", runtime=RUNSC_PTRACE)
    assert "gVisor (runsc) implements no Landlock" in caught.value.cause
    assert "hardening.landlock: auto" in caught.value.fix
    # positive control: the same manifest on runc (and the same host) gets Landlock
    assert plan_layers(manifest, facts(), egress_available=False, backend="container:runc", runtime=RUNC).landlock


def test_runsc_with_landlock_off_by_manifest_says_so():
    plan = plan_layers(
        boundary(hardening={"landlock": "off"}), facts(), egress_available=False, backend="container:runsc",
        runtime=RUNSC_PTRACE,
    )  # fmt: skip
    assert plan.report["landlock"] == "off by manifest"


@pytest.mark.parametrize(
    ("host", "runtime", "backend", "cause"),
    [
        (dict(is_root=False, uid=1000, gid=1000), RUNC, "container:runc", "contain is not running as root"),
        (dict(user_namespaces=False), RUNC, "container:runc", "user namespaces are disabled"),
        ({}, None, "container:runc", "no facts about the runc binary"),
        ({}, RUNC, "container:runsc", "no facts about the runsc binary"),
        ({}, RuntimeFacts("runsc", "/x", "v", ("kvm",)), "container:runsc", "none of which contain uses"),
    ],
)
def test_a_container_backend_refuses_hosts_and_runtimes_it_cannot_run_on(host, runtime, backend, cause):
    with pytest.raises(UnsupportedHost, match=cause):
        plan_layers(Boundary(), facts(**host), egress_available=False, backend=backend, runtime=runtime)


def test_runsc_and_runc_both_plan_write_binds(tmp_path):
    manifest = boundary(files=[{"path": "/proj", "access": "write", "host": str(tmp_path)}])
    for backend, runtime in (("container:runsc", RUNSC_PTRACE), ("container:runc", RUNC)):
        assert plan_layers(manifest, facts(), egress_available=False, backend=backend, runtime=runtime).seccomp


def test_runsc_refuses_a_boundary_that_keeps_sockets_connectable_and_runc_plans_it(tmp_path):
    manifest = boundary(
        files=[{"path": "/in", "access": "read", "host": str(tmp_path), "allow_sockets": ["agent.sock"]}]
    )
    with pytest.raises(UnsupportedHost, match="allow_sockets"):
        plan_layers(manifest, facts(), egress_available=False, backend="container:runsc", runtime=RUNSC_PTRACE)
    assert plan_layers(manifest, facts(), egress_available=False, backend="container:runc", runtime=RUNC).seccomp
    read_only = boundary(files=[{"path": "/in", "access": "read", "host": str(tmp_path)}])
    assert plan_layers(read_only, facts(), egress_available=False, backend="container:runsc", runtime=RUNSC_PTRACE)


# -- microvm ----------------------------------------------------------------------------------------


def test_microvm_layers_say_the_guest_kernel_is_the_boundary_and_what_is_not_applied():
    plan = plan_layers(Boundary(), facts(is_root=True), egress_available=True, backend="microvm")
    assert (plan.seccomp, plan.landlock, plan.egress) == (False, None, False)
    assert plan.report["namespaces"] == (
        "a guest kernel of its own (QEMU -M microvm); the VMM runs in an empty network namespace"
    )
    assert plan.report["seccomp"] == (
        "contain's filter (the same rule table, x86_64), installed by the guest agent before exec"
    )
    assert plan.report["network"] == "none (no network device in the guest)"


def test_microvm_refuses_a_host_without_libseccomp_to_compile_the_guests_filter():
    with pytest.raises(UnsupportedHost, match="libseccomp is not installed"):
        plan_layers(Boundary(), facts(libseccomp_path=None), egress_available=True, backend="microvm")


def test_microvm_refuses_a_required_landlock_and_a_caller_that_is_not_root():
    required = Boundary.model_validate({"hardening": {"landlock": "required"}})
    with pytest.raises(UnsupportedHost, match="applies no Landlock"):
        plan_layers(required, facts(is_root=True), egress_available=True, backend="microvm")
    with pytest.raises(UnsupportedHost, match="needs root"):
        plan_layers(Boundary(), facts(is_root=False), egress_available=True, backend="microvm")
