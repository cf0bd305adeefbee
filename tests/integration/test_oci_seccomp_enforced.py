"""The OCI rendering of the seccomp table, enforced by a real runc: the same answers as the BPF.

Each attack runs twice, in a runc container whose ``linux.seccomp`` is ``render_oci_seccomp()``
and in a process sandbox (the table compiled to BPF); both must give the same errno. A positive
control runs the same container without the profile, where the calls succeed or fail otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from contain.boundary import Boundary
from contain.host.facts import detect_host
from contain.runtime import Sandbox
from contain.runtime.container.oci_seccomp import render_oci_seccomp

pytestmark = [pytest.mark.needs_bwrap, pytest.mark.needs_root]

ATTACK = r"""
import ctypes, errno, json, os, socket
libc = ctypes.CDLL(None, use_errno=True)
out = {}
def attempt(name, fn):
    try:
        fn(); out[name] = "ok"
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, str(e.errno))
def call(nr, *args):
    if libc.syscall(nr, *args) == -1:
        e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
attempt("ptrace", lambda: call(101, 0, 0, 0, 0))                     # PTRACE_TRACEME
attempt("unshare", lambda: call(272, 0x10000000))                     # CLONE_NEWUSER
attempt("keyctl", lambda: call(250, 0, 0, 0, 0))
attempt("vsock", lambda: socket.socket(40, socket.SOCK_STREAM))        # AF_VSOCK
attempt("chmod setuid", lambda: (open("/tmp/f", "w").close(), os.chmod("/tmp/f", 0o4755)))
attempt("io_uring", lambda: call(425, 1, 0))
attempt("personality READ_IMPLIES_EXEC", lambda: call(135, 0x0400000))  # a row whose mask != value
print(json.dumps(out))
"""


def _runc_bundle(root: Path, *, seccomp: dict[str, Any] | None) -> Path:
    rootfs = root / "rootfs"
    for name in ("usr", "proc", "dev", "tmp"):
        (rootfs / name).mkdir(parents=True)
    for link in ("bin", "lib", "lib64", "sbin"):
        if os.path.islink(f"/{link}"):
            (rootfs / link).symlink_to(os.readlink(f"/{link}"))
    ids = [{"containerID": 0, "hostID": 0x6000_0000 + 901, "size": 1}]
    config = {
        "ociVersion": "1.0.2",
        "root": {"path": "rootfs", "readonly": True},
        "process": {
            "user": {"uid": 0, "gid": 0},
            "args": ["/usr/bin/python3", "-c", ATTACK],
            "env": ["PATH=/usr/bin:/bin"],
            "cwd": "/",
            "noNewPrivileges": True,
            "capabilities": {k: [] for k in ("bounding", "effective", "permitted", "ambient", "inheritable")},
        },
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "mode=755"]},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777"]},
            {"destination": "/usr", "type": "bind", "source": "/usr", "options": ["rbind", "ro", "nosuid", "nodev"]},
        ],
        "linux": {
            "namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount", "user", "network")],
            "uidMappings": ids,
            "gidMappings": ids,
            **({"seccomp": seccomp} if seccomp is not None else {}),
        },
    }
    (root / "config.json").write_text(json.dumps(config))
    return root


def _run_runc(bundle: Path, state: Path) -> dict[str, str]:
    done = subprocess.run(
        ["runc", "--root", str(state), "run", "--bundle", str(bundle), f"contain-test-{os.getpid()}-{bundle.name}"],
        capture_output=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout)


@pytest.fixture
def runc(host_tmp: Path) -> Path:
    if shutil.which("runc") is None:
        pytest.fail("runc is not installed; scripts/bootstrap.sh installs it")
    return host_tmp / "state"


def test_runc_with_the_rendered_profile_refuses_what_the_process_sandbox_refuses(host_tmp: Path, runc: Path):
    profile = render_oci_seccomp(arch=detect_host().arch)
    in_container = _run_runc(_runc_bundle(host_tmp / "with", seccomp=profile), runc)
    with Sandbox(Boundary()) as sandbox:
        result = sandbox.run(["python3", "-c", ATTACK])
    in_process_sandbox = json.loads(result.stdout.data)
    assert in_container == in_process_sandbox
    assert in_container["ptrace"] == "EPERM" and in_container["chmod setuid"] == "EPERM"
    assert in_container["vsock"] == "EAFNOSUPPORT"
    assert in_container["personality READ_IMPLIES_EXEC"] != "ok"


def test_without_the_profile_the_same_container_lets_the_calls_through(host_tmp: Path, runc: Path):
    bare = _run_runc(_runc_bundle(host_tmp / "without", seccomp=None), runc)
    assert bare["ptrace"] == "ok"
    assert bare["chmod setuid"] == "ok"
    assert bare["personality READ_IMPLIES_EXEC"] == "ok"
