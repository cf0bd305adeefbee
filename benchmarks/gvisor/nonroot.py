"""Does runsc (ptrace platform) start a container as a non-root user?

Runs `runsc --rootless --network=none --platform=ptrace run` (and once without --rootless)
as uid/gid 65534 via setpriv, with a bundle and --root dir that user owns.
Run as root: python3 nonroot.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import _bundle as b

UID = 65534


def attempt(flags: list[str]) -> None:
    work = tempfile.mkdtemp(prefix="gvisor-nonroot-")
    os.chmod(work, 0o755)
    root = os.path.join(work, "state")
    os.mkdir(root)
    bundle = b.make_bundle(
        ["/usr/bin/python3", "-c", "import os; print('inside uid', os.getuid(), 'pid', os.getpid())"]
    )
    os.chmod(bundle, 0o755)
    for d in (root, bundle, os.path.join(bundle, "rootfs")):
        os.chown(d, UID, UID)
    cid = b.new_id()
    argv = [
        "setpriv",
        f"--reuid={UID}",
        f"--regid={UID}",
        "--clear-groups",
        b.RUNSC,
        f"--root={root}",
        "--network=none",
        "--platform=ptrace",
        *flags,
        "run",
        "--bundle",
        bundle,
        cid,
    ]
    try:
        r = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=b.TIMEOUT_S,
            check=False,
            env={"PATH": "/usr/bin:/bin", "HOME": work, "XDG_RUNTIME_DIR": work},
        )
        out = r.stdout.decode().strip()
        err = r.stderr.decode().strip().splitlines()
        b.show(
            f"uid {UID} {' '.join(flags) or '(no --rootless)'}: container ran",
            r.returncode == 0 and "inside uid" in out,
            f"rc={r.returncode} out={out!r} err={err[-1][:300] if err else ''!r}",
        )
    finally:
        subprocess.run(
            [
                "setpriv",
                f"--reuid={UID}",
                f"--regid={UID}",
                "--clear-groups",
                b.RUNSC,
                f"--root={root}",
                "delete",
                "--force",
                cid,
            ],
            capture_output=True,
            timeout=b.TIMEOUT_S,
            check=False,
        )
        shutil.rmtree(bundle, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    attempt([])
    attempt(["--rootless"])
    attempt(["--rootless", "--ignore-cgroups"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
