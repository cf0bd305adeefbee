"""The rendered proxy Deployment's command, run for real on loopback with the rendered ConfigMap.

What the cluster would run: ``PROXY_COMMAND`` reading the ConfigMap's ``egress.json``. Here it
listens on a free loopback port instead of 0.0.0.0:3128 (the only change). The test checks the
two things the NetworkPolicy leaves to the proxy: a name outside the allow list is refused, and an
allowed name that resolves to an internal address (``localhost`` -> 127.0.0.1, as a cluster name
could resolve to a Pod or Service address) is refused by the address check, not dialled. Then
SIGTERM stops it with exit 0. Bounded: one process, a few requests, loops with deadlines.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from contain.boundary.kubernetes import Kubernetes
from contain.boundary.load import boundary_from_mapping
from contain.boundary.plain import plain_boundary
from contain.k8s.names import plan_names
from contain.k8s.proxy import CONFIG_KEY, PROXY_COMMAND, plan_proxy_config_map


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_listening(port: int, proc: subprocess.Popen[bytes], deadline_s: float = 20.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"the proxy did not listen on {port} within {deadline_s}s")


def _request(port: int, head: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head.encode())
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def test_the_rendered_proxy_command_refuses_unlisted_names_and_internal_addresses(tmp_path: Path) -> None:
    boundary = boundary_from_mapping(
        {"version": 1, "task": "px", "network": {"allow": [{"host": "localhost", "ports": [8080]}]}}
    )
    config_map = plan_proxy_config_map(plain_boundary(boundary), plan_names("px", Kubernetes()))
    config = tmp_path / CONFIG_KEY
    config.write_text(config_map["data"][CONFIG_KEY])
    port = _free_port()
    argv = list(PROXY_COMMAND[1:])
    argv[argv.index("--config") + 1] = str(config)
    argv[argv.index("--listen") + 1] = f"127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from contain.cli import main; sys.exit(main())", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        _wait_listening(port, proc)
        unlisted = _request(port, "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
        internal = _request(port, "CONNECT localhost:8080 HTTP/1.1\r\nHost: localhost:8080\r\n\r\n")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert unlisted.startswith(b"HTTP/1.1 403") and b"Contain-Denied-By: egress.not_allowed" in unlisted
    assert internal.startswith(b"HTTP/1.1 403")
    assert b"Contain-Denied-By: egress.special_address.loopback" in internal
    assert proc.returncode == 0
    events = [json.loads(line) for line in err.decode().splitlines() if line.startswith("{")]
    assert [(e["host"], e["verdict"], e["rule_id"]) for e in events] == [
        ("", "deny", "egress.request"),  # _wait_listening's bare connect: why the Deployment has no TCP probe
        ("example.com", "deny", "egress.not_allowed"),
        ("localhost", "deny", "egress.special_address.loopback"),
    ]
