"""The hostile-guest kit: the /init it boots, the archive it appends, the control VM's argv."""

from __future__ import annotations

import dataclasses
import stat
from pathlib import Path

import pytest

from contain.probe import hostile_guest
from contain.probe.hostile_guest import ATTACK_DONE_MARKER, ControlVm, hostile_init_script, hostile_initramfs_members
from contain.runtime.microvm.guest_build import GuestImage
from contain.runtime.microvm.initramfs import INIT_SCRIPT, READY_MARKER, Initramfs
from contain.runtime.microvm.kernel import GuestKernel
from contain.runtime.microvm.userland import Userland
from contain.runtime.microvm.vmm import VmmFacts

IMAGE = GuestImage(
    kernel=GuestKernel(Path("/c/kernel-1"), "6.1.0-53-cloud-amd64", "1", ("virtio",), ()),
    initramfs=Initramfs(Path("/c/initramfs-2.cpio"), "2", has_agent=True),
    userland=Userland(Path("/c/userland-3.squashfs"), "3"),
)


def test_the_hostile_init_is_the_real_one_plus_one_root_attack_line_before_the_agent_starts():
    hostile = hostile_init_script()
    added = [line for line in hostile.splitlines() if line not in INIT_SCRIPT.splitlines()]
    assert added == [
        f'$B sh /probe-attack.sh </dev/null >/dev/console 2>&1; echo "{ATTACK_DONE_MARKER} rc=$?" >/dev/console'
    ]
    assert hostile.index(READY_MARKER) < hostile.index("/probe-attack.sh") < hostile.index("exec /contain-guest-agent")


@pytest.mark.parametrize("init", ["#!/bin/sh\nexec /contain-guest-agent\n", INIT_SCRIPT + INIT_SCRIPT])
def test_an_init_without_exactly_one_ready_marker_is_refused_never_booted_without_the_attack(init):
    with pytest.raises(ValueError, match=r"update hostile_guest\.py"):
        hostile_init_script(init)


def test_the_appended_archive_replaces_init_and_adds_the_attack_script():
    members = hostile_initramfs_members("echo hi\n")
    assert [(m.path, stat.S_IMODE(m.mode)) for m in members] == [("init", 0o755), ("probe-attack.sh", 0o755)]
    assert members[0].data == hostile_init_script().encode()
    assert members[1].data == b"echo hi\n"


def test_the_hostile_image_is_the_built_initramfs_with_the_archive_appended(tmp_path):
    base_cpio = tmp_path / "base.cpio"
    base_cpio.write_bytes(b"BASE-ARCHIVE")
    base = dataclasses.replace(IMAGE, initramfs=Initramfs(base_cpio, "b", has_agent=True))
    image = hostile_guest.hostile_image("echo hi\n", into=tmp_path, base=base)
    data = image.initramfs.path.read_bytes()
    assert data.startswith(b"BASE-ARCHIVE") and b"probe-attack.sh" in data and b"TRAILER!!!" in data
    assert (image.kernel, image.userland) == (base.kernel, base.userland)


def test_the_control_vm_is_the_planned_argv_plus_its_one_weakness(monkeypatch):
    facts = VmmFacts(qemu="/usr/bin/qemu-system-x86_64", qemu_version="7.2", tsc_khz=2596132)
    monkeypatch.setattr(hostile_guest, "detect_vmm_facts", lambda: facts)
    weak = ["-netdev", "user,id=net0", "-device", "virtio-net-device,netdev=net0"]
    control = ControlVm(IMAGE, extra=weak, own_netns=False, with_agent_port=False, cmdline_extra=("contain.net=1",))
    argv = control.argv(None)
    assert argv[0] == "/usr/bin/qemu-system-x86_64" and argv[-4:] == weak
    assert "name=contain" not in " ".join(argv)  # no agent port: /init stops after the attack
    append = argv[argv.index("-append") + 1]
    assert append.endswith("contain.net=0 contain.net=1")  # /init reads the last word
    assert ControlVm(IMAGE).argv(7)[:3] == ["/usr/bin/unshare", "--net", "--"]
    assert "virtserialport,chardev=agent,name=contain" in ControlVm(IMAGE).argv(7)


def test_file_hashes_are_read_without_following_a_link(tmp_path):
    target = tmp_path / "image"
    target.write_bytes(b"x")
    (tmp_path / "link").symlink_to(target)
    assert hostile_guest.sha256_of(target) == "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"
    with pytest.raises(OSError):
        hostile_guest.sha256_of(tmp_path / "link")


def test_a_control_vm_that_quit_by_itself_is_reaped_with_its_status_and_peak_rss(monkeypatch):
    # A monitor's "quit" (or a seccomp kill) ends QEMU before the deadline: run() must still
    # reap it itself (wait4: status and rusage), never lose it to another reaper.
    monkeypatch.setattr(ControlVm, "argv", lambda self, agent_fd: ["/bin/sh", "-c", "echo up; exit 3"])
    control = ControlVm(IMAGE)
    control.run(timeout_s=30)
    assert control.exit_code == 3
    assert control.max_rss_kib > 0
    assert "up" in control.serial.text()
