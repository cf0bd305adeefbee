"""contain's real supervisor as pid 1 of a runsc container, driven by contain's own SupervisorChannel.

The control socket is donated as the container's stdin (fd 0) and named with
`--control-fd 0`; each RUN carries stdin/stdout/stderr pipes as SCM_RIGHTS, exactly as the
process backend does. Shows READY (and the Landlock state gVisor gives), two runs in one
container, stdio through the passed pipes, KILL of a running workload, and EXIT.
Run as root: python3 benchmarks/gvisor/supervisor_in_runsc.py [--patched] [runsc flags, e.g. --oci-seccomp]
--patched: pass GVISOR_ARGS (without them the supervisor refuses to start under gVisor);
--oci-seccomp: also put contain's rendered linux.seccomp in the bundle.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src"))
import _bundle as b

from contain.runtime.container.oci_seccomp import render_oci_seccomp
from contain.runtime.kernel_differences import supervisor_difference_args
from contain.runtime.supervisor_build import ensure_supervisor_binary
from contain.runtime.supervisor_channel import SupervisorChannel

PY = "/usr/bin/python3"


def one_run(chan: SupervisorChannel, code: str, stdin_data: bytes) -> tuple[object, object, bytes, bytes]:
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    started = chan.start([PY, "-c", code], {"PATH": "/usr/bin"}, "/", (), (in_r, out_w, err_w))
    for fd in (in_r, out_w, err_w):
        os.close(fd)
    with contextlib.suppress(BrokenPipeError):  # the workload never read (SPAWN_FAILED): the reply says why
        os.write(in_w, stdin_data)
    os.close(in_w)
    exited = chan.wait_exited(30) if type(started).__name__ == "Started" else None
    out = os.read(out_r, 4096)
    err = os.read(err_r, 4096)
    for fd in (out_r, err_r):
        os.close(fd)
    return started, exited, out, err


# The two gVisor 20221219 incompatibilities this script found (close_range(first, ~0U) and
# PR_SET_SECUREBITS, both EINVAL; seen with `runsc --strace --debug --debug-log=DIR`) are fixed in
# the supervisor itself: it asks close_range for INT_MAX, and takes "no securebits" only when the
# host accepts that difference (contain.runtime.kernel_differences). --patched is kept as a name
# for the stock binary with those arguments.
GVISOR_ARGS: tuple[str, ...] = supervisor_difference_args(kernel="gvisor")


def patched_supervisor(out_dir: str) -> Path:
    """contain's own supervisor binary; it needs no patch since the supervisor-gvisor fix."""
    del out_dir
    return ensure_supervisor_binary()


def main() -> int:
    patched = "--patched" in sys.argv[1:]
    # --oci-seccomp is a runsc flag; with it the bundle also carries contain's rendered filter
    seccomp = render_oci_seccomp(arch="x86_64") if "--oci-seccomp" in sys.argv[1:] else None
    tmp_build = tempfile.mkdtemp(prefix="gvisor-sup-")
    sup = patched_supervisor(tmp_build) if patched else ensure_supervisor_binary()
    print(f"supervisor binary: {sup} ({'with ' + ' '.join(GVISOR_ARGS) if patched else 'no accepted difference'})")
    platform = [a for a in sys.argv[1:] if a.startswith("--") and a != "--patched"]  # extra runsc flags
    host, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    root = tempfile.mkdtemp(prefix="gvisor-root-")
    cid = b.new_id()
    bundle = b.make_bundle(
        [
            f"/.contain/{sup.name}",
            "--control-fd",
            "0",
            "--landlock-abi",
            "1",
            "--landlock-auto",
            "--landlock-read",
            "/usr",
            *(GVISOR_ARGS if patched else ()),
        ],
        extra_mounts=[
            {"destination": "/.contain", "type": "bind", "source": str(sup.parent), "options": ["rbind", "ro"]}
        ],
        seccomp=seccomp,
    )
    print(f"linux.seccomp in bundle: {'contain SECCOMP_RULES' if seccomp else 'none'}")
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [*b.runsc_argv(root, "--network=none", *platform), "run", "--bundle", bundle, cid],
        stdin=child,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    child.close()
    chan = SupervisorChannel(host)
    try:
        ready = chan.read_ready(30)
        b.show("supervisor READY inside runsc", True, f"{ready} after {time.monotonic() - t0:.2f}s")
        for n in (1, 2):
            started, exited, out, err = one_run(
                chan,
                "import ctypes,os,sys; d=sys.stdin.read(); l=ctypes.CDLL(None, use_errno=True); "
                "pt='ok' if l.ptrace(0,0,0,0) == 0 else 'errno=%d' % ctypes.get_errno(); "
                "print('pid', os.getpid(), 'got', d, 'ptrace', pt); "
                "print('to-stderr', file=sys.stderr); sys.exit(7)",
                f"input-{n}".encode(),
            )
            ok = f"got input-{n}".encode() in out and b"to-stderr" in err and getattr(exited, "exit_code", None) == 7
            b.show(
                f"run {n}: stdin/stdout/stderr via SCM_RIGHTS pipes, exit status",
                ok,
                f"{started} out={out!r} err={err!r} {exited}",
            )
        # cancellation of a running workload through the protocol
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        started = chan.start(
            [PY, "-c", "import time\nfor _ in range(600): time.sleep(0.1)"], {}, "/", (), (in_r, out_w, out_w)
        )
        if type(started).__name__ != "Started":
            b.show("KILL ends a running workload", False, f"cannot start: {started}")
            chan.exit()
            return 1
        for fd in (in_r, out_w):
            os.close(fd)
        t1 = time.monotonic()
        chan.kill()
        exited = chan.wait_exited(30)
        b.show(
            "KILL ends a running workload",
            getattr(exited, "signal", None) == 9,
            f"{started} -> {exited} in {time.monotonic() - t1:.3f}s",
        )
        os.close(in_w)
        os.close(out_r)
        chan.exit()
        rc = proc.wait(timeout=30)
        b.show("EXIT ends the supervisor and the container (runsc run returns)", True, f"runsc rc={rc}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        b.cleanup(root, cid, bundle)
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(tmp_build, ignore_errors=True)
        err_text = proc.stderr.read().decode() if proc.stderr else ""
        if err_text.strip():
            print("stderr (runsc + supervisor):", err_text.strip()[-1500:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
