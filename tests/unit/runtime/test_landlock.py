"""plan_landlock as a truth table over (requirement, abi), and the supervisor arguments it gives."""

from __future__ import annotations

import pytest

from contain.boundary import LayerRequirement
from contain.errors import UnsupportedHost
from contain.runtime.landlock import DEVICE_WRITE_PATHS, LandlockPlan, plan_landlock


def test_required_plan_reads_everything_and_writes_named_paths_plus_devices() -> None:
    plan = plan_landlock(abi=7, write_paths=["/work/out", "/tmp"], requirement=LayerRequirement.REQUIRED)
    assert plan == LandlockPlan(
        abi=7,
        read_paths=("/",),
        write_paths=("/work/out", "/tmp", "/dev/null", "/dev/zero", "/dev/full"),
        required=True,
    )


def test_supervisor_args_carry_the_whole_plan_in_order() -> None:
    plan = LandlockPlan(abi=3, read_paths=("/",), write_paths=("/tmp", "/dev/null"), required=True)
    assert plan.supervisor_args() == [
        "--landlock-abi", "3",
        "--landlock-required",
        "--landlock-read", "/",
        "--landlock-write", "/tmp",
        "--landlock-write", "/dev/null",
    ]  # fmt: skip


def test_auto_plan_says_auto_to_the_supervisor() -> None:
    plan = plan_landlock(abi=1, write_paths=[], requirement=LayerRequirement.AUTO)
    assert plan is not None
    assert plan.supervisor_args() == [
        "--landlock-abi", "1",
        "--landlock-auto",
        "--landlock-read", "/",
        "--landlock-write", "/dev/null",
        "--landlock-write", "/dev/zero",
        "--landlock-write", "/dev/full",
    ]  # fmt: skip


def test_repeated_write_paths_appear_once() -> None:
    plan = plan_landlock(abi=7, write_paths=["/tmp", "/dev/null", "/tmp"], requirement=LayerRequirement.AUTO)
    assert plan is not None
    assert plan.write_paths == ("/tmp", "/dev/null", "/dev/zero", "/dev/full")


@pytest.mark.parametrize(
    ("requirement", "abi"),
    [
        (LayerRequirement.OFF, 0),
        (LayerRequirement.OFF, 7),
        (LayerRequirement.AUTO, 0),
    ],
)
def test_no_plan_when_off_or_auto_without_landlock(requirement: LayerRequirement, abi: int) -> None:
    assert plan_landlock(abi=abi, write_paths=["/tmp"], requirement=requirement) is None


def test_required_without_landlock_refuses_and_names_the_kernel_config() -> None:
    with pytest.raises(UnsupportedHost) as caught:
        plan_landlock(abi=0, write_paths=["/tmp"], requirement=LayerRequirement.REQUIRED)
    assert "CONFIG_SECURITY_LANDLOCK" in caught.value.cause
    assert "hardening.landlock: auto" in caught.value.fix


def test_relative_write_path_is_refused() -> None:
    with pytest.raises(ValueError, match="absolute"):
        plan_landlock(abi=7, write_paths=["tmp"], requirement=LayerRequirement.REQUIRED)


def test_every_device_row_is_an_absolute_dev_path_with_a_reason() -> None:
    for row in DEVICE_WRITE_PATHS:
        assert row.path.startswith("/dev/")
        assert row.why
