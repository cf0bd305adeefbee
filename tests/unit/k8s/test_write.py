"""Writing a render: files in apply order through a directory fd; symlinks replaced, never followed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from contain.errors import RenderRefused
from contain.k8s.render import render_boundary
from contain.k8s.write import render_yaml_stream, write_render
from k8s.conftest import NETWORKED, OFFLINE, make_boundary


def test_every_object_and_the_profile_are_written_in_apply_order(tmp_path: Path) -> None:
    render = render_boundary(make_boundary(NETWORKED))
    out = tmp_path / "out"
    written = write_render(render, out)
    assert written == [obj.file_name for obj in render.objects] + [f.relative_path for f in render.files]
    assert sorted(p.name for p in out.iterdir() if p.is_file()) == [obj.file_name for obj in render.objects]
    for obj in render.objects:
        assert yaml.safe_load((out / obj.file_name).read_text()) == obj.body
    (profile,) = render.files
    assert (out / profile.relative_path).read_text() == profile.text
    assert not [p for p in out.rglob(".*")]  # no temporary file left


def test_a_symlink_planted_at_an_output_name_is_replaced_not_followed(tmp_path: Path) -> None:
    render = render_boundary(make_boundary(OFFLINE))
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (out / render.objects[0].file_name).symlink_to(victim)
    write_render(render, out)
    assert victim.read_text() == "keep\n"
    assert not (out / render.objects[0].file_name).is_symlink()


@pytest.mark.parametrize("where", ["out", "out/seccomp"])
def test_an_output_directory_that_is_a_symlink_is_refused(tmp_path: Path, where: str) -> None:
    render = render_boundary(make_boundary(OFFLINE))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "out").mkdir(exist_ok=where != "out")
    if where == "out":
        (tmp_path / "out").rmdir()
    (tmp_path / where).symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(RenderRefused):
        write_render(render, tmp_path / "out")
    assert os.listdir(elsewhere) == []


def test_a_yaml_stream_is_refused_when_a_node_file_would_be_lost() -> None:
    with pytest.raises(RenderRefused) as caught:
        render_yaml_stream(render_boundary(make_boundary(OFFLINE)))
    assert "runtime-default" in caught.value.fix


def test_the_yaml_stream_holds_every_object_in_order() -> None:
    render = render_boundary(make_boundary(NETWORKED), overrides={"seccomp": "runtime-default"})
    assert list(yaml.safe_load_all(render_yaml_stream(render))) == [obj.body for obj in render.objects]
