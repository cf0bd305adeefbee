"""The microvm backend's pure parts: what it refuses and the VM it plans for a boundary."""

from __future__ import annotations

from pathlib import Path

import pytest

from contain.boundary import Boundary
from contain.boundary.plain import plain_boundary
from contain.errors import BackendRefusal, UnsupportedHost
from contain.runtime.microvm.accel import AccelChoice
from contain.runtime.microvm.backend import VMM_OVERHEAD_BYTES, MicroVMBackend, plan_microvm_refusals, plan_vm
from contain.runtime.microvm.guest_build import GuestImage
from contain.runtime.microvm.guest_handle import GuestLimits
from contain.runtime.microvm.initramfs import Initramfs
from contain.runtime.microvm.kernel import GuestKernel
from contain.runtime.microvm.userland import Userland
from contain.runtime.microvm.vmm import VmmFacts
from contain.runtime.microvm.vmm_plan import Accel, GuestForward, NetworkPlan

IMAGE = GuestImage(
    kernel=GuestKernel(Path("/c/kernel-1"), "6.1.0-53-cloud-amd64", "1", ("virtio",), ()),
    initramfs=Initramfs(Path("/c/initramfs-2.cpio"), "2", has_agent=True),
    userland=Userland(Path("/c/userland-3.squashfs"), "3"),
)
FACTS = VmmFacts(qemu="/usr/bin/qemu-system-x86_64", qemu_version="QEMU emulator version 7.2.22", tsc_khz=2596132)
TCG = AccelChoice(Accel.TCG, "tcg")


def _boundary(document: dict[str, object]):
    return plain_boundary(Boundary.model_validate(document))


def test_a_scratch_only_boundary_is_accepted():
    assert plan_microvm_refusals(_boundary({}), attachments=0) == ()


def test_write_binds_and_attachments_are_refused_each_with_a_reason(tmp_path):
    boundary = _boundary(
        {
            "files": [{"path": "/repo", "host": str(tmp_path), "access": "write"}],
            "network": {"allow": [{"host": "pypi.org", "ports": [443]}]},
        }
    )
    refusals = plan_microvm_refusals(boundary, attachments=1)
    assert [r.what for r in refusals] == ["write binds (/repo)", "1 attachment(s) under /.contain"]
    assert [r.feature for r in refusals] == ["write_binds", "attachments"]
    assert all(r.why and r.fix for r in refusals)


def test_egress_gives_one_restricted_nic_whose_only_peers_are_the_proxy_and_dns_stub():
    boundary = _boundary({"network": {"allow": [{"host": "pypi.org", "ports": [443]}]}})
    plan, _ = plan_vm(boundary, image=IMAGE, choice=TCG, facts=FACTS, read_binds=(), agent_fd=9, connector="/bin/socat")
    assert plan.network == NetworkPlan(
        forwards=(GuestForward("10.0.2.100", 3128, "127.0.0.1", 3128), GuestForward("10.0.2.100", 53, "127.0.0.1", 53)),
        connector="/bin/socat",
    )
    assert "contain.net=1" in plan.cmdline
    with pytest.raises(UnsupportedHost, match="socat"):
        plan_vm(boundary, image=IMAGE, choice=TCG, facts=FACTS, read_binds=(), agent_fd=9, connector=None)
    no_network, _ = plan_vm(_boundary({}), image=IMAGE, choice=TCG, facts=FACTS, read_binds=(), agent_fd=9)
    assert (no_network.network, "contain.net=0" in no_network.cmdline) == (None, True)


def test_the_backend_refuses_before_it_builds_or_boots_anything(tmp_path):
    from types import SimpleNamespace

    boundary = _boundary({"files": [{"path": "/repo", "host": str(tmp_path), "access": "write"}]})
    plan = SimpleNamespace(boundary=boundary, attachments=())
    with pytest.raises(BackendRefusal, match="cannot carry write binds \\(/repo\\)") as refused:
        MicroVMBackend().start(plan)  # type: ignore[arg-type]
    assert isinstance(refused.value, UnsupportedHost) and refused.value.feature == "write_binds"


def test_the_vm_is_sized_from_the_budgets_with_the_vmm_counted_in_the_memory_budget():
    boundary = _boundary(
        {
            "resources": {"memory_bytes": "512MiB", "cpu_cores": 1.5, "disk_bytes": "64MiB", "pids_max": 64},
            "files": [{"path": "/out", "access": "scratch"}],
        }
    )
    plan, limits = plan_vm(
        boundary, image=IMAGE, choice=TCG, facts=FACTS, read_binds=(("/data", "/c/read-9.squashfs"),), agent_fd=9
    )
    assert plan.memory_mib == (512 * 1024**2 - VMM_OVERHEAD_BYTES) // 1024**2 == 320
    assert plan.vcpus == 2
    assert (plan.kernel, plan.initramfs, plan.userland_image) == (
        "/c/kernel-1/vmlinuz",
        "/c/initramfs-2.cpio",
        "/c/userland-3.squashfs",
    )
    assert plan.read_images == ("/c/read-9.squashfs",)
    assert "contain.scratch=/out" in plan.cmdline
    assert "contain.ro=/data" in plan.cmdline
    assert f"contain.disk={64 * 1024**2}" in plan.cmdline
    assert "tsc_early_khz=2596132" in plan.cmdline
    assert limits == GuestLimits(
        memory_max_bytes=320 * 1024**2 - 48 * 1024**2, pids_max=64, output_max_bytes=8 * 1024**2 + 1
    )


def test_a_memory_budget_too_small_for_guest_and_vmm_is_refused_not_exceeded():
    # The smallest guest (128 MiB) plus QEMU's own 192 MiB must fit in the one host cgroup.
    small = _boundary({"resources": {"memory_bytes": "256MiB"}})
    with pytest.raises(UnsupportedHost, match="a microVM needs at least 320 MiB"):
        plan_vm(small, image=IMAGE, choice=TCG, facts=FACTS, read_binds=(), agent_fd=9)
    fits = _boundary({"resources": {"memory_bytes": "320MiB"}})
    assert plan_vm(fits, image=IMAGE, choice=TCG, facts=FACTS, read_binds=(), agent_fd=9)[0].memory_mib == 128


def test_the_agent_forwards_one_byte_past_the_output_cap_so_the_host_sees_the_overflow():
    # With exactly the cap the host saw a clean EOF: RunResult said "not truncated" and recorded no
    # output violation for a workload that printed past its budget (found by VM-03).
    boundary = _boundary({"resources": {"memory_bytes": "320MiB", "output_bytes": "1MiB"}})
    _, limits = plan_vm(boundary, image=IMAGE, choice=TCG, facts=FACTS, read_binds=(), agent_fd=9)
    assert limits.output_max_bytes == 1024**2 + 1


@pytest.mark.parametrize("memory", ["128MiB", "319MiB"])
def test_a_memory_budget_below_one_guest_plus_the_vmm_is_refused_with_the_minimum(memory):
    # Below it QEMU was OOM-killed in its cgroup before the guest printed a byte, and the start
    # failed as "the guest did not come up" with an empty console (found by the VM probes).
    refusals = plan_microvm_refusals(_boundary({"resources": {"memory_bytes": memory}}), attachments=0)
    assert [r.fix for r in refusals] == ["set resources.memory_bytes to at least 320MiB, or use --backend process"]


def test_a_memory_budget_of_one_guest_plus_the_vmm_is_accepted():
    assert plan_microvm_refusals(_boundary({"resources": {"memory_bytes": "320MiB"}}), attachments=0) == ()
