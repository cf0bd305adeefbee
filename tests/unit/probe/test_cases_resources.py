"""Pure judges of the RE cases fire on planted readings."""

from __future__ import annotations

from contain.probe.cases_resources import _bound_reached, _sibling_failures


def test_reaching_an_attack_bound_is_the_breach():
    assert _bound_reached({"forked": {"value": 200}}, "forked", 200)
    assert not _bound_reached({"forked": {"value": 31}}, "forked", 200)
    assert not _bound_reached({}, "forked", 200)  # no report is not a breach; the case says INCONCLUSIVE


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
