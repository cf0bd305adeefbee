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


def _lines_after_proc_is_mounted() -> list[str]:
    lines = INIT_SCRIPT.splitlines()
    mounted = next(i for i, line in enumerate(lines) if " proc /proc " in line)
    return lines[mounted + 1 :]


def test_init_runs_busybox_applets_by_name_once_proc_is_mounted():
    # By path, every applet is a fork and an exec of busybox (~9 ms each under TCG, measured in the
    # guest); by name, busybox's FEATURE_SH_STANDALONE runs most without the exec. $B is empty.
    assert "\nBB=/bin/busybox; B=\n" in INIT_SCRIPT
    for line in _lines_after_proc_is_mounted():
        if line.startswith("fail()"):
            continue  # fail() names busybox by path: it must work even where applets by name do not
        assert "/bin/busybox" not in line and "$BB" not in line, line


def test_init_mounts_proc_by_path_first_because_applets_that_exec_need_proc_self_exe():
    lines = INIT_SCRIPT.splitlines()
    first_mount = next(line for line in lines if " mount " in line)
    assert first_mount.startswith("$BB mount -t proc ")


def test_init_refuses_a_busybox_that_cannot_run_applets_by_name_before_using_one():
    lines = INIT_SCRIPT.splitlines()
    check = next(i for i, line in enumerate(lines) if line.startswith("command -v insmod"))
    assert lines[check].endswith('|| fail "this busybox cannot run applets by name (FEATURE_SH_STANDALONE)"')
    assert check < next(i for i, line in enumerate(lines) if " mount " in line)
    assert "$BB poweroff -f" in next(line for line in lines if line.startswith("fail()"))


def test_init_reads_the_kernel_command_line_module_lists_and_sysfs_names_without_a_cat():
    # $(cat ...) is a subshell fork plus an exec of busybox per file read; `read` is a builtin.
    assert " cat " not in INIT_SCRIPT
    assert "read -r CMDLINE < /proc/cmdline" in INIT_SCRIPT
    assert "done < $1; }" in INIT_SCRIPT  # the module lists
