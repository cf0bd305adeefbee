"""Cancellation and leftovers: `runsc kill`, `runsc delete --force`, and what stays behind.

For each way of ending a running container (create+start, detached, a bounded busy loop as the
workload, linux.cgroupsPath set) it lists, before and after: host processes whose command line
names the container id, files in the --root state dir, and cgroup v1 dirs named by cgroupsPath.
Run as root: python3 lifecycle.py
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time

import _bundle as b

WORKLOAD = ["/usr/bin/python3", "-c", "import time\nfor _ in range(1200): time.sleep(0.1)"]


def procs_naming(cid: str, root: str = "\0") -> list[str]:
    found = []
    for d in glob.glob("/proc/[0-9]*"):
        try:
            with open(f"{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if (cid in cmd or root in cmd) and str(os.getpid()) != d.split("/")[-1]:
            found.append(f"{d.split('/')[-1]}:{cmd[:60].strip()}")
    return found


def cgroup_dirs(cg: str) -> list[str]:
    return sorted(p for p in glob.glob(f"/sys/fs/cgroup/*{cg}") if os.path.isdir(p))


def state(root: str) -> list[str]:
    return sorted(os.listdir(root)) if os.path.isdir(root) else ["<no root dir>"]


def runsc(root: str, *args: str) -> subprocess.CompletedProcess[str]:
    # Output to files, not pipes: `create` leaves the sandbox holding its stdio, so a pipe
    # would never reach EOF.
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        r = subprocess.run(
            [*b.runsc_argv(root, "--network=none"), *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            timeout=b.TIMEOUT_S,
            check=False,
        )
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(r.args, r.returncode, out.read().decode(), err.read().decode())


def snapshot(label: str, root: str, cid: str, cg: str) -> None:
    p, s, c = procs_naming(cid, root), state(root), cgroup_dirs(cg)
    parents = sorted(glob.glob("/sys/fs/cgroup/*/gvisor-proof"))
    print(f"  {label}: {len(p)} processes {p[:4]}{' ...' if len(p) > 4 else ''}")
    print(f"  {' ' * len(label)}  state dir {s}; cgroup dirs {c}; parent dirs left: {len(parents)}")


def scenario(name: str, steps: list[tuple[str, ...]]) -> None:
    print(f"== {name}")
    root = tempfile.mkdtemp(prefix="gvisor-root-")
    cid = b.new_id()
    cg = f"/gvisor-proof/{cid}"
    bundle = b.make_bundle(WORKLOAD, cgroups_path=cg)
    try:
        r = runsc(root, "create", "--bundle", bundle, cid)
        if r.returncode != 0:
            print("  create failed:", r.stderr[-500:])
            return
        runsc(root, "start", cid)
        snapshot("running", root, cid, cg)
        for step in steps:
            t0 = time.monotonic()
            r = runsc(root, *[s.replace("CID", cid) for s in step])
            took = time.monotonic() - t0
            st = runsc(root, "state", cid)
            status = (
                st.stdout.split('"status": "')[1].split('"')[0] if '"status"' in st.stdout else st.stderr.strip()[-80:]
            )
            print(
                f"  $ runsc {' '.join(step).replace('CID', cid)} -> rc={r.returncode} in {took:.3f}s; state: {status}"
            )
            snapshot("after", root, cid, cg)
    finally:
        b.cleanup(root, cid, bundle)
        left = procs_naming(cid, root)
        # only dirs this script named; rmdir fails if not empty
        for d in [*cgroup_dirs(cg), *glob.glob("/sys/fs/cgroup/*/gvisor-proof")]:
            with contextlib.suppress(OSError):
                os.rmdir(d)
        print(f"  after script cleanup: processes {left}; state dir {state(root)}")
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    scenario("runsc kill KILL, then runsc delete", [("kill", "CID", "KILL"), ("delete", "CID")])
    scenario("runsc delete --force on a running container", [("delete", "--force", "CID")])
    return 0


if __name__ == "__main__":
    sys.exit(main())
