import json
import time
from pathlib import Path

import pytest

from contain.boundary import boundary_from_mapping, boundary_json_schema, load_boundary
from contain.errors import BoundaryInvalid

EXAMPLES = sorted((Path(__file__).parents[3] / "examples" / "boundaries").glob("*.yaml"))


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "contain.yaml"
    path.write_text(text)
    return path


def test_errors_name_the_file_the_key_path_and_the_line(tmp_path):
    path = write(
        tmp_path,
        "version: 1\n"
        "files:\n"
        "  - {host: ./data, path: /inputs/data, access: read}\n"
        "  - {path: /work/out, access: scratch, protect: [x]}\n"
        "resources:\n"
        "  wall_s: 60s\n"
        "  bogus: 1\n",
    )
    with pytest.raises(BoundaryInvalid) as info:
        load_boundary(path)
    problems = info.value.problems
    assert f"{path}:4: files.1: protect applies only to access: write" in problems[0]
    assert problems[1].startswith(f"{path}:7: resources.bogus: unknown key")
    assert info.value.fix


def test_host_paths_are_relative_to_the_manifest(tmp_path):
    path = write(
        tmp_path,
        "files:\n  - {host: ./data, path: /inputs/data, access: read}\n  - {path: /work/out, access: scratch, export: out}\n",
    )
    boundary = load_boundary(path)
    assert boundary.files[0].host == str(tmp_path / "data")
    assert boundary.files[1].export == str(tmp_path / "out")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("files: [unclosed\n", "not valid YAML"),
        ("- a\n- b\n", "top level must be a mapping"),
        ("version: 2\n", "version"),
    ],
)
def test_malformed_manifests_are_refused_with_a_clear_error(tmp_path, text, fragment):
    with pytest.raises(BoundaryInvalid) as info:
        load_boundary(write(tmp_path, text))
    assert fragment in str(info.value)


def test_missing_and_oversize_manifests_are_refused(tmp_path):
    with pytest.raises(BoundaryInvalid, match="cannot read"):
        load_boundary(tmp_path / "absent.yaml")
    with pytest.raises(BoundaryInvalid, match="larger than 1 MiB"):
        load_boundary(write(tmp_path, "# " + "x" * (1024 * 1024) + "\n"))


def test_schema_forbids_unknown_keys_everywhere():
    schema = boundary_json_schema()
    assert schema["additionalProperties"] is False
    for name, definition in schema["$defs"].items():
        if definition.get("type") == "object" and "properties" in definition:
            assert definition.get("additionalProperties") is False, name
    json.dumps(schema)


def test_there_are_example_boundaries():
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_boundary_loads(example):
    load_boundary(example)


def test_a_bare_yaml_off_means_off_and_a_bare_on_is_refused(tmp_path):
    boundary = load_boundary(write(tmp_path, "hardening: {landlock: off, cgroups: off}\n"))
    assert (boundary.hardening.landlock.value, boundary.hardening.cgroups.value) == ("off", "off")
    with pytest.raises(BoundaryInvalid, match="ambiguous"):
        load_boundary(write(tmp_path, "hardening: {landlock: on}\n"))


# Issue 18 item 8: each of these once escaped as a raw ValueError, OverflowError or
# RecursionError, or was silently accepted (duplicate keys, merge keys).
FUZZ_FINDINGS = {
    "yaml date that is not a date": "task: 2001-02-30\ntask: x\n",
    "5000-digit integer": "resources:\n  pids_max: " + "9" * 5000 + "\n",
    "400-digit memory_bytes": "resources:\n  memory_bytes: " + "9" * 400 + "\n",
    "400-digit memory_bytes with a unit": "resources:\n  memory_bytes: '" + "9" * 400 + "MiB'\n",
    "400-digit wall_s": "resources:\n  wall_s: " + "9" * 400 + "\n",
    "huge regex repeat": "tools:\n- name: a\n  verdict: allow\n  args:\n    x: {pattern: 'a{99999999999}'}\n",
    "regex nested past the compiler": "tools:\n- name: a\n  verdict: allow\n  args:\n    x: {pattern: '"
    + "(" * 2000
    + ")" * 2000
    + "'}\n",
    "deep nesting": "env: " + "[" * 5000 + "]" * 5000 + "\n",
    "duplicate key": "task: a\ntask: b\n",
    "merge key": "<<: {task: a}\n",
    "alias bomb": "task: &t a\nprincipal: *t\n",
}


@pytest.mark.parametrize("name", sorted(FUZZ_FINDINGS))
def test_every_fuzzing_finding_is_a_boundary_invalid_with_a_cause_and_a_fix(tmp_path, name):
    started = time.monotonic()
    with pytest.raises(BoundaryInvalid) as info:
        load_boundary(write(tmp_path, FUZZ_FINDINGS[name]))
    assert info.value.cause and info.value.fix
    assert time.monotonic() - started < 2.0


def test_a_yaml_date_in_a_string_field_is_the_text_that_was_written(tmp_path):
    assert load_boundary(write(tmp_path, "task: 2001-02-03\n")).task == "2001-02-03"


def test_sizes_past_one_exbibyte_are_refused_naming_the_key(tmp_path):
    with pytest.raises(BoundaryInvalid) as info:
        load_boundary(write(tmp_path, "resources:\n  memory_bytes: 4EiB\n  disk_bytes: 2000000000000000000\n"))
    assert any("resources.disk_bytes" in p and "1 EiB" in p for p in info.value.problems)


def test_a_json_manifest_is_read_as_strict_json(tmp_path):
    path = tmp_path / "contain.json"
    path.write_text('{"version": 1, "task": "a", "task": "b"}')
    with pytest.raises(BoundaryInvalid, match="duplicate key 'task'"):
        load_boundary(path)
    path.write_text('{"version": 1, "task": "b"}')
    assert load_boundary(path).task == "b"


def test_a_validator_that_lets_a_foreign_error_out_still_gives_boundary_invalid(monkeypatch):
    from contain.boundary import model

    def explode(cls, value):
        raise OverflowError("from a validator")

    monkeypatch.setattr(model.Boundary, "model_validate", classmethod(lambda cls, data: explode(cls, data)))
    with pytest.raises(BoundaryInvalid, match="OverflowError: from a validator"):
        boundary_from_mapping({"task": "a"})


def test_a_container_image_path_is_relative_to_the_manifests_folder(tmp_path):
    (tmp_path / "sub").mkdir()
    manifest = tmp_path / "sub" / "contain.yaml"
    manifest.write_text("runtime:\n  backend: container\n  container:\n    runtime: runsc\n    image: ../img.tar\n")
    boundary = load_boundary(manifest)
    assert boundary.runtime.container.image == str(tmp_path / "img.tar")
    assert boundary.runtime.container.runtime == "runsc"


def test_an_unknown_oci_runtime_in_the_manifest_is_refused_naming_the_key(tmp_path):
    with pytest.raises(BoundaryInvalid, match=r"runtime\.container\.runtime"):
        load_boundary(write(tmp_path, "runtime:\n  container:\n    runtime: crun\n"))
