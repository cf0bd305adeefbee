"""The QEMU plan: the whole argv, sizes, clock words and the guest command line."""

from __future__ import annotations

import pytest

from contain.errors import UnsupportedHost
from contain.runtime.microvm.vmm_plan import (
    BASE_CMDLINE,
    KERNEL_WORDS,
    REFUSED_KERNEL_WORDS,
    Accel,
    GuestForward,
    GuestMode,
    NetworkPlan,
    VmPlan,
    plan_clock_words,
    plan_kernel_cmdline,
    plan_qemu_argv,
    plan_vm_size,
)

PLAN = VmPlan(
    accel=Accel.TCG,
    kernel="/c/vmlinuz",
    initramfs="/c/initramfs.cpio",
    memory_mib=416,
    vcpus=2,
    cmdline=("console=ttyS0", "contain.mode=agent"),
    userland_image="/c/userland.squashfs",
    read_images=("/c/read-a,b.squashfs",),
    agent_fd=7,
)


def test_the_whole_argv_has_no_default_device_and_every_disk_read_only():
    assert plan_qemu_argv(PLAN) == [
        "qemu-system-x86_64",
        "-M", "microvm,x-option-roms=off,isa-serial=on",
        "-accel", "tcg,tb-size=64",
        "-cpu", "max",
        "-m", "416",
        "-smp", "2",
        "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
        "-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
        "-kernel", "/c/vmlinuz",
        "-initrd", "/c/initramfs.cpio",
        "-append", "console=ttyS0 contain.mode=agent",
        "-chardev", "stdio,id=console,signal=off",
        "-serial", "chardev:console",
        "-object", "rng-random,id=rng0,filename=/dev/urandom",
        "-device", "virtio-rng-device,rng=rng0",
        "-device", "virtio-serial-device,max_ports=2",
        "-chardev", "socket,id=agent,fd=7",
        "-device", "virtserialport,chardev=agent,name=contain",
        "-drive", "file=/c/userland.squashfs,format=raw,if=none,id=disk0,readonly=on",
        "-device", "virtio-blk-device,drive=disk0,serial=contain-userland",
        "-drive", "file=/c/read-a,,b.squashfs,format=raw,if=none,id=disk1,readonly=on",
        "-device", "virtio-blk-device,drive=disk1,serial=contain-ro-0",
    ]  # fmt: skip


def test_kvm_uses_the_host_cpu_and_a_network_is_only_user_mode_restricted_to_its_forwards():
    from dataclasses import replace

    network = NetworkPlan(
        forwards=(GuestForward("10.0.2.100", 3128, "127.0.0.1", 3128), GuestForward("10.0.2.100", 53, "127.0.0.1", 53)),
        connector="/usr/bin/socat",
    )
    plan = replace(PLAN, accel=Accel.KVM, agent_fd=None, read_images=(), network=network)
    argv = plan_qemu_argv(plan)
    assert argv[argv.index("-accel") + 1 : argv.index("-accel") + 4] == ["kvm", "-cpu", "host"]
    assert "socket,id=agent,fd=7" not in " ".join(argv)
    assert argv[-4:] == [
        "-netdev",
        "user,id=net0,restrict=on,ipv6=off"
        ",guestfwd=tcp:10.0.2.100:3128-cmd:/usr/bin/socat - TCP:127.0.0.1:3128"
        ",guestfwd=tcp:10.0.2.100:53-cmd:/usr/bin/socat - TCP:127.0.0.1:53",
        "-device",
        "virtio-net-device,netdev=net0",
    ]
    assert "-netdev" not in plan_qemu_argv(PLAN)
    assert "on,obsolete=deny,elevateprivileges=allow,spawn=allow,resourcecontrol=deny" in argv  # socat per connection


def test_vm_size_comes_from_the_budgets():
    assert plan_vm_size(memory_bytes=512 * 1024**2, cpu_cores=1.5) == (512, 2)
    assert plan_vm_size(memory_bytes=16 * 1024**2, cpu_cores=0.2) == (128, 1)
    assert plan_vm_size(memory_bytes=8 * 1024**3, cpu_cores=64) == (8192, 16)


def test_tcg_tells_the_guest_the_host_tsc_rate_and_kvm_adds_nothing():
    assert plan_clock_words(accel=Accel.TCG, tsc_khz=2596132) == (
        "tsc_early_khz=2596132",
        "tsc=reliable",
        "clocksource=tsc",
        "lpj=4000000",
    )
    assert plan_clock_words(accel=Accel.KVM, tsc_khz=None) == ()
    with pytest.raises(UnsupportedHost, match="TSC frequency is unknown"):
        plan_clock_words(accel=Accel.TCG, tsc_khz=None)


def test_the_guest_command_line_carries_scratch_read_binds_and_budgets():
    words = plan_kernel_cmdline(
        clock=("lpj=1",),
        mode=GuestMode.AGENT,
        disk_bytes=1048576,
        inodes=256,
        scratch_paths=("/work", "/out"),
        read_paths=("/data", "/src/lib"),
        network=False,
    )
    assert words == (
        "console=ttyS0", "quiet", "panic=-1", "reboot=t", "random.trust_cpu=on", "cryptomgr.notests", "lpj=1",
        "contain.mode=agent", "contain.disk=1048576", "contain.inodes=256", "contain.scratch=/work:/out",
        "contain.net=0", "contain.ro=/data:/src/lib",
    )  # fmt: skip


@pytest.mark.parametrize("path", ["/a b", "/a:b", "/a/../b", "relative", "/a;reboot", "/a$(id)", "//x", "/a\nb"])
def test_paths_the_guest_shell_could_misread_are_refused(path):
    with pytest.raises(UnsupportedHost, match="cannot mount"):
        plan_kernel_cmdline(
            clock=(), mode=GuestMode.AGENT, disk_bytes=1, inodes=1, scratch_paths=(path,), read_paths=(), network=False
        )


def test_a_command_line_past_the_kernel_limit_is_refused():
    with pytest.raises(UnsupportedHost, match="command line would be"):
        plan_kernel_cmdline(
            clock=(),
            mode=GuestMode.AGENT,
            disk_bytes=1,
            inodes=1,
            scratch_paths=tuple(f"/scratch/{i:04d}-{'x' * 40}" for i in range(50)),
            read_paths=(),
            network=False,
        )


def test_every_guest_command_line_skips_the_crypto_self_tests_and_each_base_word_has_a_reason():
    words = plan_kernel_cmdline(
        clock=plan_clock_words(accel=Accel.TCG, tsc_khz=2596132),
        mode=GuestMode.AGENT,
        disk_bytes=1 << 20,
        inodes=64,
        scratch_paths=(),
        read_paths=(),
        network=False,
    )
    assert "cryptomgr.notests" in words
    assert tuple(row.word for row in KERNEL_WORDS) == BASE_CMDLINE
    assert all(row.why for row in KERNEL_WORDS)


@pytest.mark.parametrize("row", REFUSED_KERNEL_WORDS, ids=lambda row: row.word)
def test_no_planned_command_line_carries_a_word_that_turns_guest_hardening_off(row):
    assert row.word not in BASE_CMDLINE
    for accel in Accel:
        assert row.word not in plan_clock_words(accel=accel, tsc_khz=2596132)
    with pytest.raises(UnsupportedHost, match="turns off"):
        plan_kernel_cmdline(
            clock=(row.word,),
            mode=GuestMode.AGENT,
            disk_bytes=1 << 20,
            inodes=64,
            scratch_paths=(),
            read_paths=(),
            network=False,
        )
