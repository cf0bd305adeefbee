"""Doctor's decisions from constructed facts and observations (no I/O), and the KVM guest's
constants and code bytes (host/kvm.py has no unit test file of its own; they live here)."""

from __future__ import annotations

import json
import struct
from dataclasses import replace

import pytest

from contain.boundary import Boundary
from contain.errors import UnsupportedHost
from contain.host import doctor, kvm
from contain.host.doctor import (
    CHECKS,
    PROCESS_NEEDS,
    VERDICTS,
    Check,
    Report,
    Status,
    build_report,
    cgroup_layout,
    render_json,
    render_text,
)
from contain.host.facts import CgroupMount, HostFacts
from contain.host.kvm import KvmGuestResult, KvmStatus
from contain.host.observe import (
    OCI_RUNTIMES,
    CgroupTrial,
    DetectedSupervisor,
    DetectedTool,
    Observations,
    ObservedRuntime,
    Trial,
)
from contain.runtime.backend_names import RuntimeFacts
from contain.runtime.cgroup_plan import CONTROLLER_ROWS
from contain.runtime.microvm.accel import KvmBootVerdict
from contain.runtime.plan import plan_layers
from fake_host import LIBSECCOMP, facts_as_root

MEMORY = CgroupMount(1, "/sys/fs/cgroup/memory", ("memory",), "/job")
V1 = tuple(CgroupMount(1, f"/sys/fs/cgroup/{c}", (c,), "/") for c in ("pids", "cpu", "cpuacct", "freezer"))
UNIFIED = CgroupMount(2, "/sys/fs/cgroup/unified", (), "/")

FACTS = facts_as_root(
    (MEMORY, *V1, UNIFIED), bwrap_path="/usr/bin/bwrap", landlock_abi=7, libseccomp_path=LIBSECCOMP
)


def _trials(facts: HostFacts, error: str | None = None) -> tuple[CgroupTrial, ...]:
    trials = []
    for row in CONTROLLER_ROWS:
        controller = row.controller
        mount = facts.cgroup_for(controller)
        directory = None if mount is None else mount.mountpoint + mount.own_path.rstrip("/")
        trials.append(CgroupTrial(controller, mount, directory, error if mount else None))
    return tuple(trials)


OBS = Observations(
    userns_trial=Trial(True, "bwrap --unshare-all as uid 65534"),
    bwrap_version="0.8.0",
    seccomp_actions=("kill_process", "errno", "allow"),
    lsm="lockdown,capability,landlock",
    cgroup_trials=_trials(FACTS),
    memsw=True,
    swap_bytes=0,
    kvm_present=True,
    kvm_api=Trial(True, "12"),
    kvm_guest=KvmGuestResult(KvmStatus.RUNS, "guest ran"),
    kvm_boot=KvmBootVerdict(True, "booted to the probe marker in 0.9 s", 0.9),
    qemu=DetectedTool("qemu-system-x86_64", None),
    qemu_microvm=None,
    guest_image=None,
    guest_image_error="no linux-image-*-cloud-amd64 package (fix: place one in /var/cache/apt/archives)",
    oci=(DetectedTool("runc", "/usr/bin/runc", "runc version 1.1.12"),),
    supervisor=DetectedSupervisor("/var/cache/contain/contain-supervisor-0123", compiler="/usr/bin/cc"),
    runtimes=(
        ObservedRuntime(
            "runc",
            RuntimeFacts("runc", "/usr/bin/runc", "runc version 1.1.12"),
            flags=frozenset({"root", "log", "debug"}),
        ),
    ),
)


def _by_name(checks: tuple[Check, ...]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def test_healthy_host_reports_every_check_in_table_order():
    report = build_report(FACTS, OBS)
    assert [(c.name, c.status.value) for c in report.checks] == [
        ("bwrap", "ok"),
        ("user-namespaces", "ok"),
        ("seccomp", "ok"),
        ("libseccomp", "ok"),
        ("landlock", "ok"),
        ("cgroup-layout", "ok"),
        ("cgroup-memory", "ok"),
        ("cgroup-pids", "ok"),
        ("cgroup-cpu", "ok"),
        ("cgroup-cpuacct", "ok"),
        ("cgroup-freezer", "ok"),
        ("memory-swap-accounting", "ok"),
        ("root", "ok"),
        ("kvm-device", "ok"),
        ("kvm-api", "ok"),
        ("kvm-guest", "ok"),
        ("qemu", "warn"),
        ("guest-image", "warn"),
        ("firecracker", "warn"),
        ("runc", "ok"),
        ("crun", "warn"),
        ("runsc", "warn"),
        ("supervisor", "ok"),
    ]
    assert report.exit_code == 0


def test_healthy_host_verdicts_are_exact():
    assert build_report(FACTS, OBS).verdicts == (
        Check("process backend", Status.OK, "works (bwrap + user namespaces + seccomp + supervisor)"),
        Check("landlock", Status.OK, "hardening.landlock auto and required both apply it (ABI 7)"),
        Check("cgroups", Status.OK, "memory, pids and cpu limits on cgroup v1"),
        Check(
            "microvm backend",
            Status.WARN,
            "qemu: qemu-system-x86_64 is not installed; guest-image: not built: no "
            "linux-image-*-cloud-amd64 package (fix: place one in /var/cache/apt/archives); accelerator: KVM",
            "qemu: apt-get install qemu-system-x86; guest-image: run `contain doctor --build-guest` (needs "
            "qemu-system-x86, busybox-static, squashfs-tools and a linux-image-*-cloud-amd64 package, which is "
            "never installed on the host)",
        ),
        Check(
            "container:runc",
            Status.OK,
            "works: runc version 1.1.12 at /usr/bin/runc; default sandbox: seccomp, cgroup limits, Landlock",
        ),
    )


def test_every_check_row_yields_a_check_of_its_own_name():
    checks = build_report(FACTS, OBS).checks
    assert [c.name for c in checks] == [row.name for row in CHECKS]
    assert len({row.name for row in CHECKS}) == len(CHECKS)
    assert all(row.why for row in CHECKS)


def test_doctor_has_one_cgroup_check_per_row_of_the_runtime_controller_table():
    rows = [row for row in CHECKS if row.name.startswith("cgroup-") and row.name != "cgroup-layout"]
    assert [(row.name, row.why) for row in rows] == [(f"cgroup-{r.controller}", r.why) for r in CONTROLLER_ROWS]


def test_the_process_backend_needs_exactly_these_checks():
    assert PROCESS_NEEDS == ("bwrap", "user-namespaces", "seccomp", "libseccomp", "supervisor")
    assert [row.name for row in VERDICTS] == [
        "process backend",
        "landlock",
        "cgroups",
        "microvm backend",
    ]


BREAKS = {
    "bwrap": (replace(FACTS, bwrap_path=None), replace(OBS, bwrap_version=None)),
    "user-namespaces": (FACTS, replace(OBS, userns_trial=Trial(False, "exit status 1: EPERM"))),
    "seccomp": (replace(FACTS, seccomp=False), OBS),
    "libseccomp": (replace(FACTS, libseccomp_path=None), OBS),
    "supervisor": (FACTS, replace(OBS, supervisor=DetectedSupervisor(None, compiler=None))),
}


@pytest.mark.parametrize("need", PROCESS_NEEDS)
def test_process_backend_fails_and_exit_is_1_when_one_need_is_missing(need):
    facts, obs = BREAKS[need]
    report = build_report(facts, obs)
    failing = _by_name(report.checks)[need]
    assert failing.status is Status.FAIL
    assert failing.fix
    assert report.process_backend == Check(
        "process backend", Status.FAIL, f"does not work: {need}", f"{need}: {failing.fix}"
    )
    assert report.exit_code == 1


def test_missing_bwrap_says_how_to_install_it():
    facts, obs = BREAKS["bwrap"]
    assert _by_name(build_report(facts, obs).checks)["bwrap"] == Check(
        "bwrap", Status.FAIL, "bubblewrap is not installed", "apt-get install bubblewrap"
    )


def test_userns_disabled_by_sysctl_fails_even_before_trying():
    report = build_report(replace(FACTS, user_namespaces=False), OBS)
    check = _by_name(report.checks)["user-namespaces"]
    assert check.status is Status.FAIL
    assert check.detail == "disabled by sysctl (user.max_user_namespaces)"
    assert "user.max_user_namespaces=15000" in check.fix


def test_failed_userns_trial_reports_what_bwrap_said():
    _, obs = BREAKS["user-namespaces"]
    check = _by_name(build_report(FACTS, obs).checks)["user-namespaces"]
    assert check.detail == "creating one failed: exit status 1: EPERM"


def test_seccomp_without_errno_action_fails():
    obs = replace(OBS, seccomp_actions=("kill_process", "allow"))
    check = _by_name(build_report(FACTS, obs).checks)["seccomp"]
    assert check.status is Status.FAIL


def test_supervisor_not_built_with_a_compiler_is_a_warning_and_still_exit_0():
    obs = replace(OBS, supervisor=DetectedSupervisor(None, compiler="/usr/bin/cc"))
    report = build_report(FACTS, obs)
    assert _by_name(report.checks)["supervisor"] == Check(
        "supervisor",
        Status.WARN,
        "not built yet; the first sandbox builds it with /usr/bin/cc",
        "run `contain doctor --build-supervisor`",
    )
    assert report.process_backend.status is Status.WARN
    assert report.exit_code == 0


def test_supervisor_error_carries_cause_and_fix():
    obs = replace(OBS, supervisor=DetectedSupervisor(None, "supervisor binary /x has mode 777", "delete /x"))
    check = _by_name(build_report(FACTS, obs).checks)["supervisor"]
    assert check == Check("supervisor", Status.FAIL, "supervisor binary /x has mode 777", "delete /x")


def test_landlock_absent_names_the_boot_parameter_with_the_current_lsm_list():
    facts = replace(FACTS, landlock_abi=0)
    obs = replace(OBS, lsm="lockdown,capability,yama\n")
    report = build_report(facts, obs)
    assert _by_name(report.checks)["landlock"] == Check(
        "landlock",
        Status.WARN,
        "not available (ABI 0)",
        "boot with lsm=lockdown,capability,yama,landlock (the kernel needs CONFIG_SECURITY_LANDLOCK=y)",
    )
    verdict = _by_name(report.verdicts)["landlock"]
    assert verdict.detail == "auto: sandboxes run without Landlock; required: refused"
    assert report.exit_code == 0


def test_landlock_absent_without_securityfs_still_gives_a_fix():
    report = build_report(replace(FACTS, landlock_abi=0), replace(OBS, lsm=None))
    assert _by_name(report.checks)["landlock"].fix.startswith("boot with lsm=...,landlock")


@pytest.mark.parametrize(
    ("mounts", "layout"),
    [
        ((MEMORY, *V1, UNIFIED), "hybrid"),
        ((MEMORY, *V1), "v1"),
        ((CgroupMount(2, "/sys/fs/cgroup", ("memory", "pids", "cpu"), "/a"),), "v2"),
        ((), "none"),
    ],
)
def test_cgroup_layout(mounts, layout):
    assert cgroup_layout(mounts) == layout


def test_cgroup_child_that_cannot_be_created_fails_with_the_errno():
    obs = replace(OBS, cgroup_trials=_trials(FACTS, error="EACCES (Permission denied)"))
    report = build_report(FACTS, obs)
    assert _by_name(report.checks)["cgroup-memory"] == Check(
        "cgroup-memory",
        Status.FAIL,
        "v1 at /sys/fs/cgroup/memory/job: cannot create a child (EACCES (Permission denied))",
        "run as root, or delegate a cgroup to uid 0 and set CONTAIN_CGROUP_ROOT to it",
    )
    cgroups = _by_name(report.verdicts)["cgroups"]
    assert cgroups.status is Status.FAIL
    assert cgroups.detail.startswith("missing: cgroup-memory, cgroup-pids, cgroup-cpu")
    assert report.exit_code == 0  # cgroups are a layer verdict, not the process backend's


def test_missing_controller_names_the_mount_command():
    facts = replace(FACTS, cgroups=(*V1, UNIFIED))
    obs = replace(OBS, cgroup_trials=_trials(facts), memsw=None)
    check = _by_name(build_report(facts, obs).checks)["cgroup-memory"]
    assert check.status is Status.FAIL
    assert "mount -t cgroup -o memory cgroup /sys/fs/cgroup/memory" in check.fix


def test_v1_only_controllers_are_not_needed_on_pure_v2():
    v2 = CgroupMount(2, "/sys/fs/cgroup", ("memory", "pids", "cpu"), "/a")
    facts = replace(FACTS, cgroups=(v2,))
    checks = _by_name(build_report(facts, replace(OBS, cgroup_trials=_trials(facts))).checks)
    assert checks["cgroup-freezer"] == Check("cgroup-freezer", Status.OK, "not needed on cgroup v2")
    assert checks["cgroup-memory"].detail == "v2 at /sys/fs/cgroup/a: can create a child"


def test_cgroups_verdict_fails_when_not_root_and_nothing_is_delegated_as_the_planner_does():
    facts = replace(FACTS, is_root=False, uid=1000, gid=1000)
    report = build_report(facts, OBS)
    root = _by_name(report.checks)["root"]
    assert root.detail == "running as uid 1000: sandboxes run as this uid"
    assert _by_name(report.verdicts)["cgroups"] == Check(
        "cgroups",
        Status.FAIL,
        "contain is not running as root and no cgroup is delegated to this user; hardening.cgroups: "
        "required (the default) is refused; set hardening.cgroups: off for rlimits only",
        "run as root, or delegate a cgroup and name it in CONTAIN_CGROUP_ROOT",
    )


def test_cgroups_verdict_is_ok_for_a_non_root_user_with_a_delegated_cgroup_that_works():
    facts = replace(FACTS, is_root=False, uid=1000, gid=1000, cgroup_root="/user.slice/deleg")
    report = build_report(facts, replace(OBS, cgroup_trials=_trials(facts)))
    assert _by_name(report.verdicts)["cgroups"] == Check(
        "cgroups", Status.OK, "memory, pids and cpu limits on cgroup v1"
    )


@pytest.mark.parametrize(
    ("memsw", "swap", "status"),
    [(True, 1 << 30, Status.OK), (False, 0, Status.OK), (False, 1 << 30, Status.FAIL)],
)
def test_memory_swap_accounting_matters_only_when_there_is_swap(memsw, swap, status):
    report = build_report(FACTS, replace(OBS, memsw=memsw, swap_bytes=swap))
    check = _by_name(report.checks)["memory-swap-accounting"]
    assert check.status is status
    if status is Status.FAIL:
        assert "swapaccount=1" in check.fix


def test_root_check_says_each_sandbox_runs_as_a_leased_uid_never_root():
    check = _by_name(build_report(FACTS, OBS).checks)["root"]
    assert check.detail == (
        "running as root: each sandbox runs as a host uid leased for it alone (never root), owning its binds "
        "through idmapped mounts; uid 65534 (nobody) only where a write bind cannot be idmapped"
    )


def test_kvm_guest_is_not_ok_when_the_test_guest_halts_but_the_real_guest_kernel_does_not_boot():
    # This host: the real-mode test guest reaches HLT, QEMU aborts booting the real kernel.
    abort = KvmBootVerdict(False, "QEMU exited with status -6: 'kvm_buf_set_msrs: Assertion failed'", 0.3)
    obs = replace(OBS, kvm_guest=KvmGuestResult(KvmStatus.RUNS, "guest ran"), kvm_boot=abort)
    report = build_report(FACTS, obs)
    assert _by_name(report.checks)["kvm-guest"] == Check(
        "kvm-guest",
        Status.WARN,
        "the guest kernel does not boot under KVM: QEMU exited with status -6: "
        "'kvm_buf_set_msrs: Assertion failed'; the real-mode test guest: runs a guest",
        "microvm sandboxes use software emulation (TCG); fix KVM on this host to use it",
    )
    assert "accelerator: TCG (software emulation)" in _by_name(report.verdicts)["microvm backend"].detail


def test_kvm_guest_is_ok_only_when_the_real_guest_kernel_booted():
    booted = KvmBootVerdict(True, "booted to the probe marker in 0.9 s", 0.9)
    report = build_report(FACTS, replace(OBS, kvm_boot=booted))
    assert _by_name(report.checks)["kvm-guest"].status is Status.OK
    assert "accelerator: KVM" in _by_name(report.verdicts)["microvm backend"].detail


def test_the_microvm_backend_works_with_qemu_and_a_built_guest_on_tcg():
    qemu = DetectedTool("qemu-system-x86_64", "/usr/bin/qemu-system-x86_64", "QEMU emulator version 7.2.22")
    obs = replace(
        OBS,
        qemu=qemu,
        qemu_microvm=True,
        guest_image="Debian cloud kernel 6.1.0-53-cloud-amd64, initramfs with the guest agent, squashfs userland",
        kvm_boot=KvmBootVerdict(False, "QEMU exited with status -6", 0.3),
    )
    verdict = _by_name(build_report(replace(FACTS, is_root=True), obs).verdicts)["microvm backend"]
    assert verdict == Check(
        "microvm backend", Status.OK, "works (QEMU -M microvm; accelerator: TCG (software emulation))"
    )


def test_kvm_guest_not_tried_says_why():
    obs = replace(OBS, kvm_boot=None, kvm_boot_skipped="the microVM guest could not be built: no mksquashfs")
    check = _by_name(build_report(FACTS, obs).checks)["kvm-guest"]
    assert (check.status, check.detail) == (
        Status.WARN,
        "not tried: the microVM guest could not be built: no mksquashfs",
    )


def test_kvm_unavailable_reports_the_errno():
    guest = KvmGuestResult(KvmStatus.UNAVAILABLE, "EACCES (Permission denied)")
    boot = KvmBootVerdict(False, "QEMU exited with status 1: 'Could not access KVM kernel module'", 0.1)
    obs = replace(OBS, kvm_api=Trial(False, "EACCES (Permission denied)"), kvm_guest=guest, kvm_boot=boot)
    checks = _by_name(build_report(FACTS, obs).checks)
    assert checks["kvm-guest"].detail == (
        "the guest kernel does not boot under KVM: QEMU exited with status 1: "
        "'Could not access KVM kernel module'; the real-mode test guest: unavailable: EACCES (Permission denied)"
    )
    assert checks["kvm-api"].fix == "add this user to the group owning /dev/kvm"


def test_wrong_kvm_api_version_fails():
    obs = replace(OBS, kvm_api=Trial(True, "11"))
    check = _by_name(build_report(FACTS, obs).checks)["kvm-api"]
    assert check.status is Status.FAIL
    assert check.detail == "KVM_GET_API_VERSION is 11, expected 12"


def test_no_kvm_device_is_a_warning_for_every_kvm_row():
    obs = replace(OBS, kvm_present=False, kvm_api=None, kvm_guest=None)
    checks = _by_name(build_report(FACTS, obs).checks)
    assert [checks[n].status for n in ("kvm-device", "kvm-api", "kvm-guest")] == [Status.WARN] * 3


def test_qemu_without_microvm_machine_is_a_warning():
    qemu = DetectedTool("qemu-system-x86_64", "/usr/bin/qemu-system-x86_64", "QEMU emulator 4.0")
    report = build_report(FACTS, replace(OBS, qemu=qemu, qemu_microvm=False))
    check = _by_name(report.checks)["qemu"]
    assert check == Check(
        "qemu",
        Status.WARN,
        "QEMU emulator 4.0; no microvm machine type",
        "install QEMU 4.2 or later (apt-get install qemu-system-x86)",
    )


def test_crun_on_a_hybrid_host_is_a_warning_naming_the_refusal():
    obs = replace(OBS, oci=(DetectedTool("crun", "/usr/bin/crun", "crun version 1.14"),))
    check = _by_name(build_report(FACTS, obs).checks)["crun"]
    assert check.status is Status.WARN
    assert "crun refuses hybrid cgroup layouts" in check.detail


SMALL = Report(
    checks=(
        Check("bwrap", Status.OK, "/usr/bin/bwrap, version 0.8.0"),
        Check("landlock", Status.WARN, "not available (ABI 0)", "boot with lsm=...,landlock"),
    ),
    verdicts=(Check("process backend", Status.FAIL, "does not work: supervisor", "supervisor: build it"),),
)


def test_render_text_is_exact():
    assert render_text(SMALL) == (
        "host\n"
        "  ok    bwrap     /usr/bin/bwrap, version 0.8.0\n"
        "  warn  landlock  not available (ABI 0)\n"
        "                  fix: boot with lsm=...,landlock\n"
        "backends and layers\n"
        "  fail  process backend  does not work: supervisor\n"
        "                         fix: supervisor: build it\n"
        "result: the process backend does NOT work on this host (exit 1)\n"
    )


def test_render_json_is_one_object_with_checks_verdicts_and_exit_code():
    text = render_json(SMALL)
    assert text.endswith("}\n") and text.count("\n") == 1
    assert json.loads(text) == {
        "checks": [
            {"name": "bwrap", "status": "ok", "detail": "/usr/bin/bwrap, version 0.8.0", "fix": ""},
            {
                "name": "landlock",
                "status": "warn",
                "detail": "not available (ABI 0)",
                "fix": "boot with lsm=...,landlock",
            },
        ],
        "verdicts": [
            {
                "name": "process backend",
                "status": "fail",
                "detail": "does not work: supervisor",
                "fix": "supervisor: build it",
            }
        ],
        "runtimes": [],
        "process_backend": "fail",
        "exit_code": 1,
    }


# ----------------------------------------------------------------------------- host/kvm.py


def test_kvm_ioctl_numbers_match_linux_uapi():
    assert kvm.KVM_GET_API_VERSION == 0xAE00
    assert kvm.KVM_CREATE_VM == 0xAE01
    assert kvm.KVM_GET_VCPU_MMAP_SIZE == 0xAE04
    assert kvm.KVM_CREATE_VCPU == 0xAE41
    assert kvm.KVM_SET_USER_MEMORY_REGION == 0x4020AE46
    assert kvm.KVM_CREATE_IRQCHIP == 0xAE60
    assert kvm.KVM_CREATE_PIT2 == 0x4040AE77
    assert kvm.KVM_RUN == 0xAE80
    assert kvm.KVM_GET_REGS == 0x8090AE81
    assert kvm.KVM_SET_REGS == 0x4090AE82
    assert kvm.KVM_GET_SREGS == 0x8138AE83
    assert kvm.KVM_SET_SREGS == 0x4138AE84
    assert (kvm.KVM_API_VERSION, kvm.KVM_EXIT_IO, kvm.KVM_EXIT_HLT) == (12, 2, 5)


def test_guest_code_is_mov_al_0x42_out_0x10_hlt():
    assert kvm.GUEST_CODE == b"\xb0\x42\xe6\x10\xf4"
    assert kvm.HALT_EXITS == ((kvm.KVM_EXIT_IO, 0x42), (kvm.KVM_EXIT_HLT, 0))


def test_halt_guest_memory_is_one_page_with_the_code_at_0():
    page = kvm.plan_guest_memory(with_timer=False)
    assert len(page) == 4096
    assert page[:5] == kvm.GUEST_CODE
    assert page[5:] == bytes(4091)


def test_timer_guest_memory_has_the_irq0_vector_code_and_handler():
    page = kvm.plan_guest_memory(with_timer=True)
    assert struct.unpack_from("=HH", page, 8 * 4) == (0x600, 0)
    assert page[0x500 : 0x500 + len(kvm.TIMER_CODE)] == kvm.TIMER_CODE
    assert kvm.TIMER_CODE.endswith(b"\xfb\xf4\xeb\xfd")  # sti; hlt; jmp back to hlt
    assert page[0x600:0x605] == b"\xb0\x99\xe6\x10\xcf"  # mov al,0x99; out 0x10,al; iret


def test_memory_region_packs_as_struct_kvm_userspace_memory_region():
    packed = kvm.pack_memory_region(slot=0, guest_phys_addr=0, size=4096, userspace_addr=0x7F00)
    assert packed == struct.pack("<IIQQQ", 0, 0, 0, 4096, 0x7F00)
    assert len(packed) == kvm.MEMORY_REGION_SIZE


def test_io_exit_is_read_from_the_kvm_run_union():
    run = bytearray(4200)
    struct.pack_into("=BBHIQ", run, 32, 1, 1, 0x10, 1, 4096)
    run[4096] = 0x42
    assert kvm.describe_io_exit(bytes(run)) == (1, 1, 0x10, 0x42)


@pytest.mark.parametrize(
    ("result", "verdict"),
    [
        (KvmGuestResult(KvmStatus.RUNS, "x"), "runs a guest"),
        (
            KvmGuestResult(KvmStatus.HANGS, "x", 3.0),
            "hangs (timed out after 3 s): use software emulation (QEMU -accel tcg)",
        ),
        (KvmGuestResult(KvmStatus.UNAVAILABLE, "ENOENT (x)"), "unavailable: ENOENT (x)"),
    ],
)
def test_kvm_verdicts_are_the_three_sentences(result, verdict):
    assert result.verdict == verdict


def test_child_report_is_parsed_and_a_crash_is_unavailable():
    ok = kvm.parse_child_report('{"status": "runs", "detail": "d"}\n', "", 0, timeout_s=3.0)
    assert ok == KvmGuestResult(KvmStatus.RUNS, "d", 3.0)
    crash = kvm.parse_child_report("", "Traceback\nImportError: x\n", 1, timeout_s=3.0)
    assert crash == KvmGuestResult(KvmStatus.UNAVAILABLE, "checker exited with status 1: ImportError: x", 3.0)


def test_non_x86_hosts_are_unavailable_without_touching_the_device():
    result = kvm.check_kvm_guest(device="/nonexistent", arch="aarch64")
    assert result == KvmGuestResult(KvmStatus.UNAVAILABLE, "the guest check supports x86_64 only")


def test_doctor_module_exports_what_it_lists():
    assert all(hasattr(doctor, name) for name in doctor.__all__)
    assert all(hasattr(kvm, name) for name in kvm.__all__)


V1_ALL = (replace(MEMORY, own_path="/"), *V1)
V2_ALL = CgroupMount(2, "/sys/fs/cgroup", ("cpu", "memory", "pids"), "/user.slice/session.scope")
LAYOUTS = {
    "v1": V1_ALL,
    "hybrid": (*V1_ALL, UNIFIED),
    "v2": (V2_ALL,),
    "split": (MEMORY, replace(V2_ALL, controllers=("cpu", "pids"))),
    "none": (),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("cgroup_root", [None, "/user.slice/deleg", "not/absolute"])
@pytest.mark.parametrize("is_root", [True, False])
def test_doctor_cgroups_verdict_agrees_with_plan_layers_for_every_owner_delegation_and_layout(
    layout, cgroup_root, is_root
):
    uid = 0 if is_root else 1000
    facts = replace(FACTS, is_root=is_root, uid=uid, gid=uid, cgroups=LAYOUTS[layout], cgroup_root=cgroup_root)
    obs = replace(OBS, cgroup_trials=_trials(facts), memsw=True)
    verdict = next(v for v in build_report(facts, obs).verdicts if v.name == "cgroups")
    try:
        planned = plan_layers(Boundary(), facts, egress_available=False).cgroups
    except UnsupportedHost:
        planned = False
    assert (verdict.status is Status.OK) == planned, verdict


@pytest.mark.parametrize("path", [None, "/usr/local/bin/firecracker"])
def test_firecracker_is_reported_as_not_used_whether_or_not_it_is_installed(path):
    obs = replace(OBS, firecracker=DetectedTool("firecracker", path))
    check = _by_name(build_report(FACTS, obs).checks)["firecracker"]
    assert check.status is Status.WARN
    assert "drives QEMU only" in check.detail and "runtime.backend: microvm" in check.fix
    assert (path or "not installed") in check.detail


@pytest.mark.parametrize("name", ["qemu", *(runtime for runtime, _install in OCI_RUNTIMES)])
def test_every_tool_row_warns_with_its_install_fix_when_the_tool_is_missing_or_its_version_fails(name: str) -> None:
    install = dict(OCI_RUNTIMES).get(name, doctor.QEMU_FIX)

    def with_tool(tool: DetectedTool) -> Check:
        obs = replace(OBS, qemu=tool, qemu_microvm=True) if name == "qemu" else replace(OBS, oci=(tool,))
        return _by_name(doctor.run_checks(FACTS, obs))[name]

    missing = with_tool(DetectedTool(name, None))
    assert (missing.status, missing.fix) == (Status.WARN, install)
    assert missing.detail == ("qemu-system-x86_64 is not installed" if name == "qemu" else "not installed")
    broken = with_tool(DetectedTool(name, f"/usr/bin/{name}", None, "exit 1"))
    assert broken == Check(name, Status.WARN, f"/usr/bin/{name} --version failed: exit 1", install)
    working = with_tool(DetectedTool(name, f"/usr/bin/{name}", f"{name} version 1"))
    assert f"{name} version 1" in working.detail  # past the tool gaps (crun still warns on hybrid cgroups)
