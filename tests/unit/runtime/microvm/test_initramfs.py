"""The initramfs plan: members, module lists, and what /init refuses."""

from __future__ import annotations

import stat

import pytest

from contain.runtime.microvm.initramfs import FAIL_MARKER, INIT_SCRIPT, PROBE_MARKER, READY_MARKER, plan_initramfs

MODULES = [("virtio", b"v"), ("virtio_blk", b"b"), ("failover", b"f"), ("virtio_net", b"n")]


def test_the_plan_lists_every_member_in_archive_order():
    entries = plan_initramfs(busybox=b"BB", modules=MODULES, network_modules=("failover", "virtio_net"), agent=b"AG")
    assert [(e.path, e.mode, e.data) for e in entries] == [
        ("bin", stat.S_IFDIR | 0o755, b""),
        ("dev", stat.S_IFDIR | 0o755, b""),
        ("proc", stat.S_IFDIR | 0o755, b""),
        ("sys", stat.S_IFDIR | 0o755, b""),
        ("run", stat.S_IFDIR | 0o755, b""),
        ("lib", stat.S_IFDIR | 0o755, b""),
        ("lib/modules", stat.S_IFDIR | 0o755, b""),
        ("bin/busybox", stat.S_IFREG | 0o755, b"BB"),
        ("init", stat.S_IFREG | 0o755, INIT_SCRIPT.encode()),
        ("lib/modules/order", stat.S_IFREG | 0o444, b"virtio\nvirtio_blk\n"),
        ("lib/modules/network", stat.S_IFREG | 0o444, b"failover\nvirtio_net\n"),
        ("lib/modules/virtio.ko", stat.S_IFREG | 0o444, b"v"),
        ("lib/modules/virtio_blk.ko", stat.S_IFREG | 0o444, b"b"),
        ("lib/modules/failover.ko", stat.S_IFREG | 0o444, b"f"),
        ("lib/modules/virtio_net.ko", stat.S_IFREG | 0o444, b"n"),
        ("contain-guest-agent", stat.S_IFREG | 0o755, b"AG"),
    ]


def test_without_an_agent_the_initramfs_holds_none():
    entries = plan_initramfs(busybox=b"BB", modules=MODULES[:2], network_modules=(), agent=None)
    assert "contain-guest-agent" not in [e.path for e in entries]


def test_network_modules_must_be_among_the_modules():
    with pytest.raises(ValueError, match="not among the modules"):
        plan_initramfs(busybox=b"", modules=MODULES[:1], network_modules=("virtio_net",), agent=None)


def test_init_execs_the_agent_chrooted_with_the_port_the_protocol_names():
    last = INIT_SCRIPT.strip().splitlines()[-2:]
    assert last == [
        "exec /contain-guest-agent --port $PORT --chroot /newroot --cgroup-root /sys/fs/cgroup --uid $UIDW "
        "--gid $UIDW \\",
        "  --machine-id-path /run/machine-id",
    ]
    assert "= contain ] && PORT=" in INIT_SCRIPT  # the virtserialport QEMU names "contain"


def test_init_fails_closed_on_every_mount_and_module_step():
    # Every mount, insmod, mknod and bind line either ends in `|| fail` or continues onto one that does.
    lines = INIT_SCRIPT.splitlines()
    for i, line in enumerate(lines):
        if any(f"$B {verb} " in line for verb in ("mount", "insmod", "mknod")) and "for " not in line:
            joined = line + (lines[i + 1] if line.endswith("\\") else "")
            assert "|| fail" in joined, line


def test_init_mounts_read_binds_and_the_userland_read_only_and_the_workload_root_ends_read_only():
    assert "$B mount -t squashfs -o ro,nodev $U /run/ro" in INIT_SCRIPT
    assert "$B mount -t squashfs -o ro,nosuid,nodev $d /newroot$p" in INIT_SCRIPT
    assert "$B mount -o remount,ro /newroot || fail" in INIT_SCRIPT
    assert "hidepid=2" in INIT_SCRIPT
    assert INIT_SCRIPT.index("remount,ro /newroot ||") < INIT_SCRIPT.index(READY_MARKER)


def test_markers_are_the_ones_the_host_looks_for():
    assert f'echo "{PROBE_MARKER}"' in INIT_SCRIPT
    assert f'echo "{READY_MARKER}"' in INIT_SCRIPT
    assert f'echo "{FAIL_MARKER} $*"' in INIT_SCRIPT
