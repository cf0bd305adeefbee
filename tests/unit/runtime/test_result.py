"""RunResult says when the host-side egress log dropped events."""

from contain.runtime.result import Captured, RunResult, Timings, Usage


def result(**extra: object) -> RunResult:
    return RunResult(
        exit_code=0,
        signal=None,
        timed_out=False,
        oom_killed=False,
        stdout=Captured(b"", False, 0),
        stderr=Captured(b"", False, 0),
        timings=Timings(0.0, 0.0, 0.0),
        usage=Usage(0.0, None, "supervisor rusage"),
        violations=(),
        backend="process",
        **extra,  # type: ignore[arg-type]
    )


def test_a_result_with_dropped_egress_events_says_it_is_truncated_and_how_much() -> None:
    dropped = {"events": 12, "bytes": 400_000, "denied": 11, "denied_by_rule": {"egress.not_allowed": 11}}
    out = result(egress_dropped=dropped).to_dict()
    assert out["egress_truncated"] is True and out["egress_dropped"] == dropped


def test_a_result_without_drops_is_not_truncated() -> None:
    out = result().to_dict()
    assert out["egress_truncated"] is False and out["egress_dropped"] == {}


def test_a_truncated_stream_says_how_many_bytes_were_seen_beyond_what_was_kept() -> None:
    out = Captured(b"abc", True, 70_000).to_dict("stdout")
    assert out == {"stdout": "abc", "stdout_encoding": "utf-8", "stdout_truncated": True, "stdout_total_bytes": 70_000}
