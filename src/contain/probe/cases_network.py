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
canaries to open, which shots to fire at which sink, which sinks to judge; the shots mechanism
(``SHOOTER``, ``run_shots``, ``judge_shots``, ``ShotsCase.check``) lives in
``contain.probe.shots``. NE-06, NE-08 and NE-10 have judges of their own and are functions here.

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

import dataclasses
import threading
import time
from typing import Any

from contain.errors import BackendRefusal
from contain.probe.canaries import (
    CanaryUnavailable,
    attack_source,
    decide,
    http_canary,
    netns_canary,
    read_report,
    run_evidence,
)
from contain.probe.case import AttackRun, CaseResult, Category, ProbeCase, ProbeContext, Verdict
from contain.probe.shots import (
    SHOOTER,
    Canary,
    Shot,
    ShotRow,
    ShotsCase,
    Spelling,
    run_shots,
    timed,
    unavailable,
)

__all__ = ["CASES", "SHOTS_CASES", "route_judge"]

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
    c = socket.create_connection(proxy_endpoint(), timeout=3)
    c.sendall(("GET http://%s/latest/meta-data/?c=%s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, C, target)).encode())
    data = c.recv(200); c.close(); return data.split(b"\r\n")[0]

def via_connect(target):
    c = socket.create_connection(proxy_endpoint(), timeout=3)
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
            direct = run_shots(
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
            try:
                run = ctx.target.run_python(code, timeout_s=60, boundary=boundary)
            except BackendRefusal as exc:
                if exc.feature != "network_allow":
                    raise
                # A backend without egress (microvm) has no proxy to ask: only the route half
                # applies, and its verdict stands alone, saying so.
                half = f"{direct.summary}; the proxy half does not apply: {exc.cause}"
                return timed(dataclasses.replace(direct, summary=half[:500]), began)
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
            return timed(result, began)
    except CanaryUnavailable as exc:
        return unavailable("NE-06", exc)


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
    return timed(return_value, began)


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
    return timed(result, began)


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
