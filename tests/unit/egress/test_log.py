from contain.egress.log import EgressEvent, EventLog


def event(verdict: str, host: str = "api.example.com") -> EgressEvent:
    return EgressEvent(
        1.0,
        host,
        443,
        None,
        verdict,
        f"{host}:443 is not in network.allow",
        "egress.not_allowed",
        "connect",
        0,
        0,
    )


def test_a_denied_event_is_a_violation_with_an_actionable_message() -> None:
    assert event("deny").violation_message() == "api.example.com:443 is not in network.allow"
    assert event("allow").violation_message() is None


def test_to_dict_has_every_field() -> None:
    assert event("deny").to_dict() == {
        "time": 1.0,
        "host": "api.example.com",
        "port": 443,
        "address": None,
        "verdict": "deny",
        "reason": "api.example.com:443 is not in network.allow",
        "rule_id": "egress.not_allowed",
        "via": "connect",
        "bytes_up": 0,
        "bytes_down": 0,
    }


def test_drain_returns_events_once_in_order() -> None:
    log = EventLog()
    log.record(event("deny", "a.test"))
    log.record(event("deny", "b.test"))
    assert [e.host for e in log.drain()] == ["a.test", "b.test"]
    assert log.drain() == []


def test_log_is_bounded_and_counts_what_it_dropped() -> None:
    log = EventLog(max_events=2)
    for host in ("a.test", "b.test", "c.test"):
        log.record(event("deny", host))
    assert [e.host for e in log.drain()] == ["b.test", "c.test"]
    assert log.dropped == 1
