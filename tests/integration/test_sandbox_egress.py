"""Egress through the real Sandbox: allowed names reachable by every path, everything else not.

The host-side proxy, stub resolver and capture are tested in depth in test_egress_netns.py; this
file checks they are wired into the sandbox: proxy variables set, resolv.conf pointing at the
stub, decisions recorded in the RunResult and refused attempts reported as violations.
"""

from __future__ import annotations

import shutil
import socket

import pytest

from contain.boundary import Boundary
from contain.runtime import Sandbox

pytestmark = [pytest.mark.needs_bwrap, pytest.mark.needs_root]


def allowing(port: int) -> Boundary:
    return Boundary.model_validate(
        {"network": {"allow": [{"host": "api.test", "ports": [port]}], "hosts": {"api.test": "127.0.0.1"}}}
    )


def test_an_allowed_name_is_reachable_through_the_proxy_and_by_name(host_server) -> None:
    port, seen = host_server
    code = (
        "import socket, urllib.request\n"
        f"print(urllib.request.urlopen('http://api.test:{port}/urllib', timeout=5).read().decode().strip())\n"
        f"s = socket.create_connection(('api.test', {port}), timeout=5)\n"
        "s.sendall(b'GET /transparent HTTP/1.0\\r\\nHost: api.test\\r\\n\\r\\n')\n"
        "print(s.recv(200).split(b'\\r\\n')[0].decode())\n"
    )
    with Sandbox(allowing(port)) as sb:
        result = sb.run(["python3", "-c", code])
    assert result.stdout.data.decode().splitlines() == ["hello from host", "HTTP/1.0 200 OK"], result.stderr.data
    assert seen == ["/urllib", "/transparent"]
    assert [(e["host"], e["verdict"], e["via"]) for e in result.egress] == [
        ("api.test", "allow", "http"),
        ("api.test", "allow", "transparent"),
    ]
    assert result.violations == ()


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_node_fetch_which_ignores_proxy_variables_is_captured(host_server) -> None:
    port, seen = host_server
    code = f"fetch('http://api.test:{port}/node').then(r => r.text()).then(t => console.log(t.trim()))"
    with Sandbox(allowing(port)) as sb:
        result = sb.run(["node", "-e", code])
    assert result.stdout.data == b"hello from host\n", result.stderr.data
    assert seen == ["/node"]


def test_other_hosts_ports_literals_and_noproxy_are_refused_and_reported(host_server) -> None:
    port, seen = host_server
    other = socket.socket()
    other.bind(("127.0.0.1", 0))
    other_port = other.getsockname()[1]
    other.close()
    script = (
        f"curl -s -m 3 http://other.test:{port}/a; echo \" rc=$?\"; "
        f"curl -s -m 3 http://api.test:{other_port}/b; echo \" rc=$?\"; "
        f"curl -s -m 3 http://127.0.0.1:{port}/c; echo \" rc=$?\"; "
        f"curl -s -m 3 --noproxy '*' http://other.test:{port}/d; echo \" rc=$?\"; "
        f"curl -s -m 3 --noproxy '*' http://127.0.0.1:{port}/e; echo \" rc=$?\"; "
        f"(echo > /dev/tcp/127.0.0.1/{port}) 2>/dev/null; echo \"devtcp rc=$?\"; "
        "getent hosts exfil-canary.example.com; echo \"dns rc=$?\""
    )
    with Sandbox(allowing(port)) as sb:
        result = sb.run(["bash", "-c", script])
    out = result.stdout.data.decode()
    assert seen == []  # nothing reached the server: every request was refused before it
    assert "hello from host" not in out
    assert "dns rc=2" in out  # NXDOMAIN from the stub: the name is not allowed
    messages = [v.message for v in result.violations]
    assert f"other.test:{port} is not in network.allow" in messages
    assert any("exfil-canary.example.com" in m for m in messages)
    # Control: the same sandbox reaches the allowed destination.
    with Sandbox(allowing(port)) as sb:
        assert sb.run(["curl", "-s", "-m", "3", f"http://api.test:{port}/ok"]).stdout.data == b"hello from host\n"
    assert seen == ["/ok"]


def _loopback(port: int) -> Boundary:
    return Boundary.model_validate({"network": {"allow": [{"host": "127.0.0.1", "ports": [port]}]}})


@pytest.mark.parametrize(
    ("client", "argv"),
    [
        ("curl", ["curl", "-sS", "--max-time", "5", "http://127.0.0.1:{port}/curl"]),
        (
            "urllib",
            [
                "python3",
                "-c",
                "import urllib.request; "
                "print(urllib.request.urlopen('http://127.0.0.1:{port}/urllib', timeout=5).read().decode(), end='')",
            ],
        ),
        (
            "requests",
            [
                "python3",
                "-c",
                "import requests; print(requests.get('http://127.0.0.1:{port}/requests', timeout=5).text, end='')",
            ],
        ),
        (
            "node",
            ["node", "-e", "fetch('http://127.0.0.1:{port}/node').then(r => r.text()).then(t => process.stdout.write(t))"],
        ),
    ],
)
def test_a_named_host_loopback_service_is_reachable_by_common_clients(host_server, client, argv) -> None:
    port, seen = host_server
    if shutil.which(argv[0]) is None:
        pytest.fail(f"{argv[0]} is not installed; scripts/bootstrap.sh installs it")
    with Sandbox(_loopback(port)) as sb:
        result = sb.run([part.format(port=port) for part in argv])
    assert result.stdout.data == b"hello from host\n", result.stderr.data
    assert seen == [f"/{client}"]
    assert [(e["host"], e["port"], e["verdict"]) for e in result.egress] == [("127.0.0.1", port, "allow")]


def test_a_loopback_port_the_manifest_does_not_name_stays_unreachable(host_server) -> None:
    port, seen = host_server
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other_port = other.getsockname()[1]
    code = (
        "import socket\n"
        f"for port in ({port}, {other_port}):\n"
        "    try:\n"
        "        socket.create_connection(('127.0.0.1', port), timeout=3).close(); print(port, 'open')\n"
        "    except OSError as e:\n"
        "        print(port, 'refused')\n"
    )
    with Sandbox(_loopback(other_port)) as sb:  # names another port, not the server's
        result = sb.run(["python3", "-c", code])
    assert result.stdout.data.decode().splitlines()[0] == f"{port} refused"
    assert seen == []


def test_a_flood_of_long_hostnames_is_recorded_clipped_and_every_refusal_is_reported() -> None:
    """Issue 18 item 5: the host kept every 16 KB hostname (twice, with the reason) in full."""
    code = (
        "import socket\n"
        "for i in range(200):\n"
        "    name = f'{i}-' + 'a' * 16000 + '.test'\n"
        "    s = socket.create_connection(('127.0.0.1', 3128), timeout=5)\n"
        "    s.sendall(f'CONNECT {name}:443 HTTP/1.1\\r\\nHost: {name}:443\\r\\n\\r\\n'.encode())\n"
        "    assert s.recv(64).startswith(b'HTTP/1.1 403'), 'not refused'\n"
        "    s.close()\n"
    )
    with Sandbox(allowing(9)) as sb:
        result = sb.run(["/usr/bin/python3", "-c", code], timeout=60)
    assert result.exit_code == 0, result.stderr.data
    refused = [e for e in result.egress if e["verdict"] == "deny"]
    longest = max(len(str(e[k])) for e in result.egress for k in ("host", "reason"))
    assert longest <= 600  # a name is at most 253 chars; the clip keeps 512 and says what it cut
    assert len(refused) == 200 and result.egress_dropped == {}
    assert all(e["host"].endswith("more chars]") for e in refused)
    assert sum(1 for v in result.violations if v.kind == "egress") == 200


def test_connections_past_the_open_limit_are_closed_by_the_host_and_reported() -> None:
    """Each open connection costs the host buffers; the sandbox may not hold more than the limit."""
    from contain.egress.session import MAX_OPEN_CONNECTIONS

    code = (
        "import socket\n"
        f"held = [socket.create_connection(('127.0.0.1', 3128), timeout=5) for _ in range({MAX_OPEN_CONNECTIONS})]\n"
        "extra = []\n"
        "for _ in range(8):\n"
        "    s = socket.create_connection(('127.0.0.1', 3128), timeout=5)\n"
        "    try:\n"
        "        extra.append(s.recv(1))\n"
        "    except OSError as e:\n"
        "        extra.append(type(e).__name__)\n"
        "print(extra)\n"
    )
    b = Boundary.model_validate(
        {
            "network": {"allow": [{"host": "api.test", "ports": [9]}], "hosts": {"api.test": "127.0.0.1"}},
            "resources": {"open_files_max": 2048},
        }
    )
    with Sandbox(b) as sb:
        result = sb.run(["/usr/bin/python3", "-c", code], timeout=60)
    assert result.exit_code == 0, result.stderr.data
    import ast

    closed = ast.literal_eval(result.stdout.data.decode())
    assert len(closed) == 8 and all(c in (b"", "ConnectionResetError") for c in closed), closed
    limited = [e for e in result.egress if e["rule_id"] == "egress.connection_limit"]
    assert len(limited) == 8
