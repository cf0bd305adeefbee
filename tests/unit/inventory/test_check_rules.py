"""Every CHECK_RULES row fires on a manifest made to trip it and stays silent on a clean one."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contain.boundary import boundary_from_mapping
from contain.inventory import CHECK_RULES, Severity, gather_check_facts, run_checks
from contain.inventory.check_rules import tool_name_words

Manifest = dict[str, Any]


def _world(tmp_path: Path) -> tuple[Path, Path]:
    """A home with credentials, and a git repository using husky, outside the home."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("-----BEGIN RSA PRIVATE KEY-----\n")
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text("[default]\n")
    repo = tmp_path / "repo"
    (repo / ".git" / "hooks").mkdir(parents=True)
    (repo / ".husky").mkdir()
    (repo / "src").mkdir()
    return home, repo


def _clean(home: Path, repo: Path) -> Manifest:
    return {
        "version": 1,
        "task": "clean",
        "principal": "alice",
        "threats": ["untrusted_documents", "generated_code", "trusted_api"],
        "files": [
            {"host": str(repo), "path": "/work/repo", "access": "write", "protect": [".husky"]},
            {"path": "/work/out", "access": "scratch"},
        ],
        "credentials": [{"name": "BILLING_TOKEN", "via": "broker"}],
        "env": {"LOG_LEVEL": "debug"},
        "tools": [
            {"name": "billing.read_*", "verdict": "allow"},
            {"name": "billing.update_invoice", "verdict": "review"},
            {"name": "fs__delete_file", "verdict": "deny"},
        ],
        "records": [{"name": "invoices", "actions": ["update_invoice"]}],
        "resources": {"wall_s": 30, "memory_bytes": "256MiB", "pids_max": 64},
        "hardening": {"landlock": "required", "cgroups": "required"},
    }


def _set(key: str, value: Any) -> Callable[[Manifest, Path, Path], None]:
    def apply(m: Manifest, home: Path, repo: Path) -> None:
        m[key] = value

    return apply


def _del(key: str) -> Callable[[Manifest, Path, Path], None]:
    def apply(m: Manifest, home: Path, repo: Path) -> None:
        del m[key]

    return apply


Mutation = Callable[[Manifest, Path, Path], None]


def _bind(access: str, host: Callable[[Path, Path], Path]) -> Mutation:
    def apply(m: Manifest, home: Path, repo: Path) -> None:
        m["files"].append({"host": str(host(home, repo)), "path": "/data/x", "access": access})

    return apply


def _network(host: str) -> Callable[[Manifest, Path, Path], None]:
    def apply(m: Manifest, home: Path, repo: Path) -> None:
        m["threats"] = ["generated_code"]  # keep CHK-016 out of the way
        m["network"] = {"allow": [{"host": host, "ports": [443]}]}

    return apply


def _dotenv_in_bind(m: Manifest, home: Path, repo: Path) -> None:
    (repo / "src" / ".env").write_text("X=1\n")
    m["files"].append({"host": str(repo / "src"), "path": "/inputs/src", "access": "read"})


def _unprotected_husky(m: Manifest, home: Path, repo: Path) -> None:
    m["files"][0]["protect"] = []


def _both(
    first: Callable[[Manifest, Path, Path], None], second: Callable[[Manifest, Path, Path], None]
) -> Callable[[Manifest, Path, Path], None]:
    def apply(m: Manifest, home: Path, repo: Path) -> None:
        first(m, home, repo)
        second(m, home, repo)

    return apply


def _k8s(section: dict[str, Any] | None = None, **more: Any) -> Mutation:
    """Add a kubernetes: section (and other top-level keys) to the clean manifest."""

    def apply(m: Manifest, home: Path, repo: Path) -> None:
        m["kubernetes"] = section or {}
        m.update(copy.deepcopy(more))

    return apply


def _k8s_read(extra: dict[str, Any], *also: dict[str, Any]) -> Mutation:
    """A kubernetes: section and a read bind of the repository's src/ with ``extra`` keys."""

    def apply(m: Manifest, home: Path, repo: Path) -> None:
        m["kubernetes"] = {"inputs": [{"path": "/inputs/src", "claim": "src"}]}
        m["files"].append({"host": str(repo / "src"), "path": "/inputs/src", "access": "read", **extra})
        m["files"].extend(also)

    return apply


def _k8s_export(m: Manifest, home: Path, repo: Path) -> None:
    m["kubernetes"] = {}
    m["files"].append({"path": "/work/exported", "access": "scratch", "export": str(home / "out")})


# rule id -> how to turn the clean manifest into one that trips it
TRIPS: dict[str, Callable[[Manifest, Path, Path], None]] = {
    "CHK-001": _set("credentials", [{"name": "API", "via": "env", "source": "CI_API"}]),
    "CHK-002": _set("env", {"UPLOAD_TOKEN": "abc-not-a-shape-but-a-secret-name"}),
    "CHK-003": _bind("write", lambda home, repo: home),
    "CHK-004": _bind("read", lambda home, repo: Path("/")),
    "CHK-005": _dotenv_in_bind,
    "CHK-006": _network("*.example.com"),
    "CHK-007": _network("*.github.io"),
    "CHK-008": _network("10.0.0.0/8"),
    "CHK-009": _network("169.254.169.254"),
    "CHK-010": _set("tools", [{"name": "fs__write_file", "verdict": "allow"}]),
    "CHK-011": _del("principal"),
    "CHK-012": _set("hardening", {"landlock": "off", "cgroups": "off"}),
    "CHK-013": _unprotected_husky,
    "CHK-014": _del("resources"),
    "CHK-015": _set("threats", []),
    "CHK-016": _set("network", {"allow": [{"host": "pypi.org"}]}),
    "CHK-017": _set("runtime", {"backend": "none"}),
    "CHK-018": _set("runtime", {"backend": "microvm"}),
    "CHK-019": _both(
        _set("runtime", {"backend": "container"}),
        _set("credentials", [{"name": "API", "via": "env", "source": "CI_API"}]),
    ),
    "CHK-022": _k8s(),
    "CHK-023": _k8s({"image": "registry.test/tools:latest"}),
    "K8S-001": _k8s(),  # the clean manifest write-binds the repository
    "K8S-002": _k8s_read({}, {"host": "/", "path": "/inputs/other", "access": "read"}),
    "K8S-003": _k8s({"inputs": [{"path": "/inputs/nothing", "config_map": "x"}]}),
    "K8S-004": _k8s_export,
    "K8S-005": _k8s_read({}, {"path": "/inputs/src/private", "access": "block"}),
    "K8S-006": _k8s_read({"allow_sockets": ["run/s.sock"]}),
    "K8S-007": _k8s(credentials=[{"name": "API", "via": "env", "source": "CI_API"}]),
    "K8S-008": _k8s(),  # the clean manifest has records and a broker credential
    "K8S-009": _k8s(network={"allow": [{"host": "api.test"}], "hosts": {"api.test": "10.1.2.3"}}),
    "K8S-010": _k8s(network={"allow": [{"host": "::ffff:127.0.0.1", "ports": [8080]}]}),
    "K8S-011": _k8s(env={"HTTPS_PROXY": "http://elsewhere.test:3128"}),
    "K8S-012": _k8s(task="Invoices_2026"),
    "CHK-024": _set("fleet", {"retries": 1}),
}


# Rules that need more than the manifest: the broker's registered actions (name -> has a
# business validator), as gather_check_facts reads them from --broker-config.
BROKER_TRIPS: dict[str, dict[str, bool]] = {
    "CHK-020": {"update_invoice": False},
    "CHK-021": {},
}
CLEAN_BROKER = {"update_invoice": True}


def _findings(manifest: Manifest, home: Path, broker: dict[str, bool] | None = None):  # type: ignore[no-untyped-def]
    boundary = boundary_from_mapping(manifest)
    facts = dataclasses.replace(gather_check_facts(boundary, home=home), broker_actions=broker)
    return run_checks(boundary, facts)


def test_every_rule_has_a_tripping_manifest_and_ids_are_unique() -> None:
    ids = [rule.id for rule in CHECK_RULES]
    assert len(ids) == len(set(ids))
    assert set(TRIPS) | set(BROKER_TRIPS) == set(ids)
    for rule in CHECK_RULES:
        assert rule.title and rule.why and rule.fix
        assert rule.severity in Severity


def test_clean_manifest_has_no_findings(tmp_path: Path) -> None:
    home, repo = _world(tmp_path)
    assert _findings(_clean(home, repo), home) == ()
    assert _findings(_clean(home, repo), home, CLEAN_BROKER) == ()


@pytest.mark.parametrize("rule", CHECK_RULES, ids=lambda r: r.id)
def test_rule_fires_on_its_tripping_manifest(rule: Any, tmp_path: Path) -> None:
    home, repo = _world(tmp_path)
    manifest = copy.deepcopy(_clean(home, repo))
    broker = BROKER_TRIPS.get(rule.id)
    if broker is None:
        TRIPS[rule.id](manifest, home, repo)
    fired = [f for f in _findings(manifest, home, broker) if f.rule_id == rule.id]
    assert fired, f"{rule.id} did not fire"
    assert all(f.severity is rule.severity and f.fix == rule.fix for f in fired)


def test_credential_rule_never_prints_the_env_value(tmp_path: Path) -> None:
    home, repo = _world(tmp_path)
    manifest = _clean(home, repo)
    manifest["env"] = {"HOOK": "xoxb-0123456789abcdefghij"}
    findings = _findings(manifest, home)
    assert [f.rule_id for f in findings] == ["CHK-002"]
    assert "xoxb-0123456789abcdefghij" not in repr(findings)
    assert "Slack token" in findings[0].message


def test_write_bind_of_a_parent_of_home_counts_as_home(tmp_path: Path) -> None:
    home, repo = _world(tmp_path)
    manifest = _clean(home, repo)
    manifest["files"].append({"host": str(tmp_path), "path": "/data/all", "access": "write"})
    ids = {f.rule_id for f in _findings(manifest, home)}
    assert "CHK-003" in ids and "CHK-005" in ids


def test_symlinked_home_bind_is_resolved_before_comparing(tmp_path: Path) -> None:
    home, repo = _world(tmp_path)
    (tmp_path / "alias").symlink_to(home)
    manifest = _clean(home, repo)
    manifest["files"].append({"host": str(tmp_path / "alias"), "path": "/data/h", "access": "write"})
    assert "CHK-003" in {f.rule_id for f in _findings(manifest, home)}


def test_blocking_the_credential_files_silences_the_exposure_rule(tmp_path: Path) -> None:
    home, repo = _world(tmp_path)
    manifest = _clean(home, repo)
    manifest["files"] += [
        {"host": str(home), "path": "/data/home", "access": "read"},
        {"path": "/data/home/.ssh", "access": "block"},
    ]
    fired = [f for f in _findings(manifest, home) if f.rule_id == "CHK-005"]
    assert len(fired) == 1
    assert ".aws/credentials" in fired[0].message and ".ssh" not in fired[0].message


def test_configured_hooks_path_inside_the_repository_must_be_protected(tmp_path: Path) -> None:
    home, repo = _world(tmp_path)
    (repo / ".git" / "config").write_text('[core]\n\thooksPath = "tools/hooks"\n')
    manifest = _clean(home, repo)
    fired = [f for f in _findings(manifest, home) if f.rule_id == "CHK-013"]
    assert [f.message.split(" in ")[0] for f in fired] == ["tools/hooks"]
    manifest["files"][0]["protect"] = [".husky", "tools/hooks"]
    assert not [f for f in _findings(manifest, home) if f.rule_id == "CHK-013"]


def test_default_protected_paths_cover_git_hooks_without_listing_them(tmp_path: Path) -> None:
    home, repo = _world(tmp_path)
    (repo / ".git" / "config").write_text("[core]\n\thooksPath = .git/hooks\n")
    assert _findings(_clean(home, repo), home) == ()


@pytest.mark.parametrize(
    ("name", "fires"),
    [
        ("fs__write_file", True),
        ("billing.updateInvoice", True),
        ("mail.send", True),
        ("billing.*", True),
        ("*", True),
        ("billing.read_*", False),
        ("docs.search", False),
        ("fs__read_file", False),
    ],
)
def test_untrusted_documents_rule_judges_tool_names_by_their_verbs(name: str, fires: bool, tmp_path: Path) -> None:
    home, repo = _world(tmp_path)
    manifest = _clean(home, repo)
    manifest["tools"] = [{"name": name, "verdict": "allow"}]
    fired = any(f.rule_id == "CHK-010" for f in _findings(manifest, home))
    assert fired is fires


def test_untrusted_documents_rule_is_silent_without_that_threat(tmp_path: Path) -> None:
    home, repo = _world(tmp_path)
    manifest = _clean(home, repo)
    manifest["threats"] = ["generated_code"]
    manifest["tools"] = [{"name": "fs__write_file", "verdict": "allow"}]
    assert not [f for f in _findings(manifest, home) if f.rule_id == "CHK-010"]


def test_metadata_address_pinned_in_hosts_fires(tmp_path: Path) -> None:
    home, repo = _world(tmp_path)
    manifest = _clean(home, repo)
    manifest["network"] = {"hosts": {"meta.test": "169.254.169.254"}}
    fired = [f for f in _findings(manifest, home) if f.rule_id == "CHK-009"]
    assert [f.key_path for f in fired] == ["network.hosts.meta.test"]


def test_tool_name_words_split_separators_and_camel_case() -> None:
    assert tool_name_words("billing.updateInvoice") == ["billing", "update", "invoice"]
    assert tool_name_words("fs__write_file") == ["fs", "write", "file"]


def test_fleet_retries_rule_is_silent_when_the_fleet_section_allows_no_retry(tmp_path: Path) -> None:
    home, repo = _world(tmp_path)
    manifest = copy.deepcopy(_clean(home, repo))
    manifest["fleet"] = {"retries": 0, "warm_sandboxes": 4}
    assert [f.rule_id for f in _findings(manifest, home)] == []


@pytest.mark.parametrize(
    ("rule_id", "section", "message"),
    [
        ("CHK-018", ("runtime", {"backend": "microvm"}), "host directory {repo} is mounted writable into the microvm"),
        ("CHK-024", ("fleet", {"retries": 1}), "fleet.retries is 1 and host directory {repo} is bound writable"),
    ],
)
def test_write_bind_rules_name_each_write_bound_host_directory_at_its_access_key(
    tmp_path: Path, rule_id: str, section: tuple[str, Any], message: str
) -> None:
    home, repo = _world(tmp_path)
    manifest = copy.deepcopy(_clean(home, repo))
    manifest[section[0]] = section[1]
    manifest["files"].append({"host": str(home), "path": "/inputs/home", "access": "read"})
    manifest["files"].append({"host": str(tmp_path), "path": "/work/all", "access": "write"})
    fired = [(f.key_path, f.message.split(": ", 1)[0]) for f in _findings(manifest, home) if f.rule_id == rule_id]
    assert fired == [
        ("files.0.access", message.format(repo=repo)),
        ("files.3.access", message.format(repo=tmp_path)),
    ]
