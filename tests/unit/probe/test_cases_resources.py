"""Pure judges of the RE cases fire on planted readings."""

from __future__ import annotations

from contain.probe.cases_resources import _bound_reached, _fork_bomb_judgement, _sibling_failures


def test_reaching_an_attack_bound_is_the_breach():
    assert _bound_reached({"forked": {"value": 200}}, "forked", 200)
    assert not _bound_reached({"forked": {"value": 31}}, "forked", 200)
    assert not _bound_reached({}, "forked", 200)  # no report is not a breach; the case says INCONCLUSIVE


def test_the_fork_bomb_is_contained_only_when_eagain_capped_it_at_pids_max():
    """RE-01: runsc's first battery let 46 forks pass a limit of 32 (RLIMIT_NPROC in the sentry had
    slack over a host cgroup that never counted them), then an OOM kill ended the sandbox unreported."""

    def judge(report):
        return _fork_bomb_judgement(report, bound=200, pids_max=32)

    assert judge({"forked": {"value": 30}, "fork error": {"value": "EAGAIN"}}) == ([], None)
    assert judge({"forked": {"value": 200}}) == (["all 200 forks succeeded: no process limit held"], None)
    assert judge({"forked": {"value": 46}, "fork error": {"value": "EAGAIN"}}) == (
        ["46 forks passed the process limit of 32"],
        None,
    )
    assert judge({}) == ([], "the attack did not report")
    breaches, missing = judge({"forked": {"value": 20}, "fork error": {"value": "ENOMEM"}})
    assert breaches == [] and "not with the process limit's EAGAIN" in str(missing)


def test_the_fork_bomb_gets_memory_for_every_child_so_the_process_limit_meets_it_first():
    from contain.probe.cases_resources import _FORK_BOMB_BOUNDARY, _RES

    six_mib_per_gvisor_child = 6 * 1024**2  # measured under runsc: copy-on-write in 2 MiB units
    assert _FORK_BOMB_BOUNDARY["resources"]["memory_bytes"] > (_RES["pids_max"] + 8) * six_mib_per_gvisor_child
    assert set(_FORK_BOMB_BOUNDARY["resources"]) == {"memory_bytes"}  # the process limit stays the probe's


def test_shared_limit_judge_ignores_calls_denied_to_everyone():
    hog = {"inotify held": {"value": {"count": 128}}, "keys held": {"value": {"count": 0, "errno": "EPERM"}}}
    sibling = {
        "sibling inotify": {"ok": False, "errno": "EMFILE"},
        "sibling add_key": {"ok": False, "errno": "EPERM"},
        "sibling mq": {"ok": True},
    }
    assert _sibling_failures(sibling, hog) == ["sibling inotify failed (EMFILE) while another task held {'count': 128}"]


def test_re53_control_restores_what_a_clipped_event_offered_the_host():
    from contain.egress.log import EgressEvent, EventLog, event_cost
    from contain.probe.cases_resources import _offered_bytes

    original = EgressEvent(1.0, "a" * 16_000, 443, None, "deny", "b" * 20_000, "egress.not_allowed", "connect", 0, 0)
    log = EventLog()
    log.record(original)
    kept = log.drain().events[0].to_dict()
    assert event_cost(EgressEvent(**kept)) < 2_500
    assert _offered_bytes(kept) == event_cost(original)


def _flood_against_a_fake_proxy(**params):
    """Run RE-53's flood (as a local python3) against a loopback stand-in for the proxy that
    reads each request head and answers 403; returns the heads and the attack's report."""
    import socket
    import subprocess
    import sys
    import threading

    from contain.probe.case import AttackRun
    from contain.probe.cases_resources import _PROXY_FLOOD
    from contain.probe.context import attack, attack_report

    server = socket.create_server(("127.0.0.1", 0))
    heads: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data and len(data) < 1 << 20:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                heads.append(data)
                conn.sendall(b"HTTP/1.1 403 Forbidden\r\nConnection: close\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        code = attack(_PROXY_FLOOD, proxy=list(server.getsockname()), output_mib=0, **params)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, check=False)
    finally:
        server.shutdown(socket.SHUT_RDWR)  # wakes the accept() above (close alone does not)
        server.close()
        thread.join(timeout=5)
    return heads, attack_report(AttackRun(0, None, out.stdout, out.stderr, False, 0.0)) or {}


def test_re53_each_flood_request_fits_the_proxys_head_limit_with_the_whole_name():
    from contain.egress.proxy import MAX_HEAD_BYTES
    from contain.probe.cases_resources import _FLOOD_NAME_CHARS

    heads, report = _flood_against_a_fake_proxy(
        count=3, seconds=30, goal_bytes=10**9, offered_per_refusal=1, name_chars=_FLOOD_NAME_CHARS
    )
    assert len(heads) == 3 and report["sent"]["value"] == 3
    for head in heads:
        assert len(head) <= MAX_HEAD_BYTES  # a longer head is refused before its name is read
        assert head.count(b"a" * _FLOOD_NAME_CHARS) == 1


def test_re53_the_flood_stops_once_its_refusals_offered_the_goal():
    heads, report = _flood_against_a_fake_proxy(
        count=50, seconds=30, goal_bytes=3_000, offered_per_refusal=1_000, name_chars=100
    )
    assert (len(heads), report["refused by the proxy"]["value"]) == (3, 3)


def test_re09_a_hog_that_failed_to_run_is_an_error_never_a_verdict():
    # The hog runs in a thread of its own; its exception was lost and the case judged the sibling
    # against an empty hog report.
    import pytest

    from contain.probe.case import AttackRun
    from contain.probe.cases_resources import re_09
    from contain.probe.context import REPORT_MARK, RunContext

    class HogFails:
        name, kind, has_contain_hooks = "fake", "process", True

        def run_python(self, code, **kw):
            if '"role": "hog"' in code.replace('\\"', '"'):
                raise RuntimeError("the hog's sandbox did not start")
            out = ("\n" + REPORT_MARK + '{"sibling mq": {"ok": true}}\n').encode()
            return AttackRun(0, None, out, b"", False, 0.01)

        def run_argv(self, argv, **kw):  # pragma: no cover
            raise AssertionError

    target = HogFails()
    ctx = RunContext(target, control=target, sandboxed_control=target, run_id="unithog")
    try:
        with pytest.raises(RuntimeError, match="hog's sandbox"):
            re_09(ctx)
    finally:
        ctx.close()
