"""`contain run` from a shell: exit statuses, --json, flags, and every refusal path (exit 125)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.needs_bwrap, pytest.mark.needs_root]

CONTAIN = str(Path(sys.executable).with_name("contain"))


def contain(*args: str, env: dict[str, str] | None = None, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([CONTAIN, *args], capture_output=True, env=env, input=stdin, timeout=120, check=False)


@pytest.mark.parametrize(
    ("cmd", "status"),
    [(["true"], 0), (["sh", "-c", "exit 3"], 3), (["sh", "-c", "kill -9 $$"], 137), (["no-such-cmd"], 127)],
)
def test_exit_status_is_the_commands_or_128_plus_signal(cmd, status):
    assert contain("run", "--", *cmd).returncode == status


def test_timeout_exits_124_and_says_why():
    done = contain("run", "--timeout", "1", "--", "sleep", "30")
    assert done.returncode == 124 and b"wall-clock limit" in done.stderr


def test_json_prints_exactly_one_object_with_the_run_result():
    done = contain("run", "--json", "--", "sh", "-c", "echo out; echo err >&2; exit 2")
    assert done.returncode == 2
    document = json.loads(done.stdout)
    assert document["exit_code"] == 2 and document["stdout"] == "out\n" and document["stderr"] == "err\n"
    assert document["stdout_encoding"] == "utf-8" and document["backend"] == "process"
    assert set(document["timings"]) == {"setup_s", "run_s", "teardown_s"}
    assert document["usage"]["source"] == "cgroup" and document["layers"]["seccomp"] == "applied"


def test_binary_output_is_base64_in_json():
    done = contain("run", "--json", "--", "printf", "\\377\\376")
    document = json.loads(done.stdout)
    assert document["stdout_encoding"] == "base64" and document["stdout"] == "//4="


def test_flags_extend_the_boundary(host_tmp):
    (host_tmp / "in.txt").write_text("input data")
    done = contain("run", "--read", f"{host_tmp}:/inputs/d", "--env", "GREETING=hi", "--memory", "128MiB", "--",
                   "sh", "-c", "cat /inputs/d/in.txt; echo; echo $GREETING")
    assert done.returncode == 0 and done.stdout == b"input data\nhi\n"


def test_stdin_is_passed_only_when_asked():
    assert contain("run", "--stdin", "--", "cat", stdin=b"piped").stdout == b"piped"
    assert contain("run", "--", "cat", stdin=b"piped").stdout == b""


@pytest.mark.parametrize(
    ("args", "cause"),
    [
        (["--read", "/nonexistent/dir", "--", "true"], "does not exist"),
        (["--manifest", "/nonexistent.yaml", "--", "true"], "cannot read manifest"),
        (["--memory", "lots", "--", "true"], "not a size"),
        (["--allow-host", "*.com", "--", "true"], "top-level domain"),
        (["--backend", "process:runc", "--", "true"], "takes no variant"),
        (["--backend", "container:crun", "--", "true"], "container runtime 'crun' is unknown"),
        (["--backend", "docker", "--", "true"], "backend 'docker' is unknown"),
        (["--read", "/etc:/etc", "--", "true"], "runtime owns"),
        ([], "no command given"),
    ],
)
def test_refusals_exit_125_and_name_the_cause(args, cause):
    done = contain("run", *args)
    assert done.returncode == 125, done.stderr
    assert cause.encode() in done.stderr and b"fix:" in done.stderr


def test_a_malformed_manifest_exits_125_naming_file_line_and_key(tmp_path):
    manifest = tmp_path / "contain.yaml"
    manifest.write_text("version: 1\nresources:\n  memroy_bytes: 1GiB\n")
    done = contain("run", "--manifest", str(manifest), "--", "true")
    assert done.returncode == 125
    assert f"{manifest}:3: resources.memroy_bytes: unknown key".encode() in done.stderr


def as_nobody(host_tmp: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """Run the CLI as an ordinary user (uid 65534) with its own supervisor cache."""
    cache = host_tmp / "cache"
    cache.mkdir(exist_ok=True)
    os.chown(cache, 65534, 65534)
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "CONTAIN_CACHE_DIR": str(cache)}
    return subprocess.run(
        ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", CONTAIN, *args],
        capture_output=True, env=env, timeout=120, check=False,
    )


def manifest_in(host_tmp: Path, text: str) -> str:
    path = host_tmp / "contain.yaml"
    path.write_text(text)
    path.chmod(0o644)
    return str(path)


def test_an_ordinary_user_asking_for_cgroups_without_delegation_is_refused(host_tmp):
    done = as_nobody(host_tmp, "run", "--manifest", manifest_in(host_tmp, "version: 1\n"), "--", "true")
    assert done.returncode == 125, done.stderr
    assert b"cgroup limits are required" in done.stderr and b"hardening.cgroups: off" in done.stderr


@pytest.mark.parametrize("backend", ["container:runc", "container:runsc"])
def test_an_ordinary_user_asking_for_a_container_is_refused_with_exit_125(host_tmp, backend):
    if shutil.which(backend.split(":")[1]) is None and not os.path.exists(f"/usr/sbin/{backend.split(':')[1]}"):
        pytest.skip(f"{backend} is not installed")
    manifest = manifest_in(host_tmp, "version: 1\nhardening:\n  cgroups: off\n")
    done = as_nobody(host_tmp, "run", "--backend", backend, "--manifest", manifest, "--", "true")
    assert done.returncode == 125, done.stderr
    assert b"contain is not running as root" in done.stderr and b"fix:" in done.stderr


UNPRIVILEGED_PROBE = (
    "import os, socket\n"
    "print('uid', os.getuid())\n"
    "for p in ['/etc/shadow', '/root', SECRET]:\n"
    "    try: open(p).read(); print('READ', p)\n"
    "    except OSError as e: print('denied', e.errno)\n"
    "open('/work/ok', 'w').write('x'); print('scratch ok')\n"
    "try: socket.create_connection(('127.0.0.1', 22), timeout=1); print('NET')\n"
    "except OSError as e: print('no net', e.errno)\n"
    "made = 0\n"
    "for _ in range(200):\n"
    "    try:\n"
    "        if os.fork() == 0:\n"
    "            import time; time.sleep(5); os._exit(0)\n"
    "        made += 1\n"
    "    except OSError: break\n"
    "print('forks', made)\n"
)


def test_an_ordinary_user_gets_a_contained_sandbox_with_rlimits_only(host_tmp):
    secret = host_tmp / "secret.txt"
    secret.write_text("s3cret")
    secret.chmod(0o644)  # readable on the host by anyone: the sandbox must still not see it
    manifest = manifest_in(host_tmp, "version: 1\nhardening: {cgroups: off}\nresources: {pids_max: 32}\n")
    code = UNPRIVILEGED_PROBE.replace("SECRET", repr(str(secret)))
    done = as_nobody(host_tmp, "run", "--json", "--manifest", manifest, "--", "python3", "-c", code)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    lines = document["stdout"].splitlines()
    assert lines[0] == "uid 1000" and "READ" not in document["stdout"] and "NET" not in document["stdout"]
    assert "scratch ok" in lines and "no net 111" in lines
    assert int(lines[-1].split()[1]) < 32  # RLIMIT_NPROC, counted per user namespace, held the bomb
    assert document["layers"]["cgroups"].startswith("off by manifest")
    assert document["usage"]["source"] == "supervisor rusage"
    # Control: the same user outside the sandbox reads the planted file.
    assert subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "cat", str(secret)],
                          capture_output=True, check=False).stdout == b"s3cret"


def test_records_without_a_broker_are_refused(host_tmp):
    manifest = manifest_in(host_tmp, "version: 1\nprincipal: alice\nrecords: [{name: invoices, actions: [update_invoice]}]\n")
    done = contain("run", "--manifest", manifest, "--", "true")
    assert done.returncode == 125 and b"no broker is configured" in done.stderr and b"--broker-config" in done.stderr


def test_a_repeated_run_skips_pydantic_and_an_edit_is_seen_at_once(host_tmp):
    """The second run of the same input reads the validated boundary from the cache, without
    importing pydantic; editing the manifest changes what the next run gets."""
    path = manifest_in(host_tmp, "version: 1\nenv: {GREETING: one}\n")
    script = (
        "import sys; from contain.cli import main; code = main(['run', '--manifest', sys.argv[1], '--', "
        "'sh', '-c', 'echo $GREETING']); print('pydantic loaded:', 'pydantic' in sys.modules, file=sys.stderr); "
        "sys.exit(code)"
    )

    def run() -> tuple[bytes, bool]:
        done = subprocess.run([sys.executable, "-c", script, path], capture_output=True, timeout=120, check=True)
        return done.stdout, b"pydantic loaded: True" in done.stderr

    assert run() == (b"one\n", True)  # first run: validated
    assert run() == (b"one\n", False)  # same input: from the cache
    Path(path).write_text("version: 1\nenv: {GREETING: two}\n")
    assert run() == (b"two\n", True)  # edited: validated again
