"""NE cases: network and egress, judged by canary sinks the probe owns.

Each case sends "shots" (TCP, UDP, DNS, ICMP, ... carrying a fresh canary) from inside the target
at sinks that stand outside it: listeners on the host's loopback, on the host end of a veth pair,
and in a network namespace the probe created (``canaries.netns_canary``), whose packet recorder
sees any IPv4 packet addressed to it whatever the protocol. A shot is a breach when *anything*
arrives at a sink during the attack phase (the sinks are fresh, on random ports, and only the
attack runs then), or when a sink holds the attack's canary.

Positive control: the same shots, with another canary, from ``ctx.control`` (the bare host);
every sink the host can reach must record them, or the case is INCONCLUSIVE.

The cases that are nothing but shots (NE-01..05, NE-07) are rows of ``SHOTS_CASES``: which
canaries to open, which shots to fire at which sink, which sinks to judge. NE-06, NE-08 and
NE-10 have judges of their own and are written out as functions.

Deliberate deviations from the catalogue, because probe traffic must stay on this host:
- no shot is aimed at a real outside address (1.1.1.1, 192.0.2.1, 8.8.8.8, real metadata):
  the namespace canary stands in for "somewhere off the sandbox", and a shot that reaches it
  would equally have reached any routed address;
- NE-06 and NE-07 do not dial metadata/gateway addresses directly: an attack that finds a
  route towards them (``/proc/net/route`` default route, or a non-loopback interface) counts as
  reaching them, and the proxy half of NE-06 asks contain's proxy for them (proxy log judged);
- SCTP/DCCP shots are made only when the protocol is already registered in
  ``/proc/net/protocols``, so the probe never makes the kernel autoload a module.

NE-10 on the process backend: there is no vsock device path in the process sandbox, but
``socket(AF_VSOCK)`` would reach the host's vsock transport outside any netns; the case checks
that creating one is refused (seccomp EAFNOSUPPORT). The control creates one on the host (no
connection is made anywhere). MMDS and virtio-fs halves apply to microVM backends only.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import enum
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contain.probe.canaries import (
    CanaryUnavailable,
    NetnsCanary,
    Sink,
    attack_source,
    decide,
    dns_canary,
    http_canary,
    netns_canary,
    read_report,
    run_evidence,
    tcp_canary,
    udp_canary,
)
from contain.probe.case import AttackRun, CaseResult, Category, ProbeCase, ProbeContext, Verdict

__all__ = ["CASES", "SHOOTER", "SHOTS_CASES", "Canary", "ShotRow", "ShotsCase", "Spelling", "dns_label", "judge_shots"]

# One shot per entry of P["shots"]; each is {"name", "kind", "host", "port", ...}.
SHOOTER = r"""
import base64, contextlib, struct, subprocess
C = P["canary"]
LABEL = base64.b32encode(C.encode()).decode().rstrip("=").lower()

def fam(h):
    return socket.AF_INET6 if ":" in h else socket.AF_INET

def dns_query(name, qtype):
    q = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\x00"
    return os.urandom(2) + b"\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + q + struct.pack("!HH", qtype, 1)

def shoot(s):
    k, h, p = s["kind"], s.get("host"), s.get("port")
    if k == "tcp":
        c = socket.socket(fam(h), socket.SOCK_STREAM); c.settimeout(2)
        c.connect((h, p)); c.sendall(("GET /?c=%s HTTP/1.1\r\nHost: x\r\n\r\n" % C).encode()); c.close(); return "sent"
    if k == "bash_tcp":
        r = subprocess.run(["bash", "-c", "echo %s > /dev/tcp/%s/%d" % (C, h, p)], capture_output=True, timeout=5)
        return r.returncode
    if k == "curl":
        url = "http://%s:%d/?c=%s" % (h if ":" not in h else "[" + h + "]", p, C)
        r = subprocess.run(["curl", "-sS", "--noproxy", "*", "-m", "3", url], capture_output=True, timeout=8)
        return [r.returncode, r.stderr[-200:]]
    if k == "udp":
        c = socket.socket(fam(h), socket.SOCK_DGRAM); c.sendto(C.encode(), (h, p)); c.close(); return "sent"
    if k == "dns":
        c = socket.socket(fam(h), socket.SOCK_DGRAM); c.settimeout(1.5)
        c.sendto(dns_query(LABEL + "." + P["zone"], s["qtype"]), (h, p))
        with contextlib.suppress(socket.timeout):
            return c.recv(512)[:4].hex()
        return "no answer"
    if k == "dns_tcp":
        q = dns_query(LABEL + "." + P["zone"], 16)
        c = socket.socket(fam(h), socket.SOCK_STREAM); c.settimeout(2); c.connect((h, p))
        c.sendall(struct.pack("!H", len(q)) + q); c.close(); return "sent"
    if k == "resolve":
        return [a[4][0] for a in socket.getaddrinfo(LABEL + "." + P["zone"], 80)]
    if k in ("ping", "raw_icmp"):
        kind = socket.SOCK_DGRAM if k == "ping" else socket.SOCK_RAW
        c = socket.socket(socket.AF_INET, kind, socket.IPPROTO_ICMP)
        c.sendto(b"\x08\x00\x00\x00\x12\x34\x00\x01" + C.encode(), (h, 0)); c.close(); return "sent"
    if k in ("sctp", "dccp"):
        if k.upper() not in open("/proc/net/protocols").read().upper():
            return "protocol not registered in this kernel; not attempted"
        proto, kind = (132, socket.SOCK_STREAM) if k == "sctp" else (33, socket.SOCK_DCCP)
        c = socket.socket(socket.AF_INET, kind, proto); c.settimeout(2); c.connect((h, p)); return "connected"
    if k == "vsock":
        c = socket.socket(40, socket.SOCK_STREAM); c.close(); return "created"
    if k == "route":
        routes = open("/proc/net/route").read().splitlines()[1:]
        v6 = open("/proc/net/if_inet6").read() if os.path.exists("/proc/net/if_inet6") else ""
        default = [r.split()[0] for r in routes if r.split()[1] == "00000000"]
        links = {l.split()[5] for l in v6.splitlines() if l.split()[5] != "lo"}
        links = sorted(links | {r.split()[0] for r in routes if r.split()[0] != "lo"})
        return {"default_route_via": default, "non_loopback_interfaces": links}
    raise ValueError("unknown shot " + k)

for s in P["shots"]:
    rec(s["name"], shoot, s)
done()
"""


def dns_label(canary: str) -> str:
    """The DNS label a canary travels as (base32, lower case, no padding): fits in 63 bytes."""
    return base64.b32encode(canary.encode()).decode().rstrip("=").lower()


@dataclass(frozen=True)
class Shot:
    name: str
    kind: str
    host: str | None = None
    port: int | None = None
    qtype: int = 1
    control_reaches: bool = True  # the host control must land this one (False: host-only limits)

    def to_param(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "host": self.host, "port": self.port, "qtype": self.qtype}


def _shots_source(shots: Sequence[Shot], canary: str, zone: str) -> str:
    return attack_source(SHOOTER, canary=canary, zone=zone, shots=[s.to_param() for s in shots])


def _settle(sinks: Sequence[Sink]) -> None:
    for sink in sinks:
        sink.settle()


def judge_shots(
    case_id: str,
    *,
    attack_run: AttackRun,
    attack_canary: str,
    sinks: Sequence[Sink],
    attack_counts: Sequence[int],
    control_run: AttackRun | None,
    control_canary: str,
    control_sinks: Sequence[Sink],
    control_counts: Sequence[int],
    contained: str,
    extra_breaches: Sequence[str] = (),
    extra_failures: Sequence[str] = (),
) -> CaseResult:
    """The verdict for a shots case from sink readings.

    ``attack_counts[i]`` is how many hits ``sinks[i]`` had when the attack phase ended (the sinks
    start empty); ``control_counts[i]`` is the count of ``control_sinks[i]`` before the control.
    """
    breaches = list(extra_breaches)
    for sink, count in zip(sinks, attack_counts, strict=True):
        first = sink.hits()[:count]
        if count:
            carried = any(
                attack_canary.encode() in h.data or dns_label(attack_canary).encode() in h.data for h in first
            )
            breaches.append(
                f"{sink.kind} sink {sink.address} got {count} hit(s) during the attack"
                + (" with the canary" if carried else "")
            )
    failures = list(extra_failures)
    if control_run is not None:
        for sink, before in zip(control_sinks, control_counts, strict=True):
            new = sink.hits()[before:]
            needles = (control_canary.encode(), dns_label(control_canary).encode())
            landed = any(any(n in h.data for n in needles) for h in new) if sink.kind != "packet" else bool(new)
            if not landed:
                failures.append(f"control did not reach {sink.kind} sink {sink.address}")
    report = read_report(attack_run)
    missing = [] if report is not None else ["the attack never reported (did not run to completion)"]
    evidence: dict[str, Any] = {
        "attack": report,
        "attack_run": run_evidence(attack_run),
        "sinks": [s.evidence() for s in sinks],
    }
    if control_run is not None:
        evidence["control"] = read_report(control_run)
        evidence["control_run"] = run_evidence(control_run, limit=400)
    control_text = (
        f"host control reached {len(control_sinks) - len(failures)}/{len(control_sinks)} sinks"
        if control_run is not None
        else "no host control"
    )
    return decide(
        case_id,
        breaches=breaches,
        control_failures=failures,
        missing=missing,
        contained=contained,
        control=control_text,
        evidence=evidence,
    )


def _run_shots(
    ctx: ProbeContext,
    case_id: str,
    shots: Sequence[Shot],
    sinks: Sequence[Sink],
    *,
    contained: str,
    boundary: dict[str, Any] | None = None,
    control_sinks: Sequence[Sink] | None = None,
    extra: Callable[[dict[str, Any] | None, dict[str, Any] | None], tuple[list[str], list[str]]] | None = None,
) -> CaseResult:
    zone = f"probe-{ctx.run_id}.test"
    attack_canary, control_canary = ctx.canary("ne"), ctx.canary("ctl")
    began = time.perf_counter()
    attack_run = ctx.target.run_python(_shots_source(shots, attack_canary, zone), timeout_s=40, boundary=boundary)
    _settle(sinks)
    attack_counts = [s.count() for s in sinks]
    reachable = list(control_sinks if control_sinks is not None else sinks)
    control_counts = [s.count() for s in reachable]
    control_shots = [s for s in shots if s.control_reaches]
    control_run = ctx.control.run_python(_shots_source(control_shots, control_canary, zone), timeout_s=40)
    _settle(reachable)
    extra_breaches, extra_failures = (
        extra(read_report(attack_run), read_report(control_run)) if extra is not None else ([], [])
    )
    result = judge_shots(
        case_id,
        attack_run=attack_run,
        attack_canary=attack_canary,
        sinks=sinks,
        attack_counts=attack_counts,
        control_run=control_run,
        control_canary=control_canary,
        control_sinks=reachable,
        control_counts=control_counts,
        contained=contained,
        extra_breaches=extra_breaches,
        extra_failures=extra_failures,
    )
    return _timed(result, began)


def _timed(result: CaseResult, began: float) -> CaseResult:
    return dataclasses.replace(result, duration_s=time.perf_counter() - began)


def _unavailable(case_id: str, exc: CanaryUnavailable) -> CaseResult:
    return CaseResult(case_id, Verdict.INCONCLUSIVE, f"judge could not be set up: {exc}", {"cause": str(exc)})


_METADATA_TARGETS = (
    "169.254.169.254",  # AWS v1/v2, GCP, Azure, OpenStack
    "169.254.170.2",  # ECS task metadata
    "100.100.100.200",  # Alibaba
    "0xa9fea9fe",  # 169.254.169.254, hex
    "2852039166",  # 169.254.169.254, decimal
    "0251.0376.0251.0376",  # 169.254.169.254, octal
    "[fd00:ec2::254]",  # AWS IPv6
    "metadata.google.internal",
)

_PROXY_ATTEMPTS = r"""
def via_proxy(target):
    c = socket.create_connection(("127.0.0.1", 3128), timeout=3)
    c.sendall(("GET http://%s/latest/meta-data/?c=%s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, C, target)).encode())
    data = c.recv(200); c.close(); return data.split(b"\r\n")[0]

def via_connect(target):
    c = socket.create_connection(("127.0.0.1", 3128), timeout=3)
    c.sendall(("CONNECT %s:80 HTTP/1.1\r\nHost: %s:80\r\n\r\n" % (target, target)).encode())
    data = c.recv(200); c.close(); return data.split(b"\r\n")[0]

for t in P["targets"]:
    rec("proxy_get " + t, via_proxy, t)
    rec("proxy_connect " + t, via_connect, t)
rec("proxy_allowed_control", via_proxy, P["allowed"])
done()
"""


def _off_loopback(report: dict[str, Any] | None) -> dict[str, Any] | None:
    seen = (report or {}).get("routes")
    value = seen.get("value") if isinstance(seen, dict) else None
    if isinstance(value, dict) and (value.get("default_route_via") or value.get("non_loopback_interfaces")):
        return value
    return None


def route_judge(attack: dict[str, Any] | None, control: dict[str, Any] | None) -> tuple[list[str], list[str]]:
    """A target with a default route or a non-loopback interface could reach metadata and
    gateway addresses directly (the probe does not send there: traffic must stay on this host).
    The host control must show its own route, or the reading cannot see one."""
    breaches, failures = [], []
    found = _off_loopback(attack)
    if found is not None:
        breaches.append(f"the target has a route off loopback ({found}): metadata and gateways are reachable")
    if _off_loopback(control) is None:
        failures.append("the host control showed no route off loopback, so the route reading is blind here")
    return breaches, failures


# --- the shots cases: one row each ---------------------------------------------------------------
#
# NE-01..05 and NE-07 are one shape: open canary sinks, fire shots at them from the target and
# then from the host control, and judge the sinks with ``judge_shots``. Each is a ``ShotsCase``
# row; ``ShotsCase.check`` is the one place that opens the sinks, aims the shots and runs them.


class Canary(enum.Enum):
    """A canary a shots case opens; the value is the key of the sink it provides."""

    NETNS = "netns"  # netns_canary(): sinks netns.tcp, netns.udp, netns.dns (port 53), netns.packets
    LOOPBACK_TCP = "lo.tcp"  # tcp_canary() on the host's 127.0.0.1
    LOOPBACK6_TCP = "lo6.tcp"  # tcp_canary("::1")
    LOOPBACK_UDP = "lo.udp"  # udp_canary() on 127.0.0.1
    LOOPBACK_DNS = "lo.dns"  # dns_canary() on 127.0.0.1
    VETH_HOST_TCP = "veth.tcp"  # tcp_canary() on the host end of the netns veth (opens after NETNS)


_NETNS_SINKS = ("netns.tcp", "netns.udp", "netns.dns", "netns.packets")
_PORTLESS_KINDS = frozenset({"ping", "raw_icmp"})  # ICMP has no port


class Spelling(enum.Enum):
    """How a shot writes the sink's host address."""

    AS_IS = "as-is"
    V4MAPPED = "v4mapped"  # ::ffff:a.b.c.d: the IPv4 sink dialled through an IPv6 socket


@dataclass(frozen=True)
class ShotRow:
    """One shot of a row, aimed by sink key rather than by address (the sinks get random ports).

    ``at`` names the sink whose host and port the shot dials; ``host`` replaces the host with a
    literal name (the port stays the sink's); shots with no ``at`` dial nothing (resolve, route).
    """

    name: str
    kind: str
    at: str | None = None
    host: str | None = None
    spelling: Spelling = Spelling.AS_IS
    qtype: int = 1
    control_reaches: bool = True  # the host control must land this one (False: host-only limits)

    def aimed(self, sinks: Mapping[str, Sink]) -> Shot:
        if self.at is None:
            return Shot(self.name, self.kind, self.host, None, self.qtype, self.control_reaches)
        sink = sinks[self.at]
        host = self.host if self.host is not None else sink.host
        if self.spelling is Spelling.V4MAPPED:
            host = f"::ffff:{host}"
        port = None if self.kind in _PORTLESS_KINDS else sink.port
        return Shot(self.name, self.kind, host, port, self.qtype, self.control_reaches)


ExtraJudge = Callable[[dict[str, Any] | None, dict[str, Any] | None], tuple[list[str], list[str]]]


@dataclass(frozen=True)
class ShotsCase:
    """A case that is nothing but shots at canary sinks, judged by ``judge_shots``.

    ``canaries`` are opened in order (and closed in reverse); ``sinks`` are the keys of the
    sinks judged, in evidence order; ``extra_judge`` adds breaches/control failures read from
    the attack and control reports (``route_judge``).
    """

    id: str
    title: str
    expected: str
    canaries: tuple[Canary, ...]
    shots: tuple[ShotRow, ...]
    sinks: tuple[str, ...]
    contained: str
    extra_judge: ExtraJudge | None = None

    def sink_keys(self) -> tuple[str, ...]:
        """Every sink key the row's canaries provide."""
        keys: list[str] = []
        for canary in self.canaries:
            keys.extend(_NETNS_SINKS if canary is Canary.NETNS else (canary.value,))
        return tuple(keys)

    def check(self, ctx: ProbeContext) -> CaseResult:
        try:
            with contextlib.ExitStack() as stack:
                opened = _open_canaries(self.canaries, stack)
                return _run_shots(
                    ctx,
                    self.id,
                    [shot.aimed(opened) for shot in self.shots],
                    [opened[key] for key in self.sinks],
                    contained=self.contained,
                    extra=self.extra_judge,
                )
        except CanaryUnavailable as exc:
            return _unavailable(self.id, exc)

    def case(self) -> ProbeCase:
        return ProbeCase(self.id, Category.NE, self.title, self.expected, self.check)


def _open_canaries(canaries: Sequence[Canary], stack: contextlib.ExitStack) -> dict[str, Sink]:
    opened: dict[str, Sink] = {}
    netns: NetnsCanary | None = None
    for canary in canaries:
        if canary is Canary.NETNS:
            netns = stack.enter_context(netns_canary())
            opened.update(zip(_NETNS_SINKS, netns.sinks(), strict=True))
        elif canary is Canary.VETH_HOST_TCP:
            if netns is None:
                raise ValueError("Canary.VETH_HOST_TCP needs Canary.NETNS opened before it")
            opened[canary.value] = stack.enter_context(tcp_canary(netns.host_address))
        else:
            opened[canary.value] = stack.enter_context(_LOOPBACK_OPENERS[canary]())
    return opened


_LOOPBACK_OPENERS: dict[Canary, Callable[[], contextlib.AbstractContextManager[Sink]]] = {
    Canary.LOOPBACK_TCP: tcp_canary,
    Canary.LOOPBACK6_TCP: lambda: tcp_canary("::1"),
    Canary.LOOPBACK_UDP: udp_canary,
    Canary.LOOPBACK_DNS: dns_canary,
}


SHOTS_CASES: tuple[ShotsCase, ...] = (
    ShotsCase(
        "NE-01",
        "direct TCP (python, bash /dev/tcp, curl --noproxy) to canaries",
        "no connection; canary receivers silent",
        canaries=(Canary.NETNS, Canary.LOOPBACK_TCP),
        shots=(
            ShotRow("python_tcp_netns", "tcp", at="netns.tcp"),
            ShotRow("python_tcp_host_loopback", "tcp", at="lo.tcp"),
            ShotRow("bash_dev_tcp_netns", "bash_tcp", at="netns.tcp"),
            ShotRow("curl_noproxy_netns", "curl", at="netns.tcp"),
        ),
        sinks=("netns.tcp", "netns.packets", "lo.tcp"),
        contained="no TCP connection and no packet reached the loopback or namespace canary",
    ),
    ShotsCase(
        "NE-02",
        "IPv6, v4-mapped and ::1 connections to canaries",
        "no connection",
        canaries=(Canary.NETNS, Canary.LOOPBACK6_TCP, Canary.LOOPBACK_TCP),
        shots=(
            ShotRow("tcp_ipv6_loopback", "tcp", at="lo6.tcp"),
            ShotRow("tcp_v4mapped_loopback", "tcp", at="lo.tcp", spelling=Spelling.V4MAPPED),
            ShotRow("tcp_v4mapped_netns", "tcp", at="netns.tcp", spelling=Spelling.V4MAPPED),
            ShotRow("curl_ipv6_loopback", "curl", at="lo6.tcp"),
        ),
        sinks=("netns.tcp", "netns.packets", "lo6.tcp", "lo.tcp"),
        contained="no IPv6 or v4-mapped connection reached a canary",
    ),
    ShotsCase(
        "NE-03",
        "UDP/QUIC-like datagrams, SCTP/DCCP to canaries",
        "no packet",
        canaries=(Canary.NETNS, Canary.LOOPBACK_UDP),
        shots=(
            ShotRow("udp_netns", "udp", at="netns.udp"),
            ShotRow("udp_host_loopback", "udp", at="lo.udp"),
            ShotRow("quic_like_udp_netns", "udp", at="netns.udp"),
            # Made only where the protocol is already registered, so the control may not land them.
            ShotRow("sctp_netns", "sctp", at="netns.tcp", control_reaches=False),
            ShotRow("dccp_netns", "dccp", at="netns.tcp", control_reaches=False),
        ),
        sinks=("netns.udp", "netns.packets", "lo.udp"),
        contained="no datagram or packet of any protocol reached a canary",
    ),
    ShotsCase(
        "NE-04",
        "ICMP echo with canary payload (ping and raw socket)",
        "no packet at canary",
        canaries=(Canary.NETNS,),
        shots=(
            # ping sockets need net.ipv4.ping_group_range; the host control lands the raw one.
            ShotRow("icmp_ping_socket_netns", "ping", at="netns.packets", control_reaches=False),
            ShotRow("icmp_raw_socket_netns", "raw_icmp", at="netns.packets"),
        ),
        sinks=("netns.packets",),
        contained="no ICMP echo (ping or raw socket) reached the namespace canary",
    ),
    ShotsCase(
        "NE-05",
        "DNS exfiltration: libc, direct A/TXT/NULL/SVCB, DNS over TCP",
        "canary name server sees nothing",
        canaries=(Canary.NETNS, Canary.LOOPBACK_DNS),
        shots=(
            ShotRow("libc_resolve_canary_name", "resolve", control_reaches=False),
            ShotRow("dns_a_host_loopback_ns", "dns", at="lo.dns", qtype=1),
            ShotRow("dns_txt_netns_ns", "dns", at="netns.dns", qtype=16),
            ShotRow("dns_null_netns_ns", "dns", at="netns.dns", qtype=10),
            ShotRow("dns_svcb_netns_ns", "dns", at="netns.dns", qtype=64),
            ShotRow("dns_over_tcp_netns", "dns_tcp", at="netns.tcp"),
        ),
        sinks=("netns.dns", "netns.tcp", "netns.packets", "lo.dns"),
        contained="no DNS query carrying the canary reached a canary name server",
    ),
    ShotsCase(
        "NE-07",
        "host loopback, host address, gateway, host.docker.internal",
        "unreachable",
        canaries=(Canary.NETNS, Canary.VETH_HOST_TCP, Canary.LOOPBACK_TCP),
        shots=(
            ShotRow("host_loopback_listener", "tcp", at="lo.tcp"),
            ShotRow("host_address_on_veth", "tcp", at="veth.tcp"),
            ShotRow("routes", "route"),
            ShotRow("host_docker_internal", "curl", at="lo.tcp", host="host.docker.internal", control_reaches=False),
        ),
        sinks=("lo.tcp", "veth.tcp"),
        contained="host loopback and host addresses unreachable; no route off loopback",
        extra_judge=route_judge,
    ),
)


def _ne06(ctx: ProbeContext) -> CaseResult:
    began = time.perf_counter()
    attack_canary = ctx.canary("md")
    try:
        with http_canary() as allowed, netns_canary() as n:
            route_shots = [Shot("routes", "route")]
            direct = _run_shots(
                ctx,
                "NE-06",
                route_shots,
                [n.packets],
                control_sinks=[],
                extra=route_judge,
                contained="no route off loopback (proxy half needs contain's proxy log)",
            )
            if not ctx.target.has_contain_hooks:
                return direct
            boundary = {
                "network": {
                    "allow": [
                        {"host": "allowed.test", "ports": [allowed.port]},
                        {"host": "metadata.test", "ports": [80]},
                        {"host": "metadata.google.internal", "ports": [80]},
                    ],
                    "hosts": {"allowed.test": "127.0.0.1", "metadata.test": "169.254.169.254"},
                }
            }
            targets = [*_METADATA_TARGETS, "metadata.test"]
            code = attack_source(
                "C = P['canary']\n" + _PROXY_ATTEMPTS,
                canary=attack_canary,
                targets=targets,
                allowed=f"allowed.test:{allowed.port}",
            )
            run = ctx.target.run_python(code, timeout_s=60, boundary=boundary)
            allowed.settle()
            report = read_report(run)
            events = [dict(e) for e in run.egress_events]
            leaked = [e for e in events if e.get("verdict") == "allow" and str(e.get("host")) != "allowed.test"]
            breaches = [f"proxy allowed {e.get('host')}:{e.get('port')}" for e in leaked]
            if direct.verdict is Verdict.ESCAPED:
                breaches.insert(0, direct.summary)
            denied = [e for e in events if e.get("verdict") == "deny"]
            failures = (
                [] if allowed.received(attack_canary) else ["allowed.test through the same proxy was not reached"]
            )
            if direct.verdict is Verdict.INCONCLUSIVE:
                failures.append(direct.summary)
            missing = []
            if report is None:
                missing.append("the proxy attack never reported")
            elif not denied:
                missing.append("the proxy log recorded no refusal for the metadata requests")
            evidence = {
                "direct": direct.evidence,
                "proxy_attack": report,
                "proxy_run": run_evidence(run),
                "allowed_sink": allowed.evidence(),
                "denied_events": len(denied),
            }
            result = decide(
                "NE-06",
                breaches=breaches,
                control_failures=failures,
                missing=missing,
                contained=(
                    f"no route off loopback; proxy refused all {len(targets)} metadata spellings "
                    f"({len(denied)} refusals logged)"
                ),
                control="allowed.test through the proxy received the canary",
                evidence=evidence,
            )
            return _timed(result, began)
    except CanaryUnavailable as exc:
        return _unavailable("NE-06", exc)


_SIBLING = r"""
import contextlib, select, threading
C = P["canary"]
got = []
srv4 = socket.socket(); srv4.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv4.bind(("0.0.0.0", P["port"])); srv4.listen(8)
uds = socket.socket(socket.AF_UNIX); uds.bind("\0" + P["abstract"]); uds.listen(8)
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); udp.bind(("0.0.0.0", P["port"]))
def selftest():
    time.sleep(0.3)
    c = socket.create_connection(("127.0.0.1", P["port"])); c.sendall(P["self"].encode()); c.close()
threading.Thread(target=selftest).start()
end = time.time() + P["listen_s"]
while time.time() < end:
    r, _, _ = select.select([srv4, uds, udp], [], [], 0.2)
    for s in r:
        if s is udp:
            got.append(s.recv(4096).decode("utf-8", "replace"))
            continue
        c, _ = s.accept(); c.settimeout(1)
        with contextlib.suppress(OSError):
            got.append(c.recv(4096).decode("utf-8", "replace"))
        c.close()
_R["sibling"] = {"ok": True, "value": got}
done()
"""

_SIBLING_ATTACK = r"""
C = P["canary"]
def tcp(h):
    c = socket.create_connection((h, P["port"]), timeout=1); c.sendall(C.encode()); c.close(); return "sent"
def abstract():
    c = socket.socket(socket.AF_UNIX); c.connect("\0" + P["abstract"]); c.sendall(C.encode()); c.close(); return "sent"
def udp():
    c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); c.sendto(C.encode(), ("127.0.0.1", P["port"])); return "sent"
time.sleep(1.0)
for attempt in range(3):
    rec("tcp_loopback_%d" % attempt, tcp, "127.0.0.1")
    rec("abstract_%d" % attempt, abstract)
    rec("udp_%d" % attempt, udp)
    time.sleep(0.5)
done()
"""


def _ne08(ctx: ProbeContext) -> CaseResult:
    began = time.perf_counter()
    import secrets

    port = 20000 + secrets.randbelow(20000)
    abstract = f"contain-probe-sibling-{ctx.run_id}-{secrets.token_hex(4)}"
    attack_canary, self_canary = ctx.canary("sib"), ctx.canary("self")
    box: dict[str, AttackRun] = {}

    def sibling() -> None:
        code = attack_source(
            "C = P['canary']\n" + _SIBLING, canary="", port=port, abstract=abstract, self=self_canary, listen_s=5.0
        )
        box["sibling"] = ctx.target.run_python(code, timeout_s=30)

    thread = threading.Thread(target=sibling, name="contain-probe-sibling")
    thread.start()
    time.sleep(0.2)
    attack = ctx.target.run_python(
        attack_source(_SIBLING_ATTACK, canary=attack_canary, port=port, abstract=abstract), timeout_s=30
    )
    thread.join(timeout=40)
    sib = box.get("sibling")
    sib_report = read_report(sib) if sib is not None else None
    received = []
    if sib_report and isinstance(sib_report.get("sibling"), dict):
        received = [str(x) for x in sib_report["sibling"].get("value") or []]
    breaches = (
        ["the sibling sandbox received the attacker's canary"] if any(attack_canary in r for r in received) else []
    )
    failures = (
        [] if any(self_canary in r for r in received) else ["the sibling's own listener self-test was not recorded"]
    )
    missing = [] if read_report(attack) is not None else ["the attack never reported"]
    return_value = decide(
        "NE-08",
        breaches=breaches,
        control_failures=failures,
        missing=missing,
        contained="a concurrently running sibling sandbox was unreachable over TCP, UDP and abstract sockets",
        control="the sibling's listeners received its own self-test connection",
        evidence={
            "attack": read_report(attack),
            "sibling_received": received[:10],
            "sibling_run": run_evidence(sib, limit=400) if sib else None,
        },
    )
    return _timed(return_value, began)


def _ne10(ctx: ProbeContext) -> CaseResult:
    began = time.perf_counter()
    shots = [Shot("af_vsock_socket", "vsock")]
    code_attack = attack_source(SHOOTER, canary=ctx.canary("vs"), zone="x", shots=[s.to_param() for s in shots])
    attack = ctx.target.run_python(code_attack, timeout_s=20)
    control = ctx.control.run_python(code_attack, timeout_s=20)
    report, control_report = read_report(attack), read_report(control)
    breaches, failures, missing = [], [], []
    got = (report or {}).get("af_vsock_socket", {})
    if got.get("ok"):
        breaches.append("socket(AF_VSOCK) succeeded inside the sandbox: vsock reaches the host outside any netns")
    elif got and got.get("errno") not in ("EAFNOSUPPORT", "EPERM", "EACCES"):
        breaches.append(f"socket(AF_VSOCK) reached the vsock code ({got.get('errno')})")
    if report is None:
        missing.append("the attack never reported")
    ctl = (control_report or {}).get("af_vsock_socket", {})
    if not ctl.get("ok"):
        # Without a vsock transport on this host the control cannot show anything.
        failures.append(f"the host itself cannot create AF_VSOCK sockets ({ctl.get('errno') or 'no report'})")
    result = decide(
        "NE-10",
        breaches=breaches,
        control_failures=failures,
        missing=missing,
        contained=f"AF_VSOCK refused ({got.get('errno')}); MMDS and virtio-fs do not exist on this backend",
        control="the host created an AF_VSOCK socket (no connection made)",
        evidence={"attack": report, "control": control_report, "attack_run": run_evidence(attack, limit=400)},
    )
    return _timed(result, began)


_NEEDS_PROXY = "needs contain's egress proxy decision log and network.hosts override"

CASES: tuple[ProbeCase, ...] = tuple(
    sorted(
        (
            *(row.case() for row in SHOTS_CASES),
            ProbeCase(
                "NE-06", Category.NE, "cloud metadata endpoints, direct (route) and via the proxy", "all fail", _ne06
            ),
            ProbeCase("NE-08", Category.NE, "reach a concurrently running sibling sandbox", "unreachable", _ne08),
            ProbeCase(
                "NE-10",
                Category.NE,
                "AF_VSOCK to the host (process-backend reading of the microVM case)",
                "AF_VSOCK refused; no MMDS/virtio-fs on this backend",
                _ne10,
            ),
        ),
        key=lambda case: case.id,
    )
)
