"""The microvm backend with real QEMU (TCG here: KVM does not boot this host's guests).

Each boot costs seconds on two shared cores, so one VM serves every test that leaves it usable
(``vm``, module scope); the host-image test boots its own guest in shell mode (root on the
console, to write /dev/vd*), and the stop/leftover test boots one it may break. Judging is from
the host: sha256 of image files, the VMM's pid, its cgroup directory, this process's descriptors
and the cache and temp directories.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from contain.boundary import Boundary
from contain.errors import ContainError, SandboxLost, UnsupportedHost
from contain.runtime import Sandbox
from contain.runtime.microvm.guest_build import GuestImage, ensure_guest_image
from contain.runtime.microvm.images import ensure_read_image
from contain.runtime.microvm.initramfs import READY_MARKER
from contain.runtime.microvm.vmm import VmProcess, detect_vmm_facts
from contain.runtime.microvm.vmm_plan import (
    Accel,
    GuestMode,
    VmPlan,
    plan_clock_words,
    plan_kernel_cmdline,
)

pytestmark = [pytest.mark.needs_root]


@pytest.fixture(scope="module")
def image() -> GuestImage:
    if detect_vmm_facts().qemu is None:
        pytest.skip("qemu-system-x86_64 is not installed")
    try:
        return ensure_guest_image()
    except UnsupportedHost as exc:
        pytest.skip(f"the microVM guest cannot be built here: {exc.cause}")


@pytest.fixture(scope="module")
def data_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="contain-microvm-data-"))
    (path / "input.txt").write_text("from the host\n")
    yield path
    for child in path.iterdir():
        child.unlink()
    path.rmdir()


@pytest.fixture(scope="module")
def vm(image: GuestImage, data_dir: Path) -> Iterator[Sandbox]:
    boundary = Boundary.model_validate(
        {"files": [{"path": "/data", "host": str(data_dir), "access": "read"}], "runtime": {"backend": "microvm"}}
    )
    with Sandbox(boundary) as sandbox:
        yield sandbox


def test_python_runs_in_the_guest_as_the_workload_user(vm: Sandbox) -> None:
    result = vm.run(["python3", "-c", "import os; print(1, os.getuid(), os.getgid())"])
    assert (result.exit_code, result.stdout.data, result.backend) == (0, b"1 1000 1000\n", "microvm")
    assert result.layers["accelerator"].startswith(("tcg", "kvm"))
    assert result.layers["network"] == "none (no network device in the guest)"


def test_the_read_bind_is_an_image_the_guest_cannot_change_and_has_no_block_devices(vm: Sandbox) -> None:
    script = (
        "import os, sys\n"
        "print(open('/data/input.txt').read(), end='')\n"
        "for path in ('/data/new', '/data/input.txt', '/usr/bin/x', '/etc/passwd'):\n"
        "    try:\n"
        "        open(path, 'a').write('x')\n"
        "        print('WROTE', path)\n"
        "    except OSError as exc:\n"
        "        print(path, exc.errno)\n"
        "print(sorted(os.listdir('/dev')))\n"
        "print(os.path.exists('/sys/block'))\n"
    )
    result = vm.run(["python3", "-c", script])
    assert result.exit_code == 0, result.stderr.data
    lines = result.stdout.data.decode().splitlines()
    assert lines[0] == "from the host"
    assert [line.split()[1] for line in lines[1:5]] == ["30", "30", "30", "30"]  # EROFS everywhere
    assert lines[5] == "['fd', 'full', 'null', 'random', 'shm', 'tty', 'urandom', 'zero']"
    assert lines[6] == "False"


def test_a_command_past_its_deadline_is_killed_and_the_vm_serves_the_next(vm: Sandbox) -> None:
    began = time.monotonic()
    result = vm.run(["sleep", "60"], timeout=2)
    assert result.timed_out and time.monotonic() - began < 15
    assert vm.run(["/bin/true"]).exit_code == 0


def test_a_workload_past_the_memory_budget_is_oom_killed_in_the_guest_and_the_vmm_survives(vm: Sandbox) -> None:
    # 512 MiB budget: 320 MiB of guest RAM, 272 MiB for the workload's guest cgroup. QEMU's own
    # memory is in the same host cgroup; it must not be what the limit kills.
    grab = "b = bytearray(250 * 1024 * 1024); b[::4096] = b'x' * len(b[::4096]); print('survived')"
    result = vm.run(["python3", "-c", grab])
    assert result.oom_killed and result.stdout.data == b""
    assert [v.kind for v in result.violations] == ["memory"]
    assert vm.run(["python3", "-c", "print('next')"]).stdout.data == b"next\n"
    # More than the guest has: refused or killed inside the guest (it was QEMU the host cgroup
    # killed when only 96 MiB were kept back for it), and the VM serves on.
    bigger = vm.run(["python3", "-c", grab.replace("250", "330")])
    assert bigger.exit_code != 0 and bigger.stdout.data == b""
    assert vm.run(["python3", "-c", "print('next')"]).stdout.data == b"next\n"


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_host_image_files_stay_byte_identical_when_guest_root_writes_every_disk(
    image: GuestImage, data_dir: Path
) -> None:
    read_image = str(ensure_read_image(str(data_dir)))
    before = {p: _sha256(p) for p in (str(image.userland.path), read_image)}
    facts = detect_vmm_facts()
    cmdline = plan_kernel_cmdline(
        clock=plan_clock_words(accel=Accel.TCG, tsc_khz=facts.tsc_khz),
        mode=GuestMode.SHELL,
        disk_bytes=64 << 20,
        inodes=4096,
        scratch_paths=("/work",),
        read_paths=("/data",),
        network=False,
    )
    assert facts.qemu is not None
    plan = VmPlan(
        accel=Accel.TCG,
        kernel=str(image.kernel.vmlinuz),
        initramfs=str(image.initramfs.path),
        memory_mib=256,
        vcpus=1,
        cmdline=cmdline,
        userland_image=str(image.userland.path),
        read_images=(read_image,),
        agent_fd=None,
        qemu=facts.qemu,
    )
    # As root in the guest: a fresh devtmpfs (not nodev) shows every virtio disk; write all of them.
    attack = (
        "import ctypes, glob, os\n"
        "os.makedirs('/tmp/d', exist_ok=True)\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print('mount', libc.mount(b'none', b'/tmp/d', b'devtmpfs', 0, None))\n"
        "for disk in sorted(glob.glob('/tmp/d/vd*')):\n"
        "    try:\n"
        "        fd = os.open(disk, os.O_WRONLY)\n"
        "        os.write(fd, b'X' * 65536); os.fsync(fd); os.close(fd)\n"
        "        print('wrote', disk)\n"
        "    except OSError as exc:\n"
        "        print('refused', disk, exc.errno)\n"
    )
    vm = VmProcess(plan, console_input=True)
    vm.start()
    try:
        assert vm.serial.wait_for(READY_MARKER, timeout_s=90), vm.serial.tail_lines()
        vm.type_on_console(f"python3 -c {_shell_quote(attack)}; echo ATTACK-DONE; exit\n".encode())
        assert vm.wait(90) is not None, vm.serial.tail_lines()
    finally:
        vm.close(grace_s=0)
    log = vm.serial.text()
    assert "ATTACK-DONE" in log and "mount 0" in log, log[-2000:]
    assert "vda" in log and "vdb" in log  # both disks were found and tried
    assert {p: _sha256(p) for p in before} == before


def _shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def _open_fds() -> set[str]:
    targets = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):  # the descriptor listdir itself used
            targets.add(os.readlink(f"/proc/self/fd/{fd}"))
    return targets


def test_a_guest_that_stops_answering_ends_at_the_deadline_and_nothing_is_left(
    image: GuestImage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A private temp directory: /tmp is shared with other test runs, this one is ours alone.
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(private_tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(private_tmp))
    fds_before = _open_fds()
    cache = image.userland.path.parent
    cache_before = set(os.listdir(cache))
    sandbox = Sandbox(Boundary.model_validate({"runtime": {"backend": "microvm"}}))
    sandbox.start()
    pid = sandbox.supervisor_pid
    assert pid is not None
    cgroup_dirs = sandbox._cgroup.paths if sandbox._cgroup is not None else ()
    assert cgroup_dirs and all(str(pid) in Path(d, "cgroup.procs").read_text().split() for d in cgroup_dirs)
    assert os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net")  # QEMU's own netns
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    assert status["Uid"].split()[0] != "0" and status["Gid"].split()[0] != "0"  # never host root
    assert (status["CapEff"].strip(), status["CapBnd"].strip()) == ("0000000000000000", "0000000000000000")
    assert (status["NoNewPrivs"].strip(), status["Seccomp"].strip()) == ("1", "2")  # QEMU's -sandbox
    try:
        process = sandbox.spawn(["sh", "-c", "echo started; exec sleep 60"], timeout=4)
        assert process.stdout.read(8) == b"started\n"  # the command runs; now freeze the whole guest
        began = time.monotonic()
        os.kill(pid, signal.SIGSTOP)
        assert process.wait(60) == -9
        assert process.timed_out
        assert time.monotonic() - began < 4 + 5 + 3  # the deadline, the kill grace, slack
        process.close()
        with pytest.raises(SandboxLost):
            sandbox.run(["/bin/true"])
    finally:
        with contextlib.suppress(ContainError):
            sandbox.close()
    assert not os.path.exists(f"/proc/{pid}")
    assert not any(os.path.exists(d) for d in cgroup_dirs)
    assert _open_fds() <= fds_before
    assert os.listdir(private_tmp) == []
    assert set(os.listdir(cache)) == cache_before


def test_a_guest_frozen_between_commands_ends_the_next_run_at_its_deadline_as_a_timeout(image: GuestImage) -> None:
    """Frozen before it answers SPAWN: the run ends at its 3 s deadline (124), not the 30 s reply timeout."""
    sandbox = Sandbox(Boundary.model_validate({"runtime": {"backend": "microvm"}}))
    sandbox.start()
    pid = sandbox.supervisor_pid
    assert pid is not None
    try:
        assert sandbox.run(["/bin/true"]).exit_code == 0
        os.kill(pid, signal.SIGSTOP)
        began = time.monotonic()
        result = sandbox.run(["/bin/true"], timeout=3)
        assert time.monotonic() - began < 3 + 5  # the deadline and slack, far below 30 s
        assert result.timed_out and [v.kind for v in result.violations] == ["timeout"]
        assert "deadline passed" in result.violations[0].message
        with pytest.raises(SandboxLost):
            sandbox.run(["/bin/true"])
    finally:
        with contextlib.suppress(ContainError):
            sandbox.close()
    assert not os.path.exists(f"/proc/{pid}")


def test_egress_reaches_allowed_names_through_the_proxy_and_the_user_network_reaches_nothing_else(
    image: GuestImage, host_server: tuple[int, list[str]]
) -> None:
    port, seen = host_server
    boundary = Boundary.model_validate(
        {
            "network": {"allow": [{"host": "api.test", "ports": [port]}], "hosts": {"api.test": "127.0.0.1"}},
            "runtime": {"backend": "microvm"},
        }
    )
    probe = (
        "import socket, urllib.request\n"
        f"print(urllib.request.urlopen('http://api.test:{port}/via-proxy', timeout=10).read().decode().strip())\n"
        "try:\n"
        "    urllib.request.urlopen('http://denied.test/', timeout=10)\n"
        "    print('denied.test REACHED')\n"
        "except Exception as exc:\n"
        "    print('denied.test refused', getattr(exc, 'code', type(exc).__name__))\n"
        "print('dns allowed', socket.gethostbyname('api.test'))\n"
        "try:\n"
        "    print('dns denied', socket.gethostbyname('denied.test'))\n"
        "except OSError as exc:\n"
        "    print('dns denied refused')\n"
        # Every other address and port of QEMU's user network: the gateway (the host's loopback as
        # QEMU sees it, where the proxy and DNS stub listen), the DNS forwarder, the forward address on
        # another port, an outside address.
        f"for host, p in (('10.0.2.2', 3128), ('10.0.2.2', 53), ('10.0.2.2', {port}), ('10.0.2.3', 53),"
        f" ('10.0.2.100', {port}), ('10.0.2.100', 22), ('1.1.1.1', 443)):\n"
        "    try:\n"
        "        socket.create_connection((host, p), timeout=3).close()\n"
        "        print('tcp', host, p, 'OPEN')\n"
        "    except OSError as exc:\n"
        "        print('tcp', host, p, 'closed')\n"
        "udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "udp.settimeout(3)\n"
        "query = bytes.fromhex('123401000001000000000000') + b'\\x07example\\x03com\\x00' + bytes.fromhex('00010001')\n"
        "for server in ('10.0.2.3', '10.0.2.2'):\n"
        "    udp.sendto(query, (server, 53))\n"
        "    try:\n"
        "        udp.recvfrom(512)\n"
        "        print('udp', server, 'ANSWERED')\n"
        "    except OSError:\n"
        "        print('udp', server, 'silent')\n"
    )
    with Sandbox(boundary) as sandbox:
        result = sandbox.run(["python3", "-c", probe], timeout=120)
    lines = result.stdout.data.decode().splitlines()
    assert lines == [
        "hello from host",
        "denied.test refused 403",
        "dns allowed 127.77.0.1",  # the stub's placeholder: answered, but only the proxy carries traffic
        "dns denied refused",
        "tcp 10.0.2.2 3128 closed",
        "tcp 10.0.2.2 53 closed",
        f"tcp 10.0.2.2 {port} closed",
        "tcp 10.0.2.3 53 closed",
        f"tcp 10.0.2.100 {port} closed",
        "tcp 10.0.2.100 22 closed",
        "tcp 1.1.1.1 443 closed",
        "udp 10.0.2.3 silent",
        "udp 10.0.2.2 silent",
    ], result.stderr.data
    assert seen == ["/via-proxy"]
    assert result.layers["network"] == "egress proxy only (QEMU user network, restrict=on, one forward)"
    assert ("api.test", "allow") in [(e["host"], e["verdict"]) for e in result.egress]
    assert any(v.kind == "egress" and "denied.test" in v.message for v in result.violations)
