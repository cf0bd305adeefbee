"""`contain inventory` and `contain check` end to end: in-process through contain.cli.main and
once through the installed console script, against a fixture home with planted secrets and
live Unix sockets. The network and process groups read this host's real /proc (read-only; no
packet is sent)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import string
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from contain.boundary import load_boundary
from contain.cli import main

CONTAIN = Path(sys.executable).with_name("contain")


def _rand(n: int) -> str:
    return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(n))


@dataclass
class World:
    home: Path
    project: Path
    environ: dict[str, str]
    planted: list[str] = field(default_factory=list)


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    base = Path(tempfile.mkdtemp(prefix="invcli", dir="/tmp"))
    base.chmod(0o755)  # like /home: the sandbox user must traverse it to reach the project
    home, project = base / "home", base / "home" / "work"
    project.mkdir(parents=True)
    token = "ghp_" + _rand(36)
    password = "Pw" + _rand(16)
    key_body = _rand(100)
    dotenv_secret = "sk-ant-" + _rand(30)
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id_rsa").write_text(f"-----BEGIN RSA PRIVATE KEY-----\n{key_body}\n")
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text(f"[default]\naws_secret_access_key = {password}\n")
    (project / ".env").write_text(f"ANTHROPIC_API_KEY={dotenv_secret}\n")
    runtime = base / "run"
    (runtime / "podman").mkdir(parents=True)
    sockets = []
    for path in (base / "agent.sock", runtime / "podman" / "podman.sock", runtime / "bus"):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(path))
        sock.listen(1)
        sockets.append(sock)
    environ = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "GITHUB_TOKEN": token,
        "DATABASE_URL": f"mysql://app:{password}@db.test:3306/shop",
        "SSH_AUTH_SOCK": str(base / "agent.sock"),
        "XDG_RUNTIME_DIR": str(runtime),
    }
    for name in list(os.environ):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(project)
    try:
        yield World(home, project, environ, [token, password, key_body, dotenv_secret])
    finally:
        for sock in sockets:
            sock.close()
        shutil.rmtree(base, ignore_errors=True)


def _contain(world: World, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The installed console script in the world's project, with the world's environment only."""
    return subprocess.run(
        [str(CONTAIN), *args],
        cwd=world.project,
        env=dict(world.environ),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_inventory_text_and_json_name_every_planted_item_and_no_secret(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    code, text = _run_main(["inventory"], capsys)
    assert code == 0
    code, raw = _run_main(["inventory", "--json"], capsys)
    assert code == 0
    items = {(i["kind"], i["location"]) for i in json.loads(raw)["items"]}
    base = world.home.parent
    for expected in [
        ("env-secret", "$GITHUB_TOKEN"),
        ("env-secret", "$DATABASE_URL"),
        ("ssh-private-key", str(world.home / ".ssh/id_rsa")),
        ("aws-credentials", str(world.home / ".aws/credentials")),
        ("dotenv", str(world.project / ".env")),
        ("socket:ssh-agent", str(base / "agent.sock")),
        ("socket:podman", str(base / "run/podman/podman.sock")),
        ("socket:dbus-session", str(base / "run/bus")),
        ("database", "mysql://app@db.test:3306/shop"),
        ("api:github-token", "GitHub API and git over HTTPS"),
        ("working-tree", str(world.project)),
    ]:
        assert expected in items
        assert expected[1] in text
    assert any(kind == "metadata-endpoint" for kind, _ in items)
    for secret in world.planted:
        assert secret not in text and secret not in raw


def test_draft_manifest_is_accepted_by_check_manifest_and_check(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    draft = world.project / "contain.yaml"
    code, out = _run_main(["inventory", "--draft-manifest", str(draft)], capsys)
    assert code == 0 and draft.exists()
    text = draft.read_text()
    for secret in world.planted:
        assert secret not in out and secret not in text
    assert load_boundary(draft).credentials
    assert _run_main(["check-manifest", str(draft)], capsys)[0] == 0
    code, out = _run_main(["check", str(draft)], capsys)
    assert code == 0, out
    code, out = _run_main(["inventory", "--draft-manifest", str(draft)], capsys)
    assert code == 125 and "refusing to overwrite" in out
    assert _run_main(["inventory", "--draft-manifest", str(draft), "--force"], capsys)[0] == 0


def test_check_exit_codes_and_formats(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    bad = world.project / "bad.yaml"
    bad.write_text(
        "version: 1\nthreats: [generated_code]\ncredentials:\n  - {name: T, via: env, source: GITHUB_TOKEN}\n"
    )
    code, out = _run_main(["check", str(bad)], capsys)
    assert code == 1 and "CHK-001" in out
    code, out = _run_main(["check", str(bad), "--format", "json"], capsys)
    assert code == 1 and json.loads(out)["findings"][0]["rule_id"] == "CHK-001"
    code, out = _run_main(["check", str(bad), "--format", "sarif"], capsys)
    sarif = json.loads(out)
    assert code == 1 and sarif["runs"][0]["results"][0]["ruleId"] == "CHK-001"
    warn = world.project / "warn.yaml"
    warn.write_text("version: 1\nthreats: [generated_code]\nnetwork:\n  allow: [{host: '*.example.com'}]\n")
    assert _run_main(["check", str(warn)], capsys)[0] == 0
    invalid = world.project / "invalid.yaml"
    invalid.write_text("version: 1\nnetwork: {allow: [{host: '*.com'}]}\n")
    code, out = _run_main(["check", str(invalid)], capsys)
    assert code == 125 and "invalid.yaml" in out


def test_console_script_runs_both_commands(world: World, tmp_path: Path) -> None:
    if not CONTAIN.exists():
        pytest.fail(f"{CONTAIN} is missing; install the package into the venv (pip install -e .)")
    result = _contain(world, "inventory", "--json", "--draft-manifest", str(tmp_path / "d.yaml"))
    assert result.returncode == 0, result.stderr
    kinds = {i["kind"] for i in json.loads(result.stdout)["items"]}
    assert {"env-secret", "ssh-private-key", "socket:ssh-agent", "dotenv"} <= kinds
    for secret in world.planted:
        assert secret not in result.stdout + result.stderr
    checked = _contain(world, "check", str(tmp_path / "d.yaml"), "--format", "sarif")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert json.loads(checked.stdout)["version"] == "2.1.0"


@pytest.mark.needs_bwrap
def test_contain_run_accepts_the_draft_and_keeps_the_secrets_out(world: World, tmp_path: Path) -> None:
    draft = tmp_path / "d.yaml"
    made = _contain(world, "inventory", "--draft-manifest", str(draft))
    assert made.returncode == 0, made.stderr
    (world.project / "input.txt").write_text("visible\n")
    script = "cat /work/work/input.txt; cat /work/work/.env; env; cat ~/.ssh/id_rsa; echo done"
    result = _contain(world, "run", "-m", str(draft), "--", "/bin/sh", "-c", script, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "visible" in result.stdout and "done" in result.stdout
    for secret in world.planted:
        assert secret not in result.stdout + result.stderr


def test_check_looks_up_record_actions_in_the_broker_configuration(tmp_path):
    """With --broker-config, actions are read from the broker itself: the example registers
    update_invoice with a business rule (silent), and an action it lacks is an error."""
    repo = Path(__file__).resolve().parents[2]
    contain = str(CONTAIN)
    broker = str(repo / "examples" / "broker" / "broker.yaml")

    def rule_ids(manifest: str) -> tuple[int, list[str]]:
        done = subprocess.run(
            [contain, "check", manifest, "--broker-config", broker, "--format", "json"],
            capture_output=True, timeout=60, check=False,
        )
        return done.returncode, [f["rule_id"] for f in json.loads(done.stdout)["findings"]]

    status, ids = rule_ids(str(repo / "examples" / "broker" / "contain.yaml"))
    assert "CHK-020" not in ids and "CHK-021" not in ids
    other = tmp_path / "contain.yaml"
    other.write_text("version: 1\nprincipal: alice\nrecords: [{name: invoices, actions: [delete_invoice]}]\n")
    status, ids = rule_ids(str(other))
    assert status == 1 and "CHK-021" in ids
