"""`make demo`: a model-written script does its job in a sandbox and fails at everything else.

The judge stands outside: a secret planted in the caller's environment and in a file, a marker
path in host /tmp, a TCP listener on the host's loopback, and the host's process table. The demo
prints what the task did, what the sandbox reported, and what the host saw.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from contain.boundary import load_boundary
from contain.boundary.extend import BoundaryFlags, extend_boundary
from contain.runtime import Sandbox

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def listen() -> tuple[socket.socket, list[bytes]]:
    """A host loopback listener the task will try to reach; it must receive nothing."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    received: list[bytes] = []

    def serve() -> None:
        while server.fileno() != -1:
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            received.append(conn.recv(4096))
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return server, received


def sleepers() -> set[int]:
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:2] == [b"sleep", b"3600"]:
                found.add(int(pid))
        except OSError:
            continue
    return found


def main() -> int:
    token = "demo-" + secrets.token_hex(12)
    os.environ["DEMO_API_TOKEN"] = token  # the caller's secret: must never reach the sandbox
    workdir = Path(tempfile.mkdtemp(prefix="contain-demo-"))
    workdir.chmod(0o755)
    secret_file = workdir / "credentials"
    secret_file.write_text(f"aws_secret_access_key = {token}\n")
    secret_file.chmod(0o644)  # readable by anyone on the host, yet invisible in the sandbox
    marker = workdir / "host-marker"
    server, received = listen()
    before = sleepers()
    out_dir = REPO / "demo-out" / "report"
    shutil.rmtree(out_dir, ignore_errors=True)

    boundary = load_boundary(HERE / "contain.yaml")
    boundary = extend_boundary(
        boundary,
        BoundaryFlags(
            reads=[f"{HERE / 'task.py'}:/inputs/task.py"],
            env=[
                f"DEMO_CREDENTIALS_PATH={secret_file}",
                f"DEMO_HOST_MARKER={marker}",
                f"DEMO_LISTENER_PORT={server.getsockname()[1]}",
            ],
        ),
    )
    print("demo: boundary summarize-invoices: read ./data, scratch /work/out (exported), no network")
    with Sandbox(boundary) as sandbox:
        for layer, state in sandbox.layers.items():
            print(f"demo: layer {layer}: {state}")
        result = sandbox.run(["python3", "/inputs/task.py"])
    server.close()

    print("\n--- what the task printed ---")
    print(result.stdout.data.decode(errors="replace").rstrip())
    if result.stderr.data:
        print(result.stderr.data.decode(errors="replace").rstrip()[-800:])
    print("\n--- what the sandbox reported ---")
    print(f"exit {result.exit_code} signal {result.signal} timed_out {result.timed_out} oom_killed {result.oom_killed}")
    print(f"cpu {result.usage.cpu_s:.2f}s, peak memory {result.usage.memory_peak_bytes} bytes ({result.usage.source})")
    for violation in result.violations:
        print(f"violation: {violation.kind}: {violation.message}")

    leftover = sleepers() - before
    output = result.stdout.data + result.stderr.data
    checks = [
        ("the report was written and exported", (out_dir / "summary.md").is_file()),
        ("the caller's token never appeared in the sandbox", token.encode() not in output),
        ("the secret file was invisible", b"aws_secret_access_key" not in output),
        ("nothing was written on the host", not marker.exists()),
        ("the inputs are unchanged", b"pwned" not in (HERE / "data" / "invoices.csv").read_bytes()),
        ("the host listener received nothing", received == []),
        ("the fork bomb was held", b"attempt fork bomb: SUCCEEDED" not in output),
        ("the memory bomb was killed", b"ate 2 GiB" not in output),
        ("no daemon survived", not leftover),
    ]
    print("\n--- judged from outside ---")
    for what, ok in checks:
        print(f"{'CONTAINED' if ok else 'ESCAPED  '}  {what}")
    if (out_dir / "summary.md").is_file():
        print(f"\nreport exported to {out_dir.relative_to(REPO)}/summary.md:")
        print((out_dir / "summary.md").read_text().rstrip())
    for pid in leftover:
        subprocess.run(["kill", "-9", str(pid)], check=False)
    shutil.rmtree(workdir, ignore_errors=True)
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
