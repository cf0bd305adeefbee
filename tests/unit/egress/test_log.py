import tracemalloc

from contain.egress.log import MAX_FIELD_CHARS, MAX_LOG_BYTES, EgressEvent, EventLog, event_cost


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
    assert [e.host for e in log.drain().events] == ["a.test", "b.test"]
    assert log.drain().events == []


def test_past_the_count_bound_the_earliest_events_are_kept_and_the_rest_counted() -> None:
    log = EventLog(max_events=2)
    for host in ("a.test", "b.test", "c.test"):
        log.record(event("deny", host))
    batch = log.drain()
    assert [e.host for e in batch.events] == ["a.test", "b.test"]
    assert batch.truncated and batch.dropped.events == 1 and batch.dropped.denied_by_rule == {"egress.not_allowed": 1}
    assert not log.drain().truncated  # counts start again after a drain


def test_long_fields_are_clipped_and_say_how_much_was_cut() -> None:
    log = EventLog()
    log.record(event("deny", "x" * 16_000))
    kept = log.drain().events[0]
    assert kept.host == "x" * MAX_FIELD_CHARS + f"...[{16_000 - MAX_FIELD_CHARS} more chars]"
    assert len(kept.reason) < MAX_FIELD_CHARS + 40


def test_a_flood_of_long_hostnames_keeps_host_memory_within_the_byte_bound() -> None:
    """Issue 18 item 5: 16 KB hostnames drove the host to 1 GB. Each name here is a new string."""
    log = EventLog()
    tracemalloc.start()
    try:
        for i in range(4000):
            log.record(event("deny" if i % 2 else "allow", f"{i}-" + "h" * 16_000))
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    batch = log.drain()
    assert peak < 2 * MAX_LOG_BYTES
    assert sum(event_cost(e) for e in batch.events) <= MAX_LOG_BYTES
    assert len(batch.events) + batch.dropped.events == 4000  # every attempt is accounted for
    assert batch.dropped.denied == sum(1 for i in range(len(batch.events), 4000) if i % 2)
    assert batch.dropped.bytes > 16_000 * batch.dropped.events  # what was offered, not the clip


def test_dropped_refusals_become_one_violation_naming_their_count_and_rules() -> None:
    log = EventLog(max_events=1)
    for host in ("a.test", "b.test", "c.test"):
        log.record(event("deny", host))
    message = log.drain().dropped.violation_message()
    assert message is not None and message.startswith("2 further refused egress attempt(s)")
    assert "egress.not_allowed x2" in message


def test_dropped_allowed_events_are_counted_without_a_violation() -> None:
    log = EventLog(max_events=0)
    log.record(event("allow"))
    dropped = log.drain().dropped
    assert dropped.events == 1 and dropped.violation_message() is None


def test_distinct_rule_ids_among_dropped_events_are_bounded() -> None:
    log = EventLog(max_events=0)
    for i in range(100):
        log.record(EgressEvent(1.0, "h", 1, None, "deny", "r", f"rule.{i}", "connect", 0, 0))
    counts = log.drain().dropped.denied_by_rule
    assert len(counts) == 33 and counts["other"] == 68 and sum(counts.values()) == 100
