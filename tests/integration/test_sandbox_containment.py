"""The process sandbox holds: each test attacks from inside and judges from outside.

Every deny check has a positive control: the same probe with the layer relaxed (or from the
host) shows the breach the test would otherwise miss.
"""

from __future__ import annotations

import os
import resource
import secrets
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from contain.boundary import Boundary
from contain.errors import FileTransferError, SandboxStartError
from contain.runtime import Sandbox

pytestmark = [pytest.mark.needs_bwrap, pytest.mark.needs_root]

PY = "/usr/bin/python3"


def boundary(**sections: object) -> Boundary:
    return Boundary.model_validate(sections)


def run(b: Boundary, code: str, **kwargs: object):
    with Sandbox(b) as sb:
        return sb.run([PY, "-c", code], **kwargs)  # type: ignore[arg-type]


def sandbox_owned_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, 65534, 65534)
    return path


# -- files --------------------------------------------------------------------------------------


def test_host_home_root_shadow_and_repo_are_unreadable(host_tmp: Path) -> None:
    canary = secrets.token_hex(16)
    home_canary = Path.home() / f".contain-canary-{canary[:8]}"
    home_canary.write_text(canary)
    repo_file = Path(__file__).resolve()
    try:
        targets = [
            str(home_canary),
            "/etc/shadow",
            str(repo_file),
            f"/proc/1/root{home_canary}",
            f"/proc/self/root{home_canary}",
        ]
        # Control: from the host every target but the /proc views is readable.
        assert home_canary.read_text() == canary and Path("/etc/shadow").read_bytes() and repo_file.read_bytes()
        code = (
            "import sys\n"
            f"for path in {targets!r}:\n"
            "    try:\n"
            "        data = open(path, 'rb').read()\n"
            "        print('READ', path, data[:64])\n"
            "    except OSError as exc:\n"
            "        print('DENIED', path, exc.errno)\n"
        )
        result = run(boundary(), code)
        out = result.stdout.data.decode()
        assert result.exit_code == 0, result.stderr.data
        assert "READ" not in out and canary not in out
        assert out.count("DENIED") == len(targets)
    finally:
        home_canary.unlink()


def test_writes_outside_scratch_and_into_read_binds_fail(host_tmp: Path) -> None:
    data = host_tmp / "data"
    data.mkdir()
    (data / "in.txt").write_text("input")
    os.chmod(data, 0o777)  # even world-writable on the host, a read bind stays read-only
    b = boundary(files=[{"host": str(data), "path": "/inputs/data", "access": "read"}])
    code = (
        "import os\n"
        "for path in ['/inputs/data/new', '/inputs/data/in.txt', '/usr/x', '/etc/x', '/x', '/proc/sys/kernel/core_pattern', '/work/ok']:\n"
        "    try:\n"
        "        with open(path, 'w') as f: f.write('x')\n"
        "        print('WROTE', path)\n"
        "    except OSError as exc:\n"
        "        print('DENIED', path, exc.errno)\n"
    )
    result = run(b, code)
    lines = result.stdout.data.decode().splitlines()
    assert "WROTE /work/ok" in lines  # control: scratch is writable
    assert [line for line in lines if line.startswith("WROTE")] == ["WROTE /work/ok"]
    assert sorted(p.name for p in data.iterdir()) == ["in.txt"] and (data / "in.txt").read_text() == "input"


def test_write_bind_keeps_protected_paths_read_only_and_uncreatable(host_tmp: Path) -> None:
    repo = sandbox_owned_dir(host_tmp / "repo")
    (repo / ".git" / "hooks").mkdir(parents=True)
    (repo / ".git" / "config").write_text("[core]\n")
    (repo / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\n")
    (repo / ".bashrc").write_text("# rc\n")
    for path in repo.rglob("*"):
        os.chown(path, 65534, 65534)
    before = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()}
    b = boundary(files=[{"host": str(repo), "path": "/work/repo", "access": "write"}])
    code = (
        "import os\n"
        "targets = ['.git/config', '.git/hooks/pre-commit', '.bashrc', '.git/hooks/post-checkout', '.vscode/settings.json', '.gitconfig', '.envrc']\n"
        "for rel in targets + ['src.py']:\n"
        "    path = '/work/repo/' + rel\n"
        "    try:\n"
        "        os.makedirs(os.path.dirname(path), exist_ok=True)\n"
        "        with open(path, 'a') as f: f.write('pwned')\n"
        "        print('WROTE', rel)\n"
        "    except OSError as exc:\n"
        "        print('DENIED', rel, exc.errno)\n"
        "try:\n"
        "    os.mkdir('/work/repo/.vscode/x'); print('WROTE mkdir')\n"
        "except OSError as exc: print('DENIED mkdir', exc.errno)\n"
    )
    result = run(b, code)
    lines = result.stdout.data.decode().splitlines()
    assert [line for line in lines if line.startswith("WROTE")] == ["WROTE src.py"], (
        lines
    )  # control: a sibling is writable
    after = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file() and p.name != "src.py"}
    assert after == before
    assert (repo / "src.py").read_text() == "pwned"
    # Placeholders bwrap had to create for masked paths are gone after close.
    assert not (repo / ".vscode").exists() and not (repo / ".gitconfig").exists() and not (repo / ".envrc").exists()


def test_protected_names_below_the_top_are_read_only_when_they_exist_and_removed_when_created(host_tmp: Path) -> None:
    repo = sandbox_owned_dir(host_tmp / "repo")
    (repo / "vendor" / "lib" / ".git" / "hooks").mkdir(parents=True)
    (repo / "vendor" / "lib" / ".git" / "config").write_text("[core]\n")
    for path in repo.rglob("*"):
        os.chown(path, 65534, 65534)
    b = boundary(files=[{"host": str(repo), "path": "/work/repo", "access": "write"}])
    script = (
        "cd /work/repo && git init -q sub && echo hook > sub/.git/hooks/post-checkout && echo made; "
        "echo x >> vendor/lib/.git/config || echo config-denied; "
        "echo x > vendor/lib/.git/hooks/pre-commit || echo hook-denied; echo ok > notes.txt"
    )
    with Sandbox(b) as sb:
        result = sb.run(["sh", "-c", script])
        assert result.stdout.data.decode().split() == ["made", "config-denied", "hook-denied"], result.stderr.data
    assert not (repo / "sub" / ".git").exists()  # created by the task, removed at close
    assert (repo / "sub").is_dir() and (repo / "notes.txt").read_text() == "ok\n"  # control: other writes stay
    assert (repo / "vendor" / "lib" / ".git" / "config").read_text() == "[core]\n"
    assert sb.teardown_findings == ["removed /work/repo/sub/.git, created by the task (a protected name)"]


def test_a_protected_path_that_is_a_symlink_to_a_decoy_is_refused(host_tmp: Path) -> None:
    repo = sandbox_owned_dir(host_tmp / "repo")
    decoy = host_tmp / "decoy"
    decoy.mkdir()
    (repo / ".vscode").symlink_to(decoy)
    b = boundary(files=[{"host": str(repo), "path": "/work/repo", "access": "write"}])
    with pytest.raises(SandboxStartError, match=r"\.vscode is a symlink"):
        Sandbox(b).start()
    assert list(decoy.iterdir()) == []


def test_block_masks_a_secret_inside_a_read_bind(host_tmp: Path) -> None:
    data = host_tmp / "data"
    (data / "secrets").mkdir(parents=True)
    (data / "secrets" / "key").write_text("SECRET")
    (data / "token.txt").write_text("TOKEN")
    (data / "public.txt").write_text("PUBLIC")
    os.chmod(data, 0o755)
    b = boundary(
        files=[
            {"host": str(data), "path": "/inputs/data", "access": "read"},
            {"path": "/inputs/data/secrets", "access": "block"},
            {"path": "/inputs/data/token.txt", "access": "block"},
        ]
    )
    code = (
        "for p in ['/inputs/data/public.txt', '/inputs/data/secrets/key', '/inputs/data/token.txt']:\n"
        "    try: print(p, open(p).read())\n"
        "    except OSError as exc: print(p, 'DENIED', exc.errno)\n"
    )
    out = run(b, code).stdout.data.decode()
    assert "/inputs/data/public.txt PUBLIC" in out  # control: the rest of the bind is readable
    assert "SECRET" not in out and "TOKEN" not in out


# -- environment and network --------------------------------------------------------------------


def test_callers_secret_variables_do_not_leak(monkeypatch: pytest.MonkeyPatch) -> None:
    canary = "ghp_" + secrets.token_hex(18)
    monkeypatch.setenv("GITHUB_TOKEN", canary)
    monkeypatch.setenv("LD_PRELOAD", "/nonexistent/evil.so")
    code = "import os; print(sorted(os.environ.items()))"
    result = run(boundary(), code)
    out = result.stdout.data.decode()
    assert canary not in out and "LD_PRELOAD" not in out and "GITHUB_TOKEN" not in out
    # Control: the probe does see a variable that the boundary names.
    named = run(boundary(env={"VISIBLE": canary}), code).stdout.data.decode()
    assert canary in named


def test_a_host_loopback_listener_is_unreachable() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    accepted: list[bytes] = []

    def serve() -> None:
        listener.settimeout(8)
        try:
            while True:
                conn, _ = listener.accept()
                accepted.append(conn.recv(64))
                conn.close()
        except OSError:
            pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        # Control: from the host the listener accepts.
        with socket.create_connection(("127.0.0.1", port), timeout=2) as direct:
            direct.sendall(b"control")
        code = (
            "import socket\n"
            f"for host in ['127.0.0.1', '10.0.2.2', '169.254.169.254', '::1']:\n"
            "    try:\n"
            f"        s = socket.create_connection((host, {port}), timeout=1); s.sendall(b'ESCAPED'); print('CONNECTED', host)\n"
            "    except OSError as exc: print('FAILED', host, exc.errno)\n"
        )
        result = run(boundary(), code)
        assert "CONNECTED" not in result.stdout.data.decode()
        time.sleep(0.2)
        assert accepted == [b"control"]
    finally:
        listener.close()
        thread.join(timeout=10)


# -- resources ------------------------------------------------------------------------------------


FORK_BOMB = (
    "import os, time\n"
    "made = 0\n"
    "for _ in range(400):\n"  # bounded: at most 400 children, each sleeps
    "    try:\n"
    "        if os.fork() == 0:\n"
    "            time.sleep(30); os._exit(0)\n"
    "        made += 1\n"
    "    except OSError:\n"
    "        break\n"
    "print(made)\n"
)


def test_a_fork_bomb_is_held_by_the_pids_limit_and_the_host_stays_responsive() -> None:
    held = boundary(resources={"pids_max": 32})
    began = time.perf_counter()
    probe = {}

    def host_probe() -> None:
        time.sleep(0.3)
        t = time.perf_counter()
        subprocess.run(["/bin/true"], check=True)
        probe["latency"] = time.perf_counter() - t

    thread = threading.Thread(target=host_probe)
    thread.start()
    result = run(held, FORK_BOMB)
    thread.join()
    made = int(result.stdout.data.decode())
    assert made < 32
    assert any(v.kind == "pids" for v in result.violations)
    assert probe["latency"] < 1.0
    assert time.perf_counter() - began < 20
    # Control: with room for them, the same bomb makes all 400.
    loose = run(boundary(resources={"pids_max": 1024}), FORK_BOMB)
    assert int(loose.stdout.data.decode()) == 400


MEMORY_BOMB = "b = bytearray({size}); b[::4096] = b'x' * len(b[::4096]); print('survived')"


def test_a_memory_bomb_ends_as_oom_killed() -> None:
    result = run(boundary(resources={"memory_bytes": "64MiB"}), MEMORY_BOMB.format(size=256 * 1024**2))
    assert result.oom_killed and result.signal == 9
    assert "survived" not in result.stdout.data.decode()
    assert any(v.kind == "memory" for v in result.violations)
    # Control: the same allocation fits a larger budget.
    ok = run(boundary(resources={"memory_bytes": "512MiB"}), MEMORY_BOMB.format(size=256 * 1024**2))
    assert ok.exit_code == 0 and not ok.oom_killed and ok.stdout.data == b"survived\n"


def test_a_cpu_loop_dies_at_its_cpu_budget() -> None:
    loop = "import time\nend = time.process_time() + {seconds}\nwhile time.process_time() < end: pass\nprint('done')"
    result = run(boundary(resources={"cpu_s": 1, "wall_s": 30}), loop.format(seconds=60))
    assert result.exit_code is None and result.signal is not None
    assert result.timings.run_s < 10
    assert any(v.kind == "cpu" for v in result.violations)
    # Control: a loop inside the budget completes.
    ok = run(boundary(resources={"cpu_s": 10, "wall_s": 30}), loop.format(seconds=0.5))
    assert ok.exit_code == 0 and ok.stdout.data == b"done\n"


def test_a_sleeper_past_the_wall_limit_is_timed_out_and_every_process_is_gone() -> None:
    code = "import os, subprocess, time\nsubprocess.Popen(['sleep', '1000'], start_new_session=True)\ntime.sleep(1000)"
    with Sandbox(boundary()) as sb:
        supervisor = sb.supervisor_pid
        assert supervisor is not None
        pidns = os.readlink(f"/proc/{supervisor}/ns/pid")
        result = sb.run([PY, "-c", code], timeout=1)
        assert result.timed_out and result.status == 124
        assert any(v.kind == "timeout" for v in result.violations)
        members = [p for p in _pids_in_namespace(pidns) if p != supervisor]
        assert members == []  # the detached sleeper died with the run
        # Control: a sleeper inside the limit finishes normally in the same session.
        ok = sb.run([PY, "-c", "import time; time.sleep(0.2); print('slept')"], timeout=5)
        assert ok.exit_code == 0 and ok.stdout.data == b"slept\n"
    assert _pids_in_namespace(pidns) == []


def _pids_in_namespace(pidns: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/ns/pid") == pidns:
                    found.append(int(entry))
            except OSError:
                continue
    return found


def test_ten_gigabytes_of_output_are_capped_without_growing_host_memory() -> None:
    flood = "import sys\nchunk = b'x' * (1 << 20)\nfor _ in range(10 * 1024):\n    sys.stdout.buffer.write(chunk)\n"
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = run(boundary(resources={"output_bytes": "1MiB"}), flood)
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert result.stdout.truncated and len(result.stdout.data) == 1024 * 1024
    assert (rss_after - rss_before) < 64 * 1024  # KiB: far below the 10 GiB written
    assert any(v.kind == "output" for v in result.violations)
    # Control: output under the cap arrives whole.
    ok = run(boundary(resources={"output_bytes": "1MiB"}), "print('y' * 1000)")
    assert not ok.stdout.truncated and ok.stdout.data == b"y" * 1000 + b"\n"


def test_host_tmp_shm_and_ipc_are_unchanged_after_teardown() -> None:
    def snapshot() -> tuple[set[str], set[str], str, str, str, set[str], str]:
        return (
            set(os.listdir("/tmp")),
            set(os.listdir("/dev/shm")),
            Path("/proc/sysvipc/shm").read_text(),
            Path("/proc/sysvipc/msg").read_text(),
            Path("/proc/sysvipc/sem").read_text(),
            set(os.listdir("/dev/mqueue")) if os.path.isdir("/dev/mqueue") else set(),
            Path("/proc/self/mountinfo").read_text(),
        )

    before = snapshot()
    code = (
        "import os, subprocess\n"
        "open('/tmp/marker-x', 'w').write('x'); open('/dev/shm/marker-y', 'w').write('y')\n"
        "import ctypes; libc = ctypes.CDLL(None); libc.shmget(0, 4096, 0o1600); libc.semget(0, 1, 0o1600); libc.msgget(0, 0o1600)\n"
        "subprocess.run(['sh', '-c', 'sleep 1000 &'])\n"
        "print('ok')\n"
    )
    with Sandbox(boundary()) as sb:
        cgroup_paths = sb._cgroup.paths if sb._cgroup else ()
        result = sb.run([PY, "-c", code])
        assert result.stdout.data == b"ok\n"
    assert snapshot() == before
    assert all(not os.path.exists(p) for p in cgroup_paths)


# -- files in and out ----------------------------------------------------------------------------


def test_put_and_get_files_refuse_symlinks_and_paths_outside_scratch(host_tmp: Path) -> None:
    out = host_tmp / "out"
    b = boundary(files=[{"path": "/work/out", "access": "scratch", "export": str(out)}])
    with Sandbox(b) as sb:
        sb.put_file("/work/out/in/task.py", b"print(open('/work/out/in/task.py').read()[:5])\n")
        result = sb.run([PY, "/work/out/in/task.py"])
        assert result.stdout.data == b"print\n"
        sb.run(
            [
                "sh",
                "-c",
                "echo result > /work/out/result.txt; ln -s /etc/shadow /work/out/shadow; ln -s /etc /work/out/etc",
            ]
        )
        assert sb.get_file("/work/out/result.txt") == b"result\n"
        for bad in ("/work/out/shadow", "/work/out/etc/passwd", "/etc/passwd", "/work/out/../../etc/passwd"):
            with pytest.raises(FileTransferError):
                sb.get_file(bad)
        with pytest.raises(FileTransferError):
            sb.put_file("/work/out/etc/evil", b"x")
    assert (out / "result.txt").read_text() == "result\n"
    assert not (out / "shadow").exists() and not (out / "etc").exists()
    assert (out / "in" / "task.py").exists()


def test_runs_in_a_session_share_scratch_but_not_processes() -> None:
    with Sandbox(boundary()) as sb:
        first = sb.run(["sh", "-c", "echo kept > /work/state; (sleep 1000 &) ; echo started"])
        second = sb.run(["sh", "-c", "cat /work/state; ps -e -o comm= | grep -c sleep || true"])
        assert first.stdout.data == b"started\n"
        assert second.stdout.data.decode().split() == ["kept", "0"]


def test_a_missing_command_is_reported_like_a_shell_would() -> None:
    with Sandbox(boundary()) as sb:
        result = sb.run(["no-such-command"])
    assert result.exit_code == 127 and b"no-such-command" in result.stderr.data


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))


def test_a_block_of_a_missing_path_in_a_write_bind_leaves_nothing_on_the_host(host_tmp: Path) -> None:
    repo = sandbox_owned_dir(host_tmp / "repo")
    b = boundary(
        files=[
            {"host": str(repo), "path": "/work/repo", "access": "write"},
            {"path": "/work/repo/secrets", "access": "block"},
        ]
    )
    with Sandbox(b) as sb:
        result = sb.run(["sh", "-c", "touch /work/repo/secrets/x || echo blocked; touch /work/repo/ok"])
    assert result.stdout.data == b"blocked\n"
    assert sorted(p.name for p in repo.iterdir()) == ["ok"]  # the mount point bwrap made is gone
