"""Control channel option (b): a host Unix socket bind-mounted in, `runsc --host-uds=open`.

The host listens on <tmp>/ctl/ctl.sock; the directory is bind-mounted at /ctl; inside,
python connects to /ctl/ctl.sock. Shows whether the connect works with and without
--host-uds=open, whether bytes flow, and whether SCM_RIGHTS works each way.
Run as root: python3 control_hostuds.py
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
import array, os, socket
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(20)
try:
    s.connect("/ctl/ctl.sock")
except OSError as e:
    print("connect error %r" % e, flush=True)
    raise SystemExit(3)
s.sendall(b"hello-from-inside\n")
msg, anc, flags, _ = s.recvmsg(64, socket.CMSG_SPACE(4 * 4))
fds = []
for level, typ, payload in anc:
    if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
        fds += list(array.array("i", payload[: len(payload) - len(payload) % 4]))
note = []
for fd in fds:
    try:
        note.append("wrote=%d" % os.write(fd, b"written-through-passed-fd"))
    except OSError as e:
        note.append("write error %r" % e)
    os.close(fd)
s.sendall(("recvmsg bytes=%r ancillary=%d fds=%r %s\n" % (msg, len(anc), fds, note)).encode())
r, w = os.pipe()
os.write(w, b"from-inside-pipe")
try:
    s.sendmsg([b"F"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [r]))])
except OSError as e:
    s.sendall(("sendmsg SCM_RIGHTS error %r\n" % e).encode())
s.close()
print("inside done", flush=True)
"""


def attempt(host_uds: str | None) -> None:
    tmp = tempfile.mkdtemp(prefix="gvisor-uds-")
    ctl = os.path.join(tmp, "ctl")
    os.mkdir(ctl)
    lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lsock.bind(os.path.join(ctl, "ctl.sock"))
    lsock.listen(1)
    lsock.settimeout(20)
    flags = ["--network=none"] + ([f"--host-uds={host_uds}"] if host_uds else [])
    root = tempfile.mkdtemp(prefix="gvisor-root-")
    cid = b.new_id()
    bundle = b.make_bundle(
        ["/usr/bin/python3", "-c", INSIDE],
        extra_mounts=[{"destination": "/ctl", "type": "bind", "source": ctl, "options": ["rbind", "rw"]}],
    )
    proc = subprocess.Popen(
        [*b.runsc_argv(root, *flags), "run", "--bundle", bundle, cid],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    label = f"--host-uds={host_uds}" if host_uds else "no --host-uds flag"
    try:
        try:
            conn, _ = lsock.accept()
        except TimeoutError:
            out, _err = proc.communicate(timeout=30)
            b.show(f"[{label}] container connects to the host socket", False, out.decode().strip())
            return
        conn.settimeout(20)
        f = conn.makefile("rb")
        hello = f.readline().decode().strip()
        b.show(f"[{label}] container connects to the host socket", hello == "hello-from-inside", hello)
        pr, pw = os.pipe()
        conn.sendmsg([b"X"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [pw]))])
        os.close(pw)
        line = f.readline().decode().strip()
        os.set_blocking(pr, False)
        try:
            via = os.read(pr, 64)
        except BlockingIOError:
            via = b""
        b.show(f"[{label}] SCM_RIGHTS host->container", via == b"written-through-passed-fd", line)
        msg, anc, _fl, _ = conn.recvmsg(128, socket.CMSG_SPACE(16))
        fds = [
            fd for lv, ty, pl in anc if ty == socket.SCM_RIGHTS for fd in array.array("i", pl[: len(pl) - len(pl) % 4])
        ]
        back = [os.read(fd, 64) for fd in fds]
        b.show(f"[{label}] SCM_RIGHTS container->host", back == [b"from-inside-pipe"], f"msg={msg!r} data={back}")
    finally:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        b.cleanup(root, cid, bundle)
        shutil.rmtree(root, ignore_errors=True)
        lsock.close()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    attempt(None)
    attempt("open")
    return 0


if __name__ == "__main__":
    sys.exit(main())
