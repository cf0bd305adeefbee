from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from contain.boundary import CredentialVia, FileAccess, load_boundary
from contain.errors import FileTransferError
from contain.inventory import (
    Group,
    Inventory,
    InventoryItem,
    Verdict,
    check_manifest,
    draft_manifest,
    take_inventory,
    write_draft_manifest,
)
from contain.inventory.check_rules import Severity

from .conftest import FakeHost


def _draft(host: FakeHost) -> str:
    return draft_manifest(
        take_inventory(home=host.home, environ=host.environ, cwd=host.cwd, root=host.root, proc_root=host.proc)
    )


def test_draft_round_trips_through_load_boundary(fake_host: FakeHost, tmp_path: Path) -> None:
    path = tmp_path / "contain.yaml"
    write_draft_manifest(path, _draft(fake_host), force=False)
    boundary = load_boundary(path)
    assert [t.value for t in boundary.threats] == ["generated_code"]
    assert not boundary.network.allow
    rules = {rule.path: rule for rule in boundary.files}
    assert rules["/work/proj"].access is FileAccess.READ
    assert rules["/work/proj"].host == str(fake_host.cwd)
    assert rules["/work/proj/.env"].access is FileAccess.BLOCK
    assert rules["/work/proj/.env.example"].access is FileAccess.BLOCK
    assert rules["/work/out"].access is FileAccess.SCRATCH
    assert all(rule.access is not FileAccess.WRITE for rule in boundary.files)
    names = {c.name for c in boundary.credentials}
    assert {"GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "DATABASE_URL", "MY_SETTING"} <= names
    assert all(c.via is CredentialVia.BROKER for c in boundary.credentials)


def test_draft_passes_check_without_errors_or_warnings(fake_host: FakeHost, tmp_path: Path) -> None:
    path = tmp_path / "contain.yaml"
    write_draft_manifest(path, _draft(fake_host), force=False)
    report = check_manifest(path, home=fake_host.home)
    assert {f.severity for f in report.findings} <= {Severity.INFO}


def test_draft_never_contains_a_secret_value(fake_host: FakeHost) -> None:
    text = _draft(fake_host)
    for secret in fake_host.secrets:
        assert secret not in text
    assert "via: env" not in text


def test_draft_does_not_bind_the_home_directory() -> None:
    home = Path("/home/alice")
    inventory = Inventory(
        home=home, cwd=home, items=(InventoryItem(Group.FILES, "working-tree", str(home), Verdict.REVIEW, "home"),)
    )
    data = yaml.safe_load(draft_manifest(inventory))
    assert data["files"] == [{"path": "/work/out", "access": "scratch"}]
    assert data["credentials"] == []


def test_write_refuses_to_overwrite_unless_forced(tmp_path: Path) -> None:
    path = tmp_path / "contain.yaml"
    path.write_text("keep me\n")
    with pytest.raises(FileTransferError, match="refusing to overwrite"):
        write_draft_manifest(path, "version: 1\n", force=False)
    assert path.read_text() == "keep me\n"
    write_draft_manifest(path, "version: 1\n", force=True)
    assert path.read_text() == "version: 1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["contain.yaml"]


def test_forced_write_replaces_a_symlink_instead_of_following_it(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("untouched\n")
    link = tmp_path / "contain.yaml"
    link.symlink_to(target)
    with pytest.raises(FileTransferError):
        write_draft_manifest(link, "version: 1\n", force=False)
    write_draft_manifest(link, "version: 1\n", force=True)
    assert target.read_text() == "untouched\n" and not link.is_symlink()
