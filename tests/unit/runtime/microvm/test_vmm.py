"""The VMM launch plan, the host TSC fact and the bounded serial log."""

from __future__ import annotations

import threading

import pytest

from contain.runtime.microvm.vmm import SerialLog, parse_tsc_khz, plan_vmm_launch


def test_qemu_starts_in_a_new_netns_after_joining_every_cgroup_as_an_unprivileged_uid():
    argv = plan_vmm_launch(
        ["qemu-system-x86_64", "-m", "256"],
        cgroup_procs=["/cg/mem/x/cgroup.procs", "/cg/pids/x/cgroup.procs"],
        run_as=(1611383829, 1611383829),
    )
    assert argv == [
        "/usr/bin/setpriv", "--pdeathsig", "KILL", "--",
        "/usr/bin/unshare", "--net", "--", "/bin/sh", "-c",
        'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n-1)); done; '
        'ip link set lo up || exit 125; exec "$@"',
        "contain-vmm", "2", "/cg/mem/x/cgroup.procs", "/cg/pids/x/cgroup.procs",
        "/usr/bin/setpriv", "--reuid=1611383829", "--regid=1611383829", "--clear-groups", "--inh-caps=-all",
        "--bounding-set=-all", "--no-new-privs", "--pdeathsig", "KILL", "--",
        "qemu-system-x86_64", "-m", "256",
    ]  # fmt: skip


def test_only_kvm_adds_a_group_and_root_is_refused():
    kvm = plan_vmm_launch(["qemu"], cgroup_procs=[], run_as=(65534, 65534), extra_gids=(108,))
    assert "--groups=108" in kvm and "--clear-groups" not in kvm
    with pytest.raises(ValueError, match="never runs as root"):
        plan_vmm_launch(["qemu"], cgroup_procs=[], run_as=(0, 0))


def test_the_join_script_writes_its_own_pid_then_execs_and_stops_on_a_failed_write(tmp_path):
    import subprocess

    def without_lo(argv: list[str]) -> list[str]:  # lo and setpriv need the new netns and root
        argv = [a.replace("ip link set lo up || exit 125; ", "") for a in argv[7:]]  # without pdeathsig, unshare
        at = argv.index("/usr/bin/setpriv")
        return argv[:at] + argv[argv.index("--", at) + 1 :]

    procs = tmp_path / "cgroup.procs"
    procs.write_text("")
    argv = without_lo(plan_vmm_launch(["/bin/sh", "-c", "echo $$"], cgroup_procs=[str(procs)], run_as=(65534, 65534)))
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert done.returncode == 0
    assert procs.read_text().strip() == done.stdout.strip()  # the pid that joined is the one that runs
    blocked = without_lo(
        plan_vmm_launch(["/bin/true"], cgroup_procs=[str(tmp_path / "missing" / "cgroup.procs")], run_as=(65534, 65534))
    )
    assert subprocess.run(blocked, capture_output=True, check=False).returncode == 125


def test_tsc_rate_is_known_only_for_a_constant_tsc():
    cpuinfo = "processor\t: 0\ncpu MHz\t\t: 2596.132\nflags\t\t: fpu tsc constant_tsc nonstop_tsc\n"
    assert parse_tsc_khz(cpuinfo) == 2596132
    assert parse_tsc_khz(cpuinfo.replace(" constant_tsc", "")) is None
    assert parse_tsc_khz("") is None


def test_the_serial_log_keeps_a_bounded_tail_and_counts_everything():
    log = SerialLog(cap=16)
    for _ in range(1000):
        log.feed(b"0123456789\n")
    assert log.total_bytes == 11000
    assert len(log.text()) == 16
    assert log.tail_lines(1) == "0123456789"


def test_waiting_for_a_marker_returns_when_it_arrives_and_times_out_otherwise():
    log = SerialLog()
    fed = threading.Event()

    def feed() -> None:
        fed.wait()
        log.feed(b"contain-guest: init done\n")

    thread = threading.Thread(target=feed)
    thread.start()
    assert not log.wait_for("init done", timeout_s=0.0)
    fed.set()
    assert log.wait_for("init done", timeout_s=30.0)
    thread.join()
