"""`contain pool` from a shell: tasks from stdin each in their own pooled sandbox, refusals, a
boundary that cannot start (exit 125), and Ctrl-C leaving no sandbox behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.needs_bwrap, pytest.mark.needs_root]

CONTAIN = str(Path(sys.executable).with_name("contain"))


def pool(*args: str, stdin: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([CONTAIN, "pool", *args], capture_output=True, input=stdin, timeout=120, check=False)


def lines(stdout: bytes) -> dict[int, dict[str, object]]:
    return {doc["task"]: doc for doc in map(json.loads, stdout.decode().splitlines())}


def test_each_task_runs_in_its_own_sandbox_and_reports_one_json_line() -> None:
    tasks = [
        ["sh", "-c", "echo $(cat /tmp/seen 2>/dev/null) >&2; echo x > /tmp/seen; echo done"],
        {"argv": ["sh", "-c", "echo $(cat /tmp/seen 2>/dev/null) >&2; echo x > /tmp/seen; echo done"], "id": "b"},
        {"argv": ["python3", "-c", "import sys; print(sys.stdin.read()[::-1])"], "stdin": "abc", "id": 3},
        {"argv": ["sh", "-c", "exit 4"]},
    ]
    done = pool("--size", "2", "--jobs", "2", stdin="\n".join(map(json.dumps, tasks)).encode() + b"\n")
    assert done.returncode == 0, done.stderr
    docs = lines(done.stdout)
    assert sorted(docs) == [1, 2, 3, 4]
    assert docs[1]["stdout"] == docs[2]["stdout"] == "done\n"
    assert docs[1]["stderr"] == docs[2]["stderr"] == "\n"  # neither saw the other's /tmp/seen
    assert (docs[2]["id"], docs[3]["id"], docs[3]["stdout"]) == ("b", 3, "cba\n")
    assert docs[4]["exit_code"] == 4 and docs[4]["backend"] == "process"


def test_a_refused_line_gets_an_error_line_and_exit_1_while_the_rest_run() -> None:
    done = pool(stdin=b'["true"]\n{"argv": "true"}\n["echo", "after"]\n')
    assert done.returncode == 1
    docs = lines(done.stdout)
    assert "argv must be a non-empty list" in docs[2]["error"]["cause"]  # type: ignore[index]
    assert docs[1]["exit_code"] == 0 and docs[3]["stdout"] == "after\n"


def test_a_boundary_that_cannot_start_exits_125_with_the_cause(tmp_path: Path) -> None:
    missing = tmp_path / "absent"
    done = pool("--read", f"{missing}:/data", stdin=b'["true"]\n["true"]\n')
    assert done.returncode == 125
    assert f"host path {missing} for /data does not exist".encode() in done.stderr
    assert b"fix: create it" in done.stderr


def supervisors_under(pid: int) -> set[int]:
    """Pids of sandbox supervisors descending from ``pid`` (walking /proc parent links)."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                status = Path(f"/proc/{entry}/status").read_text()
            except OSError:
                continue
            fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
            parents[int(entry)] = int(fields.get("PPid", "0"))
            names[int(entry)] = fields.get("Name", "").strip()
    found = set()
    for candidate, name in names.items():
        ancestor = candidate
        for _ in range(64):
            ancestor = parents.get(ancestor, 0)
            if ancestor in (0, 1):
                break
            if ancestor == pid and name == "supervisor":
                found.add(candidate)
                break
    return found


def test_ctrl_c_kills_every_sandbox_and_exits_130() -> None:
    proc = subprocess.Popen(
        [CONTAIN, "pool", "--size", "2", "--jobs", "1"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None
    proc.stdin.write(b'["sleep", "600"]\n')
    proc.stdin.flush()
    deadline = time.monotonic() + 60
    seen: set[int] = set()
    while len(seen) < 3 and time.monotonic() < deadline:  # the running task's and two idle ones
        seen |= supervisors_under(proc.pid)
        time.sleep(0.05)
    assert len(seen) >= 3, f"positive control: the pool's sandboxes run ({seen})"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert b"every sandbox was killed" in err
    alive = {pid for pid in seen if Path(f"/proc/{pid}").exists()}
    assert alive == set()
