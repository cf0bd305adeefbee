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
