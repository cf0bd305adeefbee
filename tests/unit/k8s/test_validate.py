"""validate_render: the pinned schema and the profile shape catch what a typo or a drift would break."""

from __future__ import annotations

import dataclasses
import json

import pytest

from contain.errors import RenderRefused
from contain.k8s.render import RenderedFile, RenderedObject, render_boundary
from contain.k8s.validate import validate_render, validate_seccomp_profile
from k8s.conftest import NETWORKED, make_boundary


def test_a_clean_render_validates() -> None:
    validate_render(render_boundary(make_boundary(NETWORKED)))


def test_an_object_with_an_unknown_field_is_refused_naming_the_file() -> None:
    render = render_boundary(make_boundary(NETWORKED))
    pod = render.objects[-1]
    broken = RenderedObject(pod.file_name, {**pod.body, "spec": {**pod.body["spec"], "hostUsers": "no"}})
    with pytest.raises(RenderRefused) as caught:
        validate_render(dataclasses.replace(render, objects=(*render.objects[:-1], broken)))
    assert pod.file_name in caught.value.cause


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: p.update(defaultAction="ALLOW"),
        lambda p: p.update(architecture=p.pop("architectures")),
        lambda p: p["syscalls"][0].update(errnoRet=0),
        lambda p: p["syscalls"][0].update(names=["ptrace; rm"]),
        lambda p: p["syscalls"].append(
            {"names": ["x"], "action": "SCMP_ACT_ERRNO", "args": [{"index": 6, "value": 0, "op": "SCMP_CMP_EQ"}]}
        ),
    ],
)
def test_a_profile_of_the_wrong_shape_is_refused(damage) -> None:  # type: ignore[no-untyped-def]
    render = render_boundary(make_boundary(NETWORKED))
    (profile_file,) = render.files
    profile = json.loads(profile_file.text)
    validate_seccomp_profile(profile)
    damage(profile)
    with pytest.raises(RenderRefused):
        validate_seccomp_profile(profile)
    bad = dataclasses.replace(render, files=(RenderedFile(profile_file.relative_path, json.dumps(profile)),))
    with pytest.raises(RenderRefused):
        validate_render(bad)
