"""Egress: can a listener bound from the host inside a network namespace we create be reached
from inside a runsc container, for each `--network` mode?

The host side does what contain.egress does: setns(2) into the namespace, bind+listen on
127.0.0.1:PORT (TCP, like the proxy) and 127.0.0.1:PORT (UDP, like the DNS stub), setns back,
serve from the host. A second TCP listener on the host's own loopback (root namespace) must
stay unreachable. The container gets the namespace through the OCI spec:
linux.namespaces = [{"type": "network", "path": "/run/netns/<name>"}].
Run as root: python3 egress_netns.py  (creates and deletes netns gvisor-proof-<pid>)
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
import subprocess
import sys
import threading

import _bundle as b

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)

INSIDE = r"""
import json, socket, sys
res = {"ifaces": [n for _, n in socket.if_nameindex()]}
def tcp(port):
    s = socket.socket(); s.settimeout(3)
    try:
        s.connect(("127.0.0.1", port)); s.sendall(b"ping"); return "ok:" + s.recv(64).decode()
    except OSError as e:
        return "fail:%s" % type(e).__name__ + ":" + str(e.errno)
    finally:
        s.close()
def udp(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)
    try:
        s.sendto(b"q", ("127.0.0.1", port)); return "ok:" + s.recvfrom(64)[0].decode()
    except OSError as e:
        return "fail:%s" % type(e).__name__
    finally:
        s.close()
res["netns_tcp"] = tcp(int(sys.argv[1]))
res["netns_udp"] = udp(int(sys.argv[1]))
res["host_lo_tcp"] = tcp(int(sys.argv[2]))
print(json.dumps(res))
"""


def setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns")


def serve_tcp(sock: socket.socket, reply: bytes, stop: threading.Event) -> None:
    sock.settimeout(0.5)
    for _ in range(400):  # bounded: at most ~200 s
        if stop.is_set():
            return
        try:
            conn, _ = sock.accept()
        except TimeoutError:
            continue
        with conn:
            conn.settimeout(2)
            try:
                conn.recv(64)
                conn.sendall(reply)
            except OSError:
                pass


def serve_udp(sock: socket.socket, stop: threading.Event) -> None:
    sock.settimeout(0.5)
    for _ in range(400):
        if stop.is_set():
            return
        try:
            _data, peer = sock.recvfrom(64)
        except TimeoutError:
            continue
        sock.sendto(b"udp-in-netns", peer)


def main() -> int:
    name = f"gvisor-proof-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True, timeout=10)
    path = f"/run/netns/{name}"
    stop = threading.Event()
    socks: list[socket.socket] = []
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True, timeout=10)
        own = os.open("/proc/self/ns/net", os.O_RDONLY)
        target = os.open(path, os.O_RDONLY)
        setns(target)
        try:
            in_tcp = socket.socket()
            in_tcp.bind(("127.0.0.1", 0))
            port = in_tcp.getsockname()[1]
            in_tcp.listen(8)
            in_udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            in_udp.bind(("127.0.0.1", port))
        finally:
            setns(own)
            os.close(own)
            os.close(target)
        host_tcp = socket.socket()
        host_tcp.bind(("127.0.0.1", 0))
        host_tcp.listen(8)
        host_port = host_tcp.getsockname()[1]
        socks += [in_tcp, in_udp, host_tcp]
        threads = [
            threading.Thread(target=serve_tcp, args=(in_tcp, b"tcp-in-netns", stop), daemon=True),
            threading.Thread(target=serve_udp, args=(in_udp, stop), daemon=True),
            threading.Thread(target=serve_tcp, args=(host_tcp, b"HOST-LOOPBACK", stop), daemon=True),
        ]
        for t in threads:
            t.start()
        print(
            f"netns {path}: listener 127.0.0.1:{port} tcp+udp; root-namespace loopback listener 127.0.0.1:{host_port}"
        )
        cases = [
            ("--network=none", path),
            ("--network=sandbox", path),
            ("--network=host", path),
            ("--network=host", None),  # no path: runsc makes a fresh namespace (lo down)
            # positive control: the namespace this script runs in (the host's): the root
            # loopback listener must be reachable, so a NO above is the namespace's doing
            ("--network=host", f"/proc/{os.getpid()}/ns/net"),
        ]
        for mode, ns in cases:
            r = b.run_container(
                ["/usr/bin/python3", "-c", INSIDE, str(port), str(host_port)], global_flags=[mode], netns_path=ns
            )
            label = f"{mode} netns={'path ' + ns if ns else '(no path in spec)'}"
            try:
                res = json.loads(r.stdout.decode().strip().splitlines()[-1])
            except (IndexError, ValueError):
                print(f"{label}: container failed rc={r.returncode} stderr={r.stderr.decode()[-600:]}")
                continue
            print(f"{label}: interfaces={res['ifaces']}")
            b.show("   netns TCP listener reachable", res["netns_tcp"].startswith("ok"), res["netns_tcp"])
            b.show("   netns UDP listener reachable", res["netns_udp"].startswith("ok"), res["netns_udp"])
            b.show("   root-namespace loopback reachable", res["host_lo_tcp"].startswith("ok"), res["host_lo_tcp"])
    finally:
        stop.set()
        for s in socks:
            s.close()
        subprocess.run(["ip", "netns", "delete", name], check=False, timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
