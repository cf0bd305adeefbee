"""Job lines become prepared jobs or problems that fail alone; the batch goes on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contain.fleet import jobs as jobs_module
from contain.fleet.jobs import JobProblem, PreparedJob, prepare_jobs, read_job_lines


def _prepare(tmp_path: Path, lines: list[str]) -> list[PreparedJob | JobProblem]:
    path = tmp_path / "jobs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return list(prepare_jobs(read_job_lines(path), base_dir=tmp_path))


def _line(**fields: object) -> str:
    return json.dumps({"id": "j1", "manifest": {"task": "t"}, "command": ["true"], **fields})


def test_a_valid_line_becomes_a_prepared_job_with_its_manifest_validated_and_dumped(tmp_path: Path) -> None:
    (tmp_path / "task.yaml").write_text("version: 1\ntask: from-file\nfleet: {retries: 5, warm_sandboxes: 0}\n")
    [job] = _prepare(tmp_path, [_line(manifest="task.yaml", inputs=[{"path": "/work/in", "text": "x"}])])
    assert isinstance(job, PreparedJob)
    assert (job.id, job.line, job.backend, job.boundary_dump["task"]) == ("j1", 1, "process", "from-file")
    assert (job.fleet.retries, job.fleet.warm_sandboxes) == (5, 0)
    assert job.job.inputs[0].data() == b"x"


def test_code_runs_as_python3_dash_c(tmp_path: Path) -> None:
    [job] = _prepare(tmp_path, [json.dumps({"id": "c", "manifest": {}, "code": "print(1)"})])
    assert isinstance(job, PreparedJob) and job.job.argv() == ("python3", "-c", "print(1)")


def test_equal_manifests_share_a_digest_and_different_ones_do_not(tmp_path: Path) -> None:
    a, b, c = _prepare(tmp_path, [_line(id="a"), _line(id="b"), _line(id="c", manifest={"task": "other"})])
    assert isinstance(a, PreparedJob) and isinstance(b, PreparedJob) and isinstance(c, PreparedJob)
    assert a.manifest_digest == b.manifest_digest != c.manifest_digest


def test_bad_lines_fail_alone_with_their_line_and_id_and_the_rest_is_prepared(tmp_path: Path) -> None:
    items = _prepare(tmp_path, [
        "{not json",
        _line(id="both", code="print(1)"),
        _line(id="badman", manifest={"task": "t", "filez": []}),
        _line(id="ok"),
        _line(id="ok"),
        _line(id="missing", manifest="nowhere.yaml"),
        _line(id="none", manifest={"runtime": {"backend": "none"}}),
        _line(id="path", inputs=[{"path": "/work/../etc/x", "text": "x"}]),
        _line(id="b64", inputs=[{"path": "/work/x", "base64": "***"}]),
        _line(id="../x"),
    ])
    problems = {(p.line, p.job_id): p.cause for p in items if isinstance(p, JobProblem)}
    assert [i.id for i in items if isinstance(i, PreparedJob)] == ["ok"]
    assert set(problems) == {(1, None), (2, "both"), (3, "badman"), (5, "ok"), (6, "missing"), (7, "none"),
                             (8, "path"), (9, "b64"), (10, None)}
    assert "Invalid JSON" in problems[(1, None)]
    assert "exactly one of command and code" in problems[(2, "both")]
    assert "manifest is invalid" in problems[(3, "badman")] and "filez" in problems[(3, "badman")]
    assert "used twice" in problems[(5, "ok")]
    assert "manifest is invalid" in problems[(6, "missing")]
    assert "runtime.backend: none" in problems[(7, "none")]
    assert "normalised" in problems[(8, "path")]
    assert "base64" in problems[(9, "b64")]


def test_an_oversize_line_is_one_problem_and_the_next_line_is_still_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobs_module, "MAX_JOB_LINE_BYTES", 64)
    items = _prepare(tmp_path, [_line(id="big", command=["echo", "x" * 200]), _line(id="small")])
    assert isinstance(items[0], JobProblem) and items[0].line == 1 and "longer than 64 bytes" in items[0].cause
    assert isinstance(items[1], PreparedJob) and items[1].line == 2


def test_an_unreadable_jobs_file_is_refused_with_a_cause(tmp_path: Path) -> None:
    from contain.errors import BoundaryInvalid

    with pytest.raises(BoundaryInvalid, match="cannot read the jobs file"):
        list(read_job_lines(tmp_path / "absent.jsonl"))


def test_a_container_manifest_names_its_runtime_variant_when_it_has_one() -> None:
    from contain.fleet.jobs import backend_of

    assert backend_of({"runtime": {"backend": "container", "container": {"runtime": "runsc"}}}) == "container:runsc"
    assert backend_of({"runtime": {"backend": "container"}}) == "container:runc"
    assert backend_of({"runtime": {"backend": "container", "container": {"runtime": None}}}) == "container:runc"
    assert backend_of({"runtime": {"backend": "microvm"}}) == "microvm"
