from __future__ import annotations

import json

from contain.inventory import (
    Group,
    Verdict,
    inventory_to_json,
    render_inventory_text,
    take_inventory,
)

from .conftest import FakeHost


def _inventory(host: FakeHost):  # type: ignore[no-untyped-def]
    return take_inventory(home=host.home, environ=host.environ, cwd=host.cwd, root=host.root, proc_root=host.proc)


def _found(inventory, group: Group) -> set[tuple[str, str]]:  # type: ignore[no-untyped-def]
    return {(item.kind, item.location) for item in inventory.in_group(group)}


def test_inventory_finds_every_planted_credential(fake_host: FakeHost) -> None:
    found = _found(_inventory(fake_host), Group.CREDENTIALS)
    home, cwd = fake_host.home, fake_host.cwd
    expected = {
        ("env-secret", "$GITHUB_TOKEN"),
        ("env-secret", "$AWS_ACCESS_KEY_ID"),
        ("env-secret", "$AWS_SECRET_ACCESS_KEY"),
        ("env-secret", "$NOTIFY_HOOK_VALUE"),
        ("env-secret", "$MY_SETTING"),
        ("env-secret", "$DATABASE_URL"),
        ("env-secret", "$HTTPS_PROXY"),
        ("env-secret", "$SESSION_BLOB"),
        ("env-secret", "$DEPLOY_MATERIAL"),
        ("ssh-private-key", str(home / ".ssh/id_ed25519")),
        ("ssh-private-key", str(home / ".ssh/deploy")),
        ("aws-credentials", str(home / ".aws/credentials")),
        ("kube-config", str(home / ".kube/config")),
        ("docker-config", str(home / ".docker/config.json")),
        ("netrc", str(home / ".netrc")),
        ("git-credentials", str(home / ".git-credentials")),
        ("gh-hosts", str(home / ".config/gh/hosts.yml")),
        ("npmrc", str(home / ".npmrc")),
        ("pgpass", str(home / ".pgpass")),
        ("dotenv", str(cwd / ".env")),
        ("dotenv", str(cwd / ".env.example")),
        ("dotenv", str(home / ".env")),
    }
    assert expected <= found
    names = {loc for kind, loc in found if kind == "env-secret"}
    for benign in (
        "$PATH",
        "$PWD",
        "$KEYBOARD_LAYOUT",
        "$XDG_SESSION_ID",
        "$GIT_COMMIT",
        "$NO_AUTH",
        "$SSH_AUTH_SOCK",
        "$HOME",
        "$XDG_RUNTIME_DIR",
    ):
        assert benign not in names


def test_inventory_finds_files_network_processes_and_records(fake_host: FakeHost) -> None:
    inventory = _inventory(fake_host)
    files = _found(inventory, Group.FILES)
    assert ("home", str(fake_host.home)) in files
    assert ("working-tree", str(fake_host.cwd)) in files
    assert ("shared-writable", str(fake_host.root / "tmp")) in files
    assert ("mount", "/mnt/share") in files and ("mount", "/media/usb stick") in files
    network = _found(inventory, Group.NETWORK)
    assert ("default-route", "0.0.0.0/0 via 192.0.2.1 dev eth0") in network
    assert ("default-route", "::/0 via fd00::1 dev eth0") in network
    assert ("metadata-endpoint", "169.254.169.254") in network
    assert ("resolver", "10.0.0.53") in network
    assert ("listening-tcp", "127.0.0.1:5432") in network
    assert ("proxy", "$HTTPS_PROXY=http://proxyuser@proxy.corp.test:3128") in network
    processes = _found(inventory, Group.PROCESSES)
    base = fake_host.base
    assert {
        ("processes", "3 visible processes"),
        ("socket:docker", str(fake_host.root / "run/docker.sock")),
        ("socket:x11", str(fake_host.root / "tmp/.X11-unix/X0")),
        ("socket:podman", str(base / "u/podman/podman.sock")),
        ("socket:dbus-session", str(base / "u/bus")),
        ("socket:ssh-agent", str(base / "agent.sock")),
        ("socket:unix", "/run/systemd/journal/stdout"),
        ("socket:abstract", "1 abstract Unix socket(s)"),
        ("capabilities", "CapEff=0000000000200000"),
    } <= processes
    records = _found(inventory, Group.RECORDS)
    assert {
        ("database", "postgres://app@db.internal.test:5432/prod"),
        ("database", "postgres://alice@pg.example.test:5432/billing"),
        ("kubernetes-cluster", "https://k8s.example.test:6443"),
        ("container-registry", "registry.example.test"),
        ("netrc-host", "api.example.test"),
        ("git-host", "https://bob@github.com"),
        ("github-host", "github.com"),
        ("package-registry", "registry.npmjs.org"),
        ("api:aws", "AWS APIs (eu-west-1)"),
        ("api:github-token", "GitHub API and git over HTTPS"),
        ("api:slack-token", "Slack API"),
        ("api:anthropic-key", "Anthropic API"),
    } <= records


def test_verdicts_block_secrets_read_the_working_tree_and_review_records(
    fake_host: FakeHost,
) -> None:
    inventory = _inventory(fake_host)
    by_key = {(i.kind, i.location): i for i in inventory.items}
    assert by_key[("env-secret", "$GITHUB_TOKEN")].verdict is Verdict.BLOCK
    assert by_key[("working-tree", str(fake_host.cwd))].verdict is Verdict.READ
    assert by_key[("dotenv", str(fake_host.cwd / ".env.example"))].verdict is Verdict.REVIEW
    assert all(i.verdict is Verdict.REVIEW for i in inventory.in_group(Group.RECORDS))
    assert all(i.reason for i in inventory.items)


def test_no_planted_secret_appears_in_text_or_json_output(fake_host: FakeHost) -> None:
    inventory = _inventory(fake_host)
    outputs = [render_inventory_text(inventory), json.dumps(inventory_to_json(inventory)), repr(inventory.items)]
    for output in outputs:
        for secret in fake_host.secrets:
            assert secret not in output
            assert secret[:12] not in output  # not even a prefix


def test_json_summary_counts_items_per_group_and_verdict(fake_host: FakeHost) -> None:
    data = inventory_to_json(_inventory(fake_host))
    total = sum(sum(v.values()) for v in data["summary"].values())
    assert total == len(data["items"])
    assert data["summary"]["records"]["review"] == sum(1 for item in data["items"] if item["group"] == "records")
