import json
from pathlib import Path

import pytest

from contain.boundary import boundary_json_schema, load_boundary
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
