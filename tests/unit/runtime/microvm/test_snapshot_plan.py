"""Template keys, the extra QEMU words, and which cached snapshots go."""

from __future__ import annotations

from dataclasses import replace

import pytest

from contain.runtime.microvm.snapshot_plan import (
    ABANDONED_AFTER_S,
    MAX_CACHED_SNAPSHOTS,
    UNUSED_AFTER_S,
    CachedSnapshot,
    QemuIdentity,
    artefacts_fingerprint,
    parse_snapshot_file_name,
    plan_abandoned_temporaries,
    plan_restore_words,
    plan_stale_snapshots,
    plan_template_words,
    snapshot_file_name,
    template_key,
)
from contain.runtime.microvm.vmm_plan import Accel, VmPlan

PLAN = VmPlan(
    accel=Accel.TCG,
    kernel="/c/kernel-aaa/vmlinuz",
    initramfs="/c/initramfs-bbb.cpio",
    memory_mib=416,
    vcpus=1,
    cmdline=("console=ttyS0", "contain.mode=agent", "contain.disk=1048576", "contain.scratch=/work"),
    userland_image="/c/userland-ccc.squashfs",
    read_images=("/c/read-ddd.squashfs",),
    agent_fd=7,
)
QEMU = QemuIdentity(version="QEMU emulator version 7.2.22", size=123, mtime_ns=456)


def test_the_key_ignores_which_descriptor_number_the_agent_socket_got():
    assert template_key(PLAN, QEMU) == template_key(replace(PLAN, agent_fd=12), QEMU)


@pytest.mark.parametrize(
    "changed",
    [
        replace(PLAN, accel=Accel.KVM),
        replace(PLAN, kernel="/c/kernel-zzz/vmlinuz"),
        replace(PLAN, initramfs="/c/initramfs-zzz.cpio"),
        replace(PLAN, userland_image="/c/userland-zzz.squashfs"),
        replace(PLAN, read_images=("/c/read-zzz.squashfs",)),  # a bound directory's content changed
        replace(PLAN, read_images=()),
        replace(PLAN, memory_mib=512),
        replace(PLAN, vcpus=2),
        replace(PLAN, cmdline=(*PLAN.cmdline[:2], "contain.disk=2097152", PLAN.cmdline[3])),  # disk budget
        replace(PLAN, cmdline=(*PLAN.cmdline[:3], "contain.scratch=/out")),  # scratch paths
        replace(PLAN, agent_fd=None),  # no agent port: another device set
        replace(PLAN, qemu="/opt/qemu-system-x86_64"),
    ],
)
def test_every_input_of_the_restored_vm_changes_the_key(changed):
    assert template_key(changed, QEMU) != template_key(PLAN, QEMU)


@pytest.mark.parametrize(
    "qemu", [replace(QEMU, version="QEMU emulator version 8.0.0"), replace(QEMU, size=124), replace(QEMU, mtime_ns=7)]
)
def test_another_qemu_binary_changes_the_key_and_the_artefacts_fingerprint(qemu):
    assert template_key(PLAN, qemu) != template_key(PLAN, QEMU)
    assert artefacts_fingerprint(PLAN, qemu) != artefacts_fingerprint(PLAN, QEMU)


def test_budgets_and_read_binds_change_the_key_but_not_the_artefacts_fingerprint():
    other = replace(PLAN, memory_mib=1024, read_images=())
    assert template_key(other, QEMU) != template_key(PLAN, QEMU)
    assert artefacts_fingerprint(other, QEMU) == artefacts_fingerprint(PLAN, QEMU)
    assert artefacts_fingerprint(replace(PLAN, initramfs="/c/initramfs-new.cpio"), QEMU) != artefacts_fingerprint(
        PLAN, QEMU
    )


def test_a_key_is_24_hex_digits_and_names_its_files():
    key = template_key(PLAN, QEMU)
    assert len(key) == 24 and int(key, 16) >= 0
    assert snapshot_file_name(key) == f"template-{key}.vmstate"
    assert parse_snapshot_file_name(snapshot_file_name(key)) == key
    assert parse_snapshot_file_name(f".template-{key}.vmstate.abc") is None
    assert parse_snapshot_file_name(f"template-{key}.json") is None


def test_a_name_is_never_built_from_something_that_is_not_a_key():
    with pytest.raises(ValueError):
        snapshot_file_name("../../etc/passwd")


def test_the_template_gets_a_monitor_on_an_inherited_socket_and_no_run_state_in_its_stream():
    assert plan_template_words(monitor_fd=9) == [
        "-global", "migration.store-global-state=off",
        "-chardev", "socket,id=monitor,fd=9",
        "-mon", "chardev=monitor,mode=control",
    ]  # fmt: skip


def test_a_restore_loads_the_stream_from_an_inherited_descriptor_and_has_no_monitor():
    words = plan_restore_words(snapshot_fd=11)
    assert words == ["-incoming", "fd:11"]
    assert "-mon" not in words


NOW = 100_000.0


def _cached(key: str, artefacts: str, used_at: float) -> CachedSnapshot:
    return CachedSnapshot(key=key, artefacts=artefacts, used_at=used_at)


def test_unused_snapshots_of_another_build_go_recent_ones_stay_and_the_kept_one_never_goes():
    old_unused = NOW - UNUSED_AFTER_S - 1
    cached = [
        _cached("a" * 24, "other", old_unused),
        _cached("b" * 24, "new", old_unused),  # this build's: only the cap removes it
        _cached("c" * 24, "other", NOW - 10),  # another checkout still restores from it
        _cached("d" * 24, "other", old_unused),
    ]
    assert plan_stale_snapshots(cached, current_artefacts="new", keep_key="d" * 24, now=NOW) == ["a" * 24]


def test_beyond_the_cap_the_least_recently_used_go_first_whatever_their_build():
    cached = [_cached(f"{i:024x}", "new" if i % 2 else "other", NOW - i) for i in range(MAX_CACHED_SNAPSHOTS + 2)]
    keep = f"{0:024x}"
    stale = plan_stale_snapshots(cached, current_artefacts="new", keep_key=keep, now=NOW)
    assert stale == [f"{MAX_CACHED_SNAPSHOTS + 1:024x}", f"{MAX_CACHED_SNAPSHOTS:024x}"]
    assert len(cached) - len(stale) == MAX_CACHED_SNAPSHOTS


def test_under_the_cap_nothing_recent_goes():
    cached = [_cached("a" * 24, "new", NOW - 5), _cached("b" * 24, "other", NOW - 5)]
    assert plan_stale_snapshots(cached, current_artefacts="new", keep_key="c" * 24, now=NOW) == []


def test_only_temporaries_older_than_any_live_build_are_taken_as_abandoned():
    now = 10_000.0
    found = [
        (".template-aaa.vmstate.1a2b", now - ABANDONED_AFTER_S - 1),  # a killed build's
        (".template-bbb.vmstate.3c4d", now - 5),  # a build saving right now
        ("template-ccc.vmstate", now - 10 * ABANDONED_AFTER_S),  # a finished snapshot: not a temporary
        (".other", now - 10 * ABANDONED_AFTER_S),  # not ours
    ]
    assert plan_abandoned_temporaries(found, now=now) == [".template-aaa.vmstate.1a2b"]
