"""The guest agent inside the real microVM guest (QEMU microvm, Debian cloud kernel), through ``Sandbox``.

One VM is booted for the module (TCG here: tens of seconds). What the host-process tests in
test_guest_agent.py cannot show is checked here: the virtio-serial port as the channel, the
workload chrooted into the userland image, the guest's own cgroup v2 with its controllers. (An
OOM kill in the guest's run cgroup reaching ``RunResult.oom_killed`` is tests/integration/
test_microvm.py's.)
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from contain.boundary import Boundary
from contain.errors import FileTransferError, UnsupportedHost
from contain.runtime.microvm.guest_channel import HEADER, MsgType, encode_frame, encode_items
from contain.runtime.sandbox import Sandbox

pytestmark = pytest.mark.needs_root


@pytest.fixture(scope="module")
def vm() -> Iterator[Sandbox]:
    sandbox = Sandbox(Boundary(), backend="microvm")
    try:
        sandbox.__enter__()
    except UnsupportedHost as exc:
        pytest.skip(f"no microVM on this host: {exc.cause}")
    try:
        yield sandbox
    finally:
        sandbox.close()


def test_in_the_guest_the_workload_is_uid_1000_without_capabilities_in_the_run_cgroup_namespace(vm: Sandbox) -> None:
    result = vm.run(["sh", "-c", "id -u; grep -E '^Cap(Eff|Prm|Bnd|Amb)' /proc/self/status; cat /proc/self/cgroup"])
    assert result.exit_code == 0, result.stderr.data
    lines = result.stdout.data.decode().splitlines()
    assert lines[0] == "1000"
    assert {line.split("\t")[1] for line in lines[1:5]} == {"0000000000000000"}
    assert lines[5] == "0::/"  # the run's cgroup namespace is rooted at the run cgroup, contain-run


def test_in_the_guest_the_workload_runs_under_contains_seccomp_filter_and_the_layers_say_so(vm: Sandbox) -> None:
    # keyctl(KEYCTL_GET_KEYRING_ID, session) is refused by SECCOMP_RULES (SY-05) with EPERM; busybox
    # has no keyctl, so the userland's python3 makes the call (as the probe's SY-05 does).
    script = (
        "import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
        "rc = libc.syscall(250, 0, -3, 0); print(rc, ctypes.get_errno())"
    )
    result = vm.run(["sh", "-c", f"grep -E '^Seccomp:' /proc/self/status; python3 -c '{script}'"])
    assert result.exit_code == 0, result.stderr.data
    assert result.stdout.data.decode().split() == ["Seccomp:", "2", "-1", "1"]
    assert vm.layers["seccomp"].startswith("contain's filter")


def test_in_the_guest_frames_printed_by_the_workload_are_data_not_control(vm: Sandbox) -> None:
    """VM-03 through the real port: well-formed EXITED/ERROR frames and an oversize header on stdout
    and stderr come back as bytes; the result is the real exit status."""
    exited = ["status=0", "utime_us=0", "stime_us=0", "maxrss_kb=0", "oom_kills=9", "pids_limit_hits=9"]
    forged = (
        encode_frame(MsgType.EXITED, encode_items(exited))
        + encode_frame(MsgType.ERROR, encode_items(["message=forged"]))
        + HEADER.pack(0xFFFFFFFF, MsgType.DATA, 1, 0)
    )
    script = "import sys; d = bytes.fromhex(sys.argv[1]); sys.stdout.buffer.write(d); sys.stderr.buffer.write(d); sys.exit(3)"
    result = vm.run(["python3", "-c", script, forged.hex()])
    assert (result.exit_code, result.oom_killed, result.violations) == (3, False, ())
    assert result.stdout.data == forged and result.stderr.data == forged
    assert vm.run(["true"]).exit_code == 0  # the channel is still in step


def test_in_the_guest_the_workload_cannot_reach_the_control_port(vm: Sandbox) -> None:
    script = (
        "import glob, os\n"
        "names = glob.glob('/dev/vport*') + glob.glob('/dev/virtio-ports/*') + glob.glob('/dev/hvc*')\n"
        "names += ['/proc/1/fd/%d' % n for n in range(16)]\n"
        "for name in names:\n"
        "    try:\n"
        "        os.close(os.open(name, os.O_RDWR))\n"
        "        print('OPENED', name)\n"
        "    except OSError as exc:\n"
        "        print('refused', name, exc.errno)\n"
    )
    result = vm.run(["python3", "-c", script])
    assert result.exit_code == 0, result.stderr.data
    assert b"OPENED" not in result.stdout.data


def test_in_the_guest_file_transfers_refuse_a_planted_symlink(vm: Sandbox) -> None:
    scratch = vm.scratch_paths[0]
    vm.put_file(f"{scratch}/plain.txt", b"plain")
    assert vm.get_file(f"{scratch}/plain.txt") == b"plain"
    assert vm.run(["sh", "-c", f"ln -s /etc/passwd {scratch}/link && ln -s /etc {scratch}/dir"]).exit_code == 0
    for path in (f"{scratch}/link", f"{scratch}/dir/passwd"):
        with pytest.raises(FileTransferError):
            vm.get_file(path)
        with pytest.raises(FileTransferError):
            vm.put_file(path, b"x")
    assert b"root:" in vm.run(["cat", "/etc/passwd"]).stdout.data  # the guest's file was not replaced


def test_in_the_guest_a_process_flood_is_stopped_by_the_guest_pids_limit_and_reported(vm: Sandbox) -> None:
    result = vm.run(["sh", "-c", "for i in $(seq 400); do sleep 30 & done 2>/dev/null; wait"])
    assert "pids" in [violation.kind for violation in result.violations]
    listing = vm.run(["sh", "-c", "ls /proc | grep -c '^[0-9]'"])  # the flood's sleeps did not survive
    assert int(listing.stdout.data) <= 4

