"""The plain boundary the runtime reads mirrors the validated model exactly, and refuses damage."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest

from contain.boundary import model
from contain.boundary.kinds import Backend, CredentialVia, FileAccess, LayerRequirement
from contain.boundary.load import boundary_from_mapping, load_boundary
from contain.boundary.plain import (
    NOT_MIRRORED,
    PlainBoundary,
    PlainCredential,
    PlainFileRule,
    PlainHardening,
    PlainNetwork,
    PlainNetworkRule,
    PlainRecordRule,
    PlainResources,
    PlainRuntime,
    plain_boundary,
    plain_from_json,
)
from contain.egress.policy import EgressPolicy
from contain.runtime.bwrap import default_scratch_paths
from contain.runtime.plan import has_write_binds, plan_base_env, plan_rlimits, writable_paths

EXAMPLES = sorted(Path(__file__).resolve().parents[3].joinpath("examples").rglob("contain.yaml")) + sorted(
    Path(__file__).resolve().parents[3].joinpath("examples", "boundaries").glob("*.yaml")
)

MIRRORS = [
    (model.Boundary, PlainBoundary, NOT_MIRRORED),
    (model.FileRule, PlainFileRule, frozenset()),
    (model.Credential, PlainCredential, frozenset()),
    (model.NetworkRule, PlainNetworkRule, frozenset()),
    (model.Network, PlainNetwork, frozenset()),
    (model.Resources, PlainResources, frozenset()),
    (model.Hardening, PlainHardening, frozenset()),
    (model.Runtime, PlainRuntime, frozenset()),
    (model.RecordRule, PlainRecordRule, frozenset()),
]


def everything(tmp_path: Path) -> model.Boundary:
    """A boundary that uses every section the runtime reads, with non-default values."""
    (tmp_path / "in").mkdir()
    (tmp_path / "repo").mkdir()
    return boundary_from_mapping(
        {
            "task": "t-1",
            "principal": "alice",
            "threats": ["generated_code", "untrusted_documents"],
            "files": [
                {"path": "/inputs/in", "access": "read", "host": str(tmp_path / "in"), "required": False},
                {"path": "/work/repo", "access": "write", "host": str(tmp_path / "repo"), "protect": ["secrets"]},
                {"path": "/work/repo/private", "access": "block"},
                {"path": "/out", "access": "scratch", "export": str(tmp_path / "out")},
            ],
            "credentials": [
                {"name": "TOKEN", "via": "env", "source": "CI_TOKEN"},
                {"name": "BILLING", "via": "broker"},
            ],
            "network": {"allow": [{"host": "api.test", "ports": [8443, 443]}], "hosts": {"api.test": "127.0.0.1"}},
            "resources": {"wall_s": "90s", "cpu_s": 5, "memory_bytes": "200MiB", "pids_max": 64, "cpu_cores": 1.5},
            "env": {"A": "1", "B": "two"},
            "tools": [{"name": "fs__read", "verdict": "allow"}],
            "records": [{"name": "invoices", "actions": ["update_invoice"]}],
            "hardening": {"landlock": "required", "cgroups": "off"},
            "runtime": {"backend": "process"},
        }
    )


@pytest.mark.parametrize(("model_cls", "plain_cls", "left_out"), MIRRORS, ids=lambda x: getattr(x, "__name__", ""))
def test_each_plain_class_has_exactly_the_models_fields(model_cls, plain_cls, left_out):
    assert {f.name for f in dataclasses.fields(plain_cls)} == set(model_cls.model_fields) - left_out


def assert_mirrors(plain: object, validated: object) -> None:
    """Every plain field equals the model's, recursively; enums are the same members."""
    if dataclasses.is_dataclass(plain):
        for f in dataclasses.fields(plain):
            assert_mirrors(getattr(plain, f.name), getattr(validated, f.name))
    elif isinstance(plain, tuple):
        assert isinstance(validated, tuple) and len(plain) == len(validated)
        for a, b in zip(plain, validated, strict=True):
            assert_mirrors(a, b)
    else:
        assert plain == validated and type(plain) is type(validated), (plain, validated)


def test_a_full_boundary_is_mirrored_field_for_field(tmp_path):
    validated = everything(tmp_path)
    plain = plain_boundary(validated)
    assert_mirrors(plain, validated)
    assert plain.allows_network is validated.allows_network is True
    assert plain.files[1].access is FileAccess.WRITE and plain.credentials[0].via is CredentialVia.ENV
    assert plain.hardening.cgroups is LayerRequirement.OFF and plain.runtime.backend is Backend.PROCESS


@pytest.mark.parametrize("manifest", EXAMPLES, ids=lambda p: p.parent.name + "/" + p.name)
def test_every_example_manifest_is_mirrored(manifest):
    validated = load_boundary(manifest)
    assert_mirrors(plain_boundary(validated), validated)


def test_the_default_boundary_is_mirrored():
    assert_mirrors(plain_boundary(model.Boundary()), model.Boundary())
    assert plain_boundary(model.Boundary()).allows_network is False


def test_the_runtime_plans_the_same_from_the_model_and_from_the_plain_copy(tmp_path):
    validated = everything(tmp_path)
    plain = plain_from_json(validated.model_dump(mode="json"))
    host = {"CI_TOKEN": "s3cret", "HOME": "/root"}
    assert default_scratch_paths(plain) == default_scratch_paths(validated)
    assert writable_paths(plain) == writable_paths(validated)
    assert plan_rlimits(plain.resources, cgroups=True) == plan_rlimits(validated.resources, cgroups=True)
    assert plan_base_env(plain, host_environ=host, egress_env={}) == plan_base_env(
        validated, host_environ=host, egress_env={}
    )
    assert plan_base_env(plain, host_environ=host, egress_env={})["TOKEN"] == "s3cret"
    from_plain, from_model = EgressPolicy.from_boundary(plain), EgressPolicy.from_boundary(validated)
    assert (from_plain.entries, from_plain.hosts) == (from_model.entries, from_model.hosts)


def test_has_write_binds_reads_write_binds_from_the_plain_copy(tmp_path):
    assert has_write_binds(plain_boundary(everything(tmp_path))) is True
    assert has_write_binds(plain_boundary(model.Boundary())) is False


def damaged(tmp_path: Path, change) -> dict:
    dump = copy.deepcopy(everything(tmp_path).model_dump(mode="json"))
    change(dump)
    return dump


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["files"][0].update(extra=1), r"files: missing keys \[\], unknown keys \['extra'\]"),
        (lambda d: d["resources"].pop("pids_max"), r"resources: missing keys \['pids_max'\]"),
        (lambda d: d.update(surprise=True), r"boundary: .*unknown keys \['surprise'\]"),
        (lambda d: d["resources"].update(memory_bytes="1GiB"), "expected an integer"),
        (lambda d: d["resources"].update(pids_max=True), "expected an integer"),
        (lambda d: d["files"][0].update(access="execute"), "'execute' is not a valid FileAccess"),
        (lambda d: d["files"][0].update(required="yes"), "expected true or false"),
        (lambda d: d.update(env={"A": 1}), "expected a string"),
        (lambda d: d.update(files={"path": "/x"}), "expected a list"),
        (lambda d: d.update(network=[]), "network: expected an object"),
    ],
)
def test_a_damaged_dump_is_refused_with_where(tmp_path, change, message):
    with pytest.raises(ValueError, match=message):
        plain_from_json(damaged(tmp_path, change))


def test_fields_left_out_are_ignored_in_a_dump(tmp_path):
    dump = everything(tmp_path).model_dump(mode="json")
    assert set(NOT_MIRRORED) <= set(dump)
    assert plain_from_json(dump) == plain_from_json({k: v for k, v in dump.items() if k not in NOT_MIRRORED})
