"""The canary sinks really receive, stay bounded, and the verdict order never passes vacuously."""

from __future__ import annotations

import ipaddress
import json
import socket
import struct
import subprocess
import sys

import pytest

from contain.probe import canaries
from contain.probe.canaries import (
    Bounds,
    CanaryUnavailable,
    attack_source,
    decide,
    dns_canary,
    http_canary,
    http_response,
    parse_dns_query,
    pick_test_network,
    read_report,
    tcp_canary,
    udp_canary,
    unix_canary,
)
from contain.probe.case import AttackRun, Verdict


def _run(stdout: bytes) -> AttackRun:
    return AttackRun(exit_code=0, signal=None, stdout=stdout, stderr=b"", timed_out=False, duration_s=0.1)


def test_tcp_canary_records_connection_and_bytes() -> None:
    with tcp_canary() as sink:
        with socket.create_connection((sink.host, sink.port), timeout=2) as client:
            client.sendall(b"hello canary-123")
        assert sink.wait_for("canary-123", 3)
        sink.settle()
        assert sink.count() == 1
        assert sink.hits()[0].peer.startswith("127.0.0.1:")
        assert not sink.received("something-else")


def test_tcp_canary_stops_accepting_after_its_bound() -> None:
    with tcp_canary(bounds=Bounds(max_hits=2)) as sink:
        for i in range(2):
            with socket.create_connection((sink.host, sink.port), timeout=2) as client:
                client.sendall(f"n{i}".encode())
        assert sink.wait_for("n1", 3)
        sink.settle()
        with pytest.raises(OSError):
            for _ in range(5):  # the listener closed: the kernel refuses further connections
                socket.create_connection((sink.host, sink.port), timeout=1).close()
        assert sink.count() == 2


def test_tcp_canary_keeps_at_most_max_bytes_per_hit() -> None:
    with tcp_canary(bounds=Bounds(max_bytes=10)) as sink:
        with socket.create_connection((sink.host, sink.port), timeout=2) as client:
            client.sendall(b"x" * 1000)
        sink.wait_for(b"x" * 10, 3)
        sink.settle()
        assert len(sink.hits()[0].data) == 10


def test_http_canary_answers_and_records_the_request() -> None:
    with http_canary(response=http_response(302, headers={"Location": "http://x/"}, body=b"")) as sink:
        with socket.create_connection((sink.host, sink.port), timeout=2) as client:
            client.sendall(b"GET /?c=zz-canary HTTP/1.1\r\nHost: a\r\n\r\n")
            reply = client.recv(4096)
        assert reply.startswith(b"HTTP/1.1 302 Found")
        assert b"Location: http://x/" in reply
        assert sink.received("zz-canary")


def test_udp_canary_records_datagrams() -> None:
    with udp_canary() as sink:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
            client.sendto(b"udp-canary-9", (sink.host, sink.port))
        assert sink.wait_for("udp-canary-9", 3)
        assert sink.hits()[0].kind == "udp"


def _query(name: str, qtype: int) -> bytes:
    labels = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\x00"
    return b"\xab\xcd\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + labels + struct.pack("!HH", qtype, 1)


def test_dns_canary_records_the_name_and_answers_nxdomain() -> None:
    with dns_canary() as sink:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
            client.settimeout(2)
            client.sendto(_query("ABCdef.probe.test", 16), (sink.host, sink.port))
            reply = client.recv(512)
        assert reply[:2] == b"\xab\xcd"
        assert reply[3] & 0x0F == 3  # NXDOMAIN
        assert sink.received("abcdef.probe.test type=16")


def test_parse_dns_query_refuses_compression_and_truncation() -> None:
    assert parse_dns_query(_query("a.b", 1)) == ("a.b", 1, len(_query("a.b", 1)))
    assert parse_dns_query(b"\x00" * 5) is None
    assert parse_dns_query(b"\x00" * 12 + b"\xc0\x0c") is None
    assert parse_dns_query(_query("a.b", 1)[:-3]) is None


def test_unix_canary_path_and_abstract(tmp_path) -> None:
    path = str(tmp_path / "s.sock")
    with unix_canary(path) as by_path, unix_canary(abstract=f"contain-test-{id(tmp_path)}") as abstract:
        for address in (path, "\0" + abstract.host[1:]):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
                client.connect(address)
                client.sendall(b"unix-canary")
        assert by_path.wait_for("unix-canary", 3)
        assert abstract.wait_for("unix-canary", 3)
        assert by_path.address == path
    import os

    assert not os.path.exists(path)


def test_unix_canary_needs_exactly_one_address() -> None:
    with pytest.raises(ValueError), unix_canary():
        pass


def test_wait_for_times_out_when_nothing_arrives() -> None:
    with tcp_canary() as sink:
        assert sink.wait_for("never", 0.1) is False
        assert sink.count() == 0


def test_pick_test_network_avoids_taken_ranges() -> None:
    taken = [ipaddress.IPv4Network("10.0.0.0/9")]
    for _ in range(20):
        net = pick_test_network(taken)
        assert net.prefixlen == 30
        assert net.subnet_of(ipaddress.IPv4Network("10.0.0.0/8"))
        assert not net.overlaps(taken[0])


def test_pick_test_network_gives_up_when_everything_is_taken() -> None:
    with pytest.raises(CanaryUnavailable):
        pick_test_network([ipaddress.IPv4Network("10.0.0.0/8")])


def test_netns_canary_refuses_without_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(canaries.os, "geteuid", lambda: 1000)
    with pytest.raises(CanaryUnavailable, match="needs root"), canaries.netns_canary():
        pass


def test_attack_source_roundtrip_through_a_real_interpreter() -> None:
    code = attack_source('rec("div", lambda: 1 // P["zero"])\nrec("os", os.open, "/nonexistent/x", 0)\ndone()', zero=0)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, timeout=30).stdout
    report = read_report(_run(out))
    assert report is not None
    assert report["div"]["ok"] is False and "ZeroDivisionError" in report["div"]["error"]
    assert report["os"] == {"ok": False, "errno": "ENOENT", "msg": report["os"]["msg"]}


def test_read_report_takes_the_last_record_and_none_without_one() -> None:
    text = b"noise\n@@PROBE@@" + json.dumps({"a": 1}).encode() + b"\n@@PROBE@@" + json.dumps({"b": 2}).encode()
    assert read_report(_run(text)) == {"b": 2}
    assert read_report(_run(b"printed CONTAINED but never reported")) is None
    assert read_report(_run(b"@@PROBE@@{not json")) is None


@pytest.mark.parametrize(
    ("breaches", "failures", "missing", "expected"),
    [
        (["canary at sink"], ["control failed"], ["no report"], Verdict.ESCAPED),
        ([], ["control failed"], [], Verdict.INCONCLUSIVE),
        ([], [], ["no report"], Verdict.INCONCLUSIVE),
        ([], [], [], Verdict.CONTAINED),
    ],
)
def test_decide_orders_breach_then_control_then_missing(breaches, failures, missing, expected) -> None:
    result = decide(
        "X-01", breaches=breaches, control_failures=failures, missing=missing, contained="ok", control="c", evidence={}
    )
    assert result.verdict is expected
