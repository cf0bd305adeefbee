"""PX cases: contain's allowlisting egress proxy, driven with raw sockets from inside the sandbox.

Every case runs one sandbox whose boundary allows ``allowed.test`` (mapped by ``network.hosts``
to the host's 127.0.0.1) on the port of an *allowed* HTTP canary, and sends raw requests to the
proxy where the sandbox was told it is (``http_proxy``: 127.0.0.1:3128 on the sandbox's own
loopback for the process and container backends, the guest's forwarded address 10.0.2.100:3128
in a microVM; the proxy itself runs on the host). The
*blocked* canaries listen on the host's loopback too, on other ports: the proxy dials from the
host, so any request it wrongly lets through (an IP literal, a numeric spelling, a port not in
the allow list, a redirect it follows, a smuggled second request) lands on a blocked canary.

Judges: a blocked canary that records anything during the run is ESCAPED (a smuggled or
pipelined request only matters if the proxy acts on it, and then it lands there); an ``allow``
event in the proxy's decision log (``AttackRun.egress_events``) for anything but
``allowed.test`` on its port is ESCAPED.
Positive control, in the same run through the same proxy: a request to ``allowed.test`` must reach
the allowed canary (else INCONCLUSIVE), and refusals must appear in the decision log.

Needs contain's hooks (boundary overrides and the proxy log): on --wrap targets every PX case is
NOT_APPLICABLE. PX-08 and PX-14 are documented residual risks of contain (no TLS/SNI inspection,
no DLP): they pass when the bytes only went to the allowed destination *and* the log recorded it.
PX-13's "proxy killed" half is not probed (the workload cannot kill a host-side proxy); its
other halves are: no proxy without an allow list, and malformed policies refused at load time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from contain.egress.session import PROXY_ADDRESS
from contain.probe.canaries import Sink, attack_source, decide, http_canary, http_response, read_report, run_evidence
from contain.probe.case import CaseResult, Category, ProbeCase, ProbeContext, Verdict
from contain.runtime.microvm.handle import GUEST_PROXY

__all__ = ["CASES", "PROXY_CLIENT", "PROXY_PLACES", "ProxyWorld", "Request", "judge_proxy"]


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


PROXY_CLIENT = r"""
def send(req):
    via = ("127.0.0.1", P["proxy_port"]) if "proxy_port" in P else proxy_endpoint()
    via = tuple(req["via"]) if req.get("via") else via
    c = socket.create_connection(via, timeout=4)
    try:
        c.sendall(req["raw"].encode("latin-1"))
        data = b""
        with __import__("contextlib").suppress(OSError):
            while b"\r\n\r\n" not in data and len(data) < 8192:
                chunk = c.recv(4096)
                if not chunk:
                    break
                data += chunk
        status = data.split(b"\r\n")[0].decode("latin-1")
        if req.get("then") and " 200" in status:
            c.sendall(req["then"].encode("latin-1"))
            time.sleep(0.2)
        return status or "closed without reply"
    finally:
        c.close()

for req in P["requests"]:
    rec(req["name"], send, req)
done()
"""


@dataclass(frozen=True)
class Request:
    name: str
    raw: str  # bytes sent to the proxy (latin-1)
    then: str = ""  # sent through the tunnel after a 200 (CONNECT)
    via: tuple[str, int] | None = None  # a proxy address of its own (default: where the sandbox's proxy is)


# Where a backend puts the sandbox's proxy (PX-13 asks each with no allow list: none may answer).
PROXY_PLACES: tuple[tuple[tuple[str, int], str], ...] = (
    (PROXY_ADDRESS, "process and container backends: the proxy's port on the sandbox's own loopback"),
    (_host_port(GUEST_PROXY), "microvm: the guest's forward to the proxy (runtime/microvm/handle.py)"),
)


@dataclass(frozen=True)
class ProxyWorld:
    """The canaries of one PX run and the values requests are built from."""

    allowed: Sink
    blocked: Sink
    blocked6: Sink | None
    canary: str  # carried by every blocked or smuggled request
    control: str  # carried by the allowed control request


def get(target: str, canary: str, host: str | None = None) -> str:
    host_header = host if host is not None else target.split("//", 1)[-1].split("/", 1)[0]
    return f"GET {target}?c={canary} HTTP/1.1\r\nHost: {host_header}\r\n\r\n"


def connect(authority: str) -> str:
    return f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n"


def _control(w: ProxyWorld) -> Request:
    return Request("control_allowed", get(f"http://allowed.test:{w.allowed.port}/", w.control))


def judge_proxy(
    case_id: str,
    world: ProxyWorld,
    *,
    report: dict[str, Any] | None,
    events: list[dict[str, Any]],
    allowed_port: int,
    contained: str,
    extra_allowed_hosts: tuple[str, ...] = (),
    require_refusals: bool = True,
    require_logged_allow: bool = False,
) -> tuple[list[str], list[str], list[str]]:
    """(breaches, control failures, missing) from the sinks and the decision log."""
    breaches: list[str] = []
    if world.blocked.count():
        breaches.append(f"blocked canary {world.blocked.address} got {world.blocked.count()} connection(s)")
    if world.blocked6 is not None and world.blocked6.count():
        breaches.append(f"blocked canary {world.blocked6.address} got {world.blocked6.count()} connection(s)")
    okay_hosts = {"allowed.test", *extra_allowed_hosts}
    for event in events:
        if event.get("verdict") == "allow" and (
            event.get("host") not in okay_hosts
            or (event.get("host") == "allowed.test" and event.get("port") != allowed_port)
        ):
            breaches.append(f"the proxy allowed {event.get('host')}:{event.get('port')} ({event.get('via')})")
    failures = [] if world.allowed.received(world.control) else ["allowed.test through the proxy was not reached"]
    missing: list[str] = []
    if report is None:
        missing.append("the attack never reported")
    if require_refusals and not any(e.get("verdict") == "deny" for e in events):
        missing.append("the proxy log recorded no refusal")
    logged = any(e.get("verdict") == "allow" and e.get("host") == "allowed.test" for e in events)
    if require_logged_allow and world.allowed.count() and not logged:
        breaches.append("data reached the allowed destination without an entry in the proxy log")
    return breaches, failures, missing


@contextlib.contextmanager
def _world(ctx: ProbeContext, allowed_response: Callable[[ProxyWorld | None, int], bytes] | None) -> Iterator[Any]:
    with http_canary() as blocked, http_canary("::1") as blocked6:
        canary = ctx.canary("px")
        response = allowed_response(None, blocked.port) if allowed_response else None
        if response is not None:
            response = response.replace(b"{canary}", canary.encode())
        with http_canary(response=response) as allowed:
            yield ProxyWorld(allowed, blocked, blocked6, canary, ctx.canary("pxctl"))


def _proxy_case(
    case_id: str,
    title: str,
    expected: str,
    build: Callable[[ProxyWorld], list[Request]],
    contained: str,
    *,
    extra_network: Callable[[ProxyWorld], dict[str, Any]] | None = None,
    allowed_response: Callable[[ProxyWorld | None, int], bytes] | None = None,
    require_logged_allow: bool = False,
    require_refusals: bool = True,
    extra_allowed_hosts: tuple[str, ...] = (),
) -> ProbeCase:
    def check(ctx: ProbeContext) -> CaseResult:
        began = time.perf_counter()
        if not ctx.target.has_contain_hooks:
            return CaseResult(case_id, Verdict.NOT_APPLICABLE, _NEEDS_HOOKS)
        with _world(ctx, allowed_response) as w:
            network: dict[str, Any] = {
                "allow": [{"host": "allowed.test", "ports": [w.allowed.port]}],
                "hosts": {"allowed.test": "127.0.0.1"},
            }
            if extra_network is not None:
                more = extra_network(w)
                network["allow"] += more.get("allow", [])
                network["hosts"].update(more.get("hosts", {}))
            requests = [_control(w), *build(w)]
            code = attack_source(PROXY_CLIENT, requests=[dataclasses.asdict(r) for r in requests])
            run = ctx.target.run_python(code, timeout_s=60, boundary={"network": network})
            for sink in (w.allowed, w.blocked) + ((w.blocked6,) if w.blocked6 else ()):
                sink.settle()
            report = read_report(run)
            events = [dict(e) for e in run.egress_events]
            breaches, failures, missing = judge_proxy(
                case_id,
                w,
                report=report,
                events=events,
                allowed_port=w.allowed.port,
                contained=contained,
                require_logged_allow=require_logged_allow,
                extra_allowed_hosts=extra_allowed_hosts,
                require_refusals=require_refusals,
            )
            result = decide(
                case_id,
                breaches=breaches,
                control_failures=failures,
                missing=missing,
                contained=contained,
                control="allowed.test through the same proxy received the control canary",
                evidence={
                    "proxy_replies": report,
                    "run": run_evidence(run),
                    "blocked": w.blocked.evidence(),
                    "allowed": w.allowed.evidence(),
                },
            )
        return dataclasses.replace(result, duration_s=time.perf_counter() - began)

    return ProbeCase(case_id, Category.PX, title, expected, check, not_applicable={"wrap": _NEEDS_HOOKS})


_NEEDS_HOOKS = "needs contain's proxy decision log and network.hosts override"


def _px01(w: ProxyWorld) -> list[Request]:
    return [
        Request(f"connect_allowed_{p}", connect(f"allowed.test:{p}"), w.canary) for p in (w.blocked.port, 22, 25, 6379)
    ]


def _px02(w: ProxyWorld) -> list[Request]:
    q = w.blocked.port
    return [
        Request("get_blocked_name", get(f"http://blocked.test:{q}/", w.canary)),
        Request("get_allowed_name_blocked_port", get(f"http://allowed.test:{q}/", w.canary)),
    ]


def _px03(w: ProxyWorld) -> list[Request]:
    q = w.blocked.port
    return [
        Request("get_ip_literal", get(f"http://127.0.0.1:{q}/", w.canary)),
        Request("connect_ip_literal", connect(f"127.0.0.1:{q}"), w.canary),
    ]


def _px04(w: ProxyWorld) -> list[Request]:
    q = w.blocked.port
    six = w.blocked6.port if w.blocked6 else q
    spellings = ["127.1", "0177.0.0.1", "0x7f000001", "2130706433", "0x7f.0.0.01", "127.0.0.1"]
    out = [Request(f"get_{s}", get(f"http://{s}:{q}/", w.canary)) for s in spellings]
    out += [Request(f"connect_{s}", connect(f"{s}:{q}"), w.canary) for s in spellings]
    out += [
        Request("get_[::1]", get(f"http://[::1]:{six}/", w.canary)),
        Request("connect_[::ffff:7f00:1]", connect(f"[::ffff:7f00:1]:{q}"), w.canary),
    ]
    return out


def _px05(w: ProxyWorld) -> list[Request]:
    q, p = w.blocked.port, w.allowed.port
    return [
        Request("trailing_dot_blocked", get(f"http://blocked.test.:{q}/", w.canary)),
        Request("case_blocked_port", get(f"http://ALLOWED.TEST:{q}/", w.canary)),
        Request("pct_2e", get(f"http://allowed%2etest:{q}/", w.canary)),
        Request("punycode_homograph", get(f"http://xn--llowed-3ua.test:{q}/", w.canary)),
        Request("userinfo_allowed_at_evil", get(f"http://allowed.test@127.0.0.1:{q}/", w.canary)),
        Request("backslash", get(f"http://allowed.test\\@127.0.0.1:{q}/", w.canary)),
        Request("host_header_mismatch", get(f"http://allowed.test:{p}/", w.canary, host=f"127.0.0.1:{q}")),
        Request("allowed_trailing_dot_consistent", get(f"http://allowed.test.:{p}/", w.control)),
    ]


def _px07_net(w: ProxyWorld) -> dict[str, Any]:
    names = ("a.wild.test", "wild.test", "evilwild.test", "wild.test.evil.test")
    return {
        "allow": [{"host": "*.wild.test", "ports": [w.blocked.port]}],
        "hosts": {name: "127.0.0.1" for name in names},
    }


def _px07(w: ProxyWorld) -> list[Request]:
    q = w.blocked.port
    return [
        Request("apex_not_subdomain", get(f"http://wild.test:{q}/", w.canary)),
        Request("suffix_lookalike", get(f"http://evilwild.test:{q}/", w.canary)),
        Request("allowed_as_prefix", get(f"http://wild.test.evil.test:{q}/", w.canary)),
    ]


def _px08(w: ProxyWorld) -> list[Request]:
    p = w.allowed.port
    inner = f"GET /?c={w.canary} HTTP/1.1\r\nHost: blocked.test\r\n\r\n"
    hello = "\x16\x03\x01\x00\x40" + "blocked.test" + w.canary  # a ClientHello-shaped record naming blocked.test
    return [
        Request("inner_host_other_tenant", connect(f"allowed.test:{p}"), inner.replace(w.canary, "residual")),
        Request("sni_blocked_host", connect(f"allowed.test:{p}"), hello.replace(w.canary, "residual")),
    ]


def _px11(w: ProxyWorld) -> list[Request]:
    q, p = w.blocked.port, w.allowed.port
    smuggled = f"GET http://127.0.0.1:{q}/?c={w.canary} HTTP/1.1\r\nHost: 127.0.0.1:{q}\r\n\r\n"
    return [
        Request(
            "cl_te",
            f"POST http://allowed.test:{p}/ HTTP/1.1\r\nHost: allowed.test:{p}\r\n"
            f"Content-Length: {len(smuggled) + 5}\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{smuggled}",
        ),
        Request("pipelined", f"GET http://allowed.test:{p}/ HTTP/1.1\r\nHost: allowed.test:{p}\r\n\r\n{smuggled}"),
        Request("http09", f"GET http://127.0.0.1:{q}/?c={w.canary}\r\n"),
        Request(
            "double_host",
            f"GET http://allowed.test:{p}/?c={w.canary} HTTP/1.1\r\n"
            f"Host: allowed.test:{p}\r\nHost: 127.0.0.1:{q}\r\n\r\n",
        ),
    ]


def _px12(w: ProxyWorld) -> list[Request]:
    q = w.blocked.port
    socks = "\x05\x01\x00" + "\x05\x01\x00\x01\x7f\x00\x00\x01" + chr(q >> 8) + chr(q & 0xFF)
    return [
        Request("cache_object", f"GET cache_object://127.0.0.1:{q}/info HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
        Request(
            "squid_internal_mgr", f"GET /squid-internal-mgr/info?c={w.canary} HTTP/1.1\r\nHost: 127.0.0.1:{q}\r\n\r\n"
        ),
        Request("unauthenticated_socks5", socks),
    ]


def _px14(w: ProxyWorld) -> list[Request]:
    p = w.allowed.port
    return [Request("exfil_via_allowed", connect(f"allowed.test:{p}"), f"POST /gist HTTP/1.1\r\n\r\n{w.control}-exfil")]


def _px15_response(world: ProxyWorld | None, blocked_port: int) -> bytes:
    return http_response(302, headers={"Location": f"http://127.0.0.1:{blocked_port}/?c={{canary}}"}, body=b"")


def _px15(w: ProxyWorld) -> list[Request]:
    p = w.allowed.port
    return [Request("redirect_to_blocked", get(f"http://allowed.test:{p}/redirect", w.control + "-r"))]


def _px13(ctx: ProbeContext) -> CaseResult:
    """No allow list: no proxy at all. Malformed policy: refused at load."""
    began = time.perf_counter()
    if not ctx.target.has_contain_hooks:
        return CaseResult("PX-13", Verdict.NOT_APPLICABLE, _NEEDS_HOOKS)
    from pydantic import ValidationError

    from contain.boundary import Boundary

    refused: dict[str, str] = {}
    breaches: list[str] = []
    for label, mapping in (
        ("wildcard TLD", {"network": {"allow": [{"host": "*.com", "ports": [443]}]}}),
        ("empty ports", {"network": {"allow": [{"host": "a.test", "ports": []}]}}),
        ("bad hosts address", {"network": {"hosts": {"a.test": "not-an-ip"}}}),
        ("unknown key", {"network": {"allow_all": True}}),
    ):
        try:
            Boundary.model_validate(mapping)
            breaches.append(f"malformed policy accepted: {label}")
        except ValidationError as exc:
            refused[label] = str(exc).splitlines()[0][:160]
    with http_canary() as sink:
        canary, control_canary = ctx.canary("px13"), ctx.canary("px13ctl")
        asks = [
            Request(f"no_allowlist_proxy {h}:{p}", get(f"http://127.0.0.1:{sink.port}/", canary), via=(h, p))
            for (h, p), _why in PROXY_PLACES
        ]
        code = attack_source(PROXY_CLIENT, requests=[dataclasses.asdict(r) for r in asks])
        run = ctx.target.run_python(code, timeout_s=30)  # the default boundary: no network at all
        control = ctx.control.run_python(
            attack_source(
                PROXY_CLIENT,
                proxy_port=sink.port,
                requests=[
                    dataclasses.asdict(Request("control_direct", get(f"http://127.0.0.1:{sink.port}/", control_canary)))
                ],
            ),
            timeout_s=30,
        )
        sink.settle()
        report = read_report(run)
        if sink.received(canary):
            breaches.append("with an empty allow list a request still reached the host canary")
        if run.egress_events:
            breaches.append("a sandbox with no allow list had an egress log (a proxy was running)")
        asked = {r.name: (report or {}).get(r.name, {}) for r in asks}
        for name, reached in asked.items():
            if reached.get("ok"):
                breaches.append(f"something answered at {name.split()[-1]} with no allow list: {reached.get('value')}")
        result = decide(
            "PX-13",
            breaches=breaches,
            control_failures=[] if sink.received(control_canary) else ["the host control did not reach the canary"],
            missing=[] if report is not None else ["the attack never reported"],
            contained=(
                "no proxy without an allow list ("
                + ", ".join(f"{n.split()[-1]}: {r.get('errno')}" for n, r in asked.items())
                + f"); {len(refused)} malformed policies refused"
            ),
            control="the same request sent from the host reached the canary",
            evidence={"refused": refused, "attack": report, "control": read_report(control), "run": run_evidence(run)},
        )
    return dataclasses.replace(result, duration_s=time.perf_counter() - began)


CASES: tuple[ProbeCase, ...] = (
    _proxy_case(
        "PX-01",
        "CONNECT allowed host on other ports (canary port, 22, 25, 6379)",
        "403",
        _px01,
        "every CONNECT to a port not in the allow list was refused; canary silent",
    ),
    _proxy_case(
        "PX-02",
        "absolute-form GET to a blocked host with a canary",
        "403; canary absent",
        _px02,
        "plain-HTTP requests to blocked destinations refused; canary absent",
    ),
    _proxy_case("PX-03", "IP-literal GET and CONNECT", "403", _px03, "IP literals refused"),
    _proxy_case(
        "PX-04",
        "numeric spellings of loopback (127.1, octal, hex, decimal, ::1, mapped)",
        "403",
        _px04,
        "every numeric spelling refused; canaries silent",
    ),
    _proxy_case(
        "PX-05",
        "trailing dot, case, %2e, punycode, userinfo, backslash, Host mismatch",
        "blocked stays blocked; allowed routed consistently",
        _px05,
        "every respelling of a blocked destination refused",
    ),
    _proxy_case(
        "PX-07",
        "*.wild.test vs wild.test, evilwild.test, wild.test.evil.test",
        "only true subdomains pass",
        _px07,
        "apex and look-alike names refused under a wildcard rule",
        extra_network=_px07_net,
        extra_allowed_hosts=("a.wild.test",),
    ),
    _proxy_case(
        "PX-08",
        "CONNECT allowed then SNI / inner Host of another tenant",
        "documented residual risk: bytes go only to the allowed destination",
        _px08,
        "tunnel bytes reached only the allowed destination (SNI/inner Host not inspected: residual risk)",
        require_logged_allow=True,
        require_refusals=False,
    ),
    _proxy_case(
        "PX-11",
        "CL.TE smuggling, pipelined request, HTTP/0.9, double Host",
        "400/403 for the smuggled request",
        _px11,
        "smuggled, pipelined, HTTP/0.9 and double-Host requests never reached a blocked canary",
    ),
    _proxy_case(
        "PX-12",
        "cache_object://, /squid-internal-mgr/, SOCKS5 on the proxy port",
        "403/refused",
        _px12,
        "proxy-internal URLs and SOCKS refused",
    ),
    ProbeCase(
        "PX-13",
        Category.PX,
        "empty allowlist, malformed policy",
        "deny-all / refuse to start",
        _px13,
        not_applicable={"wrap": _NEEDS_HOOKS},
    ),
    _proxy_case(
        "PX-14",
        "exfiltrate a canary through the allowed destination",
        "logged as accepted residual risk",
        _px14,
        "data to the allowed destination is recorded in the proxy log (no DLP: residual risk)",
        require_logged_allow=True,
        require_refusals=False,
    ),
    _proxy_case(
        "PX-15",
        "allowed host answers 302 to a blocked host",
        "redirect not followed",
        _px15,
        "the 302 was returned to the client, never followed by the proxy",
        allowed_response=_px15_response,
        require_refusals=False,
    ),
)
