"""Control channel option (a): a host socketpair end as the container's stdin+stdout.

Shows: (1) what the supervisor sees on fd 0 inside gVisor; (2) whether plain bytes
flow both ways; (3) whether SCM_RIGHTS host->container works (host sends a pipe's
write end, inside writes to the received fd, host reads the pipe); (4) whether
SCM_RIGHTS container->host works. Run as root: python3 control_stdio.py [--platform=ptrace|kvm]
"""

from __future__ import annotations

import array
import os
import shutil
import socket
import subprocess
import sys
import tempfile

import _bundle as b

INSIDE = r"""
import array, os, socket, stat, sys
st = os.fstat(0)
s = socket.socket(fileno=os.dup(0))
s.settimeout(20)
print_ = lambda m: s.sendall((m + "\n").encode())
print_("fd0 mode=%o sock=%s type=%s" % (st.st_mode, stat.S_ISSOCK(st.st_mode), s.type))
data = s.recv(64)
print_("echo:" + data.decode())
# (3) host sends an fd with SCM_RIGHTS
try:
    msg, anc, flags, _ = s.recvmsg(64, socket.CMSG_SPACE(4 * 4))
    fds = []
    for level, typ, payload in anc:
        if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
            fds += list(array.array("i", payload[: len(payload) - len(payload) % 4]))
    kinds = []
    for fd in fds:
        kinds.append("%o" % os.fstat(fd).st_mode)
        try:
            kinds.append("wrote=%d" % os.write(fd, b"written-through-passed-fd"))
        except OSError as e:
            kinds.append("write error %r" % e)
        os.close(fd)
    print_("recvmsg bytes=%r ancillary=%d fds=%r flags=%d %s" % (msg, len(anc), fds, flags, kinds))
except OSError as e:
    print_("recvmsg error %r" % e)
# (4) container sends its own pipe fd back
r, w = os.pipe()
os.write(w, b"from-inside-pipe")
try:
    s.sendmsg([b"F"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [r]))])
    print_("sendmsg with SCM_RIGHTS: ok")
except OSError as e:
    print_("sendmsg with SCM_RIGHTS error %r" % e)
print_("END")
"""


def recv_fds(sock: socket.socket) -> tuple[bytes, list[int]]:
    msg, anc, _f, _a = sock.recvmsg(64, socket.CMSG_SPACE(4 * 4))
    fds: list[int] = []
    for level, typ, payload in anc:
        if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
            fds += list(array.array("i", payload[: len(payload) - len(payload) % 4]))
    return msg, fds


def main() -> int:
    flags = [a for a in sys.argv[1:] if a.startswith("--")] or []
    host, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    host.settimeout(30)
    root = tempfile.mkdtemp(prefix="gvisor-root-")
    cid = b.new_id()
    bundle = b.make_bundle(["/usr/bin/python3", "-c", INSIDE])
    proc = subprocess.Popen(
        [*b.runsc_argv(root, "--network=none", *flags), "run", "--bundle", bundle, cid],
        stdin=child,
        stdout=child,
        stderr=subprocess.PIPE,
    )
    child.close()
    lines: list[str] = []
    try:
        f = host.makefile("rb")
        lines.append(f.readline().decode().strip())
        host.sendall(b"ping")
        lines.append(f.readline().decode().strip())
        pr, pw = os.pipe()
        host.sendmsg([b"X"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [pw]))])
        os.close(pw)
        lines.append(f.readline().decode().strip())
        os.set_blocking(pr, False)
        try:
            via_fd = os.read(pr, 64)
        except BlockingIOError:
            via_fd = b""
        # the F byte (with or without fds) is read with recvmsg, not the buffered file
        msg, fds = recv_fds(host)
        back = [os.read(fd, 64) for fd in fds]
        rest = f.read().decode().strip().splitlines()
        lines += rest
        print("inside said:")
        for ln in lines:
            print("   ", ln)
        b.show("fd 0 inside is a socket", "sock=True" in lines[0], lines[0])
        b.show("plain bytes host<->container", lines[1] == "echo:ping")
        b.show(
            "SCM_RIGHTS host->container delivers a usable fd",
            via_fd == b"written-through-passed-fd",
            f"pipe read {via_fd!r}",
        )
        b.show(
            "SCM_RIGHTS container->host delivers a usable fd",
            back == [b"from-inside-pipe"],
            f"got msg={msg!r} fds={fds} data={back}",
        )
    finally:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        b.cleanup(root, cid, bundle)
        shutil.rmtree(root, ignore_errors=True)
        err = proc.stderr.read().decode() if proc.stderr else ""
        if err.strip():
            print("runsc stderr:", err.strip()[-800:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
