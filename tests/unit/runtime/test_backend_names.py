"""Backend specs: every accepted spelling parses to one kind and variant; anything else is refused."""

from __future__ import annotations

import pytest

from contain.errors import UnknownBackend, UnsupportedHost
from contain.runtime.backend_names import (
    BACKEND_KINDS,
    RUNSC_PLATFORMS,
    BackendSpec,
    parse_backend_spec,
    plan_runsc_platform,
)


@pytest.mark.parametrize(
    ("text", "default", "spec"),
    [
        ("process", "runc", BackendSpec("process")),
        ("container", "runc", BackendSpec("container", "runc")),
        ("container", "runsc", BackendSpec("container", "runsc")),
        ("container:runc", "runsc", BackendSpec("container", "runc")),
        ("container:runsc", "runc", BackendSpec("container", "runsc")),
        ("microvm", "runc", BackendSpec("microvm")),
    ],
)
def test_each_spelling_parses_and_a_bare_container_takes_the_manifests_runtime(text, default, spec):
    parsed = parse_backend_spec(text, default_container_runtime=default)
    assert parsed == spec
    assert str(parsed) == (f"{spec.kind}:{spec.variant}" if spec.variant else spec.kind)


@pytest.mark.parametrize(
    ("text", "cause"),
    [
        ("docker", "backend 'docker' is unknown"),
        ("", "backend '' is unknown"),
        ("container:crun", "container runtime 'crun' is unknown (in 'container:crun')"),
        ("container:", "container runtime '' is unknown (in 'container:')"),
        ("process:runc", "backend 'process' takes no variant (got 'process:runc')"),
        ("microvm:qemu", "backend 'microvm' takes no variant (got 'microvm:qemu')"),
    ],
)
def test_unknown_kinds_and_variants_are_refused_with_the_accepted_spellings(text, cause):
    with pytest.raises(UnknownBackend) as caught:
        parse_backend_spec(text)
    assert caught.value.cause == cause
    assert caught.value.exit_code == 125
    assert caught.value.fix.startswith("use ")


def test_a_bare_container_with_an_unknown_default_runtime_is_refused_not_mapped():
    with pytest.raises(UnknownBackend, match="'crun' is unknown"):
        parse_backend_spec("container", default_container_runtime="crun")


def test_every_kind_has_a_cgroup_parent_of_its_own():
    parents = [kind.cgroup_parent for kind in BACKEND_KINDS]
    assert len(set(parents)) == len(parents)
    assert BackendSpec("container", "runc").row.cgroup_parent == "contain-container"
    assert BackendSpec("process").row.cgroup_parent == "contain"


@pytest.mark.parametrize(
    ("available", "chosen"),
    [(("kvm", "ptrace"), "ptrace"), (("kvm", "ptrace", "systrap"), "systrap"), (("systrap",), "systrap")],
)
def test_the_runsc_platform_is_the_first_table_row_the_build_offers(available, chosen):
    assert plan_runsc_platform(available).name == chosen


def test_a_runsc_with_only_kvm_is_refused_not_run_on_kvm():
    assert "kvm" not in [row.name for row in RUNSC_PLATFORMS]
    with pytest.raises(UnsupportedHost, match="offers platforms kvm"):
        plan_runsc_platform(("kvm",))
