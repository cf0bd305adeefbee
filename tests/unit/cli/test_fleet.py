"""`contain fleet`: resources for `ray start`, Ctrl-C cancels the batch, outputs land only under DIR."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

from contain.cli import main
from contain.cli.fleet import _stream, write_outputs
from contain.fleet.batch import run_batch
from contain.fleet.jobs import prepare_jobs, read_job_lines
from contain.fleet.messages import CancelReport, JobOutcome, JobSpec, NodeDescription
from contain.fleet.placement import NodeFacts
from contain.fleet.progress import Progress
from contain.host.facts import HostFacts


def test_resources_prints_the_json_ray_start_takes_from_this_nodes_facts(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import contain.fleet.placement as placement

    facts = NodeFacts(
        host=HostFacts(arch="x86_64", is_root=True, uid=0, gid=0, bwrap_path="/usr/bin/bwrap",
                       user_namespaces=True, seccomp=True, landlock_abi=3),
        built_backends=("process",), binaries={"runc": "/usr/sbin/runc"}, has_kvm=True, cpus=8,
    )
    monkeypatch.setattr(placement, "gather_node_facts", lambda: facts)
    assert main(["fleet", "resources", "--slots", "3"]) == 0
    assert json.loads(capsys.readouterr().out) == {"contain_backend_process": 3.0}


def test_an_invalid_batch_id_is_refused_before_any_cluster_is_touched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("")
    assert main(["fleet", "run", str(jobs), "--address", "127.0.0.1:1", "--batch-id", "../x"]) == 125
    assert "--batch-id '../x' is not valid" in capsys.readouterr().err


class _InterruptedOnce:
    """A dispatcher whose first wait is interrupted by Ctrl-C; jobs never finish by themselves."""

    def __init__(self) -> None:
        self.interrupted = False
        self.cancelled: list[str] = []

    def nodes(self) -> dict[str, dict[str, float]]:
        return {"n": {"contain_backend_process": 2.0}}

    def start_nodes(self, slots: dict[str, int]) -> dict[str, tuple[Any, NodeDescription]]:
        return {node_id: (node_id, NodeDescription(node_id, "h", 1, {})) for node_id in slots}

    def submit(self, node: Any, spec: JobSpec) -> Any:
        return spec.job_id

    def wait(self, refs: Any, *, timeout_s: float) -> list[tuple[Any, JobOutcome]]:
        if not self.interrupted:
            self.interrupted = True
            raise KeyboardInterrupt
        if self.cancelled:  # once cancelled, the node answers its jobs
            return [(ref, JobOutcome(ref, 1, "n", "cancelled", cause="killed")) for ref in refs]
        return []

    def cancel(self, node: Any, *, timeout_s: float) -> CancelReport:
        self.cancelled.append(node)
        return CancelReport(node, killed=2, closed_warm=0)

    def stop(self, node: Any) -> None:
        pass


def test_ctrl_c_cancels_every_node_reports_every_job_cancelled_and_exits_130(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("".join(json.dumps({"id": f"j{i}", "manifest": {}, "command": ["sleep", "9"]}) + "\n"
                            for i in range(3)))
    dispatcher = _InterruptedOnce()
    batch = run_batch(list(prepare_jobs(read_job_lines(jobs), base_dir=tmp_path)), dispatcher=dispatcher)
    status = _stream(batch, Progress(3, io.StringIO(), is_tty=False), as_json=True, outputs_dir=None)
    out = capsys.readouterr()
    lines = [json.loads(line) for line in out.out.splitlines()]
    assert status == 130 and dispatcher.cancelled == ["n"]
    assert sorted(line["job_id"] for line in lines[:-1]) == ["j0", "j1", "j2"]
    assert {line["status"] for line in lines[:-1]} == {"cancelled"}
    assert lines[-1]["summary"]["cancelled"] == 3
    assert "cancelling" in out.err


def test_outputs_are_written_under_the_job_directory(tmp_path: Path) -> None:
    root = tmp_path / "out"
    root.mkdir()
    write_outputs(root, "j1", {"/work/a/b.txt": b"B", "/work/c": b"C"})
    assert (root / "j1/work/a/b.txt").read_bytes() == b"B" and (root / "j1/work/c").read_bytes() == b"C"


def test_a_symlink_in_the_output_tree_is_never_followed(tmp_path: Path) -> None:
    root, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    root.mkdir()
    elsewhere.mkdir()
    os.symlink(elsewhere, root / "j1")
    with pytest.raises(OSError):
        write_outputs(root, "j1", {"/work/x": b"X"})
    (root / "j2").mkdir()
    os.symlink(elsewhere / "target", root / "j2" / "x")
    with pytest.raises(FileExistsError):
        write_outputs(root, "j2", {"/x": b"X"})
    assert list(elsewhere.iterdir()) == []


def test_an_existing_output_file_is_not_overwritten(tmp_path: Path) -> None:
    root = tmp_path / "out"
    root.mkdir()
    write_outputs(root, "j1", {"/o": b"first"})
    with pytest.raises(FileExistsError):
        write_outputs(root, "j1", {"/o": b"second"})
    assert (root / "j1/o").read_bytes() == b"first"


def test_an_outputs_directory_that_exists_is_refused_before_any_cluster_is_touched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("")
    assert main(["fleet", "run", str(jobs), "--address", "127.0.0.1:1", "--outputs", str(tmp_path)]) == 125
    assert "cannot create --outputs" in capsys.readouterr().err
