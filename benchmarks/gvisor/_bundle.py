"""Shared helpers for the gVisor (runsc) proof scripts: a minimal OCI bundle by hand.

Run the scripts as root. Each bundle is a temp dir with an empty rootfs plus a
read-only bind of the host's /usr (and the /lib, /lib64, /bin links), so
/usr/bin/python3 runs inside. Every runsc call has a timeout; every container
is force-deleted in ``finally``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Sequence
from typing import Any

RUNSC = "/usr/bin/runsc"
TIMEOUT_S = 60


def make_bundle(
    args: Sequence[str],
    *,
    extra_mounts: Sequence[dict[str, Any]] = (),
    netns_path: str | None = None,
    seccomp: dict[str, Any] | None = None,
    terminal: bool = False,
    cgroups_path: str | None = None,
) -> str:
    """Write config.json + rootfs under a new temp dir and return the bundle path."""
    bundle = tempfile.mkdtemp(prefix="gvisor-proof-")
    rootfs = os.path.join(bundle, "rootfs")
    os.makedirs(os.path.join(rootfs, "usr"))
    os.makedirs(os.path.join(rootfs, "tmp"))
    for link, target in (("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64"), ("sbin", "usr/sbin")):
        os.symlink(target, os.path.join(rootfs, link))
    namespaces: list[dict[str, str]] = [{"type": t} for t in ("pid", "ipc", "uts", "mount")]
    if netns_path is not None:
        namespaces.append({"type": "network", "path": netns_path})
    else:
        namespaces.append({"type": "network"})
    linux: dict[str, Any] = {"namespaces": namespaces}
    if seccomp is not None:
        linux["seccomp"] = seccomp
    if cgroups_path is not None:
        linux["cgroupsPath"] = cgroups_path
        linux["resources"] = {"pids": {"limit": 64}}
    config = {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": terminal,
            "user": {"uid": 0, "gid": 0},
            "args": list(args),
            "env": ["PATH=/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE=1"],
            "cwd": "/",
            "capabilities": {k: [] for k in ("bounding", "effective", "permitted", "inheritable", "ambient")},
            "noNewPrivileges": True,
        },
        "root": {"path": "rootfs", "readonly": False},
        "hostname": "gvisor-proof",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/usr", "type": "bind", "source": "/usr", "options": ["rbind", "ro"]},
            *extra_mounts,
        ],
        "linux": linux,
    }
    with open(os.path.join(bundle, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=1)
    return bundle


def runsc_argv(root: str, *global_flags: str) -> list[str]:
    return [RUNSC, f"--root={root}", *global_flags]


def new_id() -> str:
    return "proof-" + uuid.uuid4().hex[:10]


def cleanup(root: str, cid: str, bundle: str) -> None:
    subprocess.run(
        [RUNSC, f"--root={root}", "delete", "--force", cid], capture_output=True, timeout=TIMEOUT_S, check=False
    )
    shutil.rmtree(bundle, ignore_errors=True)


def run_container(
    args: Sequence[str],
    *,
    global_flags: Sequence[str] = ("--network=none",),
    stdin: Any = subprocess.DEVNULL,
    stdout: Any = subprocess.PIPE,
    pass_fds: Sequence[int] = (),
    **bundle_kw: Any,
) -> subprocess.CompletedProcess[bytes]:
    """``runsc run`` a one-shot container and return the completed process."""
    root = tempfile.mkdtemp(prefix="gvisor-root-")
    cid = new_id()
    bundle = make_bundle(args, **bundle_kw)
    try:
        return subprocess.run(
            [*runsc_argv(root, *global_flags), "run", "--bundle", bundle, cid],
            stdin=stdin,
            stdout=stdout,
            stderr=subprocess.PIPE,
            pass_fds=tuple(pass_fds),
            timeout=TIMEOUT_S,
            check=False,
        )
    finally:
        cleanup(root, cid, bundle)
        shutil.rmtree(root, ignore_errors=True)


def show(label: str, ok: bool, detail: str = "") -> None:
    print(f"[{'YES' if ok else 'NO '}] {label}" + (f": {detail}" if detail else ""))
