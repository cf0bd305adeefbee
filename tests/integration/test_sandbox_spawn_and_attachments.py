"""Live pipes for long-lived commands, and attachments handed in by trusted code."""

from __future__ import annotations

import os
import socket
import threading

import pytest

from contain.errors import SandboxStartError
from contain.runtime import Attachment, Sandbox

pytestmark = [pytest.mark.needs_bwrap, pytest.mark.needs_root]

ECHO_UPPER = "import sys\nfor line in sys.stdin:\n    print(line.strip().upper(), flush=True)\n"


def test_spawned_process_talks_over_live_pipes_and_then_frees_the_sandbox() -> None:
    with Sandbox() as sb:
        process = sb.spawn(["python3", "-u", "-c", ECHO_UPPER])
        process.stdin.write(b"hello\n")
        assert process.stdout.readline() == b"HELLO\n"
        process.stdin.write(b"again\n")
        assert process.stdout.readline() == b"AGAIN\n"
        process.stdin.close()
        assert process.wait(10) == 0
        assert sb.run(["echo", "next"]).stdout.data == b"next\n"


def test_spawned_process_past_its_wall_limit_is_killed_with_its_children() -> None:
    with Sandbox() as sb:
        supervisor = sb.supervisor_pid
        pidns = os.readlink(f"/proc/{supervisor}/ns/pid")
        process = sb.spawn(["sh", "-c", "sleep 1000 & sleep 1000"], timeout=1)
        assert process.wait(10) == -9 and process.timed_out
        left = [p for p in os.listdir("/proc") if p.isdigit() and p != str(supervisor) and _in_ns(p, pidns)]
        assert left == []


def _in_ns(pid: str, pidns: str) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid") == pidns
    except OSError:
        return False


def test_spawn_of_a_missing_program_names_the_stage() -> None:
    with Sandbox() as sb, pytest.raises(SandboxStartError, match="exec"):
        sb.spawn(["/nonexistent/server"])


def test_attachments_appear_read_only_under_dot_contain(host_tmp) -> None:
    socket_path = str(host_tmp / "svc.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(socket_path)
    os.chmod(socket_path, 0o666)
    server.listen(1)
    received: list[bytes] = []

    def serve() -> None:
        server.settimeout(10)
        conn, _ = server.accept()
        received.append(conn.recv(64))
        conn.close()

    thread = threading.Thread(target=serve)
    thread.start()
    code = (
        "import socket\n"
        "print(open('/.contain/token').read())\n"
        "try:\n"
        "    open('/.contain/token', 'w')\n"
        "    print('WRITABLE')\n"
        "except OSError as exc:\n"
        "    print('readonly', exc.errno)\n"
        "s = socket.socket(socket.AF_UNIX); s.connect('/.contain/svc.sock'); s.sendall(b'from-sandbox')\n"
    )
    attachments = [Attachment("/.contain/token", data=b"tok-123"), Attachment("/.contain/svc.sock", host_path=socket_path)]
    with Sandbox(attachments=attachments) as sb:
        result = sb.run(["python3", "-c", code])
    thread.join()
    server.close()
    assert result.stdout.data.decode().split("\n")[:2] == ["tok-123", "readonly 30"]
    assert received == [b"from-sandbox"]


@pytest.mark.parametrize(
    "attachment",
    [Attachment("/etc/passwd", data=b"x"), Attachment("/.contain/supervisor", data=b"x"), Attachment("/.contain/x")],
)
def test_attachments_outside_dot_contain_or_replacing_the_supervisor_are_refused(attachment) -> None:
    with pytest.raises(SandboxStartError):
        Sandbox(attachments=[attachment])
