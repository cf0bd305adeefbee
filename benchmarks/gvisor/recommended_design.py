"""The recommended runsc arrangement end to end, then a check that nothing is left behind.

One container: contain's supervisor (with GVISOR_ARGS) as pid 1 with the control
socketpair as stdin and `--control-fd 0`; contain's rendered linux.seccomp with `--oci-seccomp`;
`--network=host` with linux.namespaces naming a netns this script creates, where the host has
bound (by setns, as contain.egress does) a TCP "proxy" on 127.0.0.1:P and a "capture" listener
on 127.77.0.1:P. A root-namespace loopback listener must stay unreachable. A workload run
through the supervisor tries all three and ptrace. Afterwards: EXIT, `runsc delete --force`,
and a scan for processes naming the state root, the state dir, and the netns.
Run as root: python3 recommended_design.py
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading

import _bundle as b
from egress_netns import serve_tcp, setns
from lifecycle import procs_naming
from supervisor_in_runsc import GVISOR_ARGS, one_run, patched_supervisor

from contain.runtime.container.oci_seccomp import render_oci_seccomp
from contain.runtime.supervisor_channel import SupervisorChannel

WORKLOAD = r"""
import ctypes, socket, sys
def tcp(host, port):
    s = socket.socket(); s.settimeout(3)
    try:
        s.connect((host, port)); s.sendall(b"x"); return "ok:" + s.recv(64).decode()
    except OSError as e:
        return "fail:" + type(e).__name__
    finally:
        s.close()
p, hp = int(sys.argv[1]), int(sys.argv[2])
l = ctypes.CDLL(None, use_errno=True)
print("proxy", tcp("127.0.0.1", p), "capture", tcp("127.77.0.1", p), "host-lo", tcp("127.0.0.1", hp),
      "ptrace", "ok" if l.ptrace(0, 0, 0, 0) == 0 else "errno=%d" % ctypes.get_errno())
"""


def main() -> int:
    name = f"gvisor-design-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True, timeout=10)
    ns_path = f"/run/netns/{name}"
    stop = threading.Event()
    build = tempfile.mkdtemp(prefix="gvisor-sup-")
    root = tempfile.mkdtemp(prefix="gvisor-root-")
    cid = b.new_id()
    socks: list[socket.socket] = []
    bundle = ""
    proc = None
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True, timeout=10)
        own, target = os.open("/proc/self/ns/net", os.O_RDONLY), os.open(ns_path, os.O_RDONLY)
        setns(target)
        try:
            proxy = socket.socket()
            proxy.bind(("127.0.0.1", 0))
            port = proxy.getsockname()[1]
            capture = socket.socket()
            capture.bind(("127.77.0.1", port))
            for s in (proxy, capture):
                s.listen(8)
        finally:
            setns(own)
            os.close(own)
            os.close(target)
        host_lo = socket.socket()
        host_lo.bind(("127.0.0.1", 0))
        host_lo.listen(8)
        socks += [proxy, capture, host_lo]
        for s, reply in ((proxy, b"PROXY"), (capture, b"CAPTURE"), (host_lo, b"HOST-LOOPBACK")):
            threading.Thread(target=serve_tcp, args=(s, reply, stop), daemon=True).start()
        sup = patched_supervisor(build)
        bundle = b.make_bundle(
            [f"/.contain/{sup.name}", "--control-fd", "0", *GVISOR_ARGS],
            extra_mounts=[{"destination": "/.contain", "type": "bind", "source": build, "options": ["rbind", "ro"]}],
            netns_path=ns_path,
            seccomp=render_oci_seccomp(arch="x86_64"),
        )
        host, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        proc = subprocess.Popen(
            [*b.runsc_argv(root, "--network=host", "--oci-seccomp"), "run", "--bundle", bundle, cid],
            stdin=child,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        child.close()
        chan = SupervisorChannel(host)
        b.show("READY", True, str(chan.read_ready(30)))
        _started, exited, out, err = one_run(
            chan, WORKLOAD.replace("sys.argv[1]", str(port)).replace("sys.argv[2]", str(host_lo.getsockname()[1])), b""
        )
        text = out.decode()
        print("   workload:", text.strip(), err.decode().strip()[-300:])
        b.show("egress proxy listener in the netns reached", "proxy ok:PROXY" in text)
        b.show("capture listener 127.77.0.1 in the netns reached", "capture ok:CAPTURE" in text)
        b.show("root-namespace loopback NOT reached", "host-lo fail" in text)
        b.show("ptrace denied by contain's OCI seccomp", "ptrace errno=1" in text, str(exited))
        chan.exit()
        rc = proc.wait(timeout=30)
        b.show("EXIT ends runsc run", rc == 0, f"rc={rc}")
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        if bundle:
            b.cleanup(root, cid, bundle)
        stop.set()
        for s in socks:
            s.close()
        left = procs_naming(cid, root)
        state = os.listdir(root)
        subprocess.run(["ip", "netns", "delete", name], check=False, timeout=10)
        b.show("after delete --force: no process names the container or state root", not left, str(left))
        b.show("after delete --force: state dir empty", not state, str(state))
        b.show("netns removed", not os.path.exists(ns_path))
        b.show("no cgroup dir named after the container", not glob.glob(f"/sys/fs/cgroup/*/{cid}"))
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(build, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
