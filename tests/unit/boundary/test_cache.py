"""The validation cache: a hit is the same boundary, any change of input is a miss, and an entry
is trusted only from a private directory and a private file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from contain.boundary import cache as cache_module
from contain.boundary.cache import load_run_boundary
from contain.boundary.extend import BoundaryFlags
from contain.boundary.load import load_boundary
from contain.boundary.plain import plain_boundary
from contain.errors import BoundaryInvalid

NO_FLAGS = BoundaryFlags()


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache" / "boundaries"


def manifest(tmp_path: Path, text: str, name: str = "contain.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def entries(cache_dir: Path) -> list[Path]:
    return sorted(cache_dir.glob("*.json"))


def test_the_first_run_validates_and_the_second_reads_the_same_boundary(tmp_path, cache_dir):
    path = manifest(tmp_path, "version: 1\nenv: {A: '1'}\nresources: {memory_bytes: 64MiB}\n")
    first = load_run_boundary(path, NO_FLAGS, cache_dir=cache_dir)
    second = load_run_boundary(path, NO_FLAGS, cache_dir=cache_dir)
    assert (first.from_cache, second.from_cache) == (False, True)
    assert first.boundary == second.boundary == plain_boundary(load_boundary(path))
    assert second.boundary.resources.memory_bytes == 64 * 1024**2
    assert oct(os.stat(cache_dir).st_mode & 0o777) == "0o700"
    assert [oct(e.stat().st_mode & 0o777) for e in entries(cache_dir)] == ["0o600"]


def test_the_default_boundary_is_cached_too(cache_dir):
    assert load_run_boundary(None, NO_FLAGS, cache_dir=cache_dir).from_cache is False
    hit = load_run_boundary(None, NO_FLAGS, cache_dir=cache_dir)
    assert hit.from_cache and hit.boundary.files == () and not hit.boundary.allows_network


def test_an_edited_manifest_is_validated_again(tmp_path, cache_dir):
    path = manifest(tmp_path, "version: 1\nenv: {A: '1'}\n")
    load_run_boundary(path, NO_FLAGS, cache_dir=cache_dir)
    Path(path).write_text("version: 1\nenv: {A: '2'}\n")
    again = load_run_boundary(path, NO_FLAGS, cache_dir=cache_dir)
    assert again.from_cache is False and again.boundary.env == {"A": "2"}


def test_the_same_text_elsewhere_resolves_its_own_relative_paths(tmp_path, cache_dir):
    for name in ("a", "b"):
        (tmp_path / name / "data").mkdir(parents=True)
    text = "version: 1\nfiles: [{path: /inputs/d, access: read, host: ./data}]\n"
    a = load_run_boundary(manifest(tmp_path / "a", text), NO_FLAGS, cache_dir=cache_dir)
    b = load_run_boundary(manifest(tmp_path / "b", text), NO_FLAGS, cache_dir=cache_dir)
    assert not b.from_cache
    assert (a.boundary.files[0].host, b.boundary.files[0].host) == (str(tmp_path / "a/data"), str(tmp_path / "b/data"))


def test_flags_are_part_of_the_key_with_relative_paths_resolved_against_the_cwd(tmp_path, cache_dir, monkeypatch):
    for name in ("one", "two"):
        (tmp_path / name / "data").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "one")
    first = load_run_boundary(None, BoundaryFlags(reads=["data"]), cache_dir=cache_dir)
    monkeypatch.chdir(tmp_path / "two")
    second = load_run_boundary(None, BoundaryFlags(reads=["data"]), cache_dir=cache_dir)
    assert not second.from_cache and second.boundary.files[0].host == str(tmp_path / "two/data")
    env = load_run_boundary(None, BoundaryFlags(env=["A=1"]), cache_dir=cache_dir)
    assert not env.from_cache and env.boundary.env == {"A": "1"}
    memory = load_run_boundary(None, BoundaryFlags(resources={"memory_bytes": "99MiB"}), cache_dir=cache_dir)
    assert not memory.from_cache and memory.boundary.resources.memory_bytes == 99 * 1024**2
    assert first.boundary.files[0].host == str(tmp_path / "one/data")


def test_invalid_input_is_refused_every_time_and_never_cached(tmp_path, cache_dir):
    path = manifest(tmp_path, "version: 1\nresources: {memroy_bytes: 1}\n")
    for _ in range(2):
        with pytest.raises(BoundaryInvalid, match="unknown key"):
            load_run_boundary(path, NO_FLAGS, cache_dir=cache_dir)
    with pytest.raises(BoundaryInvalid, match="NAME=VALUE"):
        load_run_boundary(None, BoundaryFlags(env=["novalue"]), cache_dir=cache_dir)
    assert not cache_dir.exists() or entries(cache_dir) == []


def test_a_new_version_of_the_validation_code_never_reads_old_entries(cache_dir, monkeypatch):
    load_run_boundary(None, NO_FLAGS, cache_dir=cache_dir)
    monkeypatch.setattr(cache_module, "_source_digest", "another version")
    assert load_run_boundary(None, NO_FLAGS, cache_dir=cache_dir).from_cache is False


def only_entry(cache_dir: Path) -> Path:
    (entry,) = entries(cache_dir)
    return entry


def test_an_entry_readable_by_others_is_ignored_and_replaced(cache_dir):
    load_run_boundary(None, NO_FLAGS, cache_dir=cache_dir)
    os.chmod(only_entry(cache_dir), 0o644)
    assert load_run_boundary(None, NO_FLAGS, cache_dir=cache_dir).from_cache is False
    assert only_entry(cache_dir).stat().st_mode & 0o777 == 0o600
    assert load_run_boundary(None, NO_FLAGS, cache_dir=cache_dir).from_cache is True


def test_a_shared_cache_directory_is_never_used(cache_dir):
    cache_dir.mkdir(parents=True)
    os.chmod(cache_dir, 0o777)
    for _ in range(2):
        assert load_run_boundary(None, NO_FLAGS, cache_dir=cache_dir).from_cache is False
    assert entries(cache_dir) == []


def test_a_symlinked_entry_is_not_followed(tmp_path, cache_dir):
    load_run_boundary(None, NO_FLAGS, cache_dir=cache_dir)
    entry = only_entry(cache_dir)
    elsewhere = tmp_path / "planted.json"
    elsewhere.write_bytes(entry.read_bytes())
    elsewhere.chmod(0o600)
    entry.unlink()
    entry.symlink_to(elsewhere)
    assert load_run_boundary(None, NO_FLAGS, cache_dir=cache_dir).from_cache is False
    assert not entry.is_symlink()


@pytest.mark.parametrize(
    "damage",
    [
        lambda e: e.write_text("{not json"),
        lambda e: e.write_text(json.dumps({"key": "someone else", "boundary": json.loads(e.read_text())["boundary"]})),
        lambda e: e.write_text(json.dumps({"key": e.stem, "boundary": {"files": "nope"}})),
        lambda e: e.write_text(json.dumps([1, 2])),
    ],
    ids=["not-json", "other-key", "bad-structure", "not-an-object"],
)
def test_a_damaged_entry_is_a_miss_and_is_rewritten(cache_dir, damage):
    load_run_boundary(None, NO_FLAGS, cache_dir=cache_dir)
    damage(only_entry(cache_dir))
    assert load_run_boundary(None, NO_FLAGS, cache_dir=cache_dir).from_cache is False
    assert load_run_boundary(None, NO_FLAGS, cache_dir=cache_dir).from_cache is True


def test_old_entries_are_pruned(cache_dir, monkeypatch):
    monkeypatch.setattr(cache_module, "MAX_ENTRIES", 3)
    for n in range(5):
        load_run_boundary(None, BoundaryFlags(env=[f"N={n}"]), cache_dir=cache_dir)
    assert len(entries(cache_dir)) == 3


def test_no_cache_directory_means_validation_every_time(tmp_path):
    path = manifest(tmp_path, "version: 1\n")
    assert load_run_boundary(path, NO_FLAGS, cache_dir=None).from_cache is False
    assert load_run_boundary(path, NO_FLAGS, cache_dir=None).from_cache is False
