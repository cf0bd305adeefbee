"""Egress end to end: real loopback servers on the host, clients inside a network namespace.

The namespace is made with ``unshare --net --mount`` (only ``lo``, a private /etc/resolv.conf
pointing at the stub), and clients run in it with ``nsenter``. All traffic stays on the host's
loopback or inside that namespace: the only non-loopback addresses used are sent from inside
the namespace, where there is no route, so no packet leaves.
"""

from __future__ import annotations

import http.server
import os
import shutil
import socket
import socketserver
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from contain.boundary import boundary_from_mapping
from contain.egress import EgressEvent, EgressSession, start_egress
from contain.egress.session import RESOLV_CONF_TEXT

# needs_root: setns into the test namespace and binding port 53 there.
pytestmark = [pytest.mark.needs_root, pytest.mark.needs_netns]

LOOPBACK_SPELLINGS = ["127.0.0.1", "127.1", "0177.0.0.1", "0x7f000001", "2130706433", "0x7f.0.0.01"]
LITERAL_SPELLINGS_OF_127_0_0_2 = ["127.0.0.2", "127.2", "0x7f000002", "2130706434", "0177.0.0.02"]


def _require_host() -> None:
    for tool in ("unshare", "nsenter", "ip"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (util-linux / iproute2)")


# ---- host-side servers ---------------------------------------------------------------------


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[tuple[str, str]]] = []

    def _reply(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.seen.append((self.headers.get("Host", ""), self.path))
        payload = f"hello {self.headers.get('Host')} {self.path} {len(body)}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _reply

    def log_message(self, *args: Any) -> None:
        pass


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def _serve(server: socketserver.BaseServer) -> None:
    threading.Thread(target=server.serve_forever, daemon=True).start()


class World:
    """Servers on the host loopback and a test network namespace with egress running."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        _Recorder.seen = []
        self.http = _Server(("127.0.0.1", 0), _Recorder)
        self.https = _Server(("127.0.0.1", 0), _Recorder)
        self.cert = tmp / "cert.pem"
        key = tmp / "key.pem"
        subprocess.run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "1",
                "-subj",
                "/CN=allowed.test",
                "-addext",
                "subjectAltName=DNS:allowed.test,DNS:x.wild.test",
                "-keyout",
                str(key),
                "-out",
                str(self.cert),
            ],
            check=True,
            capture_output=True,
        )
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert, key)
        self.https.socket = context.wrap_socket(self.https.socket, server_side=True)
        self.echo = _Server(("127.0.0.1", 0), _Echo)
        self.literal = _Server(("127.0.0.2", 0), _Echo)  # named by an address entry
        self.udp_canary = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp_canary.bind(("127.0.0.1", 0))
        self.udp_canary.settimeout(0.5)
        for server in (self.http, self.https, self.echo, self.literal):
            _serve(server)
        self.ports = {
            "http": self.http.server_address[1],
            "https": self.https.server_address[1],
            "echo": self.echo.server_address[1],
            "literal": self.literal.server_address[1],
            "canary": self.udp_canary.getsockname()[1],
        }
        resolv = tmp / "resolv.conf"
        resolv.write_text(RESOLV_CONF_TEXT)
        self.holder = subprocess.Popen(
            [
                "unshare",
                "--net",
                "--mount",
                "--pid",
                "--fork",
                "--mount-proc",
                "--propagation",
                "private",
                "--",
                "sh",
                "-c",
                f"mount --bind {resolv} /etc/resolv.conf && ip link set lo up && exec sleep 600",
            ]
        )
        self.pid = self.holder.pid
        deadline = time.monotonic() + 5
        while not self._lo_up():
            if time.monotonic() > deadline:
                raise RuntimeError("test namespace did not come up")
            time.sleep(0.05)
        self.session = self.start()

    def _lo_up(self) -> bool:
        result = subprocess.run(
            ["nsenter", f"--target={self.pid}", "--net", "--", "ip", "-o", "addr", "show", "lo"],
            capture_output=True,
            text=True,
        )
        mounted = subprocess.run(
            ["nsenter", f"--target={self.pid}", "--mount", "--", "cat", "/etc/resolv.conf"],
            capture_output=True,
            text=True,
        )
        return "127.0.0.1" in result.stdout and mounted.stdout == RESOLV_CONF_TEXT

    def manifest(self) -> dict[str, Any]:
        p = self.ports
        return {
            "network": {
                "allow": [
                    {"host": "allowed.test", "ports": [p["http"], p["https"], p["echo"]]},
                    {"host": "*.wild.test", "ports": [p["http"], p["https"]]},
                    {"host": "localhost", "ports": [p["http"]]},
                    {"host": "metadata.test", "ports": [p["http"]]},
                    {"host": "127.0.0.2", "ports": [p["literal"]]},
                ],
                "hosts": {
                    name: "127.0.0.1"
                    for name in (
                        "allowed.test",
                        "x.wild.test",
                        "wild.test",
                        "evilwild.test",
                        "x.wild.test.evil.test",
                        "blocked.test",
                    )
                }
                | {"metadata.test": "169.254.169.254"},
            }
        }

    def start(self) -> EgressSession:
        boundary = boundary_from_mapping(self.manifest())
        return start_egress(boundary, netns_path=f"/proc/{self.pid}/ns/net")

    def inside(
        self, *argv: str, proxy: bool = True, timeout: float = 20, **env: str
    ) -> subprocess.CompletedProcess[str]:
        environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp"}
        if proxy:
            environment |= self.session.sandbox_env()
        environment |= env
        return subprocess.run(
            ["nsenter", f"--target={self.pid}", "--net", "--mount", "--pid", "--", *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=environment,
        )

    def python(self, code: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return self.inside(sys.executable, "-c", code, **kw)

    def close(self) -> None:
        self.session.close()
        self.holder.kill()
        self.holder.wait()
        for server in (self.http, self.https, self.echo, self.literal):
            server.shutdown()
            server.server_close()
        self.udp_canary.close()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    _require_host()
    w = World(tmp_path_factory.mktemp("egress"))
    try:
        yield w
    finally:
        w.close()


@pytest.fixture(autouse=True)
def _fresh_events(request: pytest.FixtureRequest) -> None:
    if "world" in request.fixturenames:
        request.getfixturevalue("world").session.drain_events()


def events_after(world: World, count: int) -> list[EgressEvent]:
    """Drain until ``count`` events arrived: a tunnel's event is written when it closes, which
    can be a moment after the client process exits."""
    got: list[EgressEvent] = []
    deadline = time.monotonic() + 5
    while len(got) < count and time.monotonic() < deadline:
        got += world.session.drain_events().events
        time.sleep(0.02)
    return got + world.session.drain_events().events


def need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.skip(f"{tool} is not installed")
    return path


def curl(world: World, *args: str, proxy: bool = True) -> subprocess.CompletedProcess[str]:
    need("curl")
    return world.inside("curl", "-sS", "-i", "--max-time", "10", "--cacert", str(world.cert), *args, proxy=proxy)


def raw_proxy(world: World, request: bytes) -> bytes:
    """Send raw bytes to the proxy from inside the namespace; return everything it answers."""
    code = (
        "import socket,sys\n"
        "s=socket.create_connection(('127.0.0.1',3128))\n"
        f"s.sendall({request!r})\n"
        "s.shutdown(socket.SHUT_WR)\n"
        "out=b''\n"
        "while (c:=s.recv(65536)): out+=c\n"
        "sys.stdout.write(out.hex())\n"
    )
    return bytes.fromhex(world.python(code).stdout)


# ---- allowed: every client kind --------------------------------------------------------------


def test_curl_reaches_allowed_http_and_https_through_the_proxy(world: World) -> None:
    p = world.ports
    plain = curl(world, f"http://allowed.test:{p['http']}/plain")
    assert plain.stdout.startswith("HTTP/1.0 200"), plain.stderr
    tls = curl(world, f"https://allowed.test:{p['https']}/tls")
    assert f"hello allowed.test:{p['https']} /tls" in tls.stdout, tls.stderr
    events = events_after(world, 2)
    assert [(e.via, e.verdict, e.address) for e in events] == [
        ("http", "allow", "127.0.0.1"),
        ("connect", "allow", "127.0.0.1"),
    ]
    assert events[1].bytes_up > 0 and events[1].bytes_down > 0


def test_python_urllib_uses_the_proxy_variables(world: World) -> None:
    p = world.ports
    code = (
        "import ssl,urllib.request\n"
        f"ctx=ssl.create_default_context(cafile={str(world.cert)!r})\n"
        f"print(urllib.request.urlopen('https://allowed.test:{p['https']}/u',context=ctx).read())\n"
        f"print(urllib.request.urlopen('http://allowed.test:{p['http']}/v').read())\n"
    )
    result = world.python(code)
    assert f"hello allowed.test:{p['https']} /u" in result.stdout, result.stderr
    assert f"hello allowed.test:{p['http']} /v" in result.stdout
    assert {e.via for e in events_after(world, 2)} == {"connect", "http"}


def test_socket_create_connection_by_name_takes_the_transparent_path(world: World) -> None:
    code = (
        "import socket\n"
        f"s=socket.create_connection(('allowed.test',{world.ports['echo']}),timeout=5)\n"
        "print(s.getpeername()[0]); s.sendall(b'ping'*1000); s.shutdown(socket.SHUT_WR)\n"
        "got=b''\n"
        "while (c:=s.recv(65536)): got+=c\n"
        "print(len(got))\n"
    )
    result = world.python(code, proxy=False)
    assert result.stdout.split() == ["127.77.0.1", "4000"], result.stderr
    (event,) = events_after(world, 1)
    assert (event.via, event.host, event.verdict, event.bytes_up, event.bytes_down) == (
        "transparent",
        "allowed.test",
        "allow",
        4000,
        4000,
    )


def test_node_fetch_ignores_proxy_variables_and_is_captured(world: World) -> None:
    need("node")
    p = world.ports
    script = (
        f"fetch('https://x.wild.test:{p['https']}/n').then(r=>r.text()).then(t=>{{console.log(t);"
        f"return fetch('http://allowed.test:{p['http']}/m')}}).then(r=>r.text()).then(console.log)"
    )
    result = world.inside("node", "-e", script, NODE_EXTRA_CA_CERTS=str(world.cert))
    assert f"hello x.wild.test:{p['https']} /n" in result.stdout, result.stderr
    assert f"hello allowed.test:{p['http']} /m" in result.stdout
    events = events_after(world, 2)
    assert [(e.via, e.host) for e in events] == [
        ("transparent", "x.wild.test"),
        ("transparent", "allowed.test"),
    ]


# ---- refused, each next to its positive control ---------------------------------------------


def test_other_hosts_are_refused_with_the_rule_header(world: World) -> None:
    port = world.ports["http"]
    assert curl(world, f"http://allowed.test:{port}/").stdout.startswith("HTTP/1.0 200")
    before = list(_Recorder.seen)
    result = curl(world, f"http://blocked.test:{port}/?c=canary")
    assert result.stdout.startswith("HTTP/1.1 403")
    assert "Contain-Denied-By: egress.not_allowed" in result.stdout
    assert f"blocked.test:{port} is not in network.allow" in result.stdout
    assert _Recorder.seen == before  # the canary request never reached the server
    denied = [e for e in events_after(world, 2) if e.verdict == "deny"]
    assert [e.violation_message() for e in denied] == [f"blocked.test:{port} is not in network.allow"]


def test_other_ports_of_an_allowed_host_are_refused(world: World) -> None:
    assert "200 Connection established" in curl(world, "-p", f"https://allowed.test:{world.ports['https']}/").stdout
    result = curl(world, "-p", f"https://allowed.test:{world.ports['literal']}/")
    assert "403" in result.stdout and "Contain-Denied-By: egress.port_not_allowed" in result.stdout
    # transparent: no listener on that placeholder port, so the kernel refuses
    other = world.ports["literal"]
    code = f"import socket\nsocket.create_connection(('allowed.test',{other}),timeout=3)"
    assert "ConnectionRefusedError" in world.python(code, proxy=False).stderr


@pytest.mark.parametrize("spelling", [*LOOPBACK_SPELLINGS, "[::1]", "[::ffff:7f00:1]"])
def test_ip_literals_in_every_spelling_are_refused(world: World, spelling: str) -> None:
    response = raw_proxy(world, f"CONNECT {spelling}:{world.ports['echo']} HTTP/1.1\r\n\r\n".encode())
    assert response.startswith(b"HTTP/1.1 403"), response
    assert b"Contain-Denied-By: egress.ip_literal" in response


@pytest.mark.parametrize("spelling", LITERAL_SPELLINGS_OF_127_0_0_2)
def test_an_address_named_in_the_manifest_is_reachable_in_any_spelling(world: World, spelling: str) -> None:
    response = raw_proxy(world, f"CONNECT {spelling}:{world.ports['literal']} HTTP/1.1\r\n\r\necho-me".encode())
    assert response == b"HTTP/1.1 200 Connection established\r\n\r\necho-me"


def test_metadata_addresses_are_refused_literal_and_through_a_hosts_override(world: World) -> None:
    port = world.ports["http"]
    literal = curl(world, "http://169.254.169.254/latest/meta-data/")
    assert "Contain-Denied-By: egress.ip_literal" in literal.stdout
    named = curl(world, f"http://metadata.test:{port}/")
    assert "Contain-Denied-By: egress.special_address.metadata" in named.stdout
    assert curl(world, f"http://allowed.test:{port}/").stdout.startswith("HTTP/1.0 200")


def test_an_allowed_name_resolving_to_loopback_without_an_override_is_refused(world: World) -> None:
    port = world.ports["http"]
    # `localhost` is allowed by name, but the host's resolver maps it to loopback and nothing in
    # the manifest names that address: refused. allowed.test maps there through network.hosts.
    result = curl(world, f"http://localhost:{port}/", "--noproxy", "", "-x", "http://127.0.0.1:3128")
    assert "Contain-Denied-By: egress.special_address.loopback" in result.stdout
    assert curl(world, f"http://allowed.test:{port}/").stdout.startswith("HTTP/1.0 200")


def test_dns_answers_only_allowed_names_and_never_forwards(world: World) -> None:
    code = (
        "import socket\n"
        "print(socket.getaddrinfo('allowed.test',443,socket.AF_INET)[0][4][0])\n"
        "print(socket.getaddrinfo('b.wild.test',443,socket.AF_INET)[0][4][0])\n"
        "for name in ('evil.test','mzxw6ytboi.exfil.test','blocked.test'):\n"
        "    try: socket.getaddrinfo(name,443); print('resolved', name)\n"
        "    except socket.gaierror as e: print('refused', e.errno)\n"
    )
    result = world.python(code, proxy=False)
    lines = result.stdout.split("\n")
    assert lines[0] == "127.77.0.1", result.stderr
    assert lines[1].startswith("127.77.") and lines[1] != "127.77.0.1"
    assert lines[2:5] == [f"refused {socket.EAI_NONAME}"] * 3
    # a query sent straight at the host's canary port stays in the namespace (its own lo)
    world.python(f"import socket\nsocket.socket(2,2).sendto(b'x'*40,('127.0.0.1',{world.ports['canary']}))")
    with pytest.raises(TimeoutError):
        world.udp_canary.recvfrom(100)
    dns = [e for e in events_after(world, 3) if e.via == "dns"]
    assert {e.host for e in dns} == {"evil.test", "mzxw6ytboi.exfil.test", "blocked.test"}
    # positive control: the canary does receive what is sent to it from the host
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"ping", ("127.0.0.1", world.ports["canary"]))
    assert world.udp_canary.recvfrom(100)[0] == b"ping"


def test_aaaa_for_an_allowed_name_is_empty(world: World) -> None:
    code = (
        "import socket\n"
        "try: print(socket.getaddrinfo('allowed.test',443,socket.AF_INET6))\n"
        "except socket.gaierror as e: print('none', e.errno)\n"
    )
    assert world.python(code, proxy=False).stdout.startswith("none")


def test_curl_noproxy_reaches_only_allowed_names(world: World) -> None:
    port = world.ports["http"]
    allowed = curl(world, "--noproxy", "*", f"http://allowed.test:{port}/np", proxy=False)
    assert allowed.stdout.startswith("HTTP/1.0 200"), allowed.stderr  # captured, then checked
    blocked = curl(world, "--noproxy", "*", f"http://blocked.test:{port}/np", proxy=False)
    assert blocked.returncode == 6  # could not resolve host
    direct = curl(world, "--noproxy", "*", "--connect-timeout", "3", "http://192.0.2.99/", proxy=False)
    assert direct.returncode == 7 and "Failed to connect" in direct.stderr  # no route


def test_bash_dev_tcp_has_no_route_except_through_placeholders(world: World) -> None:
    need("bash")
    control = world.inside("bash", "-c", f"exec 3<>/dev/tcp/allowed.test/{world.ports['echo']} && echo ok", proxy=False)
    assert control.stdout.strip() == "ok", control.stderr
    result = world.inside("bash", "-c", "exec 3<>/dev/tcp/1.1.1.1/443 && echo connected", proxy=False)
    assert result.returncode != 0 and "unreachable" in result.stderr.lower()


def test_udp_and_ipv6_have_no_route_out(world: World) -> None:
    code = (
        "import socket\n"
        "for fam, addr in ((2,('192.0.2.99',53)),(10,('2001:db8::1',53))):\n"
        "    try: socket.socket(fam,2).sendto(b'x',addr); print('sent')\n"
        "    except OSError as e: print('err', e.errno)\n"
        "try: socket.create_connection(('2001:db8::1',443),timeout=3); print('connected')\n"
        "except OSError as e: print('err', e.errno)\n"
    )
    import errno

    result = world.python(code, proxy=False)
    assert result.stdout.split("\n")[:3] == [f"err {errno.ENETUNREACH}"] * 3, result.stdout + result.stderr


def test_connect_with_a_mismatched_host_header_is_refused(world: World) -> None:
    port = world.ports["echo"]
    good = raw_proxy(world, f"CONNECT allowed.test:{port} HTTP/1.1\r\nHost: allowed.test:{port}\r\n\r\n".encode())
    assert good.startswith(b"HTTP/1.1 200")
    bad = raw_proxy(world, f"CONNECT allowed.test:{port} HTTP/1.1\r\nHost: blocked.test:{port}\r\n\r\n".encode())
    assert bad.startswith(b"HTTP/1.1 403") and b"Contain-Denied-By: egress.host_mismatch" in bad


def test_a_pipelined_second_request_is_not_forwarded(world: World) -> None:
    port = world.ports["http"]
    first = f"GET http://allowed.test:{port}/first HTTP/1.1\r\nHost: allowed.test:{port}\r\n\r\n"
    second = f"GET http://blocked.test:{port}/second HTTP/1.1\r\nHost: blocked.test:{port}\r\n\r\n"
    before = len(_Recorder.seen)
    response = raw_proxy(world, (first + second).encode())
    assert response.count(b"HTTP/1.") == 1 and b"/first" in response
    assert _Recorder.seen[before:] == [(f"allowed.test:{port}", "/first")]
    events = events_after(world, 2)
    assert [(e.verdict, e.rule_id) for e in events] == [
        ("allow", "network.allow[0]"),
        ("deny", "egress.request"),
    ]
    # control: the second request alone is a policy refusal
    assert b"egress.not_allowed" in raw_proxy(world, second.encode())


@pytest.mark.parametrize(
    "target",
    [
        "allowed.test\x00.evil.test",
        "allowed.test%00.evil.test",
        "allowed.test\r\nX: y",
        "allowed.test%0d%0a",
    ],
)
def test_nul_and_crlf_in_hostnames_are_refused(world: World, target: str) -> None:
    port = world.ports["echo"]
    response = raw_proxy(world, f"CONNECT {target}:{port} HTTP/1.1\r\n\r\n".encode())
    assert response.startswith((b"HTTP/1.1 400", b"HTTP/1.1 403")), response
    assert b"Contain-Denied-By: egress." in response
    assert raw_proxy(world, f"CONNECT allowed.test:{port} HTTP/1.1\r\n\r\n".encode()).startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("x.wild.test", True),
        ("wild.test", False),
        ("evilwild.test", False),
        ("x.wild.test.evil.test", False),
    ],
)
def test_wildcards_match_proper_subdomains_only(world: World, host: str, allowed: bool) -> None:
    result = curl(world, f"http://{host}:{world.ports['http']}/w")
    assert result.stdout.startswith("HTTP/1.0 200" if allowed else "HTTP/1.1 403"), result.stdout


def test_the_listeners_are_out_of_the_workloads_reach(world: World) -> None:
    # Inside: every process the workload can see is SIGKILLed (except the killer and pid 1),
    # and no descriptor of any of them is an egress listener. Egress keeps working.
    inodes = {os.stat(f"/proc/self/fd/{fd}").st_ino for fd in _session_fds(world.session)}
    code = (
        "import os,signal\n"
        "me=os.getpid(); socks=set()\n"
        "for pid in [p for p in os.listdir('/proc') if p.isdigit()]:\n"
        "    try: fds=os.listdir(f'/proc/{pid}/fd')\n"
        "    except OSError: continue\n"
        "    for fd in fds:\n"
        "        try: link=os.readlink(f'/proc/{pid}/fd/{fd}')\n"
        "        except OSError: continue\n"
        "        if link.startswith('socket:['): socks.add(int(link[8:-1]))\n"
        "    if int(pid) not in (me, 1):\n"
        "        try: os.kill(int(pid), signal.SIGKILL)\n"
        "        except OSError: pass\n"
        "print(sorted(socks))\n"
    )
    result = world.python(code, proxy=False)
    seen = set(eval(result.stdout))  # a list of ints printed by our own code
    assert inodes and not (inodes & seen)
    assert curl(world, f"http://allowed.test:{world.ports['http']}/after").stdout.startswith("HTTP/1.0 200")


def _session_fds(session: EgressSession) -> list[int]:
    return [sock.fileno() for sock in session._sockets if sock.fileno() >= 0]


def test_a_closed_session_fails_closed(world: World) -> None:
    second_ns = subprocess.Popen(["unshare", "--net", "--", "sh", "-c", "ip link set lo up && exec sleep 60"])
    try:
        time.sleep(0.2)
        boundary = boundary_from_mapping(world.manifest())
        session = start_egress(boundary, netns_path=f"/proc/{second_ns.pid}/ns/net")
        echo = world.ports["echo"]
        probe = (
            "import socket\n"
            f"for addr in (('127.0.0.1',3128),('127.77.0.1',{echo})):\n"
            "    try: socket.create_connection(addr,timeout=3).close(); print('open')\n"
            "    except OSError as e: print(type(e).__name__)\n"
        )
        enter = ["nsenter", f"--target={second_ns.pid}", "--net", "--", sys.executable, "-c", probe]
        assert subprocess.run(enter, capture_output=True, text=True).stdout.split() == [
            "open",
            "open",
        ]
        session.close()
        session.close()  # idempotent
        assert subprocess.run(enter, capture_output=True, text=True).stdout.split() == [
            "ConnectionRefusedError",
            "ConnectionRefusedError",
        ]
    finally:
        second_ns.kill()
        second_ns.wait()


def test_start_fails_closed_with_cause_and_fix(world: World) -> None:
    from contain.errors import SandboxStartError

    boundary = boundary_from_mapping(world.manifest())
    with pytest.raises(SandboxStartError) as info:
        start_egress(boundary, netns_path="/proc/999999999/ns/net")
    assert "999999999" in info.value.cause and info.value.fix
    # the namespace already has listeners on 3128 and 53: a second egress cannot take them over
    with pytest.raises(SandboxStartError) as busy:
        start_egress(boundary, netns_path=f"/proc/{world.pid}/ns/net")
    assert "127.0.0.1:3128" in busy.value.cause
